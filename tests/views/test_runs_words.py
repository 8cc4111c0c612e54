"""The latency and acceptance charts say how many runs they rest on (a spread or a rate from few runs is itself
uncertain)."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from assistlab.views import charts

pytestmark = pytest.mark.fast


def _words(*counts) -> str:
    fig = go.Figure()
    charts.rests_on(fig, [{"latencies_s": [1.0] * n} for n in counts])
    return fig.layout.title.subtitle.text


def test_the_words_count_what_each_arm_has():
    assert _words(7, 7) == "over 7 runs per arm"
    assert _words(1) == "over 1 run"
    assert _words(5, 7) == "over 5–7 runs"
    assert _words(0) is None


def test_the_latency_and_acceptance_charts_carry_it_under_their_titles():
    arms = [{"name": "plain", "strategy": "plain", "latencies_s": [1.0, 1.1, 0.9]},
            {"name": "prompt-lookup", "strategy": "prompt-lookup", "latencies_s": [0.8, 0.7, 0.9]}]
    report = {"arms": arms, "comparison": [{"arm": "prompt-lookup", "acceptance_by_position": [0.5, 0.25]}]}
    assert charts.latency_figure(report).layout.title.subtitle.text == "over 3 runs per arm"
    assert charts.acceptance_figure(report).layout.title.subtitle.text == "over 3 runs"
