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


def test_both_places_carry_the_panel():
    from assistlab.ui import compare_tab, history_tab

    for fields in (compare_tab.Results.__dataclass_fields__, history_tab.Side.__dataclass_fields__):
        assert {"load_panel", "load_summary", "load_speedup", "load_pareto"} <= set(fields)


def test_the_workloads_tab_carries_the_panel_for_a_workloads_load_phase():
    from assistlab.ui import suite_tab

    with gr.Blocks():
        view = suite_tab.build()
    parts = view.load_parts()
    assert all(p in view.outputs() for p in parts) and all(p in suite_tab.saved_outputs(view) for p in parts)
    shown = load_updates(*parts, load_report())
    assert shown[view.load_panel]["visible"] is True and "concurrent requests" in shown[view.load_summary]
