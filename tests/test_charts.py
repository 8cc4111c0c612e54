"""Charts and the headline are pure functions of a report dict: a real one from tiny models, and hand-made ones."""

from __future__ import annotations

import copy
import json

import pytest

from assistlab import charts
from assistlab.config import ArmSpec, BenchRequest
from assistlab.runner import run_to_report

BUILDERS = (charts.latency_figure, charts.timeline_figure, charts.speedup_figure, charts.acceptance_figure)


@pytest.fixture(scope="module")
def report(models_dir, store) -> dict:
    """One real comparison on tiny models: plain, universal assisted generation and prompt lookup."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        request = BenchRequest(
            target="target",
            arms=(ArmSpec("auto", "assistant-other"), ArmSpec("prompt-lookup")),
            max_new_tokens=16,
            repeats=2,
            warmup=1,
            prompt="write me a long essay on deep learning",
        )
        return run_to_report(request, store).to_dict()


def test_every_arm_gets_one_trace(report):
    names = [a["name"] for a in report["arms"]]
    assisted = names[1:]
    assert len(names) == 3
    assert sorted(t.name for t in charts.latency_figure(report).data) == sorted(names)
    assert [t.name for t in charts.timeline_figure(report).data] == names
    assert sorted(t.name for t in charts.speedup_figure(report).data) == sorted(assisted)
    assert [t.name for t in charts.acceptance_figure(report).data] == assisted


def test_latency_shows_every_run(report):
    fig = charts.latency_figure(report)
    by_name = {t.name: t for t in fig.data}
    for arm in report["arms"]:
        trace = by_name[arm["name"]]
        assert list(trace.x) == arm["latencies_s"]
        assert trace.boxpoints == "all"


def test_hover_texts_carry_units(report):
    hovers = {f.__name__: [t.hovertemplate for t in f(report).data] for f in BUILDERS}
    assert all(" s<" in h for h in hovers["latency_figure"])
    assert all("tokens" in h and " s<" in h for h in hovers["timeline_figure"])
    assert all("×" in h for h in hovers["speedup_figure"])
    assert all(":.0%}" in h and "tokens per target forward" in h for h in hovers["acceptance_figure"])


def test_timeline_is_cumulative_tokens_from_zero(report):
    for trace, arm in zip(charts.timeline_figure(report).data, report["arms"]):
        assert (trace.x[0], trace.y[0]) == (0.0, 0)
        assert list(trace.y) == sorted(trace.y)
        assert list(trace.x) == sorted(trace.x)
        assert trace.y[-1] == arm["new_tokens"][0] == 16
        assert trace.line.shape == "hv"


def test_speedup_marker_and_interval_come_from_the_comparison(report):
    fig = charts.speedup_figure(report)
    by_name = {t.name: t for t in fig.data}
    for comp in report["comparison"]:
        trace = by_name[comp["arm"]]
        s = comp["speedup"]
        assert trace.x[0] == pytest.approx(s["median"])
        assert trace.x[0] + trace.error_x.array[0] == pytest.approx(s["ci_high"])
        assert trace.x[0] - trace.error_x.arrayminus[0] == pytest.approx(s["ci_low"])
    assert any(shape.x0 == 1.0 and shape.x1 == 1.0 for shape in fig.layout.shapes)


def test_charts_are_pure(report):
    before = copy.deepcopy(report)
    first = [f(report).to_json() for f in BUILDERS]
    second = [f(copy.deepcopy(report)).to_json() for f in BUILDERS]
    assert first == second
    assert report == before


def test_colours_follow_the_arm_in_every_chart(report):
    colour = {a["name"]: charts.arm_color(i) for i, a in enumerate(report["arms"])}
    for trace in charts.timeline_figure(report).data:
        assert trace.line.color == colour[trace.name]
    for trace in charts.speedup_figure(report).data:
        assert trace.marker.color == colour[trace.name]
    assert charts.arm_color(0) == charts.PALETTE[0]


def test_an_empty_report_draws_waiting_charts():
    empty = {"status": "running", "arms": [{"name": "plain", "strategy": "plain", "latencies_s": []}],
             "comparison": []}
    for build in BUILDERS:
        fig = build(empty)
        assert len(fig.data) == 0
        assert fig.layout.annotations
    assert charts.headline(empty) == "Nothing measured yet."


def test_the_real_report_gets_a_headline(report):
    text = charts.headline(report)
    assert text.count("×") >= 2
    assert "prompt-lookup (k=10) was" in text
    json.dumps(text)


# ---------------------------------------------------------------- the headline, on hand-made reports


def _made(median, low, high, n=5, identical=True, first=None, status="complete", sampling=False, error=None):
    return {
        "status": status,
        "request": {"do_sample": sampling},
        "counted_repetitions": n,
        "planned_repetitions": 5,
        "arms": [
            {"name": "plain", "strategy": "plain", "latencies_s": [1.0] * n, "error": None,
             "latency_summary": {"n": n, "median": 1.0, "iqr": 0.01}},
            {"name": "assistant: small (k=5)", "strategy": "assistant", "latencies_s": [1.0 / median] * n,
             "error": error, "latency_summary": {"n": n, "median": 1.0 / median, "iqr": 0.0}},
        ],
        "comparison": [
            {"arm": "assistant: small (k=5)", "speedup": {"median": median, "ci_low": low, "ci_high": high, "n": n},
             "outputs_identical": identical, "first_difference": first}
        ],
    }


def test_headline_faster():
    assert charts.headline(_made(1.17, 1.12, 1.21)) == (
        "assistant: small (k=5) was 1.17× faster (95% interval 1.12–1.21×); outputs identical."
    )


def test_headline_says_slower_when_slower():
    text = charts.headline(_made(0.76, 0.70, 0.80))
    assert text.startswith("assistant: small (k=5) was 0.76× (slower; 95% interval 0.70–0.80×)")
    assert "faster" not in text


def test_headline_does_not_claim_a_difference_the_interval_does_not_show():
    text = charts.headline(_made(1.05, 0.97, 1.12))
    assert "no clear difference" in text
    assert "faster" not in text and "slower" not in text
    assert charts.verdict({"median": 1.05, "ci_low": 0.97, "ci_high": 1.12, "n": 5}) == "unclear"


def test_headline_names_the_first_differing_token():
    assert "outputs differ from token 13." in charts.headline(_made(1.3, 1.2, 1.4, identical=False, first=12))
    sampled = charts.headline(_made(1.3, 1.2, 1.4, identical=False, first=0, sampling=True))
    assert "expected when sampling" in sampled


def test_headline_with_one_repetition_has_no_interval():
    text = charts.headline(_made(0.9, 0.9, 0.9, n=1))
    assert "0.90× (slower; one repetition, so no interval)" in text


def test_headline_reports_a_stopped_run_and_a_failed_arm():
    stopped = charts.headline(_made(1.2, 1.1, 1.3, n=2, status="stopped"))
    assert "Stopped after 2 of 5 repetitions." in stopped
    failed = _made(1.2, 1.1, 1.3, error="ran out of memory")
    failed["arms"][1]["latencies_s"] = []
    failed["comparison"][0]["speedup"] = {"median": None, "ci_low": None, "ci_high": None, "n": 0}
    assert "assistant: small (k=5) failed: ran out of memory" in charts.headline(failed)
