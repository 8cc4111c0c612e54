"""A search's chart, sentence and table (views/tune.py) are pure functions of the report's `tune` block: a
hand-made one whose every number is known, a stopped one with no interval yet, names that carry markup, an early
interval reaching 600× (the chart stays readable), and a search whose best is not clearly faster than plain (plain
generation is what to deploy)."""

from __future__ import annotations

import copy
import math

import pytest

from assistlab.views import tune as tune_views

NONE = [None, None]


def _report() -> dict:
    """Plain and three candidates: k=1 picked (in to the end), k=3 left at look 4 (slower than plain), k=2 left at
    look 5 behind k=1; the looks are the likely intervals after each repetition (None before the first look)."""
    k1 = [NONE, NONE, NONE, [1.2, 1.8], [1.3, 1.7], [1.4, 1.6]]
    k2 = [NONE, NONE, NONE, [0.9, 1.3], [0.95, 1.2]]
    k3 = [NONE, NONE, NONE, [0.5, 0.9]]
    return {
        "status": "complete",
        "arms": [{"name": "plain"}, {"name": "prompt-lookup (k=1)"}, {"name": "prompt-lookup (k=2)"},
                 {"name": "prompt-lookup (k=3)"}],
        "tune": {
            "sentence": "Use prompt lookup with 1 token: 1.50× faster than plain (1.40–1.60), 9% faster than "
                        "transformers' defaults.",
            "settled": True, "outcome": "clear", "confirmed": True, "confirmed_against": "prompt-lookup (k=2)",
            "level": 0.95, "comparison_level": 0.99166, "assumption": "candidates leave on the likely rule",
            "looks": [4, 5, 6, 8, 10], "repetitions": 6, "runs_used": 21, "runs_without_elimination": 24,
            "candidates": [
                {"arm": "prompt-lookup (k=1)", "settings": {"prompt_lookup_num_tokens": 1}, "left_at": None,
                 "why": None, "runs": 6, "looks": k1,
                 "speedup": {"median": 1.5, "ci_low": 1.4, "ci_high": 1.6, "likely_low": 1.45, "likely_high": 1.55}},
                {"arm": "prompt-lookup (k=2)", "settings": {"prompt_lookup_num_tokens": 2}, "left_at": 5,
                 "why": "clearly slower than prompt-lookup (k=1), the leader, after 5 repetitions", "runs": 5,
                 "looks": k2,
                 "speedup": {"median": 1.07, "ci_low": None, "ci_high": None, "likely_low": 0.95, "likely_high": 1.2}},
                {"arm": "prompt-lookup (k=3)", "settings": {"prompt_lookup_num_tokens": None}, "left_at": 4,
                 "why": "clearly slower than plain after 4 repetitions", "runs": 4, "looks": k3,
                 "speedup": {"median": 0.67, "ci_low": None, "ci_high": None, "likely_low": None, "likely_high": None}},
            ],
            "recommendation": {"arm": "prompt-lookup (k=1)",
                               "bench_command": "python -m assistlab bench --target target --strategy prompt-lookup"},
            "deploy": {"engine": "transformers", "snippet": "output = target.generate(**inputs, "
                                                            "prompt_lookup_num_tokens=1, max_new_tokens=256)"},
        },
    }


def _intervals(fig, name: str) -> list[tuple[float, float, float]]:
    """(look, low, high) of one candidate's interval trace, read back from the bar's middle and its arms."""
    trace = next(t for t in fig.data if t.name == name)
    out = []
    for x, y, up, down in zip(trace.x, trace.y, trace.error_y.array, trace.error_y.arrayminus):
        out.append((round(x), y - down, y + up))
    return out


