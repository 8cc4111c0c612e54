"""The Workloads tab: Spec-Bench or a prompts file, measured prompt by prompt, with per-category results."""

from __future__ import annotations

import dataclasses
import html
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..config import CLEAR_MAX_REPEATS, DEFAULT_PROMPT, SUITE_CLEAR_MAX_TIME_S, check_encodable
from ..errors import InputError
from ..results.events import Event
from ..results.suite import SuiteReport
from ..results.suite_inputs import (
    CPU_SUITE_DEFAULTS,
    DEFAULT_CATEGORIES,
    SPEC_BENCH,
    SPEC_BENCH_CATEGORIES,
    SUITE_LIMITS,
    SuiteRequest,
    parse_prompts,
    select,
)
from ..views import charts
from ..views.history_html import prompt_cell
from ..views.progress import event_progress, progress_html
from ..views.texts import texts_html
from ..views.panels import warnings_html
from .api_parameters import FORM_FIELDS
from .fields import request_from_form
from .history_tab import save_report
from .load_panel import load_section, load_updates
from .session import LIGHT, Page, SuitePlan, write_private

SOURCE_CHOICES = [("Spec-Bench (bundled)", SPEC_BENCH), ("My prompts (a file)", "file")]
INTRO = (
    "Does the assistant help with *your* kind of work? One prompt cannot say, so measure many: a ready-made set "
    "of tasks (**Spec-Bench**, 13 kinds, from translation to maths) or **your own prompts** in a file. Every "
    "prompt is timed as on the Compare tab, with the models and settings of the form, and the answer comes per "
    "kind of task and overall."
)
# One click away from INTRO: the file formats, the defaults and how the runs are shared out.
DETAILS = (
    "Spec-Bench is the standard benchmark of speculative decoding (Xia et al., 2024). A prompts file is JSON "
    "lines (`{\"category\": ..., \"prompt\": ...}`), CSV with a `prompt` column (and optionally `category`), "
    "or plain text with blank lines between prompts. Each arm warms up once for the whole workload, not once per "
    f"prompt. Left empty, new tokens and repetitions are {CPU_SUITE_DEFAULTS['max_new_tokens']} and "
    f"{CPU_SUITE_DEFAULTS['repeats']} on a CPU, since a workload multiplies the work."
)


UNTIL_CLEAR_HINT = (
    f"Instead of the same count for every prompt: each prompt runs until each assistant is clearly faster or slower "
    f"than plain on it, or within the band of no practical difference (as a comparison with no count set; "
    f"that takes 6 or more runs), at most the count set in Settings ({CLEAR_MAX_REPEATS} if none), within "
    f"{SUITE_CLEAR_MAX_TIME_S / 60:.0f} minutes of timed runs for the whole workload, shared among the prompts left."
)
# What a workload's speedup is, in plain words; the method's own words (the report's `interval`) are one click away.
SPEEDUP_WORDS = (
    "Speedup per kind of task: the typical speedup over its prompts (their geometric mean), with the range it is "
    "95% sure to lie in if those prompts stand for that kind of work; a single prompt gives no range."
)


@dataclass
class SuiteView:
    """The Workloads tab's settings, buttons and outputs."""

    source: gr.Radio
    categories: gr.CheckboxGroup
    per_category: gr.Textbox
    selection: gr.Radio
    selection_seed: gr.Number
    turns: gr.Radio
    file: gr.File
    run: gr.Button
    stop: gr.Button
    progress: gr.HTML
    panel: gr.Column
    plot: gr.Plot
    summary: gr.HTML
    table: gr.HTML
    prompts: gr.HTML
    pick: gr.Dropdown
    texts: gr.HTML
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    per_prompt: gr.State
    load_panel: gr.Column  # Under load: the workload's load phase, shown only when it had levels
    load_summary: gr.HTML
    load_speedup: gr.Plot
    load_pareto: gr.Plot
    until_clear: gr.Checkbox  # each prompt until its answer is clear, instead of a fixed count

    def load_parts(self) -> list:
        return [self.load_panel, self.load_summary, self.load_speedup, self.load_pareto]

    def settings(self) -> list:
        return [self.source, self.categories, self.per_category, self.selection, self.selection_seed, self.turns,
                self.file]

    def outputs(self) -> list:
        return [self.progress, self.panel, self.plot, self.summary, self.table, self.prompts, self.pick, self.texts,
                self.download_json, self.download_csv, self.per_prompt, *self.load_parts()]


