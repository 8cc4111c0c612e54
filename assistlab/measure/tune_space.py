"""What a search times: the candidates each engine declares (engines/search_space.py) for the target's assistants,
narrowed as the person asked, each server engine's plain arm in front of its own, as one BenchRequest."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import BenchRequest, CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S
from ..engines import catalog, registry
from ..engines.search_space import search_space


def default_assistants(target: str) -> list[str]:
    """The assistants of the presets made for this target, then the models this machine has that fit it as
    assistants (registry.CACHED_ASSISTANTS: causal LMs at most a quarter of its size, at most two)."""
    presets = [p.assistant for p in catalog.PRESETS if p.target == target and p.assistant]
    return presets + registry.CACHED_ASSISTANTS(target, exclude=presets)


def candidate_arms(engines: Sequence[str], assistants: Sequence[str], candidates: str | None = None,
                   families: Sequence[str] | None = None) -> tuple:
    """The candidates the engines declare for these assistants, narrowed by `candidates` (engines/search_space.py's
    syntax) and `families` (the page's ticks), with each server engine's plain arm in front of its candidates."""
    declared = [registry.SETTINGS[e] for e in engines if e in registry.SETTINGS]
    found = search_space(declared, list(assistants), candidates, families=families)
    arms: list = []
    for engine in declared:
        mine = [a for a in found if a.engine == engine.engine]
        plain = engine.plain_arm() if mine else None
        if plain is not None:
            arms.append(plain)
        arms += mine
    return tuple(arms)


def tune_request(target: str, *, assistants: Sequence[str] | None = None, engines: Sequence[str] | None = None,
                 candidates: str | None = None, repeats: int | None = None, max_time_s: float | None = None,
                 families: Sequence[str] | None = None, **bench) -> BenchRequest:
    """The comparison a search times: plain and every candidate, at most `repeats` repetitions (default
    CLEAR_MAX_REPEATS) within `max_time_s` of timed runs (default CLEAR_MAX_TIME_S). `assistants` None takes
    the presets' for this target; `engines` None the host's alone; `bench` takes BenchRequest's other fields
    (prompt, max_new_tokens, ...), the prompt by default the target's preset's, as the page and the command line
    ask it; `families` None searches the families the engines search by default."""
    if bench.get("prompt") is None:
        bench["prompt"] = catalog.default_prompt(target)
    helpers = default_assistants(target) if assistants is None else [a for a in assistants if a and a.strip()]
    engines = (registry.HOST.name,) if engines is None else tuple(engines)
    arms = candidate_arms(engines, helpers, candidates, families)
    return BenchRequest(target=target, arms=arms, engines=tuple(dict.fromkeys([*engines, *(a.engine for a in arms)])),
                        repeats=CLEAR_MAX_REPEATS if repeats is None else repeats,
                        max_time_s=CLEAR_MAX_TIME_S if max_time_s is None else max_time_s, stop_rule="clear", **bench)
