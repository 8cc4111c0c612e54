"""Report dict -> Plotly figures and the result in words; pure functions, plotly only."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ..results.report import counted as counted_words
from ..results.report import (NONE_CLEARLY_FASTER, NOTHING_HELPED, TOO_FEW_FOR_EVERY_LOOK,  # noqa: F401
                              TOO_FEW_TO_TELL, answer_sentence, first_answer_words, interval_cell, is_busy, level_words, provisional,
                              provisional_sentence, speedup_sentence, time_hover)
from ..results.stats import spread_is_wide
from .chart_labels import axis_label as _axis_label
from .chart_labels import legend_lines
from .chart_labels import legend_name as _legend_name

# Plain is always the calm slate; assisted arms take the colours after it, in report order.
PALETTE = ("#64748b", "#4f46e5", "#0d9488", "#d97706", "#db2777", "#2563eb", "#65a30d", "#9333ea", "#dc2626")
FAINT = "#94a3b8"
INK = "#1e293b"  # legends and keys: readable at a glance, not a faint grey
FONT = "Inter, ui-sans-serif, system-ui, -apple-system, Segoe UI, sans-serif"
CHART_HEIGHT = 340
# Room for a vertical axis title and its tick labels. automargin only grows a margin when plotly measures it,
# which it does not always redo when gradio redraws a figure in place; a fixed floor keeps the title whole.
TITLED_AXIS_MARGIN = 72
LEGEND_ROW = 21  # pixels per legend entry: entries stack on a narrow screen, and the plot keeps its height
LEGEND = {"orientation": "h", "yanchor": "top", "y": -0.26, "x": 0, "font": {"size": 13, "color": INK}}


def arm_color(index: int) -> str:
    """The colour of the arm at `index` in report['arms']; the same in every chart."""
    return PALETTE[index % len(PALETTE)]


def _counted(report: dict) -> list[tuple[int, dict]]:
    """Arms with at least one counted run, with their index for colours."""
    return [(i, arm) for i, arm in enumerate(report.get("arms", [])) if arm.get("latencies_s")]


def _assisted(report: dict) -> list[tuple[int, dict, dict]]:
    """(colour index, arm, comparison entry) for each assisted arm that has a comparison."""
    by_name = {c["arm"]: c for c in report.get("comparison", [])}
    return [
        (i, arm, by_name[arm["name"]])
        for i, arm in enumerate(report.get("arms", []))
        if arm.get("strategy") != "plain" and arm["name"] in by_name
    ]


def _plain(text: str) -> str:
    """Text Plotly shows as it is: Plotly renders tags such as <a href> and <img>-like markup in names and
    labels, and an arm's name carries a model's name, so every such string is entity-escaped."""
    return html.escape(str(text), quote=False)


def _style(fig: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left", "y": 0.98, "yanchor": "top", "font": {"size": 15}},
        template="plotly_white",
        font={"family": FONT, "size": 12, "color": "#334155"},
        height=CHART_HEIGHT,
        margin={"l": TITLED_AXIS_MARGIN if y_title else 10, "r": 16, "t": 60, "b": 10},
        showlegend=False,
        legend=LEGEND,
        hoverlabel={"font": {"family": FONT}},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    fig.update_xaxes(title={"text": x_title, "standoff": 6}, zeroline=False, gridcolor="#e2e8f0", automargin=True)
    fig.update_yaxes(title={"text": y_title, "standoff": 6}, zeroline=False, gridcolor="#e2e8f0", automargin=True)
    return fig


def _waiting(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"color": FAINT, "size": 13})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def rests_on(fig: go.Figure, arms: list[dict]) -> None:
    """Under the title, how many counted runs the chart rests on (a spread or a rate from few runs is uncertain)."""
    counts = sorted({len(a.get("latencies_s") or []) for a in arms} - {0})
    if counts:
        one = f"over {counts[0]} run{'s' * (counts[0] > 1)}" + " per arm" * (len(arms) > 1)
        text = one if len(counts) == 1 else f"over {counts[0]}–{counts[-1]} runs"
        fig.update_layout(title_subtitle={"text": text, "font": {"size": 11, "color": FAINT}})


def latency_figure(report: dict) -> go.Figure:
    """Every counted run's latency per arm, as a box with each run shown as a point."""
    fig = go.Figure()
    for i, arm in reversed(_counted(report)):  # reversed so plain sits at the top of a horizontal chart
        fig.add_trace(
            go.Box(
                x=arm["latencies_s"],
                y=[_axis_label(arm["name"])] * len(arm["latencies_s"]),
                name=_plain(arm["name"]),
                orientation="h",
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"color": arm_color(i), "size": 7, "opacity": 0.8},
                line={"color": arm_color(i)},
                fillcolor="rgba(0,0,0,0)",
                hovertemplate="<b>%{fullData.name}</b><br>latency %{x:.3f} s<extra></extra>",
            )
        )
    _style(fig, "Latency of each run (lower is faster)", "seconds per generation", "")
    rests_on(fig, [arm for _, arm in _counted(report)])
    return fig if fig.data else _waiting(fig, "Waiting for the first repetition")


