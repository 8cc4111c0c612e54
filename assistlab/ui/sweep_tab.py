"""The sweep panel: several draft lengths against one shared plain baseline, and Apply best."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ..measure import sweep
from ..results.events import Event
from ..views import charts
from ..views.panels import sweep_html
from ..views.progress import event_progress, progress_html
from .fields import HINTS, SWEEP_DETAILS, SWEEP_INTRO, SWEEP_VALUES, sweep_plan
from .form import Form
from .history_tab import save_after
from .session import LIGHT, Page, repetition_end


@dataclass
class Sweeps:
    """The draft-length sweep: its settings, buttons and outputs."""

    values: gr.Textbox
    draft_length: gr.Button
    lookup_length: gr.Button
    stop: gr.Button
    progress: gr.HTML
    panel: gr.Column
    plot: gr.Plot
    summary: gr.HTML
    apply: gr.Button
    download_json: gr.DownloadButton
    best: gr.State

    def outputs(self) -> list:
        return [self.progress, self.panel, self.plot, self.summary, self.apply, self.download_json, self.best]


def build() -> Sweeps:
    gr.Markdown("### 3 · Tune how far the assistant guesses")
    gr.Markdown(SWEEP_INTRO, elem_classes="al-env")
    with gr.Accordion("Details: what a sweep changes", open=False, elem_id="al-sweep-details"):
        gr.Markdown(SWEEP_DETAILS, elem_classes="al-env")
    values = gr.Textbox(SWEEP_VALUES, label="Lengths to try", info=HINTS["sweep_values"], max_lines=1,
                        elem_id="al-sweep-values")
    with gr.Row():
        draft_length = gr.Button("Sweep draft length", variant="secondary", elem_id="al-sweep-k", scale=2)
        lookup_length = gr.Button("Sweep prompt-lookup length", variant="secondary", elem_id="al-sweep-lookup",
                                  scale=2)
        stop = gr.Button("Stop", variant="stop", elem_id="al-sweep-stop", scale=1)
    progress = gr.HTML(progress_html("No sweep yet.", 0.0, "idle"), elem_id="al-sweep-progress")
    with gr.Column(visible=False, elem_id="al-sweep-results") as panel:
        plot = gr.Plot(show_label=False, elem_id="al-plot-sweep")
        summary = gr.HTML()
        with gr.Row():
            apply = gr.Button("Apply best", variant="primary", visible=False, elem_id="al-sweep-apply")
            download_json = gr.DownloadButton("Download sweep report (JSON)", visible=False,
                                              elem_id="al-sweep-download")
    return Sweeps(values, draft_length, lookup_length, stop, progress, panel, plot, summary, apply, download_json,
                  gr.State(None))


def _sweep_updates(view: Sweeps, report: dict) -> dict:
    """The sweep's chart and table, redrawn from its report dict (with 'sweep' set)."""
    return {
        view.panel: gr.update(visible=True),
        view.plot: charts.sweep_figure(report),
        view.summary: sweep_html(report),
    }


def best_setting_updates(best: dict | None) -> tuple:
    """What Apply best writes into the settings: (num_assistant_tokens, schedule, prompt_lookup_num_tokens, note);
    the counts as text, for the settings' text boxes."""
    if not best or best.get("value") is None:
        return gr.update(), gr.update(), gr.update(), gr.update()
    if best["param"] == "prompt_lookup_num_tokens":
        note = f"Applied prompt-lookup length {best['value']} to the settings."
        return gr.update(), gr.update(), str(best["value"]), progress_html(note, 1.0, "done")
    note = f"Applied draft length {best['value']} with the {best['schedule']} schedule to the settings."
    return str(best["value"]), best["schedule"], gr.update(), progress_html(note, 1.0, "done")



def wire(page: Page, form: Form, view: Sweeps) -> None:
    """Each sweep button streams one sweep into the panel; Apply best copies the winner into the settings."""

    def arm_sweep(request: gr.Request):
        # The previous sweep's chart goes too: a new sweep that fails must not leave an old result looking current.
        return page.waiting_for_slot(request.session_hash, view.progress, (view.download_json, view.apply, view.panel))

    def sweep_stream(param: str, data: dict, request: gr.Request):
        finished: dict = {}  # the finished (or stopped) report and its progress line, saved once they are shown

        def prepare() -> tuple:
            bench, plan = page.form_request(data), sweep_plan(param, data[view.values])
            plan.apply(bench)  # refuse a bad value before waiting for models
            return bench, plan

        def render(event: Event) -> dict:
            update = {view.progress: event_progress(event)}
            if event.report is not None and repetition_end(event):
                report = event.report.to_dict()
                report.setdefault("sweep", sweep.summarize_sweep(report, param))
                if report["counted_repetitions"] or event.kind == "done":
                    update.update(_sweep_updates(view, report))
                if event.kind == "done" and event.report.runs:
                    best = report["sweep"].get("best")
                    update[view.best] = {**best, "param": param} if best else None
                    update[view.apply] = gr.update(visible=best is not None)
                    json_path, _csv = page.files.write(event.report)
                    update[view.download_json] = gr.update(value=json_path, visible=True)
                    finished.update(report=report, progress=update[view.progress])
            return update

        yield from page.streamed(request.session_hash, view.progress, prepare, render,
                                 owner=getattr(request, "username", None) or None)
        yield from save_after(finished, view.progress, None if page.closing else page.history, request)

    def sweep_draft_length(data: dict, request: gr.Request):
        yield from sweep_stream("num_assistant_tokens", data, request)

    def sweep_lookup_length(data: dict, request: gr.Request):
        yield from sweep_stream("prompt_lookup_num_tokens", data, request)

    for button, handler in ((view.draft_length, sweep_draft_length), (view.lookup_length, sweep_lookup_length)):
        page.run_listeners(button, arm_sweep, [view.progress, view.download_json, view.apply, view.panel], handler,
                           {*page.inputs, view.values}, view.outputs(), view.progress)
    view.stop.click(page.request_stop, None, view.progress, **LIGHT)
    view.apply.click(
        best_setting_updates, view.best,
        [form.settings["num_assistant_tokens"], form.settings["schedule"], form.settings["prompt_lookup_num_tokens"],
         view.progress],
        **LIGHT,
    )