def test_every_candidate_s_interval_at_each_look_it_reached_and_a_cross_where_it_left():
    report = _report()
    fig = tune_views.tune_figure(report)
    k1 = _intervals(fig, "prompt-lookup (k=1)")
    assert [look for look, _, _ in k1] == [4, 5, 6]  # the planned looks it reached; none before the first
    for (look, low, high), (want_low, want_high) in zip(k1, ([1.2, 1.8], [1.3, 1.7], [1.4, 1.6])):
        assert (low, high) == pytest.approx((want_low, want_high)), look
    # The bar's middle is the interval's middle on a ratio scale (the interval is symmetric in logs).
    middle = next(t for t in fig.data if t.name == "prompt-lookup (k=1)").y[0]
    assert middle == pytest.approx(math.sqrt(1.2 * 1.8))
    assert [look for look, _, _ in _intervals(fig, "prompt-lookup (k=2)")] == [4, 5]
    assert [look for look, _, _ in _intervals(fig, "prompt-lookup (k=3)")] == [4]
    crosses = {t.name: t for t in fig.data if t.name.endswith(" left")}
    assert set(crosses) == {"prompt-lookup (k=2) left", "prompt-lookup (k=3) left"}  # the pick never left
    k2 = crosses["prompt-lookup (k=2) left"]
    assert round(k2.x[0]) == 5 and k2.marker.symbol == "x"
    assert "the leader" in k2.customdata[0][2]
    # Units and terms in every hover; the candidates' points at one look stand apart, in their arms' colours.
    for trace in fig.data:
        assert "repetitions" in trace.hovertemplate
    assert "speedup over plain" in fig.data[0].hovertemplate and "×" in fig.data[0].hovertemplate
    assert "99.17% each" in fig.data[0].hovertemplate
    assert len({round(t.x[0], 3) for t in fig.data if not t.name.endswith(" left")}) == 3
    assert list(fig.layout.xaxis.tickvals) == [4, 5, 6, 8, 10]


def test_a_search_stopped_before_its_first_look_says_when_intervals_appear():
    report = _report()
    for cand in report["tune"]["candidates"]:
        cand["looks"], cand["left_at"] = [NONE, NONE], None
    fig = tune_views.tune_figure(report)
    assert not fig.data and "after 4 repetitions" in fig.layout.annotations[0].text


def test_the_sentence_comes_first_then_how_sure_and_the_table_says_who_left_and_why():
    report = _report()
    html = tune_views.sentence_html(report)
    assert html.index("Use prompt lookup with 1 token") < html.index("Confirmed by the rule that assumes nothing")
    assert "21 runs of the 24" in html  # plain 6, k=1 6, k=2 5, k=3 4, of 4 arms x 6 and "95% for the whole search" in html
    assert 'id="al-tune-bench"' in html
    table = tune_views.candidates_html(report)
    rows = table.split("<tr>")[2:]
    assert "picked" in rows[0] and "still in" in rows[0] and "1.50× (1.40–1.60×)" in rows[0]
    assert 'data-label="Left at">5</td>' in rows[1] and "the leader" in rows[1] and "(0.95–1.20× likely)" in rows[1]
    assert "prompt_lookup_num_tokens=default" in rows[2] and "slower than plain" in rows[2]
    assert tune_views.snippet(report).startswith("output = target.generate(")
    assert tune_views.snippet_language(report) == "python"
    report["tune"]["deploy"] = {"engine": "vllm", "snippet": "vllm serve target --speculative-config '{}'"}
    assert tune_views.snippet_language(report) == "shell"


def test_names_with_markup_are_shown_as_text():
    report = copy.deepcopy(_report())
    evil = "<img src=x onerror=alert(1)>"
    report["tune"]["candidates"][1]["arm"] = evil
    report["tune"]["candidates"][1]["why"] = evil
    report["tune"]["sentence"] = evil
    fig = tune_views.tune_figure(report)
    assert all("<img" not in str(t.name) for t in fig.data)
    assert "<img" not in tune_views.candidates_html(report) and "<img" not in tune_views.sentence_html(report)


