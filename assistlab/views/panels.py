"""HTML panels rendered from a report dict: headline, numbers, texts with token origins, why, ranking, sweep.

Pure functions of the report, like the charts; no gradio here, so they can be tested and reused anywhere.
"""

from __future__ import annotations

import difflib
import html
import re
import unicodedata

from .. import __version__
from ..engines.transformers.paths import LOSSY_MARK, LOSSY_TRADE
from ..results import busy, estimate
from ..results.events import Event
from ..results.explain import rank_arms
from ..results.report import busy_clause, comparisons_words, interval_cell, level_words
from ..results.stats import MIN_LEVEL, spread_is_wide
from . import charts

# Plain words for every symbol and abbreviation the page shows: a hover where each appears, and a small
# "What do these words mean?" list beside the tables that use them.
GLOSSARY = {
    "plain": ("plain", "the target model writing on its own, with no assistant: the baseline every other arm is "
              "compared with."),
    "speedup": ("speedup", "plain time ÷ assisted time for the same text: 1.5× means it took two thirds of the "
                "time; below 1× the assistant made it slower."),
    "alpha": ("α (alpha)", "the chance that the target keeps a token the assistant drafted; 1 would keep every "
              "guess."),
    "c": ("c", "how long guessing (drafting) one token takes, counted in target forward passes: 0.1 is a tenth "
          "of the time the target takes to write one token."),
    "k": ("k", "in an arm's name (k=10), the most tokens it may draft before the target checks them (the draft "
          "length)."),
    "drafted": ("drafted per step", "how many tokens were drafted, on average, before each check by the target; "
                "at most the k in the arm's name, fewer when drafting stopped early."),
    "forward": ("target forward pass", "one step of the big target model: in plain generation it writes one "
                "token; with an assistant it checks a whole draft at once."),
    "bonus": ("bonus token", "when the target checks a draft it also writes one token of its own after the ones "
              "it kept, at no extra cost."),
    "accepted": ("accepted", "the share of drafted tokens the target kept."),
    "iqr": ("IQR", "interquartile range: the middle half of the runs took times within a range this wide; small "
            "means steady timings."),
    "ttft": ("first token (TTFT)", "time to first token: how long after the start the first new token appeared."),
    "per_pass": ("tokens per pass (tok/fwd)", "new tokens per target forward pass: plain writes 1, and every "
                 "drafted token the target keeps adds to it."),
}
WHY_TERMS = ("alpha", "c", "drafted", "k", "forward", "bonus", "speedup")
NUMBER_TERMS = ("plain", "iqr", "ttft", "speedup", "accepted", "per_pass")

# Token origins, as explain.token_origins names them, and how the page explains each.
ORIGINS = ("draft", "target")
ORIGIN_LABELS = {
    "draft": "drafted (by the assistant, or copied from the prompt) and accepted by the target",
    "target": "written by the target itself at a verification step (a correction or the bonus token)",
}

# (shown name, glossary term, the comparison entry's key, format, meaning). The mean drafted per step is the
# cost model's k, but "k" in an arm's name is its draft length, so the panel names the mean in words.
WHY_ROWS = (
    ("α", "alpha", "alpha", ".2f", "chance the target keeps each drafted token it checks"),
    ("c", "c", "c", ".2f", "time to draft one token, in target forward passes"),
    ("drafted per step", "drafted", "k", ".3g", "tokens drafted before each check, on average"),
)
WHY_FOOTNOTE = (
    "Predicted speedup = (1 − α<sup>k+1</sup>) / ((1 − α)(k·c + 1)), with k the tokens drafted per step: the tokens a verification step is expected "
    "to yield over what the step costs in target forward passes, from "
    '<a href="https://arxiv.org/abs/2211.17192" target="_blank" rel="noopener">Leviathan et al. 2023</a>. '
    "α counts only the drafted tokens the target judged (up to the first rejection), so it is higher than the "
    "share of drafted tokens accepted."
)
RANKING_HEAD = ("Rank", "Arm", "Speedup (interval, its level)", "Accepted", "c", "α", "Predicted", "What limits it")
RANKING_TERMS = {"Speedup (interval, its level)": "speedup", "Accepted": "accepted", "c": "c", "α": "alpha"}
# Beside a prediction whose drafting cost was measured while others used the machine (explain's probe_busy).
PROBE_BUSY_NOTE = ("The drafting cost behind this prediction was measured while the machine was busy, so the "
                   "prediction may be far off (the measured speedup is not affected)")