def _representative_run(arm: dict) -> int:
    """The counted run whose latency is nearest the arm's median, so the timeline shows a typical run."""
    median = arm["latency_summary"]["median"]
    latencies = arm["latencies_s"]
    return min(range(len(latencies)), key=lambda k: abs(latencies[k] - median))


def timeline_figure(report: dict) -> go.Figure:
    """Tokens generated over time in one typical run of each arm; assisted arms rise in steps."""
    fig = go.Figure()
    for i, arm in _counted(report):
        run = _representative_run(arm)
        trace = arm["trace"][run]
        times, cumulative, total = [0.0], [0], 0
        for t, n in zip(trace["t_s"], trace["tokens"]):
            total += n
            times.append(t)
            cumulative.append(total)
        fig.add_trace(
            go.Scatter(
                x=times,
                y=cumulative,
                name=_legend_name(arm["name"]),
                mode="lines+markers",
                line={"color": arm_color(i), "shape": "hv", "width": 2},
                marker={"size": 4},
                hovertemplate="<b>%{fullData.name}</b><br>%{y} tokens after %{x:.3f} s<extra></extra>",
            )
        )
    _style(fig, "Tokens over time in a typical run", "seconds since the call started", "tokens generated")
    fig.update_layout(showlegend=True, height=CHART_HEIGHT + LEGEND_ROW * legend_lines(fig))
    return fig if fig.data else _waiting(fig, "Waiting for the first repetition")


def _error_bars(speedup: dict) -> tuple[float, float]:
    """(low, high) of a speedup's interval, collapsing to the median when there is none."""
    median = speedup["median"]
    low = speedup["ci_low"] if speedup.get("ci_low") is not None else median
    high = speedup["ci_high"] if speedup.get("ci_high") is not None else median
    return low, high


def _interval_text(speedup: dict) -> str:
    """The interval for a hover: with its true level, or 'range of n runs', or why there is none."""
    return interval_cell(speedup) or "one run, so no interval"


def _slower_hover(median: float) -> str:
    """Below 1×, a hover's second line: 'slower: takes 4.23× as long as plain'; '' otherwise."""
    said = time_hover(median)
    return f"<br>slower: {said}" if said else ""


def _key(fig: go.Figure, *entries: str) -> None:
    """A marker key above the plot, an entry a line, for charts whose traces are arms rather than kinds of mark.

    One entry a line, at the plot's right edge: on one line it reached past a phone-wide chart's left edge
    ("◆ measured" was cut); the top margin grows by a line for each entry after the first."""
    fig.add_annotation(text="<br>".join(entries), showarrow=False, x=1.0, y=1.02, xref="paper", yref="paper",
                       xanchor="right", yanchor="bottom", align="left", font={"color": INK, "size": 12})
    fig.update_layout(margin={"t": fig.layout.margin.t + 16 * (len(entries) - 1)},
                      height=(fig.layout.height or CHART_HEIGHT) + 16 * (len(entries) - 1))


def _extent(trace) -> list[float]:
    """The x values a speedup marker covers: the point and the ends of its error bar."""
    x = float(trace.x[0])
    bars = trace.error_x
    if bars is not None and bars.array is not None:
        return [x, x + float(bars.array[0]), x - float(bars.arrayminus[0])]
    return [x]


def _padded_range(values: list[float]) -> list[float]:
    """An axis range around every value with some air, so 1× never sits on the chart's edge."""
    low, high = min(values), max(values)
    pad = max(0.08 * (high - low), 0.05)
    return [low - pad, high + pad]