def build() -> SuiteView:
    gr.Markdown(INTRO, elem_classes="al-env")
    with gr.Accordion("Details: file formats and defaults", open=False, elem_id="al-suite-details"):
        gr.Markdown(DETAILS, elem_classes="al-env")
    source = gr.Radio(SOURCE_CHOICES, value=SPEC_BENCH, label="Workload", elem_id="al-suite-source")
    categories = gr.CheckboxGroup(list(SPEC_BENCH_CATEGORIES), value=list(DEFAULT_CATEGORIES),
                                  label="Kinds of task (Spec-Bench categories)", elem_id="al-suite-categories",
                                  info="The first eight (from MT-bench) are conversations of two questions each; "
                                       "the other five are single questions.")
    with gr.Row():
        # A text box, so that left empty it shows the number it will use (a Number box would read 0).
        per_category = gr.Textbox("", label="Prompts per kind of task", max_lines=1, min_width=140,
                                  placeholder=per_category_placeholder(SPEC_BENCH),
                                  info=f"How many prompts of each kind to time, at most {SUITE_LIMITS['per_category']}. "
                                       "Left empty: one of each kind from Spec-Bench, every prompt of your file.")
        selection = gr.Radio([("The first ones, in order", "first"), ("A random pick (repeatable by its seed)", "sample")],
                             value="first", label="Which prompts", min_width=180)
        selection_seed = gr.Number(0, label="Sample seed", precision=0, min_width=100)
        turns = gr.Radio([("First turn", "first"), ("Every turn", "both")], value="first",
                         label="Conversations (two questions)", min_width=160,
                         info="Every turn: the second question follows the target's own answer to the first.")
    until_clear = gr.Checkbox(False, label="Time each prompt until its answer is clear", elem_id="al-suite-until-clear",
                              info=UNTIL_CLEAR_HINT)
    file = gr.File(label=f"My prompts file (.jsonl, .csv or .txt, at most {SUITE_LIMITS['file_bytes'] // 1_000_000} MB)",
                   file_types=[".jsonl", ".json", ".csv", ".txt"], type="filepath", visible=False,
                   elem_id="al-suite-file")
    with gr.Column(elem_classes="al-runbar"):  # in sight while the results scroll, as the comparison's
        with gr.Row(elem_classes="al-runrow"):
            run = gr.Button("Run workload", variant="primary", elem_id="al-suite-run", scale=3)
            stop = gr.Button("Stop", variant="stop", elem_id="al-suite-stop", scale=1)
        progress = gr.HTML(progress_html("No workload yet.", 0.0, "idle"), elem_id="al-suite-progress")
    with gr.Column(visible=False, elem_id="al-suite-results") as panel:
        plot = gr.Plot(show_label=False, elem_id="al-plot-suite")
        summary = gr.HTML()
        table = gr.HTML()
        load_parts = load_section("al-suite-load")
        gr.Markdown("#### Every prompt")
        prompts = gr.HTML()
        pick = gr.Dropdown([], label="Open a prompt's texts", elem_id="al-suite-pick", interactive=True)
        texts = gr.HTML()
        with gr.Row():
            download_json = gr.DownloadButton("Download workload report (JSON)", visible=False,
                                              elem_id="al-suite-download-json")
            download_csv = gr.DownloadButton("Download runs (CSV)", visible=False, elem_id="al-suite-download-csv")
    return SuiteView(source, categories, per_category, selection, selection_seed, turns, file, run, stop, progress,
                     panel, plot, summary, table, prompts, pick, texts, download_json, download_csv, gr.State({}),
                     *load_parts, until_clear)


def per_category_placeholder(source: str) -> str:
    """What the empty "Prompts per kind of task" box will use, shown in it: 1 of Spec-Bench, all of a file."""
    return "1" if (source or SPEC_BENCH) == SPEC_BENCH else "all of them"


# ---------------------------------------------------------------- requests