PLAIN_ROW_NOTE = "The target model on its own: the baseline every arm is compared with."


def term(key: str, text: str | None = None) -> str:
    """`text` (default: the term's own name) with its plain-words meaning as a hover."""
    name, meaning = GLOSSARY[key]
    shown = html.escape(text if text is not None else name)
    return f'<abbr class="al-term" title="{html.escape(name)}: {html.escape(meaning)}">{shown}</abbr>'


def glossary_html(keys: tuple[str, ...]) -> str:
    """A small, closed "What do these words mean?" list for the terms a panel uses."""
    items = "".join(
        f"<dt>{html.escape(GLOSSARY[key][0])}</dt><dd>{html.escape(GLOSSARY[key][1])}</dd>" for key in keys
    )
    return (
        '<details class="al-glossary"><summary>What do these words mean?</summary>'
        f'<dl>{items}</dl></details>'
    )


def _printable(text: str) -> str:
    """Control characters (random models write them) shown as a visible placeholder, not swallowed."""
    return "".join(
        ch if ch in "\n\t" or unicodedata.category(ch) != "Cc" else "\ufffd" for ch in text
    )


# Every ASCII punctuation mark can be backslash-escaped in Markdown (CommonMark); '<', '>', '&' and quotes
# become HTML entities instead, which Markdown shows as the characters themselves.
_MD_PUNCTUATION = re.compile(r"([!#$%()*+,\-./:;=?@\[\\\]^_`{|}~])")


def md_text(text: object) -> str:
    """`text` shown literally inside Markdown: no emphasis, links, images, code spans, autolinks or tags."""
    escaped = _MD_PUNCTUATION.sub(r"\\\1", _printable(str(text)).replace("\n", " "))
    return html.escape(escaped, quote=True)


def _dot(index: int) -> str:
    return f'<span class="al-dot" style="background:{charts.arm_color(index)}"></span>'


def progress_html(label: str, fraction: float | None = 0.0, state: str = "running") -> str:
    """A progress bar; fraction None draws a moving bar for work of unknown length (loading)."""
    if fraction is None:
        state, width = "busy", 35.0
    else:
        width = max(0.0, min(1.0, fraction)) * 100
    alert = ' role="alert"' if state == "failed" else ""  # read out at once by a screen reader
    return (
        f'<div class="al-progress al-{state}" role="progressbar" aria-valuenow="{width:.0f}" '
        f'aria-valuemin="0" aria-valuemax="100"><div class="al-track"><div class="al-fill" '
        f'style="width:{width:.1f}%"></div></div><div class="al-label"{alert}>{html.escape(label)}</div></div>'
    )


def preparation_html(status) -> str:
    """The bundled models' background conversion (a bundled.PreparationStatus): under way with its estimate,
    ready, or why it failed; nothing when there was nothing to convert."""
    if status.state == "idle":
        return ""
    if status.state == "failed":
        return progress_html(status.message, 1.0, "failed")
    if status.state == "ready":
        return progress_html(status.message, 1.0, "done")
    left = f", about {duration(status.eta_s)} left" if status.eta_s is not None else ""
    so_far = f" · {duration(status.elapsed_s)} so far{left}" if status.elapsed_s is not None else ""
    label = f"{status.message.rstrip('.')}{so_far}. Run waits for it; later starts skip this."
    return progress_html(label, None)


