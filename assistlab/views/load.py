"""Report dict -> the load levels' charts (speedup against concurrency, the Pareto view) and their panel."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ..results.report import interval_cell, level_words
from . import charts
from .markup import dot

# Short enough for a phone-wide chart (about 370 px); the subtitle says what the marks are.
SPEEDUP_TITLE = "Speedup under load (above 1× helps)"
PARETO_TITLE = "Per user against server tokens/s"
TABLE_HEAD = ("Arm", "Requests at once", "Server tokens/s", "Per-user tokens/s", "First token p50", "Between tokens p50",
              "End to end p50 / p99", "Accepted", "Throughput speedup (interval, its level)")


def has_load(report: dict) -> bool:
    """Whether the report timed any load level (the request asked for levels and some entry came back)."""
    return bool(report.get("load"))


def _entries(report: dict) -> list[dict]:
    """The load entries that name an arm and a level (a saved report is read as it was kept)."""
    load = report.get("load")
    return [e for e in (load if isinstance(load, list) else []) if isinstance(e, dict) and isinstance(e.get("arm"), str)
            and isinstance(e.get("concurrency"), int) and not isinstance(e.get("concurrency"), bool)
            and e["concurrency"] >= 1]


def _by_arm(report: dict) -> dict[str, list[dict]]:
    """Each arm's entries, in level order; arms in the report's order (the order of their first entry)."""
    arms: dict[str, list[dict]] = {}
    for entry in _entries(report):
        arms.setdefault(entry["arm"], []).append(entry)
    return {name: sorted(entries, key=lambda e: e["concurrency"]) for name, entries in arms.items()}


def _levels(report: dict) -> list[int]:
    summary = report.get("load_summary") if isinstance(report.get("load_summary"), dict) else {}
    levels = summary.get("levels")
    if not isinstance(levels, list) or not all(isinstance(v, int) and v >= 1 for v in levels) or not levels:
        levels = sorted({e["concurrency"] for e in _entries(report)})
    return levels


def _requests_words(level: int) -> str:
    return "one request at a time" if level == 1 else f"{level} requests at once"


def _level_axis(fig: go.Figure, levels: list[int]) -> None:
    """Concurrency on a log2 scale, ticks at the levels measured: 1, 2, 4, 8 sit evenly apart."""
    fig.update_xaxes(type="log", tickvals=levels, ticktext=[str(level) for level in levels])


def _interval_words(speedup: dict) -> str:
    """The interval for a hover, with its true level and the rounds it rests on."""
    cell = interval_cell(speedup)
    rounds = speedup.get("n") or 0
    return f"{cell}, over {rounds} rounds" if cell else f"no interval ({rounds} round{'s' if rounds != 1 else ''})"


def _bars_words(speedups: list[dict]) -> str:
    """What the error bars are, when every point's interval has one level and one count of rounds."""
    if not any(interval_cell(s) for s in speedups):
        return "no intervals: too few rounds" if speedups else ""
    kinds = {(s.get("level"), s.get("n")) for s in speedups if interval_cell(s)}
    if len(kinds) != 1 or None in next(iter(kinds)):
        return "bars: each level's interval (hover for its level and rounds)"
    level, rounds = kinds.pop()
    return f"bars: {level_words(level)} intervals over {rounds} rounds"


def _subtitle(fig: go.Figure, text: str) -> None:
    """A small line under the title: what the marks mean."""
    if text:
        fig.update_layout(title={"subtitle": {"text": text, "font": {"size": 11, "color": charts.INK}}})


