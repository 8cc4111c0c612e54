"""Workloads on the command line, through the /compare_suite API, and in the tab's panels and chart."""

from __future__ import annotations

import csv
import json

import pytest
from commandline import cli

PROMPTS = "\n".join(json.dumps(r) for r in [
    {"category": "fox", "prompt": "the quick brown fox"},
    {"category": "fox", "prompt": "the lazy dog"},
    {"category": "essay", "turns": ["write me a long essay", "and a short one"]},
])


@pytest.mark.slow
def test_cli_runs_a_prompts_file(models_dir, tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(PROMPTS)
    out_json, out_csv = tmp_path / "suite.json", tmp_path / "suite.csv"
    result = cli(
        "bench", "--target", "target", "--assistant", "target-copy", "--no-prompt-lookup", "--suite-file", str(path),
        "--turns", "both", "--max-new-tokens", "5", "--repeats", "2", "--warmup", "1", "--json", str(out_json),
        "--csv", str(out_csv), models_dir=models_dir,
    )
    assert result.returncode == 0, result.stderr
    assert "4 prompts × 2 arms × 2 repetitions = 16 timed runs of 5 new tokens, plus 2 warm-up runs." in result.stderr
    assert "Prompt 4 of 4 (3.2, essay)" in result.stderr
    table = result.stdout
    assert "fox" in table and "essay" in table and "overall" in table and "assistant: target-copy (" in table
    assert "Selection: every prompt per category, 2 categories (fox, essay); every turn." in table
    report = json.loads(out_json.read_text())
    suite = report["suite"]
    assert [c["category"] for c in suite["categories"]] == ["fox", "essay"]
    assert [c["prompts"] for c in suite["categories"]] == [2, 2] and suite["overall"]["prompts"] == 4
    arm = suite["overall"]["arms"][0]
    assert set(arm["speedup"]) >= {"median", "ci_low", "ci_high", "level"} and arm["acceptance_rate"] == 1.0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 4 * 2 * 2 and {r["prompt_id"] for r in rows} == {"1", "2", "3", "3.2"}


@pytest.mark.slow  # a `python -m assistlab` process per case: seconds each
@pytest.mark.parametrize(
    "args, words",
    [
        (["--suite", "spec-bench", "--categories", "poetry"], "Spec-Bench has no category 'poetry'"),
        (["--suite", "spec-bench", "--per-category", "0"], "per_category must be between 1"),
        (["--suite", "spec-bench", "--prompt", "hi"], "A suite brings its own prompts"),
        (["--suite", "spec-bench", "--sweep", "num_assistant_tokens"], "--sweep compares draft lengths"),
        (["--suite-file", "/nonexistent/p.jsonl"], "Cannot read the prompts file 'p.jsonl'"),
    ],
)
def test_bad_suite_input_is_one_line(args, words, models_dir):
    result = cli("bench", "--target", "target", *args, models_dir=models_dir)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error:") and words in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_refuses_a_bad_file_with_its_line(models_dir, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": "broken"\n')
    result = cli("bench", "--target", "target", "--suite-file", str(path), models_dir=models_dir)
    assert result.returncode == 2
    assert "error: Line 2 of the prompts file is not valid JSON" in result.stderr


@pytest.fixture(scope="module")
def client(models_dir, store, launch_app):
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)


def test_compare_suite_api(client):
    report, sentences = client.predict(
        target="target", assistant="target-copy", strategy="assistant", also_prompt_lookup=False, suite="file",
        prompts_text=PROMPTS, prompts_filename="mine.jsonl", max_new_tokens=5, repeats=2, warmup=0,
        api_name="/compare_suite",
    )
    assert report["kind"] == "suite" and report["status"] == "complete"
    assert [c["category"] for c in report["suite"]["categories"]] == ["fox", "essay"]
    assert report["suite"]["overall"]["prompts"] == 2 + 1  # first turn only by default
    assert sentences.splitlines()[0].startswith("fox (2 prompts):") and "Overall (3 prompts)" in sentences
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare_suite"]
    names = [p["parameter_name"] for p in info["parameters"]]
    assert names[:11] == ["target", "assistant", "strategy", "suite", "categories", "per_category", "selection",
                          "selection_seed", "turns", "prompts_text", "prompts_filename"]


