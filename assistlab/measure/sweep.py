"""Speedup against draft length: one comparison whose arms are variants of one assisted arm.

All variants run in one request, so they share one plain baseline and are interleaved with it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Sequence

from ..config import LIMITS, SCHEDULES, BenchRequest
from ..engines.transformers import paths
from ..engines.transformers.arms import ArmSpec
from ..engines.transformers.models import ModelStore
from ..engines.transformers.paths import LOSSY_MARK, NON_ADAPTIVE_STRATEGIES
from ..errors import InputError
from ..results import explain, stats
from ..results.report import Report, comparisons_words, interval_phrase, level_words, slower_phrase, time_ratio
from .runner import Clock, Event, run_benchmark

PARAMS = ("num_assistant_tokens", "prompt_lookup_num_tokens", "assistant_ensemble_weight")
ENSEMBLE = "assistant_ensemble_weight"  # swept against the same arm verifying losslessly (see paths/ensemble.py)
DEFAULT_VALUES = (1, 2, 3, 5, 8)
# AssistLab resets the drafter's config before every run, so 'heuristic' and 'heuristic_transient' measure the
# same thing here; one adaptive point is enough by default.
DEFAULT_SCHEDULES = ("heuristic",)
# Why a sweep holds no vLLM arm: its values run interleaved against one plain baseline, so every vLLM value
# would be a server of its own, all loaded at once (vLLM fixes num_speculative_tokens when a server starts).
VLLM_REFUSAL = (
    "A sweep varies a transformers arm's setting, so leave the vLLM arms out of it (choose transformers in "
    "Engines, or --engines transformers): a sweep of num_speculative_tokens would need one vLLM server per value, "
    "all loaded side by side (each its own copy of the target in memory, about a minute to start on a CPU), "
    "because vLLM fixes the value when a server starts; time each value as a comparison of its own instead, or "
    "start one server per value yourself and time them together as named servers (plain=URL, k3=URL, k5=URL)."
)
# Strategies whose draft length num_assistant_tokens sets.
DRAFTING_STRATEGIES = paths.LENGTH_STRATEGIES


def _base_arm(request: BenchRequest, param: str) -> ArmSpec:
    """The arm the sweep varies: the first that `param` applies to (a default prompt-lookup arm if none)."""
    if param == "prompt_lookup_num_tokens":
        return next((a for a in request.arms if a.strategy == "prompt-lookup"), ArmSpec(strategy="prompt-lookup"))
    if param == ENSEMBLE:
        base = next((a for a in request.arms if a.strategy != "prompt-lookup"), None)
        if base is None:
            raise InputError(
                "An assistant_ensemble_weight sweep needs an arm whose drafts carry probabilities (an assistant "
                "model, early exit, mtp or dflash); prompt lookup has none."
            )
        return base
    base = next((a for a in request.arms if a.strategy in DRAFTING_STRATEGIES), None)
    if base is None:
        raise InputError(
            "A num_assistant_tokens sweep needs an arm with an assistant model or early exit (MTP and DFlash "
            "arms draft a length fixed by their checkpoint); add one, or sweep prompt_lookup_num_tokens instead."
        )
    return base


def sweep_arms(
    request: BenchRequest,
    param: str = "num_assistant_tokens",
    values: Sequence[int] = DEFAULT_VALUES,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
) -> tuple[ArmSpec, ...]:
    """Variants of the request's first matching arm: one per fixed `value`, then one per adaptive schedule.

    Adaptive schedules start from the base arm's num_assistant_tokens (transformers' default when it has
    none) and apply only to that parameter; prompt lookup has none, so they are dropped for it. Every other
    knob the base arm leaves unset keeps transformers' default, the confidence threshold among them. Every run here starts afresh (configure_drafter
    resets the drafter's config), so 'heuristic' and 'heuristic_transient' should measure alike.
    """
    if param not in PARAMS:
        raise InputError(f"The swept setting must be one of {', '.join(PARAMS)}; got {param!r}.")
    base = _base_arm(request, param)
    if param == ENSEMBLE:
        return _ensemble_arms(base, values)
    adaptive = list(dict.fromkeys(schedules)) if param == "num_assistant_tokens" else []
    if base.strategy in NON_ADAPTIVE_STRATEGIES:
        adaptive = []  # this path drafts a fixed number of tokens every step; a schedule would change nothing
    for schedule in adaptive:
        if schedule not in SCHEDULES or schedule == "constant":
            raise InputError(f"Sweep schedules must be among heuristic, heuristic_transient; got {schedule!r}.")
    fixed = [dataclasses.replace(base, **{param: v, "num_assistant_tokens_schedule": "constant"}) for v in values]
    # ArmSpec validated and coerced each value; drop repeats, keep ascending order.
    fixed = sorted({getattr(a, param): a for a in fixed}.values(), key=lambda a: getattr(a, param))
    if adaptive and base.num_assistant_tokens is None:
        # An adaptive schedule starts from a draft length; a base arm left at transformers' defaults starts
        # from transformers' own, named so every point says what it started from.
        start = paths.transformers_defaults()["num_assistant_tokens"]
        base = dataclasses.replace(base, num_assistant_tokens=start)
    arms = [*fixed, *(dataclasses.replace(base, num_assistant_tokens_schedule=s) for s in adaptive)]
    if not arms:
        raise InputError("Give at least one draft length (or schedule) to sweep.")
    if len(arms) > LIMITS["arms"]:
        raise InputError(
            f"A sweep compares at most {LIMITS['arms']} settings at once; {len(fixed)} lengths and "
            f"{len(adaptive)} schedules make {len(arms)}. Drop some."
        )
    return tuple(arms)


def _ensemble_arms(base: ArmSpec, weights: Sequence[float]) -> tuple[ArmSpec, ...]:
    """The arm verifying losslessly, then one lossy variant per weight, ascending: the trade in one chart."""
    lossy = [dataclasses.replace(base, assistant_ensemble_weight=w) for w in weights]
    lossy = sorted({a.assistant_ensemble_weight: a for a in lossy}.values(), key=lambda a: a.assistant_ensemble_weight)
    arms = (dataclasses.replace(base, assistant_ensemble_weight=None), *lossy)
    if len(arms) > LIMITS["arms"]:
        raise InputError(
            f"A sweep compares at most {LIMITS['arms']} settings at once; {len(lossy)} weights and the lossless "
            f"arm make {len(arms)}. Drop some."
        )
    return arms


def sweep_request(
    request: BenchRequest,
    param: str = "num_assistant_tokens",
    values: Sequence[int] = DEFAULT_VALUES,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
) -> BenchRequest:
    """The request with its arms replaced by the sweep's variants; everything else as asked."""
    return dataclasses.replace(request, arms=sweep_arms(request, param, values, schedules))


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
    each other setting run by run (stats.compare_with_best: the ratio rival/best per repetition, Bonferroni
    over the rivals), every interval lies above 1× and the comparisons together are at least 90% sure.
    """
    pairs = [(_point(entry, arm, param), arm.get("latencies_s") or []) for entry, arm in explain.paired_arms(report)]
    points = [p for p, _ in pairs]
    measured = [(p, lat) for p, lat in pairs if _median(p) is not None]
    summary = {"param": param, "points": points, "best": None, "best_text": "No setting finished a repetition."}
    if not measured:
        return summary
    best, best_latencies = max(measured, key=lambda pair: _median(pair[0]))
    rivals = [(p, lat) for p, lat in measured if p is not best]
    s = best["speedup"]
    versus = stats.compare_with_best(best_latencies, [lat for _, lat in rivals])
    if s["median"] >= 1.0:
        text = f"Best: {best['label']} at {s['median']:.2f}× over plain ({interval_phrase(s)})"
    else:  # a slowdown is never called the best speedup
        took = slower_phrase(s) if stats.has_interval(s) else interval_phrase(s)
        text = f"No setting beat plain. Least slow: {best['label']}, which took {time_ratio(s['median'])} as long as plain ({took})"
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
    store: ModelStore,
    param: str = "num_assistant_tokens",
    values: Sequence[int] = DEFAULT_VALUES,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
    clock: Clock = time.perf_counter,
    should_stop: Callable[[], bool] = lambda: False,
) -> Generator[Event, None, dict]:
    """Run the sweep as one comparison, yielding the runner's events; returns `summarize_sweep` of the end.

    The summary is also set on the final report as `report.sweep`, for the report to carry.
    """
    if any(a.engine != "transformers" for a in request.arms):
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


def run_sweep(request: BenchRequest, store: ModelStore, **kwargs) -> tuple[Report, dict]:
    """Run a sweep to the end; the report and its summary."""
    events = sweep(request, store, **kwargs)
    final = None
    while True:
        try:
            final = next(events)
        except StopIteration as stop:
            return final.report, stop.value
