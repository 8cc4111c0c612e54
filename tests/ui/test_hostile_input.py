"""Odd and hostile input, below the page and through the live server: canonical model names, markup shown as text in
Markdown and charts, unencodable text, every model's context, field lengths, hub downloads, prompts files nested
too deeply, history pages past the end, and no formula in any CSV the app writes."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from assistlab import history as hist
from assistlab.config import FIELD_CHARS, BenchRequest, capped_text
from assistlab.engines import catalog
from assistlab.engines.transformers import models
from assistlab.engines.transformers.arms import ArmSpec, assisted_arms
from assistlab.errors import InputError, ModelLoadError
from assistlab.measure import runner
from assistlab.views import charts, panels
from patience import patient


MARKUP = "<img src=//host/beacon><a href=//host/phish>Download</a>"
# Typed by one person, it resolves to the folder 'target' inside the models folder.
MARKUP_REF = "./<img src=x onerror=alert(1)>/../target"


# ---------------------------------------------------------------- 2: the canonical reference, escaped everywhere


def test_a_reference_resolves_to_its_canonical_name(allowed_models):
    assert catalog.resolve(MARKUP_REF).text == "target"
    assert catalog.resolve(str(allowed_models / "target")).text == "target"
    assert catalog.resolve(" target ").text == "target"
    assert catalog.resolve("org/name@v1").text == "org/name@v1"
    assert catalog.resolve("bundled:gemma-3-270m").text == "bundled:gemma-3-270m"


def test_the_model_cache_never_passes_typed_text_to_the_next_person(allowed_models):
    store = models.ModelStore()
    device = models.choose_device("cpu")
    dtype = models.choose_dtype("float32", device)
    _key, first = store.get(MARKUP_REF, device, dtype)
    _key, second = store.get("target", device, dtype)
    assert second is first  # one cached model...
    assert second.describe()["ref"] == "target" and second.name == "target"  # ...under its canonical name


def test_a_report_shows_canonical_names_after_someone_typed_markup(allowed_models, store):
    cheap = dict(prompt="deep learning", max_new_tokens=2, repeats=1, warmup=0, device="cpu")
    arm = ArmSpec("assistant", "./<b onclick=alert(1)>/../assistant-same")
    runner.run_to_report(BenchRequest(target=MARKUP_REF, arms=(arm,), **cheap), store)
    later = runner.run_to_report(BenchRequest(target="target", arms=(ArmSpec("assistant", "assistant-same"),),
                                              **cheap), store).to_dict()
    text = json.dumps(later)
    assert "<img" not in text and "<b" not in text
    assert later["environment"]["models"]["target"]["ref"] == "target"
    mine = runner.run_to_report(BenchRequest(target=MARKUP_REF, arms=(arm,), **cheap), store).to_dict()
    assert mine["request"]["target"] == "target"  # even the typer's own report stores the canonical name
    assert mine["request"]["arms"][0]["assistant"] == "assistant-same"
    assert "<" not in json.dumps(mine)


def _environment(ref: str, role: str = "target") -> dict:
    return {"environment": {"cpu_model": "CPU *x*", "dtype": "float32",
                            "models": {role: {"ref": ref, "kind": "local", "class": "LlamaForCausalLM"}}}}


@pytest.mark.parametrize("ref", [
    MARKUP,
    "a`b` ![img](//host/x.png) [link](//host/phish) **bold** _it_",
    "www.example.com https://host/phish",
    "name` <img src=x>",
])
def test_environment_markdown_shows_names_as_text(ref):
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    for report in (_environment(ref), _environment("x", role=f"assistant {ref}")):
        rendered = md.render(panels.environment_markdown(report))
        for tag in ("<img", "<a ", "<em>", "<strong>bold", "<a>"):
            assert tag not in rendered.replace("<strong>Ran on</strong>", "").replace("<strong>target</strong>", "")
        assert "<em>x</em>" not in rendered  # the CPU name is text too


def _report_with_arm(name: str) -> dict:
    arm = {"name": name, "strategy": "assistant", "latencies_s": [1.0], "new_tokens": [4], "ttft_s": [0.1],
           "trace": [{"t_s": [0.1, 0.2], "tokens": [1, 3], "drafted": [3], "accepted": [2]}],
           "latency_summary": {"median": 1.0, "iqr": 0.0, "n": 1}, "tokens_per_s_summary": {"median": 4.0, "n": 1}}
    plain = {**arm, "name": "plain", "strategy": "plain"}
    comparison = [{"arm": name, "speedup": {"median": 1.2, "ci_low": 1.1, "ci_high": 1.3, "n": 1},
                   "acceptance_by_position": [0.5], "predicted_speedup": 1.1, "acceptance_rate": 0.5}]
    return {"arms": [plain, arm], "comparison": comparison, "status": "complete"}


def test_charts_show_arm_names_as_text():
    report = _report_with_arm(f"assistant: {MARKUP}")
    figures = [charts.latency_figure(report), charts.speedup_figure(report), charts.timeline_figure(report),
               charts.acceptance_figure(report)]
    for fig in figures:
        data = json.dumps(fig.to_plotly_json(), default=str)
        assert "<img" not in data and "<a href" not in data, fig.layout.title.text
    sweep = {"sweep": {"points": [{"arm": "a", "label": MARKUP, "speedup": {"median": 1.0, "ci_low": 0.9,
                                                                            "ci_high": 1.1, "n": 2},
                                   "predicted_speedup": 1.0}]}}
    assert "<img" not in json.dumps(charts.sweep_figure(sweep).to_plotly_json(), default=str)


# ---------------------------------------------------------------- 3: text the tokenizer cannot encode


@pytest.mark.parametrize("prompt", ["deep \ud800 learning", "\udcff", "emoji half \ud83d"])
def test_a_lone_surrogate_in_the_prompt_is_refused_by_name(prompt):
    with pytest.raises(InputError, match="The prompt contains a character that is not valid text"):
        BenchRequest(target="t", prompt=prompt)


def test_a_lone_surrogate_in_a_model_reference_is_refused(allowed_models):
    with pytest.raises(InputError, match="model reference contains a character that is not valid text"):
        catalog.resolve("org/na\ud800me")
    with pytest.raises(InputError, match="not valid text"):
        catalog.resolve("./x\udc80y")


def test_other_odd_text_still_runs(allowed_models, store):
    request = BenchRequest(target="target", prompt="nul \x00, bom \ufeff, max \U0010ffff", max_new_tokens=2,
                           repeats=1, warmup=0, device="cpu")
    assert runner.run_to_report(request, store).status == "complete"


# ---------------------------------------------------------------- 4: every model's context length


@pytest.fixture
def short_context(allowed_models, tmp_path, monkeypatch):
    """The models folder plus an other-tokenizer assistant that reads at most 40 positions."""
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(allowed_models / "target", root / "target")
    for name, source in (("assistant-short", "assistant-other"), ("same-short", "assistant-same")):
        shutil.copytree(allowed_models / source, root / name)
        config = json.loads((root / name / "config.json").read_text())
        config["max_position_embeddings"] = 40
        (root / name / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    return root


@pytest.mark.parametrize("strategy, assistant", [("universal", "assistant-short"), ("assistant", "same-short")])
def test_the_assistants_context_is_checked(short_context, strategy, assistant):
    store = models.ModelStore()
    arm = ArmSpec(strategy, assistant, num_assistant_tokens=5)
    request = BenchRequest(target="target", arms=(arm,), prompt="deep learning",
                           max_new_tokens=60, repeats=1, warmup=0, device="cpu")
    events = runner.run_benchmark(request, store)
    with pytest.raises(InputError) as caught:
        for event in events:
            assert event.kind == "status", "a run started although the assistant cannot read that far"
    message = str(caught.value)
    assert f"The assistant {assistant} reads at most 40 tokens" in message
    assert "Lower max_new_tokens to" in message
    # Within the assistant's window the same pair runs.
    fits = BenchRequest(target="target", arms=(arm,), prompt="deep learning",
                        max_new_tokens=8, repeats=1, warmup=0, device="cpu")
    assert runner.run_to_report(fits, store).status == "complete"
    # Left unset, the draft is transformers' default (20), which this assistant cannot also fit.
    default = BenchRequest(target="target", arms=(ArmSpec(strategy, assistant),), prompt="deep learning",
                           max_new_tokens=8, repeats=1, warmup=0, device="cpu")
    with pytest.raises(InputError, match="a draft of 20"):
        runner.run_to_report(default, store)


# ---------------------------------------------------------------- 7: field lengths before any parsing


def test_too_many_assistants_are_refused_before_any_arm_is_built():
    started = time.perf_counter()
    with pytest.raises(InputError, match="At most 8 assisted arms"):
        assisted_arms("auto", ["org/name"] * 200_000)
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("field", sorted(FIELD_CHARS))
def test_long_fields_are_refused_by_name(field):
    assert capped_text(field, "x" * FIELD_CHARS[field]) == "x" * FIELD_CHARS[field]
    with pytest.raises(InputError, match=f"^{field} has 1,000,000 characters; the limit is"):
        capped_text(field, "a," * 500_000)


# ---------------------------------------------------------------- 8: hub downloads fetch what a load reads


REPO_FILES = [
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "README.md", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors", "original/consolidated.safetensors", "original/params.json",
    "onnx/model.onnx", "gguf/model.safetensors", "pytorch_model.bin", "subfolder/tokenizer.json",
    "unused-extra.safetensors",
]
EXPECTED = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
}


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """snapshot_download over a fake repository, filtering with huggingface_hub's own pattern rules."""
    import huggingface_hub
    from huggingface_hub.utils import filter_repo_objects

    snapshot = tmp_path / "snapshot"
    fetched: set[str] = set()
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}

    def snapshot_download(repo_id, *, allow_patterns=None, **_kwargs):
        for name in filter_repo_objects(REPO_FILES, allow_patterns=allow_patterns):
            path = snapshot / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(index) if name.endswith("index.json") else "{}")
            fetched.add(name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(models, "_hub_reachable", lambda: False)
    return fetched, index


def test_hub_downloads_only_the_files_a_load_reads(fake_hub):
    fetched, _index = fake_hub
    folder = models._fetch_hub(catalog.ModelRef("org/name", "hub", "org/name"), lambda _m: None)
    assert fetched == EXPECTED
    assert Path(folder).is_dir()


def test_a_shard_outside_the_top_level_is_refused(fake_hub):
    _fetched, index = fake_hub
    index["weight_map"]["c"] = "original/consolidated.safetensors"
    with pytest.raises(ModelLoadError, match="names 'original/consolidated.safetensors'"):
        models._fetch_hub(catalog.ModelRef("org/name", "hub", "org/name"), lambda _m: None)


@pytest.mark.parametrize("field, long", [
    ("extra_assistants", {"extra_assistants": "org/name, " * 100_000}),
    ("target", {"target": "a" * 100_000}),
    ("assistant", {"assistant": "a" * 100_000}),
])
def test_the_form_caps_each_field_before_splitting_it(field, long):
    from assistlab import ui

    started = time.perf_counter()
    with pytest.raises(InputError, match=f"^{field} has [0-9,]+ characters; the limit is"):
        ui.request_from_form(**{"target": "t", "assistant": "a", "strategy": "auto", "prompt": "p", **long})
    assert time.perf_counter() - started < 0.5
    with pytest.raises(InputError, match="^sweep_values has"):
        ui.sweep_plan("num_assistant_tokens", "1," * 100_000)


def test_two_local_folders_with_the_same_name_stay_two_models(models_dir, store, tmp_path, monkeypatch):
    root = tmp_path / "models"
    shutil.copytree(models_dir / "target", root / "target")
    for team in ("team1", "team2"):
        shutil.copytree(models_dir / "assistant-same", root / team / "tiny")
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "team1/tiny"), ArmSpec("assistant", "team2/tiny")),
                           prompt="hello there", max_new_tokens=4, repeats=1, warmup=0)
    report = runner.run_to_report(request, store).to_dict()
    names = [arm["name"] for arm in report["arms"][1:]]
    assert any("team1/tiny" in n for n in names) and any("team2/tiny" in n for n in names), names
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        entry, _ = db.get(db.save(report).id)
        assert entry.assistants == "team1/tiny, team2/tiny"
        (section,) = db.leaderboard()
        assert sorted(row.assistant for row in section.rows) == ["team1/tiny", "team2/tiny"]
        assert [e.id for e in db.list(assistant="team2/tiny").entries] == [entry.id]
    finally:
        db.close()


