"""The "Find the best setting" tab: a search over candidate settings (measure/tune.py) with Run and Stop, the
candidates still in on the progress line, then the answer in a sentence, the snippet that deploys it (plain
generation's when no setting was clearly faster than plain), the chart of every candidate's interval over the
looks, the table of candidates and the report."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ..results.events import Event
from ..views import tune as tune_views
from ..views.progress import event_progress, progress_html
from .api_parameters import FORM_FIELDS, TUNE_API
from .form import Form
from .history_tab import save_after
from .session import LIGHT, Page, TunePlan
from .tune_fields import (DETAILS, HINTS, INTRO, LABELS, cannot_run, checked, default_assistants_text,
                          default_families, engine_reasons, families_hint, family_choices, tune_request_from_form)

READY = "No search yet. Press Find the best setting to start."


@dataclass
class TuneView:
    """The tab's own boxes, its buttons and what a search fills in."""

    assistants: gr.Textbox
    families: gr.CheckboxGroup
    candidates: gr.Textbox
    repeats: gr.Textbox
    max_time_s: gr.Textbox
    run: gr.Button
    stop: gr.Button
    progress: gr.HTML
    panel: gr.Column
    sentence: gr.HTML
    snippet: gr.Code
    plot: gr.Plot
    table: gr.HTML
    download_json: gr.DownloadButton
    engines: dict  # each engine's word, when the page was built, on whether its families can run here

    def own(self) -> dict:
        """The tab's boxes by the API's names; the search's other parameters are the form's fields."""
        return {"assistants": self.assistants, "families": self.families, "candidates": self.candidates,
                "repeats": self.repeats, "max_time_s": self.max_time_s}

    def outputs(self) -> list:
        return [self.progress, self.panel, self.sentence, self.snippet, self.plot, self.table, self.download_json]


def _box(name: str, elem_id: str, **options) -> gr.Textbox:
    # Text boxes, so that left empty they show the value they will use (a Number box would read 0).
    return gr.Textbox("", label=LABELS[name], info=HINTS[name], elem_id=elem_id, **options)


def build() -> TuneView:
    gr.Markdown(INTRO, elem_classes="al-env")
    with gr.Accordion("Details: candidates and how they leave", open=False, elem_id="al-tune-details"):
        gr.Markdown(DETAILS, elem_classes="al-env")
    assistants = _box("assistants", "al-tune-assistants", lines=1, max_lines=4,
                      placeholder=default_assistants_text(_default_target()))
    engines = engine_reasons()  # asked once: a family that cannot run on this server opens unticked, saying why
    reasons = cannot_run(_default_target(), engines)
    families = gr.CheckboxGroup(family_choices(reasons), value=default_families(reasons), label=LABELS["families"],
                                info=families_hint(reasons), elem_id="al-tune-families")
    candidates = _box("candidates", "al-tune-candidates", lines=1, max_lines=4,
                      placeholder="every setting the engines try by default")
    with gr.Row():
        repeats = _box("repeats", "al-tune-repeats", max_lines=1, min_width=140, placeholder="30")
        max_time_s = _box("max_time_s", "al-tune-max-time", max_lines=1, min_width=140, placeholder="600")
    with gr.Column(elem_classes="al-runbar"):
        with gr.Row(elem_classes="al-runrow"):
            run = gr.Button("Find the best setting", variant="primary", elem_id="al-tune-run", scale=3)
            stop = gr.Button("Stop", variant="stop", elem_id="al-tune-stop", scale=1)
        progress = gr.HTML(progress_html(READY, 0.0, "idle"), elem_id="al-tune-progress")
    with gr.Column(visible=False, elem_id="al-tune-results") as panel:
        sentence = gr.HTML(elem_id="al-tune-answer")
        snippet = gr.Code("", language="python", label="Deploy it (copy with the button at the top right)",
                          interactive=False, buttons=["copy"], elem_id="al-tune-snippet", lines=4)
        plot = gr.Plot(show_label=False, elem_id="al-plot-tune")
        table = gr.HTML()
        download_json = gr.DownloadButton("Download search report (JSON)", visible=False, elem_id="al-tune-download")
    return TuneView(assistants, families, candidates, repeats, max_time_s, run, stop, progress, panel, sentence,
                    snippet, plot, table, download_json, engines)


def _default_target() -> str:
    from ..engines import catalog

    return catalog.PRESETS[0].target


def result_updates(view: TuneView, report: dict) -> dict:
    """Every result component, drawn from one report dict with its `tune` block."""
    return {
        view.panel: gr.update(visible=True),
        view.sentence: tune_views.sentence_html(report),
        view.snippet: gr.update(value=tune_views.snippet(report), language=tune_views.snippet_language(report),
                                label=tune_views.snippet_label(report), visible=bool(tune_views.snippet(report))),
        view.plot: tune_views.tune_figure(report),
        view.table: tune_views.candidates_html(report),
    }


def saved_outputs(view: TuneView) -> list:
    """The tab's panels a saved search is opened in (from History or its link)."""
    return view.outputs()


def saved_updates(view: TuneView, run_id: str, data: dict) -> dict:
    """A saved search's report dict in the tab's panels, drawn by the same functions as a fresh one."""
    note = f"Opened the saved search {run_id} (from the history)."
    return {view.progress: progress_html(note, 1.0, "done"), **result_updates(view, data),
            view.download_json: gr.update(visible=False)}


def inputs(page: Page, view: TuneView) -> list:
    """The components a search reads, in TUNE_API's order: the tab's own boxes, else the form's fields."""
    form = dict(zip(FORM_FIELDS, page.inputs))
    own = view.own()
    return [own.get(p.name) or form[p.name] for p in TUNE_API]


def wire(page: Page, form: Form, view: TuneView) -> None:
    """Run streams a search (the candidates still in on its progress line) and draws its result when it ends;
    Stop ends it at the next run boundary, keeping what was measured ("not settled")."""
    components = inputs(page, view)

    def arm_run(request: gr.Request):
        return page.waiting_for_slot(request.session_hash, view.progress, (view.download_json, view.panel))

    def run_stream(data: dict, request: gr.Request):
        finished: dict = {}

        def prepare():
            values = {p.name: data[c] for p, c in zip(TUNE_API, components)}
            return checked(lambda: tune_request_from_form(**values)), TunePlan()

        def render(event: Event) -> dict:
            update = {view.progress: event_progress(event)}
            if event.kind == "done" and event.report is not None and event.report.tune is not None:
                report = event.report.to_dict()
                update.update(result_updates(view, report))
                if event.report.runs:
                    json_path, _csv = page.files.write(event.report)
                    update[view.download_json] = gr.update(value=json_path, visible=True)
                    finished.update(report=report, progress=update[view.progress])
            return update

        yield from page.streamed(request.session_hash, view.progress, prepare, render)
        yield from save_after(finished, view.progress, page.history, request)

    page.run_listeners(view.run, arm_run, [view.progress, view.download_json, view.panel], run_stream,
                       set(components), view.outputs(), view.progress)
    view.stop.click(page.request_stop, None, view.progress, **LIGHT)
    form.target.change(lambda target: gr.update(placeholder=default_assistants_text(target)), form.target,
                       view.assistants, **LIGHT)
    form.target.change(lambda target: families_update(target, view.engines), form.target, view.families, **LIGHT)


def families_update(target, engines: dict) -> dict:
    """The ticks' labels and info line for a target: a family that cannot run for it (mtp without MTP layers)
    says so; the ticks themselves stay as the person left them."""
    reasons = cannot_run(target, engines)
    return gr.update(choices=family_choices(reasons), info=families_hint(reasons))