def load_speedup_figure(report: dict) -> go.Figure:
    """Per assisted arm, its throughput speedup over its engine's plain at each level, intervals as error bars,
    against the 1× line; a level that failed is an ✕ on the 1× line with the server's sentence."""
    fig = go.Figure()
    shown = []
    for name, entries in _by_arm(report).items():
        if entries[0].get("baseline") is None:
            continue
        color = charts.arm_color(entries[0].get("arm_index") or 0)
        points = [e for e in entries if (e.get("speedup") or {}).get("median") is not None]
        if points:
            speedups = [e["speedup"] for e in points]
            shown.extend(speedups)
            lows, highs = zip(*(charts._error_bars(s) for s in speedups))
            fig.add_trace(go.Scatter(
                x=[e["concurrency"] for e in points], y=[s["median"] for s in speedups], name=charts._plain(name),
                mode="lines+markers", line={"color": color, "width": 2}, marker={"color": color, "size": 9},
                error_y={"type": "data", "symmetric": False, "array": [h - s["median"] for h, s in zip(highs, speedups)],
                         "arrayminus": [s["median"] - lo for lo, s in zip(lows, speedups)], "color": color,
                         "thickness": 1.5, "width": 6},
                customdata=[[_requests_words(e["concurrency"]), _interval_words(e["speedup"]),
                             _latency_words(e.get("latency_speedup"))] for e in points],
                hovertemplate=("<b>%{fullData.name}</b><br>%{customdata[0]}: %{y:.2f}× the throughput of plain"
                               "<br>(plain's round time ÷ this arm's, equal tokens)<br>%{customdata[1]}"
                               "<br>%{customdata[2]}<extra></extra>"),
            ))
        failed = [e for e in entries if e.get("failed")]
        if failed:
            fig.add_trace(go.Scatter(
                x=[e["concurrency"] for e in failed], y=[1.0] * len(failed), name=f"{charts._plain(name)} (failed)",
                mode="markers", marker={"color": color, "size": 11, "symbol": "x-thin", "line": {"width": 2.5,
                                                                                                 "color": color}},
                customdata=[[_requests_words(e["concurrency"]), charts._plain(e["failed"])] for e in failed],
                hovertemplate="<b>%{fullData.name}</b><br>%{customdata[0]}: failed<br>%{customdata[1]}<extra></extra>",
                showlegend=False,
            ))
    charts._style(fig, SPEEDUP_TITLE, "requests at once (concurrency)", "throughput speedup")
    failed_any = any(t.name.endswith("(failed)") for t in fig.data)
    _subtitle(fig, " · ".join(w for w in (_bars_words(shown), "✕ failed" if failed_any else "") if w))
    if not fig.data:
        return charts._waiting(fig, "No load level measured")
    fig.add_hline(y=1.0, line={"color": charts.FAINT, "dash": "dash", "width": 1.5})
    values = [1.0] + [v for s in shown for v in charts._error_bars(s)] + [s["median"] for s in shown]
    fig.update_yaxes(ticksuffix="×", range=charts._padded_range(values))
    _level_axis(fig, _levels(report))
    lines = sum(1 for t in fig.data if t.mode == "lines+markers")
    fig.update_layout(showlegend=True, height=charts.CHART_HEIGHT + charts.LEGEND_ROW * lines,
                      margin={"t": 72})
    return fig


def _latency_words(speedup: dict | None) -> str:
    if not speedup or speedup.get("median") is None:
        return "per-request latency: not measured"
    return f"per-request latency {speedup['median']:.2f}× plain's" + (
        f" ({interval_cell(speedup)})" if interval_cell(speedup) else "")


def load_pareto_figure(report: dict) -> go.Figure:
    """Per arm, tokens/s each user sees (y) against the server's output tokens/s (x), one line through its levels,
    each point labelled with its level: up and to the right is better for both."""
    fig = go.Figure()
    for name, entries in _by_arm(report).items():
        points = [e for e in entries if not e.get("failed") and e.get("output_tokens_per_s") is not None
                  and e.get("per_user_tokens_per_s") is not None]
        if not points:
            continue
        color = charts.arm_color(entries[0].get("arm_index") or 0)
        fig.add_trace(go.Scatter(
            x=[e["output_tokens_per_s"] for e in points], y=[e["per_user_tokens_per_s"] for e in points],
            name=charts._plain(name), mode="lines+markers+text", text=[str(e["concurrency"]) for e in points],
            textposition="top center", textfont={"size": 11, "color": color},
            line={"color": color, "width": 2}, marker={"color": color, "size": 8},
            customdata=[[_requests_words(e["concurrency"]), e.get("requests") or 0] for e in points],
            hovertemplate=("<b>%{fullData.name}</b><br>%{customdata[0]}<br>server %{x:.1f} tokens/s, "
                           "each user %{y:.1f} tokens/s<br>%{customdata[1]} requests<extra></extra>"),
        ))
    charts._style(fig, PARETO_TITLE, "server output tokens/s", "tokens/s per user")
    _subtitle(fig, "labels: requests at once; up and right is better")
    if not fig.data:
        return charts._waiting(fig, "No load level measured")
    # From 0, so the gaps between arms read as ratios; headroom for the labels above the top points.
    fig.update_xaxes(range=[0, 1.08 * max(x for t in fig.data for x in t.x)])
    fig.update_yaxes(range=[0, 1.15 * max(y for t in fig.data for y in t.y)])
    fig.update_layout(showlegend=True, height=charts.CHART_HEIGHT + charts.LEGEND_ROW * len(fig.data),
                      margin={"t": 72})
    return fig


