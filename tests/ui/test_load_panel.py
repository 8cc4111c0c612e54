"""The Under load panel in the comparison tab and a saved comparison: filled and shown with load, hidden without."""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
from sample_reports import load_report, minimal_report

from assistlab.ui.load_panel import load_section, load_updates


def test_the_panel_shows_only_for_a_report_with_load_levels():
    with gr.Blocks():
        column, summary, speedup, pareto = parts = load_section("al-test-load")
    shown = load_updates(*parts, load_report())
    assert shown[column]["visible"] is True
    assert "helps up to 2 concurrent requests" in shown[summary]
    assert isinstance(shown[speedup], go.Figure) and isinstance(shown[pareto], go.Figure)
    hidden = load_updates(*parts, minimal_report())
    assert hidden == {column: gr.update(visible=False)}  # nothing else drawn, nothing stale left in view


def test_both_places_carry_the_panel(tmp_path, monkeypatch):
    """The comparison tab and a saved comparison's side each draw the panel from a report with load levels (and
    hide it for one without), among their outputs. The other panels are stubbed: the sample is not a whole report."""
    from types import SimpleNamespace

    from assistlab.ui import compare_tab, history_tab

    for module in (compare_tab, history_tab):
        for name in ("headline_html", "why_html", "ranking_html", "numbers_html", "texts_html", "sweep_html",
                     "environment_markdown", "environment_html", "entry_caption_html"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, lambda *a, **k: "")
        figure = lambda report: go.Figure()  # noqa: E731
        monkeypatch.setattr(module, "charts", SimpleNamespace(
            speedup_figure=figure, latency_figure=figure, timeline_figure=figure, acceptance_figure=figure))
    with gr.Blocks():
        results = compare_tab.build()
        side = history_tab._side("left")
    entry = SimpleNamespace(id="0123456789abcdef")
    for view, draw in ((results, lambda r: compare_tab._report_updates(results, r)),
                       (side, lambda r: history_tab._side_updates(side, entry, r, tmp_path))):
        parts = (view.load_panel, view.load_summary, view.load_speedup, view.load_pareto)
        assert all(part in view.outputs() for part in parts)
        shown = draw(load_report())
        assert shown[view.load_panel]["visible"] is True and "concurrent requests" in shown[view.load_summary]
        assert isinstance(shown[view.load_speedup], go.Figure)
        assert draw(minimal_report())[view.load_panel] == gr.update(visible=False)


def test_the_workloads_tab_carries_the_panel_for_a_workloads_load_phase():
    from assistlab.ui import suite_tab

    with gr.Blocks():
        view = suite_tab.build()
    parts = view.load_parts()
    assert all(p in view.outputs() for p in parts) and all(p in suite_tab.saved_outputs(view) for p in parts)
    shown = load_updates(*parts, load_report())
    assert shown[view.load_panel]["visible"] is True and "concurrent requests" in shown[view.load_summary]
