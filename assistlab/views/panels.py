"""HTML panels rendered from a report dict: the headline and the tables (numbers, why, ranking, sweep, where).

Pure functions of the report, like the charts; no gradio here, so they can be tested and reused anywhere.
The progress lines are in `progress.py`, the generated texts in `texts.py`.
"""

from __future__ import annotations

import html

from .. import __version__
from ..engines.base import LOSSY_MARK, LOSSY_TRADE
from ..results import busy
from ..results.ranking import rank_arms
from ..results.report import (busy_clause, comparisons_words, interval_cell, level_words, time_hover, unsettled,
                              unsettled_sentence)
from ..results.stats import MIN_LEVEL, spread_is_wide
from . import answers, charts
from .markup import dot, glossary_html, md_text, term, with_terms

WHY_TERMS = ("alpha", "c", "drafted", "k", "forward", "bonus", "speedup")
NUMBER_TERMS = ("plain", "iqr", "ttft", "speedup", "accepted", "per_pass")

# (shown name, glossary term, the comparison entry's key, format, meaning). The mean drafted per step is the
# cost model's k, but "k" in an arm's name is its draft length, so the panel names the mean in words.
WHY_ROWS = (
    ("α", "alpha", "alpha", ".2f", "chance the target keeps a drafted token it checks (tokens after a rejected "
     "one are thrown away unchecked, so this is higher than the share of all drafted tokens accepted)"),
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


def headline_html(report: dict) -> str:
    """The answer first in plain words, then the headline sentences, each arm's line marked with its chart colour."""
    lines = answers.headline_lines(report)
    arm_names = {arm["name"]: i for i, arm in enumerate(report.get("arms", []))}
    lead = answers.lead_sentence(report)
    parts = [f'<p class="al-lead" id="al-lead">{with_terms(lead)}</p>'] if lead else []
    warned = {w["message"] for w in report.get("warnings") or []}
    folded = [line for line in lines if line in warned or line.startswith(charts.NOISY)]
    warning = warnings_html(report, folded)
    if warning:  # one line under the answer; the sentences behind it are one click away
        parts.append(warning)
        lines = [line.removesuffix(busy_clause(True)) for line in lines if line not in folded]  # said once, above
    medians = {c["arm"]: (c.get("speedup") or {}).get("median") for c in report.get("comparison", [])}
    for line in lines:
        index = next((i for name, i in arm_names.items() if i and line.startswith((name + " ", name + ":"))), None)
        if line in warned:  # beside the verdict, marked so a reader cannot miss it
            parts.append(f'<p class="al-warning" role="alert">⚠ {html.escape(line)}</p>')
        elif index is not None:
            parts.append(f'<p class="al-arm"{_time_title(medians.get(report["arms"][index]["name"]))}>{dot(index)}'
                         f'{with_terms(line)}</p>')
        else:
            parts.append(f'<p class="al-note">{with_terms(line)}</p>')
    return f'<div class="al-headline" id="al-headline">{"".join(parts)}</div>'


def _time_title(median: float | None) -> str:
    """A slower arm's time as a hover attribute (' title="takes 4.23× as long as plain"'); '' otherwise: the
    text says a slower arm as its speedup below 1×, everywhere, and its time only here."""
    said = time_hover(median)
    return f' title="{html.escape(said)}"' if said else ""


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
            speed = (f"<span{_time_title(s['median'])}>{s['median']:.2f}×</span>"
                     + (f" ({interval_cell(s)})" if interval_cell(s) else ""))
        latency = _fmt(lat["median"], ".3f", " s")
        if lat["n"]:
            wide = spread_is_wide(lat)
            flag = ' title="The spread is over 10% of the median: noisy timings"' if wide else ""
            latency += f' <span class="al-sub"{flag}>({lat["iqr"]:.3f} s{" ⚠" if wide else ""})</span>'
        name = html.escape(arm["name"])
        if arm.get("error"):
            name += ' <span class="al-badge al-failed-badge">failed</span>'
        cells = [
            f"{dot(i)}{name}",
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


# ---------------------------------------------------------------- why: the cost model, the ranking, the sweep


def _speed_cell(median, speedup: dict) -> str:
    """The median, then its interval with the level it has (or 'range of n runs'), from report.interval_cell."""
    if median is None:
        return "–"
    interval = interval_cell(speedup)
    shown = f"<span{_time_title(median)}>{median:.2f}×</span>"
    return f"{shown} <span class=\"al-sub\">({html.escape(interval)})</span>" if interval else shown


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
        title = f"<h4>{dot(i)}{html.escape(arm['name'])}</h4>"
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
            limit = with_terms(comp["limit"])
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
    """The ranking with plain among the arms: the report's own (ranking.rank_arms), recomputed for a report
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
    body, no_answer = [], unsettled(report)  # no clear answer: listed by median, never ranked
    for row in rows:
        rank = str(row["rank"]) if row.get("rank") is not None and not no_answer else "–"
        if row.get("plain"):
            cells = [rank, f"{dot(0)}{term('plain', 'plain')} <span class=\"al-sub\">(no assistant)</span>",
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
            f"{dot(colour.get(row['arm'], 0))}{name}",
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
        f'<p class="al-sub" id="al-ranking-note">{with_terms(ranking_words(report, rows))}</p>'
        f'{_lossy_note(rows)}</div>'
    )


def ranking_words(report: dict, rows: list[dict]) -> str:
    """The ranking's note; for a run that ended without a clear answer, that first, and the order is medians."""
    if unsettled(report):
        return f"{unsettled_sentence(report['stopping'])} Ordered by median only, which is not an answer."
    return ranking_note(rows)


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


def servers_words(report: dict) -> str | None:
    """How the vLLM servers AssistLab started were held, in a few plain words ("servers took turns: the target
    did not fit twice in memory"), with what waking and sleeping took; None when it started none."""
    held = ((report.get("environment") or {}).get("engines") or {}).get("vllm", {}) or {}
    held = held.get("turns") if isinstance(held, dict) else None
    if not held:
        return None
    words = str(held.get("words") or held.get("design"))
    if held.get("design") == "blocks":
        return _blocks_words(words, held)
    if held.get("design") != "sleep":
        need, free = held.get("need_bytes"), held.get("free_bytes")
        fits = (f" (they fit together: {need / 1e9:.1f} GB of {free / 1e9:.1f} GB free)"
                if need and free and need <= free else "")
        return f"vLLM servers: {words}{fits}."
    arms = [a for a in (held.get("arms") or {}).values() if a.get("wake_s")]
    wakes = sorted(s for a in arms for s in a["wake_s"])
    sleeps = sorted(s for a in arms for s in a.get("sleep_s") or [])
    if not wakes:
        return f"vLLM {words}."
    return (f"vLLM {words}; each run woke its server first ({wakes[len(wakes) // 2]:.2f} s, median of "
            f"{len(wakes)} wakes) and put it to sleep after ({sleeps[len(sleeps) // 2]:.2f} s), never inside a "
            f"timed run." if sleeps else f"vLLM {words}.")


def _blocks_words(words: str, held: dict) -> str:
    """Servers in blocks: the design, the order and what the starts took (never inside a timed run)."""
    arms = [a for a in (held.get("arms") or {}).values() if a.get("start_s")]
    starts = sorted(s for a in arms for s in a["start_s"])
    order = "A B C C B A" if len(held.get("arms") or {}) > 2 else "A B B A"
    said = (f"vLLM {words}. The blocks came in a mirrored order ({order}), so that a steady drift of the machine "
            f"falls on every arm alike; the answers were looked at once every arm had run both its blocks, "
            f"and their intervals assume a fresh start shifts no arm's times by itself (under load they pair "
            f"blocks, not rounds)")
    if starts:
        said += (f"; {len(starts)} starts ({starts[len(starts) // 2]:.0f} s median), each followed by its warm-up, "
                 f"never inside a timed run")
    return said + "."


def environment_markdown(report: dict) -> str:
    """Where the numbers come from, in one paragraph: hardware, dtype, versions, each model's source."""
    env = report.get("environment", {})
    if not env:
        return ""
    hardware = f"GPU {env['gpu_name']}" if env.get("gpu_name") else f"CPU {env.get('cpu_model', '?')}"
    if env.get("cpu_threads") and not env.get("gpu_name"):
        hardware += f", {env['cpu_threads']} threads"
    # The dtype in words first: how precisely the numbers were kept (float32 full, bfloat16 half the memory).
    facts = (hardware, f"numbers kept as {env.get('dtype', '?')}", f"torch {env.get('torch', '?')}",
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
    held = servers_words(report)
    if held:
        parts.append(f"**Servers**: {md_text(held)}")
    return "  \n".join(parts)
