"""The Under load panel, laid out once for the comparison tab and the saved comparisons: sentence, table, charts."""

from __future__ import annotations

import gradio as gr

from ..views import load


def load_section(elem_id: str) -> tuple[gr.Column, gr.HTML, gr.Plot, gr.Plot]:
    """The Under load panel (hidden until a report with load levels comes): its sentence and table, and the
    speedup and Pareto charts side by side on a desktop, one above the other on a phone."""
    with gr.Column(visible=False, elem_id=f"{elem_id}-panel") as column:
        gr.Markdown("#### Under load")
        summary = gr.HTML(elem_id=f"{elem_id}-summary")
        with gr.Row(equal_height=True):
            speedup = gr.Plot(show_label=False, min_width=300, elem_id=f"{elem_id}-speedup")
            pareto = gr.Plot(show_label=False, min_width=300, elem_id=f"{elem_id}-pareto")
    return column, summary, speedup, pareto


def load_updates(column, summary, speedup, pareto, report: dict) -> dict:
    """The Under load panel from a report: filled and shown when it timed load levels, else hidden."""
    if not load.has_load(report):
        return {column: gr.update(visible=False)}
    return {column: gr.update(visible=True), summary: load.load_html(report),
            speedup: load.load_speedup_figure(report), pareto: load.load_pareto_figure(report)}