def duration(seconds: float) -> str:
    """Seconds as a person says them: '45 s', '2 min 05 s', '1 h 04 min'."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def timing_text(event: Event) -> str:
    """'1 min 05 s so far, about 2 min 10 s left', or as much of it as the event knows."""
    parts = []
    if event.elapsed_s is not None:
        parts.append(f"{duration(event.elapsed_s)} so far")
    if event.kind != "done":
        if getattr(event, "eta_busy", False) and event.total:  # a figure the next burst of others' work overturns
            parts.append("time left uncertain: the machine is busy")
        elif event.eta_s is not None and event.eta_rough:
            parts.append(f"roughly {duration(event.eta_s)} left ({estimate.BASIS}, until a run has been timed)")
        elif event.eta_s is not None:
            # Before the run count starts (loading) the estimate covers that step only.
            parts.append(f"about {duration(event.eta_s)} left" + ("" if event.total else " for this step"))
        elif event.elapsed_s is not None:
            parts.append("time left known after the first run")
    return ", ".join(parts)


def progress_text(event) -> str:
    """The one form of every progress line (a comparison, a sweep, a workload, the command line):
    [where ·] the step under way (or the run just done and its time) · runs done · time so far, time left.

    `event` is a runner Event or a workload's SuiteEvent (which adds `where`: the prompt being measured).
    'Repetition 2 of 5: plain · 7 of 18 runs done · 1 min 05 s so far, about 2 min 10 s left';
    'Prompt 2 of 5 (qa_3, qa) · Repetition 1 of 3: plain, took 8.92 s · 12 of 45 runs done · ...'.
    """
    if event.kind == "done":
        took = f" in {duration(event.elapsed_s)}" if event.elapsed_s is not None else ""
        return f"{event.message.rstrip('.')} ({event.done} of {event.total} runs done{took})."
    timing = timing_text(event)
    step = (event.step or event.message).rstrip(".")
    if event.kind == "run":  # a run just finished: its step and time, until the next step's event replaces them
        step = f"{step}, took {event.took_s:.2f} s" if event.took_s is not None else event.message.rstrip(".")
    runs = f"{event.done} of {event.total} runs done" if event.total else ""
    return " · ".join(x for x in (getattr(event, "where", ""), step, runs, timing) if x)


def event_progress(event) -> str:
    """The progress bar for one runner (or workload) event, labelled by `progress_text`.

    Moving while a model loads (no run count yet), filling over warm-up and repetitions.
    """
    label = progress_text(event)
    if event.kind == "done":
        status = getattr(event.report, "status", None) or "done"
        state = {"complete": "done", "stopped": "stopped"}.get(status, "failed")
        return progress_html(label, event.done / event.total if event.total else 1.0, state)
    if not event.total:
        return progress_html(label, None)
    return progress_html(label, event.done / event.total)


def headline_html(report: dict) -> str:
    """The answer first in plain words, then the headline sentences, each arm's line marked with its chart colour."""
    lines = charts.headline_lines(report)
    arm_names = {arm["name"]: i for i, arm in enumerate(report.get("arms", []))}
    lead = charts.lead_sentence(report)
    parts = [f'<p class="al-lead" id="al-lead">{html.escape(lead)}</p>'] if lead else []
    warned = {w["message"] for w in report.get("warnings") or []}
    folded = [line for line in lines if line in warned or line.startswith(charts.NOISY)]
    warning = warnings_html(report, folded)
    if warning:  # one line under the answer; the sentences behind it are one click away
        parts.append(warning)
        lines = [line.removesuffix(busy_clause(True)) for line in lines if line not in folded]  # said once, above
    for line in lines:
        index = next((i for name, i in arm_names.items() if i and line.startswith(name + " ")), None)
        if line in warned:  # beside the verdict, marked so a reader cannot miss it
            parts.append(f'<p class="al-warning" role="alert">⚠ {html.escape(line)}</p>')
        elif index is not None:
            parts.append(f'<p class="al-arm">{_dot(index)}{html.escape(line)}</p>')
        else:
            parts.append(f'<p class="al-note">{html.escape(line)}</p>')
    return f'<div class="al-headline" id="al-headline">{"".join(parts)}</div>'