# ---------------------------------------------------------------- the panel


def _seconds(figures: dict | None, key: str = "p50") -> str:
    value = (figures or {}).get(key)
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _number(value, pattern: str) -> str:
    return "–" if value is None else format(value, pattern)


def _speed_cell(speedup: dict | None, baseline: str | None) -> str:
    if baseline is None:
        return "1× (baseline)"
    if not speedup or speedup.get("median") is None:
        return "–"
    cell = interval_cell(speedup)
    return f"{speedup['median']:.2f}×" + (f' <span class="al-sub">({html.escape(cell)})</span>' if cell else "")


def _row(entry: dict) -> str:
    name = html.escape(str(entry["arm"]))
    first = f"{dot(entry.get('arm_index') or 0)}{name}"
    level = str(entry["concurrency"])
    if entry.get("failed"):
        return (f'<tr class="al-load-failed"><td>{first} <span class="al-badge al-failed-badge">failed</span></td>'
                f'<td>{level}</td><td colspan="{len(TABLE_HEAD) - 2}">{html.escape(str(entry["failed"]))}</td></tr>')
    if entry.get("outputs_identical") is False:  # greedy should keep the target's tokens at every level
        first += (' <span class="al-badge al-failed-badge" title="Not every request got the same tokens as its '
                  'engine\'s plain arm">other tokens</span>')
    acceptance = entry.get("acceptance") or {}
    e2e = entry.get("e2e_s")
    cells = [first, level, _number(entry.get("output_tokens_per_s"), ".1f"),
             _number(entry.get("per_user_tokens_per_s"), ".1f"), _seconds(entry.get("ttft_s")),
             _seconds(entry.get("itl_s")), f"{_seconds(e2e)} / {_seconds(e2e, 'p99')}",
             _number(acceptance.get("rate"), ".0%"), _speed_cell(entry.get("speedup"), entry.get("baseline"))]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def load_html(report: dict) -> str:
    """The load panel: the summary sentence, its notes, what the client took, and every (arm, level) in a table;
    '' when the report timed no load level."""
    if not has_load(report):
        return ""
    summary = report.get("load_summary") if isinstance(report.get("load_summary"), dict) else {}
    parts = []
    if summary.get("sentence"):
        parts.append(f'<p class="al-load-sentence"><strong>{html.escape(summary["sentence"])}</strong></p>')
    notes = [n for n in summary.get("notes") or [] if n]
    if notes:
        parts.append('<ul class="al-load-notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    if summary.get("client"):
        parts.append(f'<p class="al-sub al-load-client">{html.escape(summary["client"])}</p>')
    entries = sorted(_entries(report), key=lambda e: e["concurrency"])  # stable: arms keep their order
    header = "".join(f"<th>{h}</th>" for h in TABLE_HEAD)
    rows = "".join(_row(e) for e in entries)
    rounds = summary.get("rounds")
    parts.append(
        f'<div class="al-wrap"><table class="al-table al-load-table"><thead><tr>{header}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
        '<p class="al-sub">Each level sends the same prompt as that many requests at once to each arm\'s server, '
        f"arms in turn{f', {rounds} timed rounds' if rounds else ''} after an untimed warm-up. Server tokens/s: "
        "the round's output tokens ÷ its wall time (median over rounds); per-user: each request's tokens ÷ its "
        "time; latencies over the level's requests. The speedup pairs each round with plain's.</p>"
    )
    return '<div class="al-load">' + "".join(parts) + "</div>"
