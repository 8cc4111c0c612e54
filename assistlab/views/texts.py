"""The generated texts side by side: where each token came from, and what differs from plain.

Pure functions of the report dict, like the other panels; no gradio here.
"""

from __future__ import annotations

import difflib
import html
import re

from .markup import dot, printable, term

# Token origins, as explain.token_origins names them, and how the page explains each.
ORIGINS = ("draft", "target")
ORIGIN_LABELS = {
    "draft": "drafted (by the assistant, or copied from the prompt) and accepted by the target",
    "target": "written by the target itself at a verification step (a correction or the bonus token)",
}


def _char_origins(text: str, segments: list) -> list[str | None]:
    """Each character's origin from [[text, origin], ...]; all None when the pieces do not spell `text`."""
    pieces = [(printable(str(piece)), origin) for piece, origin in segments or []]
    if "".join(piece for piece, _ in pieces) != text:
        return [None] * len(text)
    return [origin if origin in ORIGINS else None for piece, origin in pieces for _ in piece]


def marked_html(text: str, reference: str | None = None, segments: list | None = None) -> str:
    """`text` HTML-escaped, each token tinted by origin (from `segments`) and words that differ from
    `reference` marked, with the reference's missing words shown struck through."""
    text = printable(text)
    origins = _char_origins(text, segments or [])
    differs = [False] * len(text)
    struck: dict[int, str] = {}  # character position -> reference words missing before it
    if reference is not None:
        # Words with their following spaces kept as separate pieces, so a changed word is marked whole.
        ref_words = re.findall(r"\S+|\s+", printable(reference))
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
            badge, body = '<span class="al-badge al-same">reference</span>', html.escape(printable(plain))
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
            f'<div class="al-text-card"><h4><span>{dot(i)}{html.escape(arm["name"])}</span> {badge}</h4>{note}'
            f'<pre class="al-text">{body}</pre></div>'
        )
    legend = origin_legend_html() if len(arms) > 1 else ""
    return f'{prompt_note_html(report)}{legend}<div class="al-texts" id="al-texts">{"".join(cards)}</div>'


def prompt_note_html(report: dict) -> str:
    """Why the texts may read as a continuation: the target had no chat template (or it was turned off)."""
    note = (report.get("environment") or {}).get("prompt_note")
    return f'<p class="al-prompt-note" id="al-prompt-note">{html.escape(note)}</p>' if note else ""
