"""HTML for saved comparisons: the history list, one entry's caption and the leaderboard; every stored string escaped.

Stored text (prompts, model names, login names) was typed by someone else, so it is escaped here for HTML and by
`escape_markdown` for Markdown; nothing from the database reaches a page as markup.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from ..history import INTERVAL_KINDS, BoardSection, Entry, Page, check_id
from ..results.report import level_words

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def escape_markdown(value: object) -> str:
    """Text shown literally in Markdown: HTML escaped, then every Markdown marker backslashed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escape(value))


def permalink(run_id: str, base: str = "") -> str:
    """The page address that opens one saved comparison: `?run=<id>`."""
    return f"{base}?run={quote(check_id(run_id))}"


def _speed(median: float | None) -> str:
    return "–" if median is None else f"{median:.2f}×"


def interval_words(kind: str, low: float | None, high: float | None, level: float | None, n: int) -> str:
    """'95.8% interval 1.12–1.21× (n=10)', 'range of 2 runs 0.9–1.3×', or '–' (plain text)."""
    if low is None or high is None:
        return "–"
    if kind in INTERVAL_KINDS:
        return f"{level_words(level or 0.95)} interval {low:.2f}–{high:.2f}× (n={n})"
    return f"range of {n} runs {low:.2f}–{high:.2f}× (too few for an interval)"


def _when(entry_time) -> str:
    return entry_time.strftime("%Y-%m-%d %H:%M UTC")


def entries_html(page: Page, base: str = "") -> str:
    """The history list as a table, newest first, each row linking to its permalink."""
    if not page.entries:
        return '<p class="al-note">No saved comparisons match.</p>'
    head = ("Saved", "Who", "Target", "Assistants", "Device", "Tokens", "Best speedup", "Identical", "Prompt", "Id")
    rows = []
    for e in page.entries:
        identical = {True: "yes", False: "no", None: "–"}[e.outputs_identical]
        status = "" if e.status == "complete" else ' <span class="al-sub">(stopped)</span>'
        best = _speed(e.best_speedup) + (f' <span class="al-sub">{escape(e.best_arm)}</span>' if e.best_arm else "")
        cells = (
            escape(_when(e.created_at)) + status, escape(e.owner or "–"), escape(e.target), escape(e.assistants or "–"),
            escape(e.device_name) + f' <span class="al-sub">{escape(e.dtype)}</span>', escape(e.new_tokens or "–"),
            best, identical, escape(e.prompt_preview),
            f'<a href="{escape(permalink(e.id, base))}" target="_blank" rel="noopener">{escape(e.id)}</a>',
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
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
    stopped = " It was stopped before all repetitions finished." if entry.status == "stopped" else ""
    versions = f"AssistLab {escape(entry.assistlab_version or '?')}, transformers {escape(entry.transformers_version or '?')}"
    link = escape(permalink(entry.id, base))
    return (
        f'<p class="al-note">Saved {escape(_when(entry.created_at))}{who} on {escape(entry.device_name)} '
        f'({escape(entry.dtype)}; {versions}).{stopped} Permalink: <a href="{link}">{link}</a></p>'
    )


def board_html(sections: tuple[BoardSection, ...], base: str = "") -> str:
    """The leaderboard: per target and device, pairings ranked by their median speedup over saved comparisons."""
    if not sections:
        return '<p class="al-note">Nothing saved yet: finished comparisons appear here.</p>'
    head = ("Rank", "Pairing", "Speedup", "Comparisons", "Latest interval", "Latest", "")
    parts = []
    for section in sections:
        rows = []
        for rank, row in enumerate(section.rows, 1):
            latest = interval_words(row.latest_kind, row.latest_low, row.latest_high, row.latest_level, row.latest_n)
            cells = (
                str(rank), escape(row.label), f"{row.speedup:.2f}×", str(row.comparisons), escape(latest),
                escape(_when(row.latest_at)),
                f'<a href="{escape(permalink(row.latest_id, base))}" target="_blank" rel="noopener">open</a>',
            )
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append(
            f'<h4>{escape(section.target)} <span class="al-sub">on {escape(section.device_name)}</span></h4>'
            f'<p class="al-note">{escape(section.note)}</p>'
            '<div class="al-wrap"><table class="al-table al-board"><thead><tr>'
            + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></div>"
        )
    parts.append(
        '<p class="al-sub">Speedup: the median, over the comparisons that tried a pairing, of each one\'s median '
        "speedup over plain. The interval is the latest comparison's own, at its true level; a pairing has beaten "
        "plain where some comparison's interval lies wholly above 1×.</p>"
    )
    return "".join(parts)
