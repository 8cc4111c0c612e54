"""The load phase: per level, a warm-up round then timed rounds of many requests at once, the arms rotated."""

from __future__ import annotations

from collections.abc import Callable, Generator

from ..config import BenchRequest
from ..engines.base import Arm, RunFailure, unwatched
from ..results.events import Event
from ..results.load import LoadRecord, LoadRound
from ..results.report import Report
from . import blocks, contention
from .progress import Clock, Progress

# emit(kind, message, step, eta_s, round_done) -> Event: how a comparison or a workload words its events.
Emit = Callable[[str, str, str, "float | None", bool], Event]


def same_prompt(ids: list[int]) -> Callable[[int], list[list[int]]]:
    """A comparison's round: its one prompt, once per request."""
    return lambda level: [list(ids) for _ in range(level)]


def prompts_in_turn(prompts: list[list[int]]) -> Callable[[int], list[list[int]]]:
    """A workload's round: its prompts in turn, request i taking prompt i mod their number."""
    return lambda level: [list(prompts[i % len(prompts)]) for i in range(level)]


def runs_of_phase(request: BenchRequest, arms: list[Arm]) -> int:
    """How many load runs (warm-up included) the phase makes at most: for the progress bar's total."""
    loading = sum(1 for a in arms if a.loads and not a.info.error and not a.info.left)
    return len(request.concurrency) * (1 + request.load_rounds) * loading


class _Pace:
    """Seconds per load run by level, for the time left: later levels are guessed from the last one measured,
    growing with the level (a server's round of C requests takes at most about C times one's decode steps)."""

    def __init__(self):
        self.seconds: dict[int, list[float]] = {}

    def record(self, level: int, seconds: float) -> None:
        self.seconds.setdefault(level, []).append(seconds)

    def left(self, plan: list[tuple[int, int]]) -> float | None:
        """Seconds for `plan`, (level, runs) pairs; None before any load run was timed."""
        if not self.seconds:
            return None
        known = {level: sum(s) / len(s) for level, s in self.seconds.items()}
        last = max(known)
        return sum(runs * known.get(level, known[last] * level / last) for level, runs in plan)


def kept_words(record: LoadRecord) -> str:
    """'kept levels 1, 2 of 1, 2, 4, 8' or 'kept no level of 1, 2, 4, 8', for a stop's message."""
    asked = ", ".join(map(str, record.levels))
    if not record.done:
        return f"kept no load level of {asked}"
    return f"kept load level{'s' if len(record.done) > 1 else ''} {', '.join(map(str, record.done))} of {asked}"