def suite_request_from_form(
    source, categories, per_category, selection, selection_seed, turns, file=None
) -> SuiteRequest:
    """The SuiteRequest the tab (or the API) describes; a file's own categories are all taken."""
    source = source or SPEC_BENCH
    is_file = source != SPEC_BENCH
    if isinstance(categories, str):
        categories = [c for c in categories.split(",") if c.strip()]
    return SuiteRequest(
        suite=source,
        file=(str(file) if file else None) if is_file else None,
        categories=() if is_file else tuple(categories or ()),
        per_category=None if per_category in (None, 0) or str(per_category).strip() == "" else per_category,
        selection=selection or "first",
        seed=0 if selection_seed in (None, "") else selection_seed,
        turns=turns or "first",
    )


def bench_from_form(values: dict, until_clear: bool = False):
    """The form's BenchRequest, with a stand-in prompt (a suite brings its own prompts); `until_clear` runs each
    prompt until its answer is clear (the rule "clear") instead of a fixed count."""
    bench = request_from_form(**{**values, "prompt": DEFAULT_PROMPT})
    if until_clear is not True and until_clear not in (False, None):
        raise InputError(f"until_clear must be true or false, got {until_clear!r}.")
    if bench.stop_rule == "likely":
        raise InputError("How sure: Likely stops one comparison at its likely answer; a workload runs each prompt a "
                         "fixed count, or until its answer is sure (Each prompt until its answer is clear): choose "
                         "Sure or Careful.")
    if until_clear and bench.precision is not None:
        raise InputError("Each prompt until its answer is clear and How sure: Careful are two ways to decide how "
                         "many repetitions run; choose Sure, or switch the per-prompt rule off.")
    return dataclasses.replace(bench, stop_rule="clear") if until_clear else bench


# ---------------------------------------------------------------- panels (pure HTML from the report dict)


