"""The comparison tab: Run and Stop, progress, and every panel of a finished (or growing) result."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ..results.events import Event
from ..views import charts
from ..views.panels import environment_markdown, headline_html, numbers_html, ranking_html, why_html
from ..views.progress import event_progress, progress_html
from ..views.texts import texts_html
from .fields import INTRO
from .history_tab import save_after
from .load_panel import load_section, load_updates
from .session import LIGHT, Page, repetition_end


@dataclass
class Results:
    """The output components a run updates, and the buttons that start and stop it."""

    run: gr.Button
    stop: gr.Button
    intro: gr.Markdown
    progress: gr.HTML
    panel: gr.Column
    headline: gr.HTML
    latency: gr.Plot
    speedup: gr.Plot
    timeline: gr.Plot
    acceptance: gr.Plot
    why: gr.HTML
    ranking: gr.HTML
    numbers: gr.HTML
    texts: gr.HTML
    environment: gr.Markdown
    environment_json: gr.JSON
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    # Under load (issue 27): shown only for a report that timed load levels.
    load_panel: gr.Column
    load_summary: gr.HTML
    load_speedup: gr.Plot
    load_pareto: gr.Plot

    def outputs(self) -> list:
        return [getattr(self, name) for name in self.__dataclass_fields__ if name not in ("run", "stop")]


def build() -> Results:
    gr.Markdown("### 2 · Run, watch and understand")
    # Run, Stop and the progress line stay in sight at the top of the window while the results scroll; on a
    # phone Run and Stop stay at the bottom of the screen (style.py).
    with gr.Column(elem_classes="al-runbar"):
        with gr.Row(elem_classes="al-runrow"):
            run = gr.Button("Run", variant="primary", elem_id="al-run", scale=3)
            stop = gr.Button("Stop", variant="stop", elem_id="al-stop", scale=1)
        progress = gr.HTML(progress_html("Ready. Press Run to start.", 0.0, "idle"), elem_id="al-progress")
    intro = gr.Markdown(INTRO)
    with gr.Column(visible=False, elem_id="al-results") as panel:
        headline = gr.HTML()
        with gr.Row(equal_height=True):
            speedup = gr.Plot(show_label=False, min_width=300, elem_id="al-plot-speedup")
            latency = gr.Plot(show_label=False, min_width=300, elem_id="al-plot-latency")
        with gr.Row(equal_height=True):
            timeline = gr.Plot(show_label=False, min_width=300, elem_id="al-plot-timeline")
            acceptance = gr.Plot(show_label=False, min_width=300, elem_id="al-plot-acceptance")
        load_panel, load_summary, load_speedup, load_pareto = load_section("al-load")
        gr.Markdown("#### Why this speed")
        why = gr.HTML()
        ranking = gr.HTML()
        gr.Markdown("#### All the numbers")
        numbers = gr.HTML()
        gr.Markdown("#### Generated texts")
        texts = gr.HTML()
        environment = gr.Markdown(elem_classes="al-env")
        with gr.Accordion("Environment details", open=False):
            environment_json = gr.JSON(show_label=False)
        with gr.Row():
            download_json = gr.DownloadButton("Download report (JSON)", visible=False, elem_id="al-download-json")
            download_csv = gr.DownloadButton("Download runs (CSV)", visible=False, elem_id="al-download-csv")
    return Results(run, stop, intro, progress, panel, headline, latency, speedup, timeline, acceptance, why, ranking,
                   numbers, texts, environment, environment_json, download_json, download_csv, load_panel,
                   load_summary, load_speedup, load_pareto)


def _report_updates(results: Results, report: dict) -> dict:
    """Every results component, redrawn from one report dict."""
    return {
        results.intro: gr.update(visible=False),
        results.panel: gr.update(visible=True),
        results.headline: headline_html(report),
        results.latency: charts.latency_figure(report),
        results.speedup: charts.speedup_figure(report),
        results.timeline: charts.timeline_figure(report),
        results.acceptance: charts.acceptance_figure(report),
        results.why: why_html(report),
        results.ranking: ranking_html(report),
        results.numbers: numbers_html(report),
        results.texts: texts_html(report),
        results.environment: environment_markdown(report),
        results.environment_json: report.get("environment", {}),
        **load_updates(results.load_panel, results.load_summary, results.load_speedup, results.load_pareto, report),
    }



def wire(page: Page, results: Results) -> None:
    """Run streams one comparison into the panels, redrawing after every counted repetition; Stop ends it."""

    def arm_run(request: gr.Request):
        # The previous result is cleared as the new run starts, so a run that fails never leaves an old
        # headline and charts looking like its own.
        return page.waiting_for_slot(
            request.session_hash, results.progress, (results.download_json, results.download_csv, results.panel)
        )

    def run_stream(data: dict, request: gr.Request):
        finished: dict = {}  # the finished (or stopped) report and its progress line, saved once they are shown

        def render(event: Event) -> dict:
            update = {results.progress: event_progress(event)}
            if event.report is not None and repetition_end(event):
                report = event.report.to_dict()
                if report["counted_repetitions"] or event.kind == "done":
                    update.update(_report_updates(results, report))
            if event.kind == "done" and event.report is not None and event.report.runs:
                json_path, csv_path = page.files.write(event.report)
                update[results.download_json] = gr.update(value=json_path, visible=True)
                update[results.download_csv] = gr.update(value=csv_path, visible=True)
                finished.update(report=report, progress=update[results.progress])
            return update

        yield from page.streamed(request.session_hash, results.progress,
                                 lambda: (page.form_request(data), None), render,
                                 owner=getattr(request, "username", None) or None)
        yield from save_after(finished, results.progress, None if page.closing else page.history, request)

    page.run_listeners(
        results.run, arm_run, [results.progress, results.download_json, results.download_csv, results.panel],
        run_stream,
        set(page.inputs),  # a set: gradio passes one {component: value} dict
        results.outputs(), results.progress,
    )
    # No `cancels=` on Stop: the flag ends the run cleanly and keeps the partial report. A cancel from
    # elsewhere stops the run as well (Page.streamed), and its slot stays taken until the work has stopped.
    results.stop.click(page.request_stop, None, results.progress, **LIGHT)
