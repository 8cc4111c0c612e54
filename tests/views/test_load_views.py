"""The load levels' charts and panel (views/load.py) are pure functions of a report with `load` (sample_reports)."""

from __future__ import annotations

import copy
import json

import pytest
from sample_reports import LOAD_NGRAM, LOAD_PLAIN, NGRAM_FAILED, load_report, minimal_report

from assistlab.views import charts, load


@pytest.fixture
def report() -> dict:
    return load_report()


def _lines(fig):
    return [t for t in fig.data if t.mode and "lines" in t.mode]


def test_the_speedup_chart_has_one_line_per_assisted_arm_with_intervals_and_the_1x_line(report):
    fig = load.load_speedup_figure(report)
    (line,) = _lines(fig)  # plain has no speedup over itself
    assert line.name == LOAD_NGRAM
    assert list(line.x) == [1, 2, 4] and list(line.y) == [1.40, 1.22, 0.87]  # 8 failed: no point
    assert [round(v, 2) for v in line.error_y.array] == [0.12, 0.08, 0.08]
    assert [round(v, 2) for v in line.error_y.arrayminus] == [0.09, 0.14, 0.07]
    assert line.line.color == charts.arm_color(1)
    ones = [s for s in fig.layout.shapes if s.y0 == 1.0 and s.y1 == 1.0]
    assert len(ones) == 1  # the 1x line
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert fig.layout.title.subtitle.text == "bars: 93.7% intervals over 5 rounds · ✕ failed"
    hover = line.customdata[1]
    assert hover[0] == "2 requests at once" and "1.08–1.30×, 93.7%" in hover[1] and "5 rounds" in hover[1]
    failed = [t for t in fig.data if t.name.endswith("(failed)")]
    assert len(failed) == 1 and list(failed[0].x) == [8] and NGRAM_FAILED in failed[0].customdata[0][1]
    json.dumps(fig.to_plotly_json(), default=str)


def test_the_pareto_chart_draws_each_arm_through_its_levels_labelled(report):
    fig = load.load_pareto_figure(report)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {LOAD_PLAIN, LOAD_NGRAM}
    plain, ngram = by_name[LOAD_PLAIN], by_name[LOAD_NGRAM]
    assert list(plain.x) == [20.0, 36.0, 60.0, 90.0] and list(plain.text) == ["1", "2", "4", "8"]
    assert list(ngram.x) == [28.0, 44.0, 52.0] and list(ngram.text) == ["1", "2", "4"]  # not the failed level
    assert ngram.y[0] == pytest.approx(28.0 * 0.95)
    assert "lines" in plain.mode and "text" in plain.mode
    assert fig.layout.xaxis.title.text == "server output tokens/s"
    assert fig.layout.yaxis.title.text == "tokens/s per user"


def test_the_panel_says_the_sentence_the_notes_the_client_and_every_level(report):
    page = load.load_html(report)
    assert report["load_summary"]["sentence"] in page
    assert "The client took 1% of the timed rounds" in page
    assert NGRAM_FAILED in page and "al-failed-badge" in page
    rows = page.split("<tbody>")[1].split("</tbody>")[0].count("<tr")
    assert rows == 8  # two arms at four levels
    assert "1.22× <span class=\"al-sub\">(1.08–1.30×, 93.7%)</span>" in page
    assert "1× (baseline)" in page and "50 ms" in page
    assert 'class="al-wrap"' in page  # scrolls sideways on a phone rather than widening the page


def test_no_load_means_no_panel_and_waiting_charts():
    plain_report = minimal_report()
    assert not load.has_load(plain_report) and load.load_html(plain_report) == ""
    for build in (load.load_speedup_figure, load.load_pareto_figure):
        fig = build(plain_report)
        assert not fig.data and fig.layout.annotations[0].text == "No load level measured"


def test_names_are_escaped_in_the_charts_and_the_panel(report):
    hostile = '<img src=x onerror=alert(1)>'
    bad = json.loads(json.dumps(report).replace(LOAD_NGRAM, hostile))
    assert "<img" not in load.load_html(bad)
    assert all("<img" not in (t.name or "") for t in load.load_speedup_figure(bad).data)
    assert all("<img" not in (t.name or "") for t in load.load_pareto_figure(bad).data)


def test_a_level_without_an_interval_is_drawn_without_claiming_one(report):
    thin = copy.deepcopy(report)
    for entry in thin["load"]:
        if entry["speedup"]:
            entry["speedup"].update(ci_low=None, ci_high=None, level=None, n=1, interval=None)
    fig = load.load_speedup_figure(thin)
    (line,) = _lines(fig)
    assert list(line.error_y.array) == [0, 0, 0]
    assert fig.layout.title.subtitle.text.startswith("no intervals: too few rounds")
    assert "no interval" in line.customdata[0][1]


def test_the_pareto_axes_start_at_zero_with_room_for_the_labels(report):
    fig = load.load_pareto_figure(report)
    assert fig.layout.xaxis.range[0] == 0 and fig.layout.xaxis.range[1] > 90.0
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] > 28.0 * 0.95 * 1.1


def test_a_kept_report_with_odd_load_entries_still_draws(report):
    odd = copy.deepcopy(report)
    odd["load"] += ["junk", {"arm": None, "concurrency": 2}, {"arm": "x", "concurrency": True}]
    odd["load_summary"]["levels"] = "1,2"
    assert len(_lines(load.load_speedup_figure(odd))) == 1
    assert list(load.load_speedup_figure(odd).layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert load.load_html(odd).count("<tr") == 9  # the head and the eight real entries