def warnings_html(report: dict, details: list[str] | None = None) -> str:
    """The busy-machine warnings as one line, their sentences (or `details`) behind a click; '' without any."""
    entries = report.get("warnings") or []
    line = busy.summary(entries, (report.get("environment") or {}).get("contention"))
    if not line:
        return ""
    said = "".join(f"<p>{html.escape(text)}</p>" for text in details or [w["message"] for w in entries])
    return (f'<p class="al-warning" role="alert">⚠ {html.escape(line)}</p>'
            f'<details class="al-warning-details"><summary>What was busy, and what to do</summary>{said}</details>')


def _fmt(value, pattern: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{pattern}}{suffix}"


def _count(n: int) -> str:
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def numbers_html(report: dict) -> str:
    """Per-arm numbers, all read from the report: medians first, spread flagged when wide."""
    by_name = {c["arm"]: c for c in report.get("comparison", [])}
    head = ["Arm", f"Median time per run (spread: {term('iqr', 'IQR')})", "Tokens/s", term("ttft", "First token"),
            f"{term('speedup', 'Speedup')} (interval, its level)", term("accepted", "Accepted"),
            term("per_pass", "Tokens per pass"), "Runs"]
    rows = []
    for i, arm in enumerate(report.get("arms", [])):
        lat, tps = arm["latency_summary"], arm["tokens_per_s_summary"]
        ttft = sorted(t for t in arm.get("ttft_s", []) if t is not None)
        comp = by_name.get(arm["name"], {})
        s = comp.get("speedup") or {}
        if s.get("median") is None:
            speed = "1× (baseline)" if arm["strategy"] == "plain" else "–"
        else:
            speed = f"{s['median']:.2f}×" + (f" ({interval_cell(s)})" if interval_cell(s) else "")
        latency = _fmt(lat["median"], ".3f", " s")
        if lat["n"]:
            wide = spread_is_wide(lat)
            flag = ' title="The spread is over 10% of the median: noisy timings"' if wide else ""
            latency += f' <span class="al-sub"{flag}>({lat["iqr"]:.3f} s{" ⚠" if wide else ""})</span>'
        name = html.escape(arm["name"])
        if arm.get("error"):
            name += ' <span class="al-badge al-failed-badge">failed</span>'
        cells = [
            f"{_dot(i)}{name}",
            latency,
            _fmt(tps["median"], ".1f", " tokens/s"),
            _fmt(ttft[len(ttft) // 2] if ttft else None, ".3f", " s"),
            speed,
            _fmt(comp.get("acceptance_rate"), ".0%"),
            _fmt(comp.get("tokens_per_forward"), ".2f"),
            str(lat["n"]),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return (
        f'<div class="al-wrap"><table class="al-table" id="al-numbers"><thead><tr>{header}</tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div>{glossary_html(NUMBER_TERMS)}'
    )


def _char_origins(text: str, segments: list) -> list[str | None]:
    """Each character's origin from [[text, origin], ...]; all None when the pieces do not spell `text`."""
    pieces = [(_printable(str(piece)), origin) for piece, origin in segments or []]
    if "".join(piece for piece, _ in pieces) != text:
        return [None] * len(text)
    return [origin if origin in ORIGINS else None for piece, origin in pieces for _ in piece]


def marked_html(text: str, reference: str | None = None, segments: list | None = None) -> str:
    """`text` HTML-escaped, each token tinted by origin (from `segments`) and words that differ from
    `reference` marked, with the reference's missing words shown struck through."""
    text = _printable(text)
    origins = _char_origins(text, segments or [])
    differs = [False] * len(text)
    struck: dict[int, str] = {}  # character position -> reference words missing before it
    if reference is not None:
        # Words with their following spaces kept as separate pieces, so a changed word is marked whole.
        ref_words = re.findall(r"\S+|\s+", _printable(reference))
        words = re.findall(r"\S+|\s+", text)
        starts = [0]
        for word in words:
            starts.append(starts[-1] + len(word))
        matcher = difflib.SequenceMatcher(None, ref_words, words, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op in ("replace", "delete") and i2 > i1:
                struck[starts[j1]] = struck.get(starts[j1], "") + "".join(ref_words[i1:i2])
            if op in ("replace", "insert"):
                differs[starts[j1]:starts[j2]] = [True] * (starts[j2] - starts[j1])
    out, i = [], 0
    while i <= len(text):
        if i in struck:
            out.append(f"<del>{html.escape(struck[i])}</del>")
        if i == len(text):
            break
        j = i + 1
        while j < len(text) and j not in struck and (origins[j], differs[j]) == (origins[i], differs[i]):
            j += 1
        chunk = html.escape(text[i:j])
        tag = "mark" if differs[i] else "span"
        cls = f' class="al-o-{origins[i]}"' if origins[i] else ""
        out.append(f"<{tag}{cls}>{chunk}</{tag}>" if differs[i] or cls else chunk)
        i = j
    return "".join(out)


def diff_html(reference: str, other: str) -> str:
    """`other` with the words that differ from `reference` marked; every piece HTML-escaped."""
    return marked_html(other, reference)


def origin_legend_html() -> str:
    """The key to the colours and marks in the generated texts."""
    return (
        '<div class="al-legend" id="al-legend">'
        f'<span><span class="al-swatch al-o-draft"></span>{html.escape(ORIGIN_LABELS["draft"])}</span>'
        f'<span><span class="al-swatch al-o-target"></span>'
        f'{html.escape(ORIGIN_LABELS["target"]).replace("bonus token", term("bonus"))}</span>'
        '<span><mark>differs from plain</mark></span>'
        '<span><del>in plain, not here</del></span></div>'
    )


def _origin_note(arm: dict) -> str:
    origins = arm.get("token_origins") or []
    if not origins:
        return ""
    drafted = sum(1 for o in origins if o == "draft")
    return f'<span class="al-sub">{drafted} of {len(origins)} tokens drafted and accepted</span>'


def texts_html(report: dict) -> str:
    """The plain text and each assisted text side by side: where each token came from, and what differs."""
    arms = report.get("arms", [])
    if not arms:
        return ""
    by_name = {c["arm"]: c for c in report.get("comparison", [])}
    plain = arms[0].get("text", "")
    cards = []
    for i, arm in enumerate(arms):
        comp = by_name.get(arm["name"], {})
        segments = arm.get("text_segments") if i else None  # plain is all the target's: no tint needed
        note = _origin_note(arm) if i else ""
        if arm.get("error") and not arm.get("latencies_s"):
            badge, body = '<span class="al-badge al-failed-badge">failed</span>', html.escape(arm["error"])
        elif i == 0:
            badge, body = '<span class="al-badge al-same">reference</span>', html.escape(_printable(plain))
        elif comp.get("outputs_identical") is False:
            where = comp.get("first_difference")
            at = f" from token {where + 1}" if where is not None else ""
            badge = f'<span class="al-badge al-differs">differs{at}</span>'
            body = marked_html(arm.get("text", ""), plain, segments)
        else:
            same = comp.get("outputs_identical")
            badge = '<span class="al-badge al-same">identical to plain</span>' if same else ""
            body = marked_html(arm.get("text", ""), None, segments)
        cards.append(
            f'<div class="al-text-card"><h4><span>{_dot(i)}{html.escape(arm["name"])}</span> {badge}</h4>{note}'
            f'<pre class="al-text">{body}</pre></div>'
        )
    legend = origin_legend_html() if len(arms) > 1 else ""
    return f'{prompt_note_html(report)}{legend}<div class="al-texts" id="al-texts">{"".join(cards)}</div>'


def prompt_note_html(report: dict) -> str:
    """Why the texts may read as a continuation: the target had no chat template (or it was turned off)."""
    note = (report.get("environment") or {}).get("prompt_note")
    return f'<p class="al-prompt-note" id="al-prompt-note">{html.escape(note)}</p>' if note else ""


# ---------------------------------------------------------------- why: the cost model, the ranking, the sweep


def _speed_cell(median, speedup: dict) -> str:
    """The median, then its interval with the level it has (or 'range of n runs'), from report.interval_cell."""
    if median is None:
        return "–"
    interval = interval_cell(speedup)
    return f"{median:.2f}× <span class=\"al-sub\">({html.escape(interval)})</span>" if interval else f"{median:.2f}×"


def why_html(report: dict) -> str:
    """Per assisted arm: measured against predicted speedup, alpha, c, k and the sentence on what limits it."""
    by_name = {c["arm"]: c for c in report.get("comparison", [])}
    running = report.get("status") == "running"
    cards = []
    for i, arm in enumerate(report.get("arms", [])):
        comp = by_name.get(arm["name"])
        if i == 0 or comp is None:
            continue
        s = comp.get("speedup") or {}
        title = f"<h4>{_dot(i)}{html.escape(arm['name'])}</h4>"
        if arm.get("error") and not arm.get("latencies_s"):
            cards.append(f'<div class="al-why-card">{title}<p class="al-limit">Failed: {html.escape(arm["error"])}'
                         f"</p></div>")
            continue
        measured = _speed_cell(s.get("median"), s)
        predicted = _fmt(comp.get("predicted_speedup"), ".2f", "×")
        rows = "".join(
            f"<tr><th>{term(word, symbol)}</th><td>{_fmt(comp.get(key), pattern)}</td><td>{meaning}</td></tr>"
            for symbol, word, key, pattern, meaning in WHY_ROWS
        )
        if comp.get("limit"):
            limit = html.escape(comp["limit"])
        elif running:
            limit = "The drafting cost is measured after the timed runs; the prediction follows then."
        else:
            limit = "Not enough was measured to explain this arm."
        analysis = comp.get("analysis") or {}
        best_k = analysis.get("best_k")
        hint = ""
        predicted_value = comp.get("predicted_speedup")
        # Only worth a line when another length would help noticeably, not by a rounding error.
        if (best_k is not None and predicted_value and abs(best_k - (comp.get("k") or 0)) >= 1
                and analysis.get("best_k_speedup", 0) >= 1.05 * predicted_value):
            hint = (f'<p class="al-sub">For this α and c the model would favour k = {best_k} '
                    f"(predicted {analysis['best_k_speedup']:.2f}×).</p>")
        disturbed = ""
        if comp.get("probe_busy") and predicted_value is not None:
            disturbed = (f'<p class="al-sub al-probe-busy" role="note">⚠ {html.escape(PROBE_BUSY_NOTE)}: '
                         f'{html.escape(comp["probe_busy"])}.</p>')
        cards.append(
            f'<div class="al-why-card">{title}<div class="al-why-nums">'
            f'<div><div class="al-big">{measured}</div><div class="al-sub">measured</div></div>'
            f'<div><div class="al-big">{predicted}</div><div class="al-sub">predicted by the cost model</div></div>'
            f'</div>{disturbed}<table class="al-kv">{rows}</table><p class="al-limit">{limit}</p>{hint}</div>'
        )
    if not cards:
        return ""
    return (
        f'<div class="al-why" id="al-why">{"".join(cards)}</div>'
        f'<details class="al-glossary al-formula"><summary>How is the prediction made?</summary>'
        f'<p class="al-sub">{WHY_FOOTNOTE}</p></details>{glossary_html(WHY_TERMS)}'
    )


def _legacy_with_plain(rows: list[dict]) -> list[dict]:
    """Rows from before plain was ranked (assisted arms only) with plain in its place: after every arm whose
    median beats 1×, before the rest; ranks renumbered, so an arm slower than plain is never rank 1. Their
    run-by-run comparisons left plain out, so the first's `clearly_first` is kept only as `over_assistants`."""
    ahead = [r for r in rows if r.get("speedup") is not None and r["speedup"] > 1.0]
    rest = [r for r in rows if not (r.get("speedup") is not None and r["speedup"] > 1.0)]
    ordered = [*ahead, {"arm": "plain", "plain": True, "speedup": 1.0}, *rest]
    rank, shown = 0, []
    for row in ordered:
        if row.get("speedup") is not None:
            rank += 1
        legacy = {"over_assistants": row.get("clearly_first"), "clearly_first": None}
        shown.append({**row, **legacy, "rank": rank if row.get("speedup") is not None else None})
    return shown


def ranked_rows(report: dict) -> list[dict]:
    """The ranking with plain among the arms: the report's own (explain.rank_arms), recomputed for a report
    saved before plain was ranked, or, when that cannot be, the old rows with plain put in its place."""
    rows = report.get("ranking") or []
    if any(row.get("plain") for row in rows):
        return rows
    try:
        return rank_arms(report)
    except (KeyError, TypeError, ValueError):  # a partial report dict: rank what it holds
        return _legacy_with_plain(rows)


def _behind(first: dict, row: dict) -> float:
    """The low end of `row`'s run-by-run comparison with the first (above 1: clearly behind); for plain in an old
    report, which has none, the first arm's own interval over plain."""
    if row.get("behind_first"):
        return row["behind_first"].get("ci_low") or 0.0
    if row.get("plain") and first.get("interval") in ("order-statistic", "bootstrap"):
        return first.get("ci_low") or 0.0
    return 0.0


def ranking_note(rows: list[dict]) -> str:
    """Whether the first-ranked arm, plain included, is really ahead, from rank_arms' run-by-run comparisons
    (Bonferroni over every other ranked arm). Never calls an arm slower than plain ahead of anything."""
    ranked = [r for r in rows if r.get("rank") is not None]
    if len(ranked) < 2:
        return ""
    first, rest, family = ranked[0], ranked[1:], ranked[0].get("family_level")
    together = f"{level_words(family)} sure of {comparisons_words(len(rest))}" if family else ""
    if first.get("plain"):
        if first.get("clearly_first"):
            return f"Plain generation is clearly the fastest here: no assistant helped ({together})."
        if family is None or family < MIN_LEVEL:
            return "Plain generation ranks first: no assistant's median beat it; too few runs to be sure of the order."
        close = [r["arm"] for r in rest if not _behind(first, r) > 1.0]
        return (f"Plain generation ranks first: no assistant's median beat it, but it is not clearly ahead of "
                f"{', '.join(close)} ({together}).")
    if first.get("over_assistants"):  # an old report: its comparisons left plain out
        assistants = sum(1 for r in rest if not r.get("plain"))
        return f"{first['arm']} is clearly ahead of every other assistant ({level_words(family)} sure of " \
               f"{comparisons_words(assistants)})."
    if first.get("clearly_first"):
        return f"{first['arm']} is clearly ahead of every other arm, plain included ({together})."
    if family is None or family < MIN_LEVEL:
        return "Ranked by median only: too few runs to be sure of this order."
    close = [r["arm"] for r in rest if not _behind(first, r) > 1.0]
    return f"Ranked by median; {first['arm']} is not clearly ahead of {', '.join(close)} ({together})."


def ranking_html(report: dict) -> str:
    """The arms fastest first, plain among them, with the numbers that explain the order; two or more assisted."""
    rows = ranked_rows(report)
    if sum(1 for row in rows if not row.get("plain")) < 2:
        return ""
    colour = {arm["name"]: i for i, arm in enumerate(report.get("arms", []))}
    body = []
    for row in rows:
        rank = str(row["rank"]) if row.get("rank") is not None else "–"
        if row.get("plain"):
            cells = [rank, f"{_dot(0)}{term('plain', 'plain')} <span class=\"al-sub\">(no assistant)</span>",
                     "1× (baseline)", "–", "–", "–", "–", html.escape(PLAIN_ROW_NOTE)]
            body.append('<tr class="al-plain-row">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        name = html.escape(row["arm"])
        if row.get("error"):
            name += ' <span class="al-badge al-failed-badge">failed</span>'
        if row.get("lossless") is False and LOSSY_MARK not in row["arm"]:
            name += f' <span class="al-badge al-lossy-badge">{html.escape(LOSSY_MARK)}</span>'
        cells = [
            rank,
            f"{_dot(colour.get(row['arm'], 0))}{name}",
            _speed_cell(row.get("speedup"), row),
            _fmt(row.get("acceptance_rate"), ".0%"),
            _fmt(row.get("c"), ".2f"),
            _fmt(row.get("alpha"), ".2f"),
            _fmt(row.get("predicted_speedup"), ".2f", "×"),
            html.escape(row.get("limit") or row.get("error") or "–"),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{term(RANKING_TERMS[h], h) if h in RANKING_TERMS else html.escape(h)}</th>" for h in RANKING_HEAD
    )
    return (
        '<div class="al-wrap"><h4 class="al-h">Ranking</h4><table class="al-table al-ranking" id="al-ranking">'
        f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<p class="al-sub" id="al-ranking-note">{html.escape(ranking_note(rows))}</p>{_lossy_note(rows)}</div>'
    )


def _lossy_note(rows: list[dict]) -> str:
    """The trade in one sentence, under a table that holds a lossy arm."""
    if not any(row.get("lossless") is False for row in rows):
        return ""
    return f'<p class="al-sub al-lossy-note" id="al-lossy-note">{html.escape(LOSSY_TRADE)}</p>'


def sweep_html(report: dict) -> str:
    """The sweep's best setting in a sentence, then each setting's numbers."""
    summary = report.get("sweep") or {}
    points = summary.get("points") or []
    if not points:
        return ""
    best = (summary.get("best") or {}).get("arm")
    rows = []
    for p in points:
        s = p.get("speedup") or {}
        label = html.escape(p["label"]) + (' <span class="al-badge al-same">best</span>' if p["arm"] == best else "")
        if p.get("error"):
            label += ' <span class="al-badge al-failed-badge">failed</span>'
        cells = [label, _speed_cell(s.get("median"), s),
                 _fmt(p.get("acceptance_rate"), ".0%"), _fmt(p.get("predicted_speedup"), ".2f", "×")]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("Setting", "Speedup (interval, its level)", "Accepted", "Predicted"))
    status = report.get("status")
    lead = summary.get("best_text", "") if status != "running" else f"So far: {summary.get('best_text', '')}"
    return (
        f'<p class="al-sweep-best" id="al-sweep-best">{html.escape(lead)}</p><div class="al-wrap">'
        f'<table class="al-table" id="al-sweep-table"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div>'
    )


def environment_markdown(report: dict) -> str:
    """Where the numbers come from, in one paragraph: hardware, dtype, versions, each model's source."""
    env = report.get("environment", {})
    if not env:
        return ""
    hardware = f"GPU {env['gpu_name']}" if env.get("gpu_name") else f"CPU {env.get('cpu_model', '?')}"
    if env.get("cpu_threads") and not env.get("gpu_name"):
        hardware += f", {env['cpu_threads']} threads"
    facts = (hardware, env.get("dtype", "?"), f"torch {env.get('torch', '?')}",
             f"transformers {env.get('transformers', '?')}", f"AssistLab {env.get('assistlab', __version__)}")
    parts = ["**Ran on** " + " · ".join(md_text(fact) for fact in facts)]
    for role, info in env.get("models", {}).items():
        params = info.get("parameters")
        size = f"{_count(params)} parameters" if params else ""
        source = info.get("kind", "")
        prov = info.get("provenance") or {}
        if prov.get("package"):
            source = f"bundled from {prov['package']} {prov.get('package_version', '')}".strip()
            if prov.get("license"):
                source += f"; license: {prov['license']}"
        details = ", ".join(x for x in (info.get("class"), size, source) if x)
        parts.append(f"**{md_text(role)}**: <code>{md_text(info.get('ref', '?'))}</code> ({md_text(details)})")
    return "  \n".join(parts)