def run_load(
    request: BenchRequest,
    prompts: Callable[[int], list[list[int]]],
    arms: list[Arm],
    report: Report,
    clock: Clock,
    should_stop: Callable[[], bool],
    progress: Progress,
    rotation: Callable[[int, int], list[int]],
    monitor: contention.Monitor | None = None,
    emit: Emit | None = None,
    enter: Callable[[int], Generator[Event, None, bool]] | None = None,
) -> Generator[Event, None, bool]:
    """Every level of `request.concurrency`, lowest first: one untimed warm-up round per arm that loads, then
    `request.load_rounds` timed rounds, each sending `prompts(level)` at once to every such arm in the order
    `rotation(n_arms, round)` gives (runner.rotation, passed in: the runner calls this module), each timed round
    watched by `monitor` as a timed run is. The rounds go into `report.load`.

    A failure at a level marks that (arm, level) failed with its sentence, and the arm's higher levels are not
    tried (nor those of the assisted arms timed against it, when it is their plain arm); lower levels stay. A
    stop discards the level under way and returns True: the record keeps whole levels only.

    `enter(index)`, when the arms are served in blocks (measure/blocks.py), readies an arm before its block (True
    when its server started afresh): each level's rounds then run arm after arm in blocks of
    `request.load_block_rounds` (half the rounds when unset: one cycle), each cycle's first blocks in the arms'
    order and its second blocks mirrored, each block after its own warm-up round on a fresh server. The record
    keeps the blocks (`record.blocks`): an interval in blocks pairs blocks, not rounds (results/load.py).
    """
    loading = [i for i, a in enumerate(arms) if a.loads and not a.info.error and not a.info.left]
    per_block = block_rounds(request)
    record = report.load = LoadRecord(levels=tuple(request.concurrency), rounds_asked=request.load_rounds,
                                      arms=loading,
                                      blocks=None if enter is None else blocks.units(request.load_rounds, per_block))
    if not loading or not request.concurrency:
        return False
    pace = _Pace()
    broken: dict[int, str] = {}  # arm -> why its higher levels are not tried

    def event(kind: str, message: str, step: str, eta_s: float | None, round_done: bool) -> Event:
        return Event(kind, message, progress.done, progress.total, report, step=step,
                     elapsed_s=progress.pace.elapsed(), eta_s=eta_s, round_done=round_done,
                     eta_busy=kind != "done" and progress.busy())

    emit = event if emit is None else emit

    def left(level: int, runs_here: int) -> float | None:
        later = [(c, (1 + request.load_rounds) * len(loading)) for c in request.concurrency if c > level]
        return pace.left([(level, runs_here), *later])

    def fail(index: int, level: int, reason: str) -> None:
        at = f"{level} concurrent request{'' if level == 1 else 's'}"
        record.failures[(index, level)] = reason
        broken[index] = f"not tried: it failed at {at}."
        info = arms[index].info
        if not info.assisted:  # its engine's assisted arms have nothing to be compared with at this level
            for other in loading:
                if other not in broken and arms[other].info.engine == info.engine and arms[other].info.assisted:
                    record.failures[(other, level)] = f"its baseline, {info.name}, {reason.rstrip('.')}."
                    broken[other] = f"not tried: its baseline, {info.name}, failed at {at}."

    def discard(level: int, kept: int) -> bool:
        del record.rounds[kept:]
        for key in [k for k in record.failures if k[1] == level]:
            del record.failures[key]
        return True

    for level in request.concurrency:
        kept, orders_kept = len(record.rounds), len(record.orders)
        for index in loading:
            if index in broken:
                record.failures[(index, level)] = broken[index]
        runs_left = (1 + request.load_rounds) * sum(1 for i in loading if i not in broken)
        if enter is None:
            items = _round_major(loading, broken, request.load_rounds, rotation)
        else:
            items, orders = _in_blocks([i for i in loading if i not in broken], request.load_rounds, per_block)
            record.orders.extend(orders)
        current, warmed = None, set()
        for r, index, position, last, order in items:
            warmup = r < 0
            if enter is None and not warmup and position == 0:
                record.orders.append(order)
            if index in broken:
                continue
            if should_stop():
                del record.orders[orders_kept:]
                return discard(level, kept)
            if enter is not None and index != current:
                if (yield from enter(index)) and index in warmed:
                    warmed.discard(index)  # a fresh server: its warm-up round again, which no count foresaw
                    progress.unforeseen(1)
                    runs_left += 1
                current = index
            if warmup and index in warmed:
                continue
            warmed.add(index)
            name = arms[index].info.name
            what = "warm-up (not counted)" if warmup else f"round {r + 1} of {request.load_rounds}"
            step = f"Under load: {level} request{'s' if level > 1 else ''} at once, {what}, {name}"
            yield emit("status", f"{step}...", step, left(level, runs_left), False)
            if arms[index].quiet is not None:  # another server's poll after its last round shares the cores
                arms[index].quiet(should_stop)
            began = progress.pace.elapsed()
            watch = unwatched if warmup or monitor is None else monitor.window
            outcome = arms[index].run_load(prompts(level), max(r, 0), clock, should_stop, watch)
            if isinstance(outcome, RunFailure) and outcome.stopped:
                del record.orders[orders_kept:]
                return discard(level, kept)
            progress.done += 1
            runs_left -= 1
            if isinstance(outcome, RunFailure):
                fail(index, level, outcome.reason)
                record.rounds = [x for x in record.rounds if (x.arm, x.concurrency) not in record.failures]
                yield emit("run", f"{name} at {level} at once: {outcome.reason}", step, left(level, runs_left),
                           last)
                continue
            pace.record(level, progress.pace.elapsed() - began)
            tokens = sum(q.tokens for q in outcome.requests)
            rate = tokens / outcome.wall_s if outcome.wall_s > 0 else 0.0
            if not warmup:
                record.rounds.append(LoadRound(index, level, r, outcome.wall_s, outcome.requests,
                                               outcome.counts_source, outcome.counts, position))
            message = f"{name}: {level} at once, {what}, {outcome.wall_s:.2f} s, {rate:.1f} tok/s"
            yield emit("run", message, step, left(level, runs_left), last)
        record.done.append(level)
    progress.total = progress.done  # runs an arm's failure left untried are not owed
    return False


def _round_major(loading: list[int], broken: dict, rounds: int, rotation: Callable[[int, int], list[int]]):
    """(round, arm, position, last of its round, the round's order) round after round, the warm-up (-1) first,
    every arm once per round in `rotation`'s order; an arm broken during a round is out of the rounds after."""
    for r in range(-1, rounds):
        active = [i for i in loading if i not in broken]
        order = [active[k] for k in rotation(len(active), max(r, 0))] if active else []
        for position, index in enumerate(order):
            yield r, index, position, position == len(order) - 1, order


def block_rounds(request: BenchRequest) -> int:
    """Rounds per block in blocks: the request's `load_block_rounds`, else half the rounds (one cycle a level)."""
    return request.load_block_rounds or (request.load_rounds + 1) // 2


def _in_blocks(active: list[int], rounds: int, per_block: int) -> tuple[list[tuple], list[list[int]]]:
    """The same items in blocks (measure/blocks.py), cycle after cycle of blocks of at most `per_block` rounds:
    each arm's first block in turn, after its warm-up round (-1; skipped where its server did not start
    afresh), then the second blocks mirrored; and the order of the arms for every round."""
    items, orders = [], []
    for first, second in blocks.cycles(rounds, per_block):
        for number, (index, reps) in enumerate(blocks.cycle(active, first, second)):
            order = list(active) if number < len(active) else list(reversed(active))
            position = order.index(index)
            items += [(-1, index, position, False, order)] + [(r, index, position, r == reps[-1], order) for r in reps]
        orders += blocks.orders(active, first, second)
    return items, orders