def _num(value, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def _interval(s: dict) -> str:
    if s.get("ci_low") is None:
        return "–"
    return f"{s['ci_low']:.2f}–{s['ci_high']:.2f}×"


def summary_html(data: dict) -> str:
    """One sentence per category and overall: which arm was fastest, never from an interval holding 1×."""
    suite = data["suite"]
    items = [f"<li>{html.escape(c['best'])}</li>" for c in suite["categories"]]
    items.append(f"<li><b>{html.escape(suite['overall']['best'])}</b></li>")
    skipped = "".join(
        f"<li>Skipped {html.escape(s['id'])} ({html.escape(s['category'])}): {html.escape(s['reason'] or '')}</li>"
        for s in suite["skipped"]
    )
    rule = html.escape(f"{suite['name']}: {suite['rule']}. {SPEEDUP_WORDS}")
    method = (f'<details class="al-glossary"><summary>How is this worked out?</summary>'
              f'<p class="al-sub">{html.escape(suite["interval"])}.</p></details>')
    warned = warnings_html(data)  # one line, the details a click away, as beside a single comparison's verdict
    return (f'<div class="al-suite-summary"><p class="al-env">{rule}</p>{method}{warned}<ul>{"".join(items)}</ul>'
            + (f'<ul class="al-env">{skipped}</ul>' if skipped else "") + "</div>")


def table_html(data: dict) -> str:
    """Per category and overall, per arm: speedup, interval, acceptance, mean accepted tokens, identical."""
    suite = data["suite"]
    head = ("<tr><th>category</th><th>arm</th><th>prompts</th><th>speedup</th><th>95% interval</th>"
            "<th>acceptance</th><th>accepted tokens / step</th><th>identical</th></tr>")
    rows = []
    for entry in [*suite["categories"], {**suite["overall"], "category": "overall"}]:
        for arm in entry["arms"]:
            s = arm["speedup"]
            rows.append(
                f"<tr><td>{html.escape(entry['category'])}</td><td>{html.escape(arm['arm'])}</td>"
                f"<td>{arm['prompts']}</td><td>{_num(s['geomean'], '{:.2f}×')}</td><td>{_interval(s)}</td>"
                f"<td>{_num(arm['acceptance_rate'], '{:.0%}')}</td><td>{_num(arm['mean_accepted_tokens'], '{:.2f}')}</td>"
                f"<td>{arm['identical']}/{arm['prompts']}</td></tr>"
            )
    return f'<div style="overflow-x:auto"><table class="al-table" id="al-suite-table">{head}{"".join(rows)}</table></div>'


SUITE_PROMPT_CHARS = 90  # of a prompt in the table of every prompt; more of it is the cell's hover


def prompts_html(data: dict) -> str:
    """Every selected prompt: its status, and per arm the paired speedup, acceptance and tokens per forward."""
    rows = []
    for row in data["suite"]["prompts"]:
        if row["arms"]:
            cells = "<br>".join(
                f"{html.escape(a['arm'])}: {_num(a['speedup'], '{:.2f}×')}, "
                f"{_num(a['acceptance_rate'], '{:.0%}')} accepted, {_num(a['tokens_per_forward'], '{:.2f}')} tokens per step"
                + ("" if a["identical"] is not False else ", differs")
                for a in row["arms"]
            )
        else:
            cells = html.escape(row["reason"] or row["status"])
        rows.append(
            f"<tr><td>{html.escape(row['id'])}</td><td>{html.escape(row['category'])}</td><td>{row['status']}</td>"
            f"<td>{_num(row['prompt_tokens'], '{}')}</td>{prompt_cell(row['prompt'], SUITE_PROMPT_CHARS)}"
            f"<td>{cells}</td></tr>"
        )
    head = "<tr><th>id</th><th>category</th><th>status</th><th>tokens</th><th>prompt</th><th>per arm</th></tr>"
    return f'<div style="overflow-x:auto"><table class="al-table" id="al-suite-prompts">{head}{"".join(rows)}</table></div>'


def redraws(event: Event) -> bool:
    """Whether the suite's results are redrawn on this event: once each prompt is measured, and at the end."""
    return event.kind == "done" or event.prompt_done


def _choices(report: SuiteReport) -> list[tuple[str, str]]:
    return [(f"{r.item.id} · {r.item.category} · {r.item.text[:50]}", r.item.id)
            for r in report.results if r.report is not None and r.report.runs]


def saved_outputs(view: SuiteView) -> list:
    """The Workloads panels a saved workload is opened in (from History or its link)."""
    return [view.progress, view.panel, view.plot, view.summary, view.table, view.prompts, view.pick, view.texts,
            view.per_prompt, view.download_json, view.download_csv, *view.load_parts()]


def saved_updates(view: SuiteView, run_id: str, data: dict) -> dict:
    """A saved workload's report dict in the Workloads panels, drawn by the same functions as a fresh one."""
    rows = [r for r in (data.get("suite") or {}).get("prompts") or [] if r.get("runs")]
    # Each prompt's texts from its saved runs (plain first), as the texts panel reads a comparison.
    per_prompt = {r["id"]: {"arms": r["runs"], "comparison": [{"arm": a["arm"], "outputs_identical": a.get("identical")}
                                                              for a in r.get("arms") or []]} for r in rows}
    choices = [(f"{r['id']} · {r['category']} · {str(r.get('prompt') or '')[:50]}", r["id"]) for r in rows]
    first = choices[0][1] if choices else None
    note = f"Opened the saved workload {run_id} (from the history)."
    return {
        view.progress: progress_html(note, 1.0, "done"),
        view.panel: gr.update(visible=True),
        view.plot: charts.suite_figure(data),
        view.summary: summary_html(data),
        view.table: table_html(data),
        view.prompts: prompts_html(data),
        view.per_prompt: per_prompt,
        view.pick: gr.update(choices=choices, value=first),
        view.texts: texts_html(per_prompt[first]) if first else "",
        view.download_json: gr.update(visible=False),
        view.download_csv: gr.update(visible=False),
        **load_updates(*view.load_parts(), data),
    }


def write_files(root: Path, report: SuiteReport) -> tuple[str, str]:
    folder = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    json_path, csv_path = folder / f"{report.file_stem}.json", folder / f"{report.file_stem}-runs.csv"
    write_private(json_path, report.to_json())
    write_private(csv_path, report.to_csv())
    return str(json_path), str(csv_path)


def suite_progress(event: Event) -> str:
    """A workload's progress bar, in the same form as a single comparison's (progress.progress_text): the prompt,
    the run under way, runs done, time so far and time left."""
    return event_progress(event)


# ---------------------------------------------------------------- listeners


def wire(page: Page, view: SuiteView) -> None:
    """Run streams a workload into the panels after every prompt; Stop keeps what was measured."""
    names = {component: name for name, component in zip(FORM_FIELDS, page.inputs)}

    def show_source(source: str):
        is_file = source != SPEC_BENCH
        return (gr.update(visible=not is_file), gr.update(visible=is_file),
                gr.update(placeholder=per_category_placeholder(source)))

    view.source.change(show_source, view.source, [view.categories, view.file, view.per_category], **LIGHT)

    def arm_run(request: gr.Request):
        return page.waiting_for_slot(request.session_hash, view.progress, (view.download_json, view.download_csv))

    def run_stream(data: dict, request: gr.Request):
        def prepare():
            bench = bench_from_form({names[c]: v for c, v in data.items() if c in names}, data[view.until_clear])
            selection = select(suite_request_from_form(*(data[c] for c in view.settings())))
            return bench, SuitePlan(selection)

        def render(event: Event) -> dict:
            update = {view.progress: suite_progress(event)}
            report = event.report
            if report is not None and redraws(event):
                data_ = report.to_dict()
                update.update({
                    view.panel: gr.update(visible=True),
                    view.plot: charts.suite_figure(data_),
                    view.summary: summary_html(data_),
                    view.table: table_html(data_),
                    view.prompts: prompts_html(data_),
                    **load_updates(*view.load_parts(), data_),
                })
                if event.kind == "done":
                    per_prompt = {r.item.id: r.report_dict() for r in report.results if r.report is not None}
                    choices = _choices(report)
                    first = choices[0][1] if choices else None
                    update[view.per_prompt] = per_prompt
                    update[view.pick] = gr.update(choices=choices, value=first)
                    update[view.texts] = texts_html(per_prompt[first]) if first else ""
                    if any(r.report is not None and r.report.runs for r in report.results):
                        json_path, csv_path = write_files(page.files.root, report)
                        update[view.download_json] = gr.update(value=json_path, visible=True)
                        update[view.download_csv] = gr.update(value=csv_path, visible=True)
                        update[view.progress] += save_report(None if page.closing else page.history, data_, request)
            return update

        yield from page.streamed(request.session_hash, view.progress, prepare, render, redraws,
                                 owner=getattr(request, "username", None) or None)

    page.run_listeners(view.run, arm_run, [view.progress, view.download_json, view.download_csv], run_stream,
                       {*page.inputs, *view.settings(), view.until_clear}, view.outputs(), view.progress)
    view.stop.click(page.request_stop, None, view.progress, **LIGHT)

    def open_prompt(item_id, per_prompt: dict):
        data = (per_prompt or {}).get(item_id)
        return texts_html(data) if data else ""

    view.pick.change(open_prompt, [view.pick, view.per_prompt], view.texts, **LIGHT)


def suite_plan_from_api(values: dict, suite_values: dict, prompts_text: str, prompts_filename: str,
                        until_clear: bool = False):
    """The /compare_suite API's request and plan: a prompts file comes as its text."""
    prompts_text = "" if prompts_text is None else str(prompts_text)
    if len(prompts_text) > SUITE_LIMITS["file_bytes"]:  # before anything reads it: a character is at least a byte
        raise InputError(
            f"prompts_text is {len(prompts_text):,} characters; a prompts file may be at most "
            f"{SUITE_LIMITS['file_bytes']:,} bytes. Split it or choose fewer prompts."
        )
    bench = bench_from_form(values, until_clear)
    if suite_values["source"] != SPEC_BENCH:
        if not prompts_text.strip():
            raise InputError("prompts_text: give the contents of a prompts file (or choose suite='spec-bench').")
        check_encodable("prompts_text", prompts_text)
        check_encodable("prompts_filename", str(prompts_filename or ""))
        prompts = parse_prompts(prompts_text.encode("utf-8"), prompts_filename or "prompts.txt")
        request = suite_request_from_form(**{**suite_values, "file": prompts_filename or "prompts.txt"})
        return bench, SuitePlan(select(request, prompts))
    return bench, SuitePlan(select(suite_request_from_form(**suite_values)))
