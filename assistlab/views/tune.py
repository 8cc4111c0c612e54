"""A search's result (the report's `tune` block, measure/tune_summary.py) as a chart and HTML: every candidate's
interval over the looks with the look at which it left, the sentence, what to deploy, the table of candidates.
Pure functions."""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go

from ..results.tune_interval import LIKELY, best_bounds
from .charts import FAINT, _plain, _style, _waiting, arm_color

# The candidates' points at one look sit side by side, this far apart (in repetitions), so none hides another.
SPREAD = 0.5
# The chart's speedup axis is logarithmic and shows at most 0.1× to 10× of the intervals' ends, with a little room
# around: an early interval reaching 600× would otherwise set the axis and flatten every other candidate onto the
# 1× line. An end past the edge is drawn to it and marked with an arrow (a middle past it sits at the edge).
CHART_LOW, CHART_HIGH, ROOM = 0.1, 10.0, 1.15
TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
WAITING = "The intervals appear at the first planned look, after {first} repetitions."
# The words a person reads beside the chart and the table, each term with its meaning in a hover.
TERMS = {
    "look": "a look: after these repetitions the search checks every interval and drops the candidates clearly behind",
    "interval": ("the search's interval: where the speedup over plain lies, by the likely rule (if the noise is "
                 "roughly normal) or the sign-based rule (assuming nothing), whichever is narrower; its level is "
                 "split over every comparison the search may make, the two rules and the looks, so all hold at once"),
    "left": "left: the candidate stopped being timed here, because it was clearly slower than plain or the leader",
}


def _term(key: str, text: str) -> str:
    return f'<abbr class="al-term" title="{html.escape(TERMS[key])}">{html.escape(text)}</abbr>'


def _tune(report: dict) -> dict:
    return report.get("tune") or {}


def _colour_index(report: dict, name: str) -> int:
    """The candidate's colour: its arm's place in report['arms'], the same colour as every other chart."""
    names = [a.get("name") for a in report.get("arms") or []]
    return names.index(name) if name in names else 1


def _bounds(candidates: list[dict], looks: list[int]) -> tuple[float, float]:
    """The speedup axis' ends: the intervals' ends and 1×, cut to CHART_LOW-CHART_HIGH, with ROOM around."""
    ends = [1.0]
    for cand in candidates:
        sequence = cand.get("looks") or []
        ends += [v for t in looks if t <= len(sequence) and None not in sequence[t - 1] for v in sequence[t - 1]]
    return max(min(ends), CHART_LOW) / ROOM, min(max(ends), CHART_HIGH) * ROOM


def _beyond(name: str, xs: list[float], ys: list[float], data: list[list], colour: str, up: bool) -> go.Scatter:
    """Arrows at the chart's edge where a candidate's intervals go beyond it, the hover saying how far."""
    return go.Scatter(
        x=xs, y=ys, mode="markers", name=f"{name} beyond the chart", showlegend=False, cliponaxis=False,
        customdata=data, marker={"symbol": "triangle-up" if up else "triangle-down", "size": 11, "color": colour},
        hovertemplate=("<b>%{customdata[0]}</b> after %{customdata[1]} repetitions: the interval goes beyond the "
                       "chart, " + ("up to" if up else "down to") + " %{customdata[2]:.3g}× of plain's speed"
                       "<extra></extra>"))