@pytest.fixture(scope="module")
def client(models_dir, store, launch_app):
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)


DEEP = '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_deeply_nested_json_in_a_prompts_file_is_one_sentence():
    from assistlab.errors import InputError
    from assistlab.results.suite_inputs import parse_prompts

    for name in ("deep.jsonl", "deep"):
        with pytest.raises(InputError, match="Line 1 of the prompts file nests lists or objects too deeply"):
            parse_prompts(DEEP.encode(), name)


@pytest.mark.parametrize("arguments, words", [
    ({"prompts_text": DEEP, "prompts_filename": "deep.jsonl"}, "Line 1 of the prompts file nests"),
    ({"prompts_text": "a prompt \ud800 with half an emoji"}, "The prompts_text contains a character that is not valid text"),
    ({"prompts_text": "fine", "prompts_filename": "p\udc00.txt"}, "The prompts_filename contains a character"),
])
def test_compare_suite_refuses_hostile_prompts_naming_the_field(client, arguments, words):
    outcome = call_api(client.src, "compare_suite", target="target", suite="file", **arguments)
    assert outcome[0] == "error" and words in outcome[1] and "unexpected" not in outcome[1], outcome


def call_api(url: str, api_name: str, **arguments) -> tuple[str, str]:
    """(event, data) of the last message of one /gradio_api/call request, its JSON written with \\u escapes.

    gradio_client cannot send a lone surrogate (it encodes its body as UTF-8); JSON can, as an escape.
    """
    import json

    import httpx

    url = url.rstrip("/") + "/"
    info = httpx.get(f"{url}gradio_api/info", timeout=patient(30)).json()["named_endpoints"][f"/{api_name}"]
    data = [arguments.get(p["parameter_name"], p.get("parameter_default")) for p in info["parameters"]]
    body = json.dumps({"data": data}, ensure_ascii=True)
    posted = httpx.post(f"{url}gradio_api/call/{api_name}", content=body,
                        headers={"content-type": "application/json"}, timeout=patient(60))
    assert posted.status_code == 200, posted.text
    event_id = posted.json()["event_id"]
    event, payload = "", ""
    with httpx.stream("GET", f"{url}gradio_api/call/{api_name}/{event_id}", timeout=patient(120)) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                payload = line[5:].strip()
    return event, payload