def speedup_figure(report: dict) -> go.Figure:
    """Median speedup of each assisted arm over plain, with its interval (at its stated level) and the prediction."""
    fig = go.Figure()
    predicted_any = False
    for i, arm, comp in reversed(_assisted(report)):
        s = comp["speedup"]
        if s.get("median") is None:
            continue
        low, high = _error_bars(s)
        y = _axis_label(arm["name"])
        fig.add_trace(
            go.Scatter(
                x=[s["median"]],
                y=[y],
                name=_plain(arm["name"]),
                mode="markers",
                marker={"color": arm_color(i), "size": 13, "symbol": "diamond"},
                error_x={"type": "data", "symmetric": False, "array": [high - s["median"]],
                         "arrayminus": [s["median"] - low], "color": arm_color(i), "thickness": 2, "width": 8},
                customdata=[[low, high, s.get("n", 0), _interval_text(s), _slower_hover(s["median"])]],
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>measured speedup %{x:.2f}× (plain time ÷ this arm's time)"
                    "%{customdata[4]}<br>%{customdata[3]}"
                    "<br>%{customdata[2]} paired runs<extra></extra>"
                ),
            )
        )
        predicted = comp.get("predicted_speedup")
        if predicted is not None:
            predicted_any = True
            fig.add_trace(
                go.Scatter(
                    x=[predicted],
                    y=[y],
                    name=f"{_plain(arm['name'])} (predicted)",
                    mode="markers",
                    marker={"color": "rgba(0,0,0,0)", "size": 12, "symbol": "circle",
                            "line": {"color": arm_color(i), "width": 2}},
                    customdata=[[comp.get("alpha") or 0.0, comp.get("c") or 0.0, comp.get("k") or 0.0]],
                    hovertemplate=(
                        "<b>%{fullData.name}</b><br>predicted speedup %{x:.2f}×"
                        "<br>from α %{customdata[0]:.2f} (chance a drafted token is kept),"
                        "<br>c %{customdata[1]:.2f} (time to draft one token, in target steps),"
                        "<br>k %{customdata[2]:.3g} (tokens drafted per check)"
                        "<br>by the cost model of Leviathan et al. 2023<extra></extra>"
                    ),
                )
            )
    _style(fig, "Speedup over plain (right of 1× is faster)", "plain time ÷ assisted time", "")
    if not fig.data:
        return _waiting(fig, "Waiting for the first repetition")
    fig.add_vline(x=1.0, line={"color": FAINT, "dash": "dash", "width": 1.5})
    fig.update_xaxes(ticksuffix="×", range=_padded_range([1.0] + [v for t in fig.data for v in _extent(t)]))
    if predicted_any:
        _key(fig, "◆ measured, with its interval", "○ predicted by the cost model")
    return fig


def acceptance_figure(report: dict) -> go.Figure:
    """Share of drafted tokens the target accepted at each draft position, per assisted arm."""
    fig = go.Figure()
    for i, arm, comp in _assisted(report):
        rates = comp.get("acceptance_by_position") or []
        if not rates:
            continue
        overall = comp.get("acceptance_rate")
        per_forward = comp.get("tokens_per_forward")
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(rates) + 1)),
                y=rates,
                name=_legend_name(arm["name"]),
                mode="lines+markers",
                line={"color": arm_color(i), "width": 2},
                marker={"size": 6},
                customdata=[[overall or 0.0, per_forward or 0.0]] * len(rates),
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>draft position %{x}: the target kept %{y:.0%} of the drafted"
                    " tokens<br>that reached this position"
                    "<br>overall %{customdata[0]:.0%} of drafted tokens kept, %{customdata[1]:.2f} new tokens"
                    "<br>per target forward pass (one step of the big model; plain writes 1)<extra></extra>"
                ),
            )
        )
    _style(fig, "Acceptance by draft position", "position in the draft (1 = first drafted token)", "accepted")
    rests_on(fig, [arm for _, arm, comp in _assisted(report) if comp.get("acceptance_by_position")])
    if not fig.data:
        return _waiting(fig, "No drafts yet")
    fig.update_yaxes(range=[-0.03, 1.05], tickformat=".0%")
    fig.update_xaxes(dtick=1)
    fig.update_layout(showlegend=True, height=CHART_HEIGHT + LEGEND_ROW * legend_lines(fig))
    return fig


