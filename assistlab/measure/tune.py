"""Which setting to deploy: a search over each engine's declared settings that drops the candidates clearly
behind, run by the runner (warm-up, rotated rounds, busy watch, progress, Stop) with a stopping hook.

The package's interface, which the command line (`python -m assistlab tune`), the page and the API call:
  - `tune_request(target, ...)`: the BenchRequest whose arms are the candidates (engines/settings.py's space);
  - `tune(request, store, ...)`: the runner's events, the last one 'done' with `report.tune` set (its summary,
    docs/tune.md); `run_tune(...)`: the same to the end, (report, summary).
After each repetition at a planned look the hook decides that look with results/tune.search, the candidates
already out passed in: those that leave are retired (`info.left`, and the rounds skip them); when the search ends with budget left, the winner and its
nearest rival (back in if it had left) run on until the rule that assumes nothing confirms the winner or
contradicts it (`confirmed`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Sequence

import numpy as np

from ..config import ArmRequest, BenchRequest, CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S
from ..engines import catalog, registry
from ..engines.settings import search_space
from ..errors import InputError
from ..results import tune as elimination
from ..results.report import Report
from . import stopping as stop_rules
from . import tune_schedule
from .runner import Clock, Event, run_benchmark, to_the_end

SEARCH, CONFIRM = "search", "confirm"


def default_assistants(target: str) -> list[str]:
    """The assistants of the presets made for this target, then the models this machine has that fit it as
    assistants (registry.CACHED_ASSISTANTS: causal LMs at most a quarter of its size, at most two)."""
    presets = [p.assistant for p in catalog.PRESETS if p.target == target and p.assistant]
    return presets + registry.CACHED_ASSISTANTS(target, exclude=presets)


def candidate_arms(engines: Sequence[str], assistants: Sequence[str], candidates: str | None = None,
                   families: Sequence[str] | None = None) -> tuple:
    """The candidates the engines declare for these assistants, narrowed by `candidates` (engines/settings.py's
    syntax) and `families` (the page's ticks), with each server engine's plain arm in front of its candidates."""
    declared = [registry.SETTINGS[e] for e in engines if e in registry.SETTINGS]
    found = search_space(declared, list(assistants), candidates, families=families)
    arms: list = []
    for engine in declared:
        mine = [a for a in found if a.engine == engine.engine]
        if mine and engine.plain_arm is not None:
            arms.append(engine.plain_arm())
        arms += mine
    return tuple(arms)


def tune_request(target: str, *, assistants: Sequence[str] | None = None, engines: Sequence[str] | None = None,
                 candidates: str | None = None, repeats: int | None = None, max_time_s: float | None = None,
                 families: Sequence[str] | None = None, **bench) -> BenchRequest:
    """The comparison a search times: plain and every candidate, at most `repeats` repetitions (default
    CLEAR_MAX_REPEATS) within `max_time_s` of timed runs (default CLEAR_MAX_TIME_S). `assistants` None takes
    the presets' for this target; `engines` None the host's alone; `bench` takes BenchRequest's other fields
    (prompt, max_new_tokens, ...); `families` None searches the families the engines search by default."""
    helpers = default_assistants(target) if assistants is None else [a for a in assistants if a and a.strip()]
    engines = (registry.HOST.name,) if engines is None else tuple(engines)
    arms = candidate_arms(engines, helpers, candidates, families)
    return BenchRequest(target=target, arms=arms, engines=tuple(dict.fromkeys([*engines, *(a.engine for a in arms)])),
                        repeats=CLEAR_MAX_REPEATS if repeats is None else repeats,
                        max_time_s=CLEAR_MAX_TIME_S if max_time_s is None else max_time_s, stop_rule="clear", **bench)


@dataclasses.dataclass
class _State:
    """The search as the hook sees it: the candidates (report arm indices), their requests, their baselines."""

    request: BenchRequest
    candidates: list[int]
    specs: list[ArmRequest]
    baselines: list[int]
    simplicity: list[float]
    phase: str = SEARCH
    result: elimination.Search | None = None
    outcome: str = elimination.OPEN
    winner: int | None = None
    rival: int | None = None
    confirmed: bool | None = None
    levels: elimination.Levels = elimination.Levels(1)
    left_at: dict = dataclasses.field(default_factory=dict)  # candidate position -> (repetition, why words)


def _state(request: BenchRequest, report: Report) -> _State:
    """Match the report's assisted arms to the request's candidates (each engine keeps their order)."""
    candidates, specs, baselines = [], [], []
    for engine in request.engines:
        wanted = [a for a in request.arms if a.engine == engine and a.assisted]
        indices = [i for i, info in enumerate(report.arms) if info.engine == engine and info.assisted]
        plain = next((i for i, info in enumerate(report.arms) if info.engine == engine and not info.assisted), 0)
        for spec, index in zip(wanted, indices):
            candidates.append(index)
            specs.append(spec)
            baselines.append(plain)
    keys = [registry.SETTINGS[s.engine].simplicity(s) for s in specs]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    rank = [float(order.index(i)) for i in range(len(keys))]
    levels = elimination.Levels(len(candidates), elimination.planned_looks(request.repeats))
    return _State(request, candidates, specs, baselines, rank, levels=levels)


def _logs(report: Report, count: int) -> np.ndarray:
    """Log latencies of every arm by repetition, (1, arms, count); NaN where an arm did not run."""
    out = np.full((1, len(report.arms), count), np.nan)
    for run in report.runs:
        if run.repetition < count and run.latency_s > 0:
            out[0, run.arm, run.repetition] = np.log(run.latency_s)
    return out


def _latencies(report: Report, index: int) -> dict[int, float]:
    return {r.repetition: r.latency_s for r in report.runs_of(index)}


def _paired(report: Report, a: int, b: int) -> tuple[list[float], list[float]]:
    """Latencies of arms a and b over the repetitions both ran."""
    la, lb = _latencies(report, a), _latencies(report, b)
    reps = sorted(set(la) & set(lb))
    return [la[r] for r in reps], [lb[r] for r in reps]


def _nearest_rival(state: _State, report: Report) -> int | None:
    """The candidate (position) closest to the winner: the lowest ranking statistic (results/tune.ranking, the
    median log latency ratio over plain, as the search ranks) but the winner's."""
    best, rival = np.inf, None
    for pos, index in enumerate(state.candidates):
        if pos == state.winner or report.arms[index].error:
            continue
        base, mine = _paired(report, state.baselines[pos], index)
        if mine:
            value = float(elimination.ranking(np.log(np.divide(mine, base))))
            if value < best:
                best, rival = value, pos
    return rival


def _retire(state: _State, report: Report, result: elimination.Search) -> None:
    """Mark the candidates that left (their sentence in `info.left`) so the rounds skip them."""
    for pos, index in enumerate(state.candidates):
        info = report.arms[index]
        if pos in state.left_at or info.error:
            continue
        code, at = int(result.why[0, pos]), int(result.left_at[0, pos])
        if code == elimination.SLOWER_THAN_PLAIN:
            words = f"clearly slower than plain after {at} repetitions"
        elif code == elimination.SLOWER_THAN_LEADER:
            leader = report.arms[state.candidates[int(result.beaten_by[0, pos])]].name
            words = f"clearly slower than {leader}, the leader, after {at} repetitions"
        else:
            continue
        state.left_at[pos] = (at, words)
        info.left = words


def _hook(state: _State) -> Callable:
    """The runner's stopping hook: the budget from the stopping rule, the rest from the search."""

    def decide(request: BenchRequest, report: Report, count: int, elapsed: float) -> stop_rules.Decision:
        # The budget is kept: a search stops before a repetition that would likely overrun it. The bench rule's
        # extension to the fewest repetitions its own answer needs is not the search's (its looks are its own),
        # and ran a saved search's timed runs to 716 s of a 600 s budget.
        budget = stop_rules.after_repetition(request, report, count, elapsed, extend_to_floor=False)
        stop = report.stopping
        if stop.get("ended_by") == "clear":  # a tuner's "clear" is the search's, not every arm against plain
            stop.update(ended_by=None, reached=False)  # and the budgets that rule returned before checking
            if count >= request.repeats:
                stop["ended_by"] = "repetitions"
            elif request.max_time_s is not None and elapsed + elapsed / count > request.max_time_s:
                stop["ended_by"] = "time budget"
            budget = stop_rules.Decision(stop["ended_by"] is not None)
        # One look at a time, from the state kept: a candidate that failed or left is out, whatever came before.
        out = np.array([[bool(report.arms[i].error or report.arms[i].left) for i in state.candidates]])
        if state.phase == SEARCH:
            looks = state.levels.looks
            result = elimination.search(_logs(report, count), state.baselines, state.candidates, request.band,
                                        state.simplicity, out, looks=looks,
                                        decide_at=[count] if count in looks else [])
            state.result = result
            _retire(state, report, result)
            state.outcome = str(result.ended[0])
            state.winner = None if result.pick[0] < 0 else int(result.pick[0])
            if state.outcome != elimination.OPEN:
                stop["ended_by"], stop["reached"] = "clear", True
                state.rival = _nearest_rival(state, report) if state.winner is not None else None
                if state.rival is None or budget.stop:
                    return stop_rules.Decision(True)
                state.confirmed = _confirm(state, report)
                if state.confirmed is not None:
                    return stop_rules.Decision(True)
                state.phase = CONFIRM
                for pos, index in enumerate(state.candidates):  # only the winner and its rival run on
                    if pos == state.rival:
                        report.arms[index].left = None
                    elif pos != state.winner and not report.arms[index].left:
                        report.arms[index].left = "not needed to confirm the winner"
                stop["ended_by"], stop["reached"] = None, False
        elif state.phase == CONFIRM:
            state.confirmed = _confirm(state, report)
            if state.confirmed is not None:
                stop["ended_by"], stop["reached"] = "clear", True
                return stop_rules.Decision(True)
        if budget.stop:
            return budget
        return stop_rules.Decision(False, _waiting(state, report))

    return decide


def _load_every_length(state: _State, report: Report) -> None:
    """Before the load phase: every draft length a schedule could use is timed under load, including those that
    left the single-request search (each level may have its own best, measure/tune_schedule.py)."""
    for index, spec in zip(state.candidates, state.specs):
        if registry.SCHEDULES.schedule_family(spec) is not None and not report.arms[index].error:
            report.arms[index].left = None


def _confirm(state: _State, report: Report) -> bool | None:
    rival, winner = _paired(report, state.candidates[state.rival], state.candidates[state.winner])
    return elimination.confirm(winner, rival, state.outcome, state.request.band, state.levels)


def _waiting(state: _State, report: Report) -> str:
    """The progress line's words: the candidates still in, and in the confirmation which two run on."""
    if state.phase == CONFIRM:
        return (f"confirming {report.arms[state.candidates[state.winner]].name} against "
                f"{report.arms[state.candidates[state.rival]].name}, assuming nothing")
    still = [report.arms[i].name for i in state.candidates if not report.arms[i].left and not report.arms[i].error]
    return f"still in: {', '.join(still)}" if still else ""


def tune(request: BenchRequest, store, clock: Clock = time.perf_counter,
         should_stop: Callable[[], bool] = lambda: False) -> Generator[Event, None, dict]:
    """Run the search, yielding the runner's events; the 'done' event's report carries `tune` (its summary),
    which is also returned. `request` comes from `tune_request`."""
    from .tune_summary import summarize

    if not any(a.assisted for a in request.arms):
        raise InputError("There is nothing to search: no candidate setting; name one with --candidates.")
    holder: dict = {}

    def decide(req: BenchRequest, report: Report, count: int, elapsed: float) -> stop_rules.Decision:
        if "state" not in holder:
            holder["state"] = _state(req, report)
        decision = _hook(holder["state"])(req, report, count, elapsed)
        if decision.stop and req.concurrency:
            _load_every_length(holder["state"], report)
        return decision

    final = None
    for event in run_benchmark(request, store, clock, should_stop, decide=decide, probes=False):
        if event.kind == "done":
            final = event
            break
        yield event
    report = final.report
    state = holder.get("state") or _state(request.resolved("cpu"), report)
    for pos, (_at, words) in state.left_at.items():  # timed under load or not, it left the search
        report.arms[state.candidates[pos]].left = words
    summary = summarize(report, state)
    if request.concurrency and report.status == "complete":
        pick = None if state.winner is None else state.candidates[state.winner]
        found, counted = yield from tune_schedule.after_search(state.request, report, state.specs, state.candidates,
                                                               pick, store, clock, should_stop, final.done)
        summary.update(found)
        final = dataclasses.replace(final, done=counted, total=counted, most=0)
    report.tune = summary
    under_load = (summary.get("schedule") or {}).get("sentence", "")
    report.message = " ".join(x for x in (summary["sentence"], _ended_words(report), summary["budget"]["sentence"],
                                          under_load) if x)
    yield dataclasses.replace(final, message=report.message)
    return summary


ENDED = {"clear": "when the answer was clear", "repetitions": "at the most repetitions allowed",
         "time budget": "when the time budget ran out", "no assisted arm": "with no candidate left to time"}


def _ended_words(report: Report) -> str:
    """How the runs ended, after the sentence: the runner's own words for a stop, else the search's."""
    stop = report.stopping or {}
    if report.status != "complete":
        return report.message
    n = stop.get("repetitions", 0)
    return f"The search ran {n} repetition{'s' if n != 1 else ''} and ended {ENDED.get(stop.get('ended_by'), 'there')}."


def run_tune(request: BenchRequest, store, **kwargs) -> tuple[Report, dict]:
    """Run a search to the end: its report and summary."""
    return to_the_end(tune(request, store, **kwargs))