def tune_figure(report: dict) -> go.Figure:
    """Each candidate's interval (the search's: likely and sign-based at once) on its speedup over plain at every
    planned look it reached (a vertical bar through the interval's middle, on a log axis cut at CHART_LOW and
    CHART_HIGH, an end beyond it marked with an arrow), and a cross at the look where it left, with why in the
    hover."""
    summary = _tune(report)
    fig = go.Figure()
    candidates = summary.get("candidates") or []
    looks = [int(t) for t in summary.get("looks") or []]
    level = summary.get("comparison_level")
    share = f"{level:.2%} each" if isinstance(level, (int, float)) else "its share"
    bottom, top = _bounds(candidates, looks)
    for pos, cand in enumerate(candidates):
        sequence = cand.get("looks") or []
        offset = (pos - (len(candidates) - 1) / 2) * SPREAD / max(1, len(candidates))
        xs, ys, plus, minus, data, past = _points(_plain(cand["arm"]), sequence, looks, offset, bottom, top)
        colour = arm_color(_colour_index(report, cand["arm"]))
        if xs:
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=_plain(cand["arm"]), customdata=data,
                line={"color": colour, "width": 1, "dash": "dot"}, marker={"color": colour, "size": 7},
                error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "color": colour,
                         "thickness": 2, "width": 4},
                hovertemplate=("<b>%{customdata[0]}</b><br>after %{customdata[1]} repetitions<br>speedup over plain "
                               "%{customdata[2]:.2f}× to %{customdata[3]:.2f}× (the search's interval, " + share +
                               ")<extra></extra>"),
            ))
        for up, (bx, by, ends) in past.items():
            if bx:
                fig.add_trace(_beyond(_plain(cand["arm"]), bx, by, ends, colour, up))
        if cand.get("left_at"):
            fig.add_trace(_left_cross(cand, offset, colour, bottom, top))
    _style(fig, "Speedup over plain at each look (× = left)",  # short enough for a phone's width
           "repetitions (looks)", "speedup over plain (×, log scale)")
    if not fig.data:
        return _waiting(fig, WAITING.format(first=looks[0] if looks else 4))
    fig.add_hline(y=1.0, line={"color": FAINT, "dash": "dash", "width": 1},
                  annotation={"text": "plain (1×)", "font": {"color": FAINT, "size": 11}})
    ticks = [t for t in TICKS if bottom <= t <= top]
    fig.update_yaxes(type="log", range=[math.log10(bottom), math.log10(top)], tickvals=ticks,
                     ticktext=[f"{t:g}×" for t in ticks])
    fig.update_xaxes(tickvals=looks)
    fig.update_layout(showlegend=True)
    return fig


def _points(arm: str, sequence: list, looks: list[int], offset: float, bottom: float, top: float) -> tuple:
    """A candidate's intervals at the looks it reached: (x, middle, error up, error down, hover data) lists, and
    the arrows up and down (x, y, hover data) for ends beyond the chart's edges."""
    xs, ys, plus, minus, data = [], [], [], [], []
    past = {True: ([], [], []), False: ([], [], [])}
    for t in looks:
        if t > len(sequence):
            break
        low, high = sequence[t - 1]
        if low is None or high is None:
            continue
        # The middle on a ratio scale (the interval is symmetric in logs), kept within the chart's edges.
        middle = min(max((low * high) ** 0.5, bottom), top)
        xs.append(t + offset)
        ys.append(middle)
        plus.append(min(high, top) - middle)
        minus.append(middle - max(low, bottom))
        data.append([arm, t, low, high])
        for up, beyond, edge, end in ((True, high > top, top, high), (False, low < bottom, bottom, low)):
            if beyond:
                past[up][0].append(t + offset)
                past[up][1].append(edge)
                past[up][2].append([arm, t, end])
    return xs, ys, plus, minus, data, past


def _left_cross(cand: dict, offset: float, colour: str, bottom: float, top: float) -> go.Scatter:
    """The cross at the look where a candidate left, at its interval's middle there, with why in the hover."""
    left, sequence = cand["left_at"], cand.get("looks") or []
    bounds = sequence[left - 1] if 0 < left <= len(sequence) else [None, None]
    y = min(max((bounds[0] * bounds[1]) ** 0.5, bottom), top) if None not in bounds else 1.0
    return go.Scatter(
        x=[left + offset], y=[y], mode="markers", name=f"{_plain(cand['arm'])} left",
        marker={"symbol": "x", "size": 13, "color": colour, "line": {"width": 1, "color": colour}},
        customdata=[[_plain(cand["arm"]), left, _plain(cand.get("why") or "")]],
        hovertemplate="<b>%{customdata[0]}</b> left after %{customdata[1]} repetitions:<br>%{customdata[2]}"
                      "<extra></extra>",
    )