# The setting's name on a line of its own, so the title fits a phone-wide chart (about 370 px).
SWEEP_AXIS = {
    "num_assistant_tokens": "draft length<br>(num_assistant_tokens)",
    "prompt_lookup_num_tokens": "prompt-lookup length<br>(prompt_lookup_num_tokens)",
}


def sweep_figure(report: dict) -> go.Figure:
    """Speedup at each swept setting with its interval, the predicted speedup, and the best one marked.

    Reads report['sweep'] (sweep.summarize_sweep); settings are categories, since an adaptive schedule
    sits beside the fixed lengths.
    """
    summary = report.get("sweep") or {}
    points = [p for p in summary.get("points", []) if (p.get("speedup") or {}).get("median") is not None]
    best = (summary.get("best") or {}).get("arm")
    fig = go.Figure()
    _style(fig, "Speedup by setting (above 1× is faster)", SWEEP_AXIS.get(summary.get("param"), "setting"),
           "plain time ÷ assisted time")
    if not points:
        return _waiting(fig, "Waiting for the first repetition")
    labels = [_plain(p["label"]) for p in points]
    medians = [p["speedup"]["median"] for p in points]
    bars = [_error_bars(p["speedup"]) for p in points]
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=medians,
            name="measured, with its interval",
            mode="lines+markers",
            line={"color": PALETTE[1], "width": 1.5},
            marker={"color": [PALETTE[2] if p["arm"] == best else PALETTE[1] for p in points],
                    "size": [16 if p["arm"] == best else 10 for p in points],
                    "symbol": ["star" if p["arm"] == best else "diamond" for p in points]},
            error_y={"type": "data", "symmetric": False, "array": [h - m for (_, h), m in zip(bars, medians)],
                     "arrayminus": [m - lo for (lo, _), m in zip(bars, medians)], "color": PALETTE[1],
                     "thickness": 1.5, "width": 6},
            customdata=[[lo, hi, p.get("acceptance_rate") if p.get("acceptance_rate") is not None else float("nan"),
                         _interval_text(p["speedup"])] for (lo, hi), p in zip(bars, points)],
            hovertemplate=(
                "<b>%{x}</b><br>measured speedup %{y:.2f}×"
                "<br>%{customdata[3]}"
                "<br>%{customdata[2]:.0%} of drafted tokens accepted<extra></extra>"
            ),
        )
    )
    predicted = [
        (_plain(p["label"]), p["predicted_speedup"]) for p in points if p.get("predicted_speedup") is not None
    ]
    if predicted:
        fig.add_trace(
            go.Scatter(
                x=[label for label, _ in predicted],
                y=[value for _, value in predicted],
                name="predicted by the cost model",
                mode="markers",
                marker={"color": "rgba(0,0,0,0)", "size": 11, "symbol": "circle",
                        "line": {"color": PALETTE[0], "width": 2}},
                hovertemplate="<b>%{x}</b><br>predicted speedup %{y:.2f}× (Leviathan et al. 2023)<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line={"color": FAINT, "dash": "dash", "width": 1.5})
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=labels)
    fig.update_yaxes(ticksuffix="×")
    # The axis title takes two lines: the legend sits lower, and the chart grows by a row per entry, as others do.
    fig.update_layout(showlegend=True, legend={**LEGEND, "y": -0.36}, height=CHART_HEIGHT + LEGEND_ROW * len(fig.data))
    return fig


def lead_sentence(report: dict) -> str | None:
    """The answer first, in plain words (results.report.answer_sentence: the report's `answer` says the same)."""
    return answer_sentence(report)


NOISY = "Timings were noisy"  # how the note on wide spreads starts (the page folds it with the warnings)


def headline(report: dict) -> str:
    """The result in words, one line per assisted arm then notes; slower results are called slower."""
    return "\n".join(headline_lines(report))


def headline_lines(report: dict) -> list[str]:
    """The sentences of `headline`, for callers that lay them out themselves; each arm's starts with its name."""
    arms = report.get("arms", [])
    sampling = bool(report.get("request", {}).get("do_sample"))
    plain_runs = len(arms[0]["latencies_s"]) if arms else 0
    if not plain_runs:
        stopped = report.get("status") == "stopped"
        return ["Stopped before any repetition finished." if stopped else "Nothing measured yet."]
    sentences = []
    for _i, arm, comp in _assisted(report):
        error = arm.get("error")
        if error and not arm.get("latencies_s"):
            sentences.append(f"{arm['name']} failed: {error}")
            continue
        if comp["speedup"].get("median") is None:
            continue
        if comp.get("sequence") and provisional(report):
            sentence = provisional_sentence(comp)
        else:
            sentence = speedup_sentence(comp, sampling, busy=is_busy(report))
        sentences.append(f"{sentence} It then failed: {error}" if error else sentence)
    if not sentences:
        sentences.append("No assisted arm finished a run, so there is nothing to compare.")
    counted, planned = report.get("counted_repetitions", plain_runs), report.get("planned_repetitions")
    if provisional(report) and (report.get("stopping") or {}).get("rule") == "clear":
        sentences.append(f"So far: {counted_words(counted, 'repetition')}; the runs stop once the answer is clear "
                         f"(at most {planned}).")
    elif report.get("status") == "running":
        sentences.append(f"So far: {counted} of {counted_words(planned, 'repetition')}.")
    elif report.get("status") == "stopped":
        sentences.append(f"Stopped after {counted} of {counted_words(planned, 'repetition')}.")
    if first_answer_words(report):
        sentences.append(first_answer_words(report))
    sentences += [w["message"] for w in report.get("warnings") or []]
    noisy = [a["name"] for a in arms if a.get("latencies_s") and spread_is_wide(a["latency_summary"])]
    if noisy:
        sentences.append(
            f"{NOISY} for {', '.join(noisy)} (spread over 10% of the median); more repetitions would help."
        )
    return sentences


def suite_figure(report: dict) -> go.Figure:
    """A suite: each assisted arm's speedup per category (geometric mean over prompts, with its interval),
    and overall. Categories run down the chart; arms are offset within each row by colour."""
    suite = report.get("suite") or {}
    rows = [*suite.get("categories", []), {**suite.get("overall", {}), "category": "overall"}]
    names = report.get("arms", [])
    fig = go.Figure()
    labels = [f"{r['category']} ({r.get('prompts', 0)})" for r in rows]
    for index, name in enumerate(names):
        xs, ys, lows, highs, custom = [], [], [], [], []
        for row, label in zip(rows, labels):
            arm = next((a for a in row.get("arms", []) if a["arm"] == name), None)
            s = (arm or {}).get("speedup") or {}
            if s.get("geomean") is None:
                continue
            low = s["ci_low"] if s.get("ci_low") is not None else s["geomean"]
            high = s["ci_high"] if s.get("ci_high") is not None else s["geomean"]
            xs.append(s["geomean"])
            ys.append(label)
            lows.append(s["geomean"] - low)
            highs.append(high - s["geomean"])
            custom.append([low, high, s.get("n", 0), level_words(s.get("level") or 0.95),
                           arm.get("acceptance_rate") if arm.get("acceptance_rate") is not None else float("nan")])
        if not xs:
            continue
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, name=_legend_name(name), mode="markers", showlegend=True,
                marker={"color": arm_color(index + 1), "size": 11, "symbol": "diamond"},
                error_x={"type": "data", "symmetric": False, "array": highs, "arrayminus": lows,
                         "color": arm_color(index + 1), "thickness": 2, "width": 6},
                customdata=custom,
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>%{y}: %{x:.2f}× (geometric mean over %{customdata[2]} prompts)"
                    "<br>%{customdata[3]} interval %{customdata[0]:.2f}–%{customdata[1]:.2f}×"
                    "<br>acceptance %{customdata[4]:.0%}<extra></extra>"
                ),
            )
        )
    _style(fig, "Speedup per category (right of 1× is faster)", "plain time ÷ assisted time", "")
    fig.update_layout(
        height=max(CHART_HEIGHT, 70 + 34 * len(rows) * max(1, len(names)) ** 0.5),
        showlegend=True, legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
        scattermode="group",
    )
    if not fig.data:
        return _waiting(fig, "Waiting for the first prompt")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(labels)))
    fig.add_vline(x=1.0, line={"color": FAINT, "dash": "dash", "width": 1.5})
    # A log axis: a speedup of 2× and a slowdown to 0.5× lie equally far from 1×.
    ticks = [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks])
    return fig