@pytest.mark.parametrize("page, words", [(10**19, "page must be a page number from 1 to 1,000,000,000"),
                                         (2**63, "page must be a page number from 1")])
def test_history_refuses_a_page_past_any_history(client, page, words):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict(page=page, api_name="/history")
    assert words in str(caught.value) and "unexpected" not in str(caught.value)
    assert client.predict(page=3, api_name="/history")["page"] == 3


HOSTILE_CELLS = ['=HYPERLINK("http://evil","x")', "@SUM(A1:A9)", '+cmd|" /C calc"!A0', "-2+3", "\tTAB", "\rCR"]


def _formula_cells(text: str) -> list[str]:
    import csv
    import io

    from assistlab.results.cells import _NUMBER, FORMULA_STARTS

    return [c for row in csv.reader(io.StringIO(text)) for c in row
            if c.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(c)]


def test_cells_quote_formulas_and_keep_numbers():
    from assistlab.results.cells import cell

    assert [cell(c) for c in HOSTILE_CELLS] == ["'" + c for c in HOSTILE_CELLS]
    assert [cell(v) for v in (-1.5, -3, "-1.5", "+2", "-1e-3", "plain", "", None)] == \
        [-1.5, -3, "-1.5", "+2", "-1e-3", "plain", "", None]


