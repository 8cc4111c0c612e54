"""HTML for saved comparisons: the history list, one entry's caption and the leaderboard; every stored string escaped.

Stored text (prompts, model names, login names) was typed by someone else, so it is escaped here for HTML and by
`escape_markdown` for Markdown; nothing from the database reaches a page as markup.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from ..history import INTERVAL_KINDS, BoardRow, BoardSection, Entry, Page, check_id
from ..history.derive import PLAIN, TUNE_INTERVAL_KINDS
from ..results.report import NO_CLEAR_ANSWER, NO_CLEAR_ANSWER_SHORT, level_words

UNSETTLED = "unsettled"  # an entry's status when it ran until clear and ended first (history.derive)

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def escape_markdown(value: object) -> str:
    """Text shown literally in Markdown: HTML escaped, then every Markdown marker backslashed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escape(value))


def shortened(text: object, limit: int) -> str:
    """`text` on one line, at most `limit` characters, cut after a whole word with an ellipsis (plain text)."""
    flat = " ".join(str(text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    if flat[limit - 1] != " " and " " in cut:  # the cut fell inside a word: drop that word
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


PROMPT_HOVER_CHARS = 400  # of a prompt shown when the pointer rests on its shortened cell


def prompt_cell(text: object, limit: int) -> str:
    """A table cell for a prompt: its start, cut after a whole word, with more of it (up to PROMPT_HOVER_CHARS)
    as its hover."""
    return (f'<td class="al-prompt-cell" title="{escape(shortened(text, PROMPT_HOVER_CHARS))}">'
            f"{escape(shortened(text, limit))}</td>")


def permalink(run_id: str, base: str = "") -> str:
    """The page address that opens one saved comparison: `?run=<id>`."""
    return f"{base}?run={quote(check_id(run_id))}"


def _speed(median: float | None) -> str:
    return "–" if median is None else f"{median:.2f}×"


def interval_words(kind: str, low: float | None, high: float | None, level: float | None, n: int) -> str:
    """'95.8% interval 1.12–1.21× (n=10)', 'range of 2 runs 0.9–1.3×', or '–' (plain text)."""
    if low is None or high is None:
        return "–"
    if kind in INTERVAL_KINDS or kind in TUNE_INTERVAL_KINDS:  # a tuner's pick: the interval its page shows
        assumed = ", assuming roughly normal noise" if kind == "likely" else ""
        every = " at every look" if kind == "time-uniform" else ""  # as the page says it (verdicts.shown_level)
        return f"{level_words(level or 0.95)}{every} interval {low:.2f}–{high:.2f}× (n={n}){assumed}"
    return f"range of {n} runs {low:.2f}–{high:.2f}× (too few for an interval)"


def best_words(entry: Entry) -> str:
    """A comparison's best as History says it: 'no clear answer: the runs ended before it was clear' for one that
    ran until clear and ended first (never 'plain' or an arm), 'plain (no assistant helped)' when nothing beat
    plain, else '1.17× <pairing>' (the page sets the pairing apart itself)."""
    if entry.status == UNSETTLED:
        return NO_CLEAR_ANSWER_SHORT
    if entry.best_arm == PLAIN:
        return "plain (no assistant helped)"
    return _speed(entry.best_speedup) + (f" {entry.best_arm}" if entry.best_arm else "")


def where_html(where: str | None) -> str:
    """Where the history is kept and how to keep another, for the History tab; `where` is History.where ('the
    history file /path/history.sqlite3'), None on a shared server, whose operator chooses (its path stays unsaid)."""
    if where is None:
        return ('<p class="al-sub" id="al-history-where">Saved comparisons are kept on the server; its operator '
                "chooses where (docs/history.md, “Where it is kept”).</p>")
    return (f'<p class="al-sub" id="al-history-where">Kept in {escape(where)} on the machine running AssistLab. '
            "Everything run under that account saves there (this page, <code>bench --save</code>, other copies of "
            "AssistLab), so entries made elsewhere appear here too. To keep a history of your own, start AssistLab "
            "with <code>ASSISTLAB_DATA_DIR</code> set to another folder, or <code>ASSISTLAB_DATABASE_URL</code> "
            "set to a database (docs/history.md, “Where it is kept”).</p>")


def _when(entry_time) -> str:
    return entry_time.strftime("%Y-%m-%d %H:%M UTC")


HISTORY_PROMPT_CHARS = 60  # of a prompt in the history list; the whole stored preview is its hover


def entries_html(page: Page, base: str = "") -> str:
    """The history list as a table, newest first, each row linking to its permalink."""
    if not page.entries:
        return '<p class="al-note">No saved comparisons match.</p>'
    head = ("Saved", "Who", "Target", "Assistants", "Engine", "Device", "Tokens", "Best speedup", "Identical", "Prompt",
            "Id")
    rows = []
    for e in page.entries:
        identical = {True: "yes", False: "no", None: "–"}[e.outputs_identical]
        status = ' <span class="al-sub">(stopped)</span>' if e.status == "stopped" else ""
        best = escape(best_words(e)) if e.best_arm == PLAIN or e.status == UNSETTLED else (
            _speed(e.best_speedup) + (f' <span class="al-sub">{escape(e.best_arm)}</span>' if e.best_arm else ""))
        if e.kind == "tune":  # a tuner's search: its answer in its own sentence
            best = f'<span class="al-badge">tuner</span> {escape(e.recommendation or "no recommendation")}'
        cells = (
            escape(_when(e.created_at)) + status, escape(e.owner or "–"), escape(e.target), escape(e.assistants or "–"),
            escape(e.engines), escape(e.device_name) + f' <span class="al-sub">{escape(e.dtype)}</span>',
            escape(e.new_tokens or "–"), best, identical,
        )
        # The id's first 8 characters tell entries apart on one page; the link and its hover carry the whole id.
        link = (f'<a href="{escape(permalink(e.id, base))}" target="_blank" rel="noopener" title="{escape(e.id)}">'
                f'{escape(e.id[:8])}…</a>')
        # The whole row opens the comparison (the page's listener reads data-run); the id stays a plain link.
        rows.append(f'<tr class="al-history-row" data-run="{escape(check_id(e.id))}" tabindex="0" '
                    f'title="Open this comparison">' + "".join(f"<td>{c}</td>" for c in cells)
                    + prompt_cell(e.prompt_preview, HISTORY_PROMPT_CHARS) + f"<td>{link}</td></tr>")
    first = (page.page - 1) * page.page_size + 1
    caption = f"{first}–{first + len(page.entries) - 1} of {page.total} saved comparisons, newest first"
    return (
        f'<div class="al-wrap"><table class="al-table al-history"><caption>{escape(caption)}</caption><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>" + "".join(rows)
        + "</tbody></table></div>"
    )


def entry_caption_html(entry: Entry, base: str = "") -> str:
    """One line above a saved comparison: when, who, where, and its permalink."""
    who = f" by {escape(entry.owner)}" if entry.owner else ""
    stopped = {"stopped": " It was stopped before all repetitions finished.",
               UNSETTLED: f" {NO_CLEAR_ANSWER}: it ended before its answer was clear."}.get(entry.status, "")
    versions = f"AssistLab {escape(entry.assistlab_version or '?')}, transformers {escape(entry.transformers_version or '?')}"
    if entry.engines != "transformers":
        versions += f"; engines {escape(entry.engines)}"
    link = escape(permalink(entry.id, base))
    # The page turns the link into the full address it was opened at (a server cannot know it behind a proxy);
    # the button copies it.
    return (
        f'<p class="al-note">Saved {escape(_when(entry.created_at))}{who} on {escape(entry.device_name)} '
        f'({escape(entry.dtype)}; {versions}).{stopped} Link to share: <a class="al-permalink" href="{link}">{link}</a> '
        f'<button type="button" class="al-copy" title="Copy the link">Copy link</button></p>'
    )


def chooser_label(entry: Entry) -> str:
    """One saved comparison in the chooser, by what tells it apart from the others: when, the pair, the new
    tokens, its answer and the start of its prompt (plain text: the dropdown shows it as text)."""
    answer = "no answer" if entry.best_speedup is None else f"{entry.best_arm or 'best'} {entry.best_speedup:.2f}×"
    if entry.status == UNSETTLED:
        answer = NO_CLEAR_ANSWER.lower()
    if entry.kind == "tune":
        answer = f"tuner: {entry.best_arm or 'no pick'}"
    tokens = f"{entry.new_tokens} tokens" if entry.new_tokens else "tokens ?"
    prompt = entry.prompt_preview[:40] + ("…" if len(entry.prompt_preview) > 40 else "")
    stopped = " (stopped)" if entry.status == "stopped" else ""
    engines = "" if entry.engines == "transformers" else f" · {entry.engines}"
    return (f"{entry.created_at:%m-%d %H:%M} · {entry.target} + {entry.assistants or 'no assistant'}{engines} · "
            f"{tokens} · {answer}{stopped} · “{prompt}” · {entry.id}")
PLAIN_LINE = "plain (no assistant)"
PLAIN_NOTE = "the line to beat"


def plain_line(section: BoardSection) -> str:
    """The board's plain line: 'plain (no assistant)', or 'vllm plain (no assistant)' on vLLM's board."""
    return PLAIN_LINE if section.plain == "plain" else f"{section.plain} (no assistant)"


def section_title(section: BoardSection) -> str:
    """'org/t on cpu: X with transformers' (plain text): what a board's plain and pairings ran on."""
    return f"{section.target} on {section.device_name} with {section.engine}"


def board_lines(section: BoardSection) -> list[tuple[int, BoardRow | None]]:
    """(rank, row) fastest first with plain (row None) in its place at 1×: after every pairing whose median beats
    it, before the rest, so a pairing slower than plain never ranks above it. A board of comparisons with no clear
    answer ranks nothing: every rank is None."""
    ahead = [r for r in section.rows if r.speedup > 1.0]
    behind = [r for r in section.rows if r.speedup <= 1.0]
    if section.unsettled:  # no answer: listed in the same order, with no rank (None)
        return [(None, row) for row in [*ahead, None, *behind]]
    return list(enumerate([*ahead, None, *behind], 1))


def latest_words(row: BoardRow) -> str:
    """The latest comparison's own speedup beside its own interval: '1.20×, 93.7% interval 1.14–1.25× (n=5)'."""
    interval = interval_words(row.latest_kind, row.latest_low, row.latest_high, row.latest_level, row.latest_n)
    speed = _speed(row.latest_speedup)
    return speed if interval == "–" else f"{speed}, {interval}"


def _rank(rank: int | None) -> str:
    return "–" if rank is None else str(rank)


def board_html(sections: tuple[BoardSection, ...], base: str = "") -> str:
    """The leaderboard: per target, device, engine and what was measured, pairings ranked by their median speedup
    over that engine's plain, plain among them at 1×."""
    if not sections:
        return '<p class="al-note">Nothing saved yet: finished comparisons appear here.</p>'
    head = ("Rank", "Pairing", "Median speedup", "Comparisons", "Latest comparison: its speedup and interval",
            "Latest", "")
    parts = []
    for section in sections:
        rows = []
        for rank, row in board_lines(section):
            if row is None:
                cells = (_rank(rank), escape(plain_line(section)), "1.00×", "–", escape(PLAIN_NOTE), "", "")
                rows.append('<tr class="al-plain-row">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
                continue
            cells = (
                _rank(rank), escape(row.label), f"{row.speedup:.2f}×", str(row.comparisons), escape(latest_words(row)),
                escape(_when(row.latest_at)),
                f'<a href="{escape(permalink(row.latest_id, base))}" target="_blank" rel="noopener">open</a>',
            )
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        measured = f'<p class="al-sub al-measured">{escape(section.measured)}</p>' if section.measured else ""
        parts.append(
            f'<h4>{escape(section.target)} <span class="al-sub">on {escape(section.device_name)} with '
            f'<span class="al-engine">{escape(section.engine)}</span>'
            + (f" · workload {escape(section.workload)}" if section.workload else "") + f"</span></h4>{measured}"
            f'<p class="al-note">{escape(section.note)}</p>'
            '<div class="al-wrap"><table class="al-table al-board"><thead><tr>'
            + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></div>"
        )
    parts.append(
        '<p class="al-sub">Each table holds comparisons that measured the same thing (target, device, engine, new '
        "tokens, prompt or workload, sampling, finished or stopped, requests at once). A comparison's own figures "
        "are one request at a time; a table marked “at 4 requests at once” ranks the load runs at that level by "
        "their throughput speedup, never beside another level's. Median speedup: the median, over the comparisons "
        "that tried a pairing, of each one's median speedup over its engine's plain; that plain is 1×, the line to "
        "beat (a vLLM pairing is never ranked against transformers' plain). The latest "
        "comparison's own speedup stands beside its own interval, at its true level; a pairing has beaten plain "
        "where some comparison's interval lies wholly above 1× and its median is above 1× too.</p>"
    )
    return "".join(parts)
