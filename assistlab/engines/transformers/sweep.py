"""The variants of one transformers arm a sweep times side by side: one per draft length, schedule or weight."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...config import LIMITS, SCHEDULES, BenchRequest
from ...errors import InputError
from . import paths
from .arms import ArmSpec
from .paths import NON_ADAPTIVE_STRATEGIES

ENGINE = "transformers"  # the engine whose arms a sweep varies
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