def test_every_csv_the_app_writes_neutralises_formulas(models_dir, store, monkeypatch):
    from assistlab.history import runs_csv
    from assistlab.measure import suite_runner
    from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    prompts = "\n".join('{"category": %s, "prompt": "the quick brown fox"}' % json_text(c) for c in HOSTILE_CELLS[:4])
    selection = select(SuiteRequest(suite="file", file="p.jsonl"), parse_prompts(prompts.encode(), "p.jsonl"))
    bench = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=3,
                         repeats=1, warmup=0)
    text = suite_runner.run_suite_to_report(bench, selection, store).to_csv()
    assert "'=HYPERLINK" in text and "'@SUM" in text and "'+cmd" in text and "'-2+3" in text
    assert _formula_cells(text) == []
    live = runner.run_to_report(bench, store)
    live.arms[1].name = HOSTILE_CELLS[0]
    report = live.to_dict()
    for text in (live.to_csv(), runs_csv(report)):  # the page's and CLI's download, the history's
        assert _formula_cells(text) == [] and "'=HYPERLINK" in text


def json_text(value: str) -> str:
    import json

    return json.dumps(value)


def test_a_huge_prompts_text_is_refused_by_its_size_before_it_is_read(monkeypatch):
    from assistlab.errors import InputError
    from assistlab.ui import suite_tab

    monkeypatch.setattr(suite_tab, "bench_from_form", lambda values: pytest.fail("read before the size check"))
    with pytest.raises(InputError, match="prompts_text is 50,000,001 characters"):
        suite_tab.suite_plan_from_api({}, {"source": "file"}, "x" * 50_000_001, "p.txt")
