"""Speedup against draft length: one comparison whose arms are variants of one assisted arm.

All variants run in one request, so they share one plain baseline and are interleaved with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence

from ..config import BenchRequest
from ..engines import registry
from ..engines.base import LOSSY_MARK
from ..errors import InputError
from ..results import ranking, stats
from ..results.report import Report, comparisons_words, interval_phrase, level_words, slower_phrase
from .runner import Clock, Event, run_benchmark, to_the_end

# The variants are the sweeping engine's to make (engines/registry.py names it); named here as the callers know them.
PARAMS, ENSEMBLE = registry.SWEEPS.PARAMS, registry.SWEEPS.ENSEMBLE
DEFAULT_VALUES, DEFAULT_SCHEDULES = registry.SWEEPS.DEFAULT_VALUES, registry.SWEEPS.DEFAULT_SCHEDULES
VLLM_REFUSAL = registry.SWEEPS.VLLM_REFUSAL
sweep_arms, sweep_request = registry.SWEEPS.sweep_arms, registry.SWEEPS.sweep_request


def _point(entry: dict, arm: dict, param: str) -> dict:
    spec = arm.get("spec") or {}
    schedule = spec.get("num_assistant_tokens_schedule", "constant") if param == "num_assistant_tokens" else "constant"
    value = spec.get(param)
    label = f"k={value}" if schedule == "constant" else f"{schedule} (from k={value})"  # k as in ArmSpec.label
    if param == ENSEMBLE:
        label = "lossless" if value is None else f"w={value:g}"
    if arm.get("lossless") is False:
        label += f" {LOSSY_MARK}"
    return {
        "arm": entry["arm"],
        "label": label,
        "value": value,
        "schedule": schedule,
        "speedup": entry.get("speedup"),
        "acceptance_rate": entry.get("acceptance_rate"),
        "tokens_per_forward": entry.get("tokens_per_forward"),
        "alpha": entry.get("alpha"),
        "c": entry.get("c"),
        "predicted_speedup": entry.get("predicted_speedup"),
        "error": arm.get("error"),
        "lossless": arm.get("lossless"),
    }


def _median(point: dict) -> float | None:
    return (point.get("speedup") or {}).get("median")


def summarize_sweep(report: dict, param: str = "num_assistant_tokens") -> dict:
    """Speedup per setting from a sweep's report dict, and the best setting named in one sentence.

    The best is the highest median speedup over plain. It is called clearly ahead only when, compared with
    each other setting run by run (ranking.versus_best: the ratio rival/best per repetition, Bonferroni over the
    rivals, time-uniform when the count followed the data), every interval lies above 1× and the comparisons
    together are at least 90% sure.
    """
    pairs = [(_point(entry, arm, param), arm.get("latencies_s") or []) for entry, arm in ranking.paired_arms(report)]
    points = [p for p, _ in pairs]
    measured = [(p, lat) for p, lat in pairs if _median(p) is not None]
    summary = {"param": param, "points": points, "best": None, "best_text": "No setting finished a repetition."}
    if not measured:
        return summary
    best, best_latencies = max(measured, key=lambda pair: _median(pair[0]))
    rivals = [(p, lat) for p, lat in measured if p is not best]
    s = best["speedup"]
    versus = ranking.versus_best(report, best_latencies, [lat for _, lat in rivals])
    if s["median"] >= 1.0:
        text = f"Best: {best['label']} at {s['median']:.2f}× over plain ({interval_phrase(s)})"
    else:  # a slowdown is never called the best speedup
        took = slower_phrase(s) if stats.has_interval(s) else interval_phrase(s)
        text = f"No setting beat plain. Least slow: {best['label']}, at {s['median']:.2f}× the speed of plain ({took})"
    family = versus["family_level"]
    if not rivals:
        text += "."
    elif versus["clear"]:
        text += (f", clearly ahead of every other setting ({level_words(family)} sure of "
                 f"{comparisons_words(len(rivals))}).")
    elif family is None or family < stats.MIN_LEVEL:
        runs = min((c["n"] for c in versus["comparisons"]), default=0)
        text += (f"; {'one run' if runs <= 1 else f'{runs} runs'} of each setting {'is' if runs <= 1 else 'are'} "
                 "too few to tell the settings apart.")
    else:
        close = [p["label"] for (p, _), c in zip(rivals, versus["comparisons"]) if not c["ci_low"] > 1.0]
        text += (f"; it is not clearly faster than {', '.join(close)} ({level_words(family)} sure of "
                 f"{comparisons_words(len(rivals))}).")
    summary["best"] = {"arm": best["arm"], "label": best["label"], "value": best["value"],
                       "schedule": best["schedule"], "speedup": s, "clear": versus["clear"],
                       "family_level": family,
                       "versus": [{"arm": p["arm"], "label": p["label"], "speedup": c}
                                  for (p, _), c in zip(rivals, versus["comparisons"])]}
    summary["best_text"] = text
    return summary


def sweep(
    request: BenchRequest,
    store,
    param: str = "num_assistant_tokens",
    values: Sequence[int] = DEFAULT_VALUES,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Generator[Event, None, dict]:
    """Run the sweep as one comparison, yielding the runner's events; returns `summarize_sweep` of the end.

    The summary is also set on the final report as `report.sweep`, for the report to carry.
    """
    if any(a.engine != registry.SWEEPS.ENGINE for a in request.arms):
        raise InputError(VLLM_REFUSAL)
    final = None
    for event in run_benchmark(sweep_request(request, param, values, schedules), store, clock, should_stop):
        if event.kind == "done":
            final = event
            break
        yield event
    summary = summarize_sweep(final.report.to_dict(), param)
    final.report.sweep = summary
    yield final
    return summary


def run_sweep(request: BenchRequest, store, **kwargs) -> tuple[Report, dict]:
    """Run a sweep to the end; the report and its summary."""
    return to_the_end(sweep(request, store, **kwargs))