def test_compare_suite_api_takes_the_same_defaults_as_compare(client):
    """A workload measures what a single comparison would: transformers' drafting defaults, not fixed numbers."""
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]

    def defaults(name: str) -> dict:
        return {p["parameter_name"]: p.get("parameter_default") for p in endpoints[name]["parameters"]}

    single, suite = defaults("/compare"), defaults("/compare_suite")
    shared = set(single) & set(suite)
    assert {"num_assistant_tokens", "schedule", "confidence_threshold", "prompt_lookup_num_tokens"} <= shared
    assert {name: suite[name] for name in shared} == {name: single[name] for name in shared if name != "prompt"}


def test_compare_suite_api_refuses_a_bad_file(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="Line 1 of the prompts file has no prompt"):
        client.predict(target="target", suite="file", prompts_text='{"category": "x"}', api_name="/compare_suite")
    with pytest.raises(AppError, match="categories: Spec-Bench has no category 'poetry'"):
        client.predict(target="target", categories="poetry", api_name="/compare_suite")


def _report(figures: dict) -> dict:
    """A suite report dict with two categories and one arm, numbers chosen by hand."""
    def arm(geomean, low, high, n):
        return {"arm": "A", "speedup": {"geomean": geomean, "median": geomean, "ci_low": low, "ci_high": high,
                                        "level": 0.95, "n": n},
                "acceptance_rate": 0.5, "mean_accepted_tokens": 2.0, "identical": n, "prompts": n}
    categories = [{"category": c, "prompts": n, "arms": [arm(g, lo, hi, n)], "best": f"{c} sentence"}
                  for c, (g, lo, hi, n) in figures.items()]
    return {"arms": ["A"], "suite": {
        "name": "Spec-Bench", "rule": "the first 2", "interval": "t", "skipped": [],
        "categories": categories,
        "overall": {"prompts": 4, "arms": [arm(1.3, 1.1, 1.5, 4)], "best": "Overall sentence"},
        "prompts": [{"id": "1", "category": "qa", "status": "skipped", "prompt": "a <b>", "prompt_tokens": None,
                     "reason": "too long", "arms": []}],
    }}


def test_suite_figure_and_tables():
    from assistlab.ui import suite_tab
    from assistlab.views import charts

    data = _report({"qa": (1.2, 1.0, 1.4, 2), "rag": (1.5, None, None, 1)})
    fig = charts.suite_figure(data)
    (trace,) = fig.data
    assert list(trace.y) == ["qa (2)", "rag (1)", "overall (4)"]
    assert list(trace.x) == [1.2, 1.5, 1.3]
    assert list(trace.error_x.array) == pytest.approx([0.2, 0.0, 0.2])
    assert list(trace.error_x.arrayminus) == pytest.approx([0.2, 0.0, 0.2])
    assert "interval" in trace.hovertemplate and "×" in trace.hovertemplate
    table = suite_tab.table_html(data)
    assert table.count("<tr>") == 1 + 3 and "1.00–1.40×" in table and "50%" in table and "2.00" in table
    assert "rag</td><td>A</td><td>1</td><td>1.50×</td><td>–</td>" in table
    prompts = suite_tab.prompts_html(data)
    assert "a &lt;b&gt;" in prompts and "too long" in prompts
    assert "Overall sentence" in suite_tab.summary_html(data)
    empty = charts.suite_figure({"arms": ["A"], "suite": {"categories": [], "overall": {"arms": []}}})
    assert not empty.data


def test_suite_request_from_the_tab():
    from assistlab.ui import suite_tab

    request = suite_tab.suite_request_from_form("spec-bench", ["qa", "rag"], 2, "sample", 3, "both", None)
    assert (request.categories, request.per_category, request.selection, request.seed, request.turns) == (
        ("qa", "rag"), 2, "sample", 3, "both")
    mine = suite_tab.suite_request_from_form("file", ["qa"], None, "first", None, "first", "/tmp/x.csv")
    assert mine.categories == () and mine.per_category is None and mine.file == "/tmp/x.csv"
