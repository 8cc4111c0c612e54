"""The block design: the order of the runs when an engine serves its arms one at a time on freshly started
servers (vLLM's CPU build, which has no sleep mode, when the servers do not fit in memory together).

Interleaving every repetition would start a server for every run, so each arm runs a block of repetitions in a
row, and the blocks come in a mirrored order, A B C then C B A: a drift of the machine that grows steadily over
a cycle lands as much on each arm (the two blocks' midpoints average to the cycle's middle for every arm), and
shows as a difference between an arm's two blocks instead of hiding in a speedup. Adjacent blocks of one arm
(C C) share its server. What it gives up against interleaving: a change of the machine faster than a cycle,
which interleaving spreads over every arm, here falls on the arms whose blocks it meets. The stopping rules
look only at the end of a cycle, when every arm has run both its blocks. Under load, the runs of one block share
their server's start and moment, so an interval there pairs blocks (`units`), not rounds (results/load.py).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

BLOCK = 2  # repetitions per block: a cycle of both blocks gives 4, the first look at a likely answer


def halves(start: int, stop: int, block: int = BLOCK) -> tuple[range, range]:
    """The repetitions of the cycle that begins at `start` (at most 2 x `block`, ending by `stop`): the forward
    blocks' and the mirrored blocks' (the second one shorter by one when the count is odd)."""
    size = min(2 * block, stop - start)
    first = (size + 1) // 2
    return range(start, start + first), range(start + first, start + size)


def cycles(count: int, block: int) -> list[tuple[range, range]]:
    """Every cycle's halves (as `halves` gives them) for `count` runs in blocks of at most `block`: the load
    phase's rounds at one level, in one cycle when `block` is half of them, in more when it is smaller."""
    out, start = [], 0
    while start < count:
        first, second = halves(start, count, block)
        out.append((first, second))
        start = second.stop if len(second) else first.stop
    return out


def units(count: int, block: int) -> list[list[int]]:
    """The runs of each block, in order, every arm's the same: what a block design pairs (an arm's block with
    another's block of the same runs), since runs inside one block share their server's start and moment."""
    return [list(half) for pair in cycles(count, block) for half in pair if len(half)]


def cycle(arms: list[int], first: range, second: range) -> list[tuple[int, list[int]]]:
    """The blocks of one cycle, in order: (arm, its repetitions), every arm's `first` in turn, then every arm's
    `second` in the mirrored order; an empty half adds no blocks."""
    forward = [(arm, list(first)) for arm in arms] if len(first) else []
    mirrored = [(arm, list(second)) for arm in reversed(arms)] if len(second) else []
    return forward + mirrored


def orders(arms: list[int], first: range, second: range) -> list[list[int]]:
    """The order the arms ran in for each repetition of the cycle (the report's `orders`): forward, then mirrored."""
    return [list(arms)] * len(first) + [list(reversed(arms))] * len(second)


def repetitions(arms: list, report, repeats: int, warmup: int, enter: Callable, run: Callable, after: Callable,
                clock: Callable[[], float], progress=None) -> Generator[object, None, bool]:
    """Every counted repetition in cycles of blocks (runner.py's, when an arm is served in blocks).

    `enter(index)` readies an arm before its block (a generator of events; True when it starts afresh: its
    `warmup` runs come again, as they do the first time an arm runs); `run(index, repetition, warmup,
    position, last)` one run (runner.run_one; True on a stop); `after(count, untimed_s)` the stopping rule
    once a cycle is whole (True: over). The seconds that went to starts and warm-ups are left out of the time
    budget and kept in `report.timing` (`starts_s`, `warmup_s`); `progress`, when given, counts the starts
    still to come in its time left (Progress.untimed_left). Returns True when a stop ended the runs: the cycle
    under way is not whole, and runner.keep_whole_repetitions drops it.
    """
    warmed: set[int] = set()
    current, starts_s, warmup_s, start = None, 0.0, 0.0, 0
    fresh_s: list[float] = []  # each fresh start with its warm-ups, for the time left
    ahead: list[int] = []  # the arms of this cycle's blocks not begun yet
    report.timing["warmup_s"] = report.timing["starts_s"] = 0.0

    def untimed_left() -> float:
        """Starts still to come: this cycle's blocks that change server, then about 2n - 2 a later cycle."""
        if not fresh_s:
            return 0.0
        changes = sum(1 for a, b in zip([current, *ahead], ahead) if a != b)
        n = len([a for a in arms if not a.info.error and not a.info.left])
        likely = max(0, progress.total // max(1, len(arms)) - warmup - (second.stop if len(second) else first.stop))
        cycles = -(-likely // (2 * BLOCK))
        return sorted(fresh_s)[len(fresh_s) // 2] * (changes + cycles * max(0, 2 * n - 2))

    if progress is not None:
        progress.untimed_left = untimed_left
    try:
        while start < repeats:
            live = [i for i, arm in enumerate(arms) if not arm.info.error and not arm.info.left]
            first, second = halves(start, repeats)
            report.orders.extend(orders(live, first, second))
            plan = cycle(live, first, second)
            for number, (index, reps) in enumerate(plan):
                ahead[:] = [i for i, _ in plan[number + 1:]]
                if arms[index].info.error:  # its server failed to start in an earlier block
                    continue
                began = clock()
                fresh = False
                if index != current:
                    fresh = yield from enter(index)
                    current = index
                starts_s += clock() - began
                if fresh or index not in warmed:
                    if index in warmed and progress is not None:
                        progress.unforeseen(warmup)  # the counts foresaw one warm-up per arm
                    warm_began = clock()
                    for w in range(warmup):
                        report.warmup_orders.append([index])
                        if (yield from run(index, w, True, 0, False)):
                            return True
                    warmed.add(index)
                    warmup_s += clock() - warm_began
                if fresh:
                    fresh_s.append(clock() - began)
                report.timing.update(starts_s=starts_s, warmup_s=warmup_s)
                position = live.index(index) if number < len(live) else len(live) - 1 - live.index(index)
                for r in reps:
                    if (yield from run(index, r, False, position, r == reps[-1])):
                        return True
            ahead.clear()
            start = second.stop if len(second) else first.stop
            if (yield from after(start, starts_s + warmup_s)):
                return False
        return False
    finally:
        if progress is not None:
            progress.untimed_left = None
