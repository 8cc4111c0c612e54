"""The History and Leaderboard tabs: saved comparisons, one or two opened in the result panels, permalinks.

Every string that comes from the database is escaped (history_html); saved reports are rendered by the same
panel and chart functions as a fresh result.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..errors import AssistLabError
from ..history import History, SaveResult, canonical_model, check_id, kind_of, runs_csv, savable
from ..views import charts
from ..views.history_html import board_html, chooser_label, entries_html, entry_caption_html, where_html
from ..views.panels import headline_html, numbers_html, ranking_html, sweep_html, why_html
from ..views.texts import texts_html
from .load_panel import load_section, load_updates
from .session import LIGHT, Page, user_errors, write_private

SIDES = ("left", "right")
PAGE_SIZE = 20


def saved_note(result: SaveResult) -> str:
    """One line under a finished result: its permalink, or why it was not saved (also shown as a warning)."""
    if result.saved:
        link = html.escape(f"?run={result.id}")
        note = f" {html.escape(result.note)}" if result.note else ""
        return (f'<p class="al-note" id="al-saved">Saved to the history as <a href="{link}">{html.escape(result.id)}'
                f"</a> (open it in the History tab, or share the link).{note}</p>")
    gr.Warning(result.warning)
    return f'<p class="al-note al-failed" id="al-saved">{html.escape(result.warning or "")}</p>'


def save_report(history: History | None, report: dict, request: gr.Request | None) -> str:
    """Save a finished (or stopped, measured) comparison or workload with the login name; '' when there is no
    history or the history's rule (`savable`: at least one whole repetition, or one measured prompt of a
    workload) says it is not kept."""
    if history is None or not savable(report):
        return ""
    return saved_note(history.save(report, owner=getattr(request, "username", None) or None))


def save_after(finished: dict, progress: gr.HTML, history: History | None, request: gr.Request | None):
    """After a run's last update (its result already on the page), save `finished["report"]` and add the note
    to `finished["progress"]`; a slow or stalled database then delays only this line, never the result."""
    if "report" in finished:
        note = save_report(history, finished["report"], request)
        if note:
            yield {progress: finished["progress"] + note}


def failure_html(message: str) -> str:
    """A sentence where the person looked (the listing, the status line, the board), in red."""
    return f'<p class="al-note al-failed">{html.escape(message)}</p>'


def shown_errors(call, on_error):
    """`call()`, or `on_error(sentence)` when it fails: the History and Leaderboard listeners run outside the
    queue, where a raised gr.Error reaches the browser as a bare HTTP 500 "Error", so the sentence is returned
    into a visible component instead."""
    try:
        with user_errors():
            return call()
    except gr.Error as exc:
        return on_error(failure_html(exc.message))


def environment_html(report: dict) -> str:
    """Where a saved result was measured, escaped (the page's Markdown panel is for fresh results)."""
    env = report.get("environment") or {}
    hardware = f"GPU {env['gpu_name']}" if env.get("gpu_name") else f"CPU {env.get('cpu_model', '?')}"
    parts = [f"Ran on {hardware} · {env.get('dtype', '?')} · torch {env.get('torch', '?')} · transformers "
             f"{env.get('transformers', '?')} · AssistLab {env.get('assistlab', '?')}"]
    for role, info in (env.get("models") or {}).items():
        if isinstance(info, dict):
            parts.append(f"{role}: {canonical_model(info.get('ref'), info.get('kind') or None)} ({info.get('kind', '?')})")
    return '<p class="al-env">' + "<br>".join(html.escape(str(p)) for p in parts) + "</p>"


@dataclass
class Side:
    """The panels one saved comparison is shown in."""

    column: gr.Column
    caption: gr.HTML
    headline: gr.HTML
    speedup: gr.Plot
    latency: gr.Plot
    timeline: gr.Plot
    acceptance: gr.Plot
    why: gr.HTML
    ranking: gr.HTML
    sweep: gr.HTML
    numbers: gr.HTML
    texts: gr.HTML
    environment: gr.HTML
    download_json: gr.DownloadButton
    download_csv: gr.DownloadButton
    load_panel: gr.Column  # Under load: shown only for a comparison that timed load levels
    load_summary: gr.HTML
    load_speedup: gr.Plot
    load_pareto: gr.Plot

    def outputs(self) -> list:
        return [getattr(self, name) for name in self.__dataclass_fields__]


@dataclass
class HistoryView:
    target: gr.Textbox
    assistant: gr.Textbox
    device: gr.Textbox
    page: gr.Number
    refresh: gr.Button
    listing: gr.HTML
    chosen: gr.Dropdown
    open: gr.Button
    delete: gr.Button
    status: gr.HTML
    sides: tuple[Side, ...]
    board_target: gr.Textbox
    board_device: gr.Textbox
    board_refresh: gr.Button
    board: gr.HTML


# A click (or Enter) on a history row asks the page to open that comparison.
ROW_CLICKS = """
const pick = (event) => {
  const row = event.target.closest('tr[data-run]');
  if (!row || event.target.closest('a')) return;
  trigger('click', {run: row.dataset.run});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', (event) => { if (event.key === 'Enter') pick(event); });
"""
# The share link as the full address the page was opened at, and its copy button.
FULL_LINK = """
const full = () => element.querySelectorAll('a.al-permalink').forEach((a) => {
  const url = new URL(a.getAttribute('href'), window.location.href).href;
  if (a.textContent !== url) { a.href = url; a.textContent = url; }
});
new MutationObserver(full).observe(element, {childList: true, subtree: true, characterData: true});
full();
element.addEventListener('click', (event) => {
  const button = event.target.closest('button.al-copy');
  if (!button) return;
  const url = element.querySelector('a.al-permalink').href;
  const copied = () => { button.textContent = 'Copied'; setTimeout(() => { button.textContent = 'Copy link'; }, 2000); };
  const fallback = () => {
    const box = document.createElement('textarea');
    box.value = url; document.body.appendChild(box); box.select();
    document.execCommand('copy'); box.remove(); copied();
  };
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).then(copied, fallback);
  else fallback();
});
"""
# After a comparison opens, bring it into view (it is below the list).
SCROLL_TO_OPENED = "() => document.querySelector('#al-saved-left')?.scrollIntoView({behavior: 'smooth', block: 'start'})"


def _side(name: str) -> Side:
    with gr.Column(visible=False, elem_id=f"al-saved-{name}", min_width=360) as column:
        caption = gr.HTML(js_on_load=FULL_LINK, elem_id=f"al-saved-{name}-caption")
        headline = gr.HTML()
        speedup = gr.Plot(show_label=False, elem_id=f"al-saved-{name}-speedup")
        latency = gr.Plot(show_label=False)
        timeline = gr.Plot(show_label=False)
        acceptance = gr.Plot(show_label=False)
        load_parts = load_section(f"al-saved-{name}-load")
        why = gr.HTML()
        ranking = gr.HTML()
        sweep = gr.HTML()
        numbers = gr.HTML()
        texts = gr.HTML(elem_id=f"al-saved-{name}-texts")
        environment = gr.HTML()
        with gr.Row():
            download_json = gr.DownloadButton("Download report (JSON)", visible=False)
            download_csv = gr.DownloadButton("Download runs (CSV)", visible=False)
    return Side(column, caption, headline, speedup, latency, timeline, acceptance, why, ranking, sweep, numbers, texts,
                environment, download_json, download_csv, *load_parts)


def build_history(where: str | None = None) -> dict:
    """The History tab's layout (inside a gr.Tab); `where` is where the history is kept (None: not said)."""
    gr.Markdown("Saved comparisons, newest first. Choose one to open it, or two to see them side by side.")
    gr.HTML(where_html(where))
    with gr.Row():
        target = gr.Textbox(label="Target contains", max_lines=1, max_length=200, min_width=150)
        assistant = gr.Textbox(label="Assistant contains", max_lines=1, max_length=200, min_width=150)
        device = gr.Textbox(label="Device contains", max_lines=1, max_length=200, min_width=150,
                            placeholder="e.g. cpu, H200")
        page = gr.Number(1, label="Page", precision=0, minimum=1, min_width=80)
    refresh = gr.Button("Show saved comparisons", elem_id="al-history-refresh")
    listing = gr.HTML(elem_id="al-history-list", js_on_load=ROW_CLICKS)
    with gr.Row():
        chosen = gr.Dropdown([], multiselect=True, max_choices=2, label="Comparisons to open (one or two)",
                             allow_custom_value=True, elem_id="al-history-chosen", scale=4)
        open_ = gr.Button("Open", variant="primary", elem_id="al-history-open", scale=1)
        delete = gr.Button("Delete", variant="stop", elem_id="al-history-delete", scale=1)
    status = gr.HTML(elem_id="al-history-status")
    with gr.Row(equal_height=False):
        sides = tuple(_side(name) for name in SIDES)
    return dict(target=target, assistant=assistant, device=device, page=page, refresh=refresh, listing=listing,
                chosen=chosen, open=open_, delete=delete, status=status, sides=sides)


def build_board() -> dict:
    """The Leaderboard tab's layout (inside a gr.Tab)."""
    gr.Markdown("For each target and device, the pairings tried, ranked by measured speedup over plain: how many "
                "times faster the target wrote with that help than on its own (1× = no change, below 1× = slower).")
    with gr.Row():
        board_target = gr.Textbox(label="Target contains", max_lines=1, max_length=200)
        board_device = gr.Textbox(label="Device contains", max_lines=1, max_length=200)
    board_refresh = gr.Button("Show the leaderboard", elem_id="al-board-refresh")
    board = gr.HTML(elem_id="al-board")
    return dict(board_target=board_target, board_device=board_device, board_refresh=board_refresh, board=board)


def _side_updates(side: Side, entry, report: dict, folder: Path) -> dict:
    json_path = folder / f"assistlab-report-{entry.id}.json"
    csv_path = folder / f"assistlab-runs-{entry.id}.csv"
    write_private(json_path, json.dumps(report, indent=2))
    write_private(csv_path, runs_csv(report))
    return {
        side.column: gr.update(visible=True),
        side.caption: entry_caption_html(entry),
        side.headline: headline_html(report),
        side.speedup: charts.speedup_figure(report),
        side.latency: charts.latency_figure(report),
        side.timeline: charts.timeline_figure(report),
        side.acceptance: charts.acceptance_figure(report),
        side.why: why_html(report),
        side.ranking: ranking_html(report),
        side.sweep: sweep_html(report) if report.get("sweep") else "",
        side.numbers: numbers_html(report),
        side.texts: texts_html(report),
        side.environment: environment_html(report),
        side.download_json: gr.update(value=str(json_path), visible=True),
        side.download_csv: gr.update(value=str(csv_path), visible=True),
        **load_updates(side.load_panel, side.load_summary, side.load_speedup, side.load_pareto, report),
    }


def listing_of(history: History):
    """The listener that shows one page of the history with the filters."""

    def listed(target: str, assistant: str, device: str, number):
        with user_errors():
            result = history.list(target=target or "", assistant=assistant or "", device=device or "",
                                  page=int(number or 1), page_size=PAGE_SIZE)
        choices = [(chooser_label(e), e.id) for e in result.entries]
        return entries_html(result), gr.update(choices=choices)

    def listing(target: str, assistant: str, device: str, number):
        return shown_errors(lambda: listed(target, assistant, device, number), lambda note: (note, gr.update()))

    return listing


def board_of(history: History):
    """The listener that shows the leaderboard."""

    def board(target: str, device: str):
        return shown_errors(lambda: board_html(history.leaderboard(target=target or "", device=device or "")),
                            lambda note: note)

    return board


@dataclass
class Elsewhere:
    """Where a saved run of one kind (history.kind_of: 'workload', 'tune') opens instead of the History panels:
    the tab's id, its panels, and how a saved report (with its run id) fills them."""

    kind: str
    tab: str
    outputs: list
    updates: Callable[[str, dict], dict]


def wire(page: Page, history: History, view: HistoryView, tabs: gr.Tabs, demo: gr.Blocks,
         elsewhere: tuple[Elsewhere, ...] = ()) -> None:
    """List, open (one or two), delete, leaderboard, and the ?run=<id> permalink.

    A saved run whose kind has an `elsewhere` opens in that tab's panels (a workload in Workloads, a tuner's
    search in Find the best setting); the first one chosen decides.
    """
    side_outputs = ([c for side in view.sides for c in side.outputs()] + [c for e in elsewhere for c in e.outputs]
                    + [tabs])
    routes = {e.kind: e for e in elsewhere}

    listing = listing_of(history)
    def opened(ids: list[str] | None):
        ids = [i for i in (ids or []) if i][:2]
        if not ids:
            raise gr.Error("Choose one or two saved comparisons to open.", print_exception=False)
        update = {}
        folder = page.files.folder("saved")  # made again if it went: the files of opened comparisons
        with user_errors():
            opened = [(run_id, *history.get(run_id)) for run_id in ids]
        away = [(routes[kind_of(report)], run_id, report) for run_id, _entry, report in opened
                if kind_of(report) in routes]
        if away:  # a workload or a search opens in its own tab's panels
            route, run_id, report = away[0]
            return {**route.updates(run_id, report), tabs: gr.update(selected=route.tab), view.status: ""}
        for side, (_run_id, entry, report) in zip(view.sides, opened):
            update.update(_side_updates(side, entry, report, folder))
        for side in view.sides[len(ids):]:
            update[side.column] = gr.update(visible=False)
        update[view.status] = ""
        return update

    def open_chosen(ids: list[str] | None):
        return shown_errors(lambda: opened(ids), lambda note: {view.status: note})

    def deleted(ids: list[str] | None, request: gr.Request):
        ids = [i for i in (ids or []) if i]
        if not ids:
            raise gr.Error("Choose the saved comparisons to delete.", print_exception=False)
        with user_errors():
            for run_id in ids:
                history.delete(run_id, user=getattr(request, "username", None) or None)
        done = ", ".join(check_id(i) for i in ids)
        return (f'<p class="al-note">Deleted {html.escape(done)}.</p>', gr.update(value=[]),
                *[gr.update(visible=False) for _ in view.sides])

    def delete_chosen(ids: list[str] | None, request: gr.Request):
        return shown_errors(lambda: deleted(ids, request),
                            lambda note: (note, gr.update(), *[gr.update() for _ in view.sides]))

    board = board_of(history)
    def permalink(request: gr.Request):
        run_id = (getattr(request, "query_params", None) or {}).get("run")
        if not run_id:
            return {view.status: gr.update()}
        try:
            update = opened([check_id(run_id)])
        except (gr.Error, AssistLabError) as exc:
            message = exc.message if isinstance(exc, gr.Error) else str(exc)
            return {tabs: gr.update(selected="history"), view.status: f'<p class="al-note">{html.escape(message)}</p>'}
        return {tabs: gr.update(selected="history"), **update, view.chosen: gr.update(value=[check_id(run_id)])}

    filters = [view.target, view.assistant, view.device, view.page]
    view.refresh.click(listing, filters, [view.listing, view.chosen], **LIGHT)
    for box in filters[:3]:
        box.submit(listing, filters, [view.listing, view.chosen], **LIGHT)
    view.open.click(open_chosen, view.chosen, [*side_outputs, view.status], **LIGHT).success(
        None, None, None, js=SCROLL_TO_OPENED, **LIGHT)

    def open_row(event: gr.EventData):
        run_id = check_id((getattr(event, "_data", None) or {}).get("run"))
        return {**open_chosen([run_id]), view.chosen: gr.update(value=[run_id])}

    view.listing.click(open_row, None, [*side_outputs, view.status, view.chosen], **LIGHT).success(
        None, None, None, js=SCROLL_TO_OPENED, **LIGHT)
    view.delete.click(delete_chosen, view.chosen, [view.status, view.chosen, *[s.column for s in view.sides]],
                      **LIGHT).then(listing, filters, [view.listing, view.chosen], **LIGHT)
    view.board_refresh.click(board, [view.board_target, view.board_device], view.board, **LIGHT)
    demo.load(permalink, None, [view.chosen, view.status, *side_outputs], **LIGHT)