def sentence_html(report: dict) -> str:
    """The answer in one sentence first, then whether it is settled and confirmed, and how sure, in words."""
    summary = _tune(report)
    if not summary:
        return ""
    state = "al-tune-settled" if summary.get("settled") else "al-tune-open"
    confirmed = {True: "Confirmed by the rule that assumes nothing against "
                       f"{summary.get('confirmed_against') or 'its nearest rival'}.",
                 False: "The rule that assumes nothing does not agree with this pick: treat it as uncertain.",
                 None: ""}[summary.get("confirmed")]
    runs = (f"{summary.get('runs_used')} runs of the {summary.get('runs_without_elimination')} a grid of every "
            f"candidate would have taken to {summary.get('repetitions')} repetitions.")
    level = summary.get("level")
    how = (f"How sure: {level:.0%} for the whole search, {summary.get('assumption')}."
           if isinstance(level, (int, float)) else "")
    rec = summary.get("recommendation") or {}
    again = (f'<p class="al-env">Re-time it on its own: <code id="al-tune-bench">{html.escape(rec["bench_command"])}'
             "</code></p>" if rec.get("bench_command") else "")
    schedule = (summary.get("schedule") or {}).get("sentence")
    under_load = "".join(f'<p class="al-env">{html.escape(x)}</p>' for x in (
        [schedule] + [row["sentence"] for row in ((summary.get("schedule_check") or {}).get("levels") or [])
                      if row.get("sentence")]) if x)
    deploy = (summary.get("deploy") or {}).get("sentence")
    deploy = (f'<p class="al-tune-deploy" id="al-tune-deploy">{html.escape(deploy)}</p>' if deploy else "")
    over = (summary.get("budget") or {}).get("sentence")
    over = f'<p class="al-warning" id="al-tune-budget">{html.escape(over)}</p>' if over else ""
    return (f'<p class="al-tune-sentence {state}" id="al-tune-sentence"><b>{html.escape(summary.get("sentence", ""))}'
            f'</b></p>{deploy}{over}<p class="al-env">{html.escape(" ".join(x for x in (confirmed, runs) if x))}</p>'
            f'<p class="al-env">{html.escape(how)}</p>{under_load}{again}')


def _settings(settings: dict) -> str:
    parts = [f"{k}={'default' if v is None else v}" for k, v in (settings or {}).items()]
    return ", ".join(parts) or "defaults"


def _speed(speedup: dict | None, interval: dict | None = None) -> str:
    """The median and its interval: the summary's one interval with its level ('0.89× (0.48–1.76×, 99.1%)'), or,
    in a search saved before it had one, the sure interval else the likely one."""
    if not speedup or not speedup.get("median"):
        return "–"
    if interval is not None:
        return f"{speedup['median']:.2f}×" + (f" ({interval['text']})" if interval.get("text") else "")
    low, high, kind = best_bounds(speedup)
    said = " likely" if kind == LIKELY else ""
    span = f" ({low:.2f}–{high:.2f}×{said})" if low is not None else ""
    return f"{speedup['median']:.2f}×{span}"


# The table's columns: each header, short enough that six fit a results column, and what a phone shows before
# each cell once the rows stack (the header's words).
COLUMNS = ("Candidate", "Settings", "Speedup over plain", "Runs", "Left at", "Why")


def candidates_html(report: dict) -> str:
    """One row per candidate: its settings, its speedup over plain, the look it left at and why."""
    summary = _tune(report)
    candidates = summary.get("candidates") or []
    if not candidates:
        return ""
    picked = (summary.get("recommendation") or {}).get("arm")
    rows = []
    for cand in candidates:
        name = html.escape(cand["arm"]) + (' <span class="al-badge al-same">picked</span>' if cand["arm"] == picked
                                           else "")
        left = cand.get("left_at")
        cells = [name, html.escape(_settings(cand.get("settings"))),
                 html.escape(_speed(cand.get("speedup"), cand.get("interval"))),
                 str(cand.get("runs", 0)), "still in" if not left and not cand.get("why") else str(left or "–"),
                 html.escape(cand.get("why") or "")]
        rows.append("<tr>" + "".join(f'<td data-label="{label}">{c}</td>' for label, c in zip(COLUMNS, cells))
                    + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in (*COLUMNS[:4], _term("left", COLUMNS[4]), COLUMNS[5]))
    return (f'<div class="al-wrap al-tune-wrap"><table class="al-table" id="al-tune-table"><thead><tr>{head}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table></div>'
            f'<p class="al-env">{_term("look", "Looks")}, {_term("left", "left at")} (the repetition) and '
            f'{_term("interval", "intervals")}: hover the words for what they mean.</p>')


def snippet(report: dict) -> str:
    """The code or command line that deploys what the search found (plain generation's when no setting was
    clearly faster than plain); empty when there is none."""
    deploy = _tune(report).get("deploy") or {}
    return deploy.get("snippet") or ""


def snippet_label(report: dict) -> str:
    """The code box's title: "Deploy it" for a setting clearly faster than plain, else "Deploy plain generation"."""
    deploy = _tune(report).get("deploy") or {}
    what = "Deploy plain generation" if deploy.get("plain") else "Deploy it"
    return f"{what} (copy with the button at the top right)"


def snippet_language(report: dict) -> str:
    """'python' for transformers' generate(...), 'shell' for a `vllm serve` line."""
    deploy = _tune(report).get("deploy") or {}
    return "python" if deploy.get("engine", "transformers") == "transformers" else "shell"
