"""Charts and the headline are pure functions of a report dict: a real one from tiny models, and hand-made ones."""

from __future__ import annotations

import copy
import json

import pytest

from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure.runner import run_to_report
from assistlab.measure.sweep import run_sweep
from assistlab.results import report as report_mod
from assistlab.results import stats
from assistlab.views import charts, panels

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


@pytest.fixture(scope="module")
def swept(models_dir, store) -> dict:
    """A real draft-length sweep on tiny models: k=1, k=3 and the heuristic schedule against one plain baseline."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        request = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy", num_assistant_tokens=5),),
                               max_new_tokens=8,
                               repeats=2, warmup=0, prompt="write me a long essay on deep learning")
        sweep_report, _summary = run_sweep(request, store, values=(1, 3))
        return sweep_report.to_dict()


def _measured(fig) -> list:
    return [t for t in fig.data if not t.name.endswith("(predicted)")]


def test_every_arm_gets_one_trace(report):
    names = [a["name"] for a in report["arms"]]
    assisted = names[1:]
    assert len(names) == 3
    assert sorted(t.name for t in charts.latency_figure(report).data) == sorted(names)
    assert [t.name for t in charts.timeline_figure(report).data] == names
    assert sorted(t.name for t in _measured(charts.speedup_figure(report))) == sorted(assisted)
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
    assert all(":.0%}" in h and "per target forward pass (one step" in h for h in hovers["acceptance_figure"])
    # The cost model's symbols are explained where they appear, not only in the README.
    predicted = [h for h in hovers["speedup_figure"] if "predicted" in h]
    assert predicted and all("chance a drafted token is kept" in h and "tokens drafted per check" in h
                             for h in predicted)


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
        # The hover says what the bar is: two runs are a range, not a 95% interval.
        assert trace.customdata[0][3] == f"range of 2 runs {s['ci_low']:.2f}–{s['ci_high']:.2f}×"
        assert "%{customdata[3]}" in trace.hovertemplate and "95%" not in trace.hovertemplate
    assert any(shape.x0 == 1.0 and shape.x1 == 1.0 for shape in fig.layout.shapes)


def test_the_predicted_speedup_sits_beside_the_measured_one(report):
    fig = charts.speedup_figure(report)
    by_name = {t.name: t for t in fig.data}
    predicted = [c for c in report["comparison"] if c["predicted_speedup"] is not None]
    assert predicted  # the tiny models' report carries the cost model
    for comp in predicted:
        mark = by_name[f"{comp['arm']} (predicted)"]
        assert mark.x[0] == pytest.approx(comp["predicted_speedup"])
        assert mark.y[0] == by_name[comp["arm"]].y[0]  # on the arm's own row
        assert "predicted speedup %{x:.2f}×" in mark.hovertemplate
    assert any("predicted" in a.text for a in fig.layout.annotations)  # the key says which mark is which
    without = copy.deepcopy(report)
    for comp in without["comparison"]:
        comp["predicted_speedup"] = None
    assert not any(t.name.endswith("(predicted)") for t in charts.speedup_figure(without).data)


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
        name = trace.name.removesuffix(" (predicted)")
        assert colour[name] in (trace.marker.color, trace.marker.line.color)
    assert charts.arm_color(0) == charts.PALETTE[0]


def test_an_empty_report_draws_waiting_charts():
    empty = {"status": "running", "arms": [{"name": "plain", "strategy": "plain", "latencies_s": []}],
             "comparison": []}
    for build in BUILDERS:
        fig = build(empty)
        assert len(fig.data) == 0
        assert fig.layout.annotations
    assert charts.headline(empty) == "Nothing measured yet."
    assert len(charts.sweep_figure(empty).data) == 0


# ---------------------------------------------------------------- the sweep


def test_the_sweep_chart_shows_every_setting_with_interval_prediction_and_best(swept):
    summary = swept["sweep"]
    fig = charts.sweep_figure(swept)
    measured, predicted = fig.data
    assert list(measured.x) == [p["label"] for p in summary["points"]] == ["k=1", "k=3", "heuristic (from k=5)"]
    for i, point in enumerate(summary["points"]):
        s = point["speedup"]
        assert measured.y[i] == pytest.approx(s["median"])
        assert measured.y[i] + measured.error_y.array[i] == pytest.approx(s["ci_high"])
        assert measured.y[i] - measured.error_y.arrayminus[i] == pytest.approx(s["ci_low"])
        assert measured.customdata[i][3] == f"range of 2 runs {s['ci_low']:.2f}–{s['ci_high']:.2f}×"
    best = [p["arm"] for p in summary["points"]].index(summary["best"]["arm"])
    assert [sym == "star" for sym in measured.marker.symbol] == [i == best for i in range(3)]
    assert list(predicted.y) == pytest.approx([p["predicted_speedup"] for p in summary["points"]])
    assert "×" in measured.hovertemplate and "×" in predicted.hovertemplate
    assert any(shape.y0 == 1.0 and shape.y1 == 1.0 for shape in fig.layout.shapes)
    assert fig.layout.xaxis.title.text == "draft length<br>(num_assistant_tokens)"
    slower = summary["best"]["speedup"]["median"] < 1.0
    first = f"No setting beat plain. Least slow: {summary['best']['label']}," if slower else (
        f"Best: {summary['best']['label']} at")
    assert summary["best_text"].startswith(first)
    assert summary["best_text"].endswith("2 runs of each setting are too few to tell the settings apart.")


def test_the_sweep_chart_is_pure_and_skips_settings_without_a_run(swept):
    before = copy.deepcopy(swept)
    assert charts.sweep_figure(swept).to_json() == charts.sweep_figure(copy.deepcopy(swept)).to_json()
    assert swept == before
    partial = copy.deepcopy(swept)
    partial["sweep"]["points"][1]["speedup"] = {"median": None, "ci_low": None, "ci_high": None, "n": 0}
    assert list(charts.sweep_figure(partial).data[0].x) == ["k=1", "heuristic (from k=5)"]


def test_the_real_report_gets_a_headline(report):
    text = charts.headline(report)
    assert text.count("×") >= 2
    assert "prompt-lookup (k=10) ran at" in text
    # Two repetitions are a range of 2 runs, never called faster or slower.
    assert text.count("range of 2 runs") == 2 and "faster" not in text and "slower" not in text
    assert json.loads(json.dumps(text)) == text
    assert all(c["speedup"]["level"] == 0.5 and c["speedup"]["interval"] == "range" for c in report["comparison"])


# ---------------------------------------------------------------- the headline, on hand-made reports


def _made(median, low, high, n=20, identical=True, first=None, status="complete", sampling=False, error=None):
    level = stats.median_interval([0.0] * n)["level"] if n else None  # the level stats gives n runs
    kind = "order-statistic" if level is not None and level >= 0.9 else "range"
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
            {"arm": "assistant: small (k=5)",
             "speedup": {"median": median, "ci_low": low, "ci_high": high, "n": n, "level": level, "interval": kind},
             "outputs_identical": identical, "first_difference": first}
        ],
    }


def test_headline_faster():
    assert charts.headline(_made(1.17, 1.12, 1.21)) == (
        "assistant: small (k=5) was 1.17× faster (95.8% sure the speedup lies between 1.12× and 1.21×); "
        "outputs identical."
    )


def test_the_headline_and_the_command_line_share_one_sentence():
    made = _made(1.17, 1.12, 1.21)
    made["comparison"][0]["acceptance_rate"] = 0.83
    sentence = report_mod.speedup_sentence(made["comparison"][0])
    assert sentence == (
        "assistant: small (k=5) was 1.17× faster (95.8% sure the speedup lies between 1.12× and 1.21×); "
        "83% of drafted tokens accepted; outputs identical."
    )
    assert charts.headline(made) == sentence


def test_headline_says_slower_when_slower():
    made = _made(0.76, 0.70, 0.80)
    text = charts.headline(made)
    # Said as the chart and the tables say it (issue 36 item 4): the speedup below 1×, with 'slower'.
    assert text.startswith(
        "assistant: small (k=5) was slower: 0.76× the speed of plain (95.8% sure between 0.70× and 0.80× the "
        "speed of plain)"
    )
    assert "as long" not in text and "the speedup lies" not in text
    assert "faster" not in text
    # The time it costs only in a hover: 1 / 0.76 = 1.32.
    assert 'title="takes 1.32× as long as plain"' in panels.headline_html(made)
    made["arms"] = [{**arm, "tokens_per_s_summary": {"median": 10.0}, "ttft_s": []} for arm in made["arms"]]
    assert "0.76×" in panels.numbers_html(made) and 'title="takes 1.32× as long as plain"' in panels.numbers_html(made)
    hover = charts.speedup_figure(made).data[0]
    assert "slower: takes 1.32× as long as plain" in hover.customdata[0][4]


def test_headline_does_not_claim_a_difference_the_interval_does_not_show():
    text = charts.headline(_made(1.05, 0.97, 1.12))
    assert ("1.05×, no clear difference from plain (95.8% sure the speedup lies between 0.97× and 1.12×, "
            "which contains 1×)") in text
    assert "faster" not in text and "slower" not in text
    five = {"n": 5, "level": 0.9375, "interval": "order-statistic"}
    assert report_mod.verdict({"median": 1.05, "ci_low": 0.97, "ci_high": 1.12, **five}) == "unclear"
    assert report_mod.verdict({"median": 1.05, "ci_low": 1.01, "ci_high": 1.12, **five}) == "faster"
    assert report_mod.verdict({"median": 0.95, "ci_low": 0.90, "ci_high": 0.99, **five}) == "slower"


def test_the_level_is_said_as_it_is():
    five = charts.headline(_made(1.3, 1.2, 1.4, n=5))
    assert "was 1.30× faster (93.7% sure the speedup lies between 1.20× and 1.40×)" in five
    ten = charts.headline(_made(1.3, 1.2, 1.4, n=10))
    assert "(97.8% sure the speedup lies between 1.20× and 1.40×)" in ten
    assert report_mod.level_words(0.95) == "95%" and report_mod.level_words(0.75) == "75%"
    assert report_mod.level_words(1 - 2 / 2**20) == "99.9%"  # rounded down: never says 100%


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_range_of_few_runs_is_never_faster_or_slower(n):
    # Every run faster (or every run slower), far from 1×: still too few runs for a 90% interval.
    for median, low, high in ((1.5, 1.4, 1.6), (0.5, 0.4, 0.6)):
        text = charts.headline(_made(median, low, high, n=n))
        assert f"ran at {median:.2f}× the speed of plain (range of {n} runs {low:.2f}–{high:.2f}×: too few to be sure)" in text
        assert "faster" not in text and "slower" not in text and "95%" not in text
        assert report_mod.verdict(_made(median, low, high, n=n)["comparison"][0]["speedup"]) == "too few"


def test_verdicts_follow_the_statistics_module():
    # A real speedup of five runs, all faster: the first n at which stats gives a 90% interval.
    five = stats.speedup([1.3, 1.25, 1.4, 1.2, 1.35], [1.0] * 5)
    assert report_mod.verdict(five) == "faster"
    assert report_mod.interval_phrase(five) == "93.7% sure the speedup lies between 1.20× and 1.40×"
    four = stats.speedup([1.3, 1.25, 1.4, 1.2], [1.0] * 4)
    assert report_mod.verdict(four) == "too few"
    assert report_mod.interval_phrase(four) == "range of 4 runs 1.20–1.40×: too few to be sure"
    assert report_mod.interval_cell(four) == "range of 4 runs 1.20–1.40×"
    assert report_mod.interval_cell(five) == "1.20–1.40×, 93.7%"


def test_headline_names_the_first_differing_token():
    assert "outputs differ from token 13." in charts.headline(_made(1.3, 1.2, 1.4, identical=False, first=12))
    sampled = charts.headline(_made(1.3, 1.2, 1.4, identical=False, first=0, sampling=True))
    assert "outputs differ from token 1 (expected when sampling)." in sampled
    # The command line counts tokens the same way: from 1.
    entry = _made(1.3, 1.2, 1.4, identical=False, first=12)["comparison"][0]
    assert report_mod.speedup_sentence(entry).endswith("outputs differ from token 13.")


def test_headline_with_one_repetition_has_no_interval():
    text = charts.headline(_made(0.9, 0.9, 0.9, n=1))
    assert "ran at 0.90× the speed of plain (one repetition, so no interval)" in text
    assert "slower" not in text


def test_an_arm_without_a_repetition_is_said_so():
    entry = {"arm": "x", "speedup": {"median": None, "ci_low": None, "ci_high": None, "n": 0}}
    assert report_mod.speedup_sentence(entry) == "x finished no repetition, so there is no speedup to report."


def test_headline_reports_a_stopped_run_and_a_failed_arm():
    stopped = charts.headline(_made(1.2, 1.1, 1.3, n=2, status="stopped"))
    assert "Stopped after 2 of 5 repetitions." in stopped
    failed = _made(1.2, 1.1, 1.3, error="ran out of memory")
    failed["arms"][1]["latencies_s"] = []
    failed["comparison"][0]["speedup"] = {"median": None, "ci_low": None, "ci_high": None, "n": 0}
    assert "assistant: small (k=5) failed: ran out of memory" in charts.headline(failed)