def test_an_interval_reaching_600x_is_cut_at_the_chart_s_edge_and_marked():
    """One early interval up to 600× (and one down to 0.001×) no longer sets the axis: it is logarithmic, its ends
    stay within the cap around the data, and the cut ends are arrows whose hover says how far they go."""
    report = _report()
    k2 = report["tune"]["candidates"][1]["looks"]
    k2[3] = [0.6, 600.0]
    k3 = report["tune"]["candidates"][2]["looks"]
    k3[3] = [0.001, 0.9]
    fig = tune_views.tune_figure(report)
    axis = fig.layout.yaxis
    assert axis.type == "log"
    low, high = (10 ** v for v in axis.range)
    assert high == pytest.approx(tune_views.CHART_HIGH * tune_views.ROOM) and high < 600
    assert low == pytest.approx(tune_views.CHART_LOW / tune_views.ROOM) and low > 0.001
    # A middle past the edge (here sqrt(0.6 * 600) = 19×) sits at the edge, the bar running down from it.
    trace = next(t for t in fig.data if t.name == "prompt-lookup (k=2)")
    assert trace.y[0] == pytest.approx(high) and trace.y[0] - trace.error_y.arrayminus[0] == pytest.approx(0.6)
    # The other candidates are not flattened: the 1x-2x band takes a fair share of the axis' height.
    assert (math.log10(2) - math.log10(1)) / (axis.range[1] - axis.range[0]) > 0.1
    # The cut bar ends at the edge; an arrow there says how far the interval goes.
    bar = _intervals(fig, "prompt-lookup (k=2)")[0]
    assert bar[2] == pytest.approx(high)
    up = next(t for t in fig.data if t.name == "prompt-lookup (k=2) beyond the chart")
    assert up.marker.symbol == "triangle-up" and up.y[0] == pytest.approx(high) and up.customdata[0][2] == 600.0
    assert "beyond the chart" in up.hovertemplate and "up to" in up.hovertemplate and "repetitions" in up.hovertemplate
    down = next(t for t in fig.data if t.name == "prompt-lookup (k=3) beyond the chart")
    assert down.marker.symbol == "triangle-down" and down.y[0] == pytest.approx(low)
    assert "down to" in down.hovertemplate and down.customdata[0][2] == 0.001
    # The uncut candidate has no arrow; its bars are whole.
    assert not any(t.name == "prompt-lookup (k=1) beyond the chart" for t in fig.data)
    assert [round(v, 6) for v in _intervals(fig, "prompt-lookup (k=1)")[0][1:]] == [1.2, 1.8]
    assert list(axis.ticktext)[list(axis.tickvals).index(1)] == "1×"


def test_a_best_not_clearly_faster_than_plain_says_to_deploy_plain_and_an_overrun_budget_is_said():
    report = _report()
    tune = report["tune"]
    tune["sentence"] = ("Not settled within the budget; best so far: prompt lookup with 3 tokens: 0.89× the speed "
                        "of plain, no clear difference (0.48–1.76×, 99.1% at every look).")
    tune["deploy"] = {"engine": "transformers", "plain": True, "snippet": "output = target.generate(**inputs, "
                      "do_sample=False, max_new_tokens=64)",
                      "sentence": "Deploy plain generation: no setting was clearly faster than plain here (best: "
                                  "prompt lookup with 3 tokens, 0.89×, 0.48–1.76×, 99.1% at every look)."}
    tune["budget"] = {"max_time_s": 600, "timed_s": 716.2, "over": True,
                      "sentence": "The timed runs took 716 s, past the 600 s budget: a repetition already started "
                                  "is finished."}
    html = tune_views.sentence_html(report)
    assert html.index("Not settled") < html.index("Deploy plain generation: no setting was clearly faster")
    assert 'id="al-tune-deploy"' in html and "Deploy it" not in html
    assert 'id="al-tune-budget"' in html and "took 716 s, past the 600 s budget" in html
    assert tune_views.snippet_label(report).startswith("Deploy plain generation")
    assert "prompt_lookup" not in tune_views.snippet(report)
    # A setting clearly faster than plain: "Deploy it", and no word of a budget kept.
    tune["deploy"] = {"engine": "transformers", "plain": False, "snippet": "x",
                      "sentence": "Deploy it: prompt lookup with 1 token, 1.50× faster than plain (1.40–1.60×, "
                                  "99.1% at every look)."}
    tune["budget"] = {"max_time_s": 600, "timed_s": 312.0, "over": False, "sentence": ""}
    html = tune_views.sentence_html(report)
    assert "Deploy it: prompt lookup with 1 token" in html and "al-tune-budget" not in html
    assert tune_views.snippet_label(report).startswith("Deploy it")
    # No candidate could be timed: nothing to deploy, the code box hides.
    tune["deploy"] = None
    assert tune_views.snippet(report) == "" and 'id="al-tune-deploy"' not in tune_views.sentence_html(report)


def test_the_table_shows_each_candidate_s_one_interval_with_its_level():
    report = _report()
    pick = report["tune"]["candidates"][0]
    pick["interval"] = {"median": 1.5, "ci_low": 1.4, "ci_high": 1.6, "level": 0.99166, "interval": "time-uniform",
                        "n": 6, "assumption": "", "text": "1.40–1.60×, 99.1% at every look"}
    rows = tune_views.candidates_html(report).split("<tr>")[2:]
    assert "1.50× (1.40–1.60×, 99.1% at every look)" in rows[0]
    # Every cell is labelled with its column, which a phone shows once the rows stack.
    assert [c.split('"')[1] for c in rows[0].split("<td data-label=")[1:]] == list(tune_views.COLUMNS)
