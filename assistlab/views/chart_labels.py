"""Arm names as the charts show them: broken onto lines so a phone-wide chart (about 370 px) keeps them whole."""

from __future__ import annotations

import html

# A legend entry longer than this is broken before its settings: plotly wraps a legend between entries, never
# inside one, so on a phone "universal: bundled:smollm2-135m-instruct (transformers defaults)" was cut at
# "(transformers de".
LEGEND_CHARS = 36


def plain(text: str) -> str:
    """Text Plotly shows as it is (its markup in a model's name entity-escaped)."""
    return html.escape(str(text), quote=False)


def axis_label(name: str) -> str:
    """Long arm names broken after the strategy and before their settings ("(transformers defaults)"), so
    horizontal charts keep room for the data and their axis title on a narrow screen."""
    name = plain(name)
    if len(name) <= 20:
        return name
    head, sep, tail = name.partition(": ")
    lines = [f"{head}:"] if sep else []
    core, paren, settings = (tail if sep else head).partition(" (")
    lines.append(core)
    if paren:
        lines.append(f"({settings}")
    return "<br>".join(lines)


def legend_name(name: str) -> str:
    """An arm's name for a legend: on two lines, before its settings in parentheses, when it is long."""
    name = plain(name)
    head, paren, settings = name.partition(" (")
    if len(name) <= LEGEND_CHARS or not paren:
        return name
    return f"{head}<br>({settings}"


def legend_lines(fig) -> int:
    """The lines a figure's legend takes, stacked: one per line of every entry shown."""
    return sum(1 + str(trace.name or "").count("<br>") for trace in fig.data if trace.showlegend is not False)
