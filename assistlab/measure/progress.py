"""The pace of a measurement for the person watching it: the time so far, the runs done, the time left."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import MIN_PRECISION_REPEATS, BenchRequest
from ..results import busy as busy_mod
from ..results import sequential, stats
from ..results.events import Event
from ..results.likely import LOOKS
from ..results.report import Report

Clock = Callable[[], float]


def likely_repetitions(request: BenchRequest, assisted: int) -> int:
    """The repetitions a comparison most likely runs, for the count a person watches: its count when fixed; under
    "clear" or a precision target the fewest after which the time-uniform interval of `assisted` arms can be
    bounded at all (its floor, where the clear answers come first; a precision target checks from
    MIN_PRECISION_REPEATS on); under "likely" its first planned look. Never more than the most allowed."""
    rule = request.stopping_rule
    if rule == "likely" and assisted:  # the likely answer's first planned look
        likely = LOOKS[0]
    elif rule in ("clear", "precision") and assisted:
        likely = sequential.fewest_for_verdict(sequential.arm_alpha(stats.TARGET_LEVEL, assisted))
        if rule == "precision":
            likely = max(likely, MIN_PRECISION_REPEATS)
    else:
        likely = request.repeats
    return max(1, min(likely, request.repeats))


class Pace:
    """Elapsed time, and the time left estimated from how long each arm's runs have taken so far.

    Each arm's pace is the median of its runs after the first (the first carries start-up costs), so one run
    slowed by a burst of other work does not move it; and it moves by at most PACE_STEP per run (an arm's
    first pace starts from the other arms'), so the time left never leaps from one progress line to the next.
    The clock is a parameter so tests can give it fixed costs; it is not the benchmark's clock.
    """

    PACE_STEP = 1.4  # the most one run may change an arm's pace, either way

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.seconds: dict[int, list[float]] = {}
        self.paces: dict[int, float] = {}  # each arm's smoothed seconds per run

    def elapsed(self) -> float:
        return self.clock() - self.start

    def record(self, arm: int, seconds: float) -> None:
        runs = self.seconds.setdefault(arm, [])
        runs.append(seconds)
        later = sorted(runs[1:] or runs)
        middle = len(later) // 2
        measured = later[middle] if len(later) % 2 else (later[middle - 1] + later[middle]) / 2
        others = [p for a, p in self.paces.items() if a != arm]
        before = self.paces.get(arm, sum(others) / len(others) if others else measured)
        self.paces[arm] = min(max(measured, before / self.PACE_STEP), before * self.PACE_STEP)

    def per_run(self, arm: int) -> float | None:
        """One run of `arm`, as smoothed over its runs so far; None before its first."""
        return self.paces.get(arm)

    def left(self, runs_left: int, probes_left: int = 0, assisted: tuple[int, ...] = ()) -> float | None:
        """Seconds for `runs_left` runs spread over the arms and `probes_left` drafting-cost runs; None before any run."""
        known = {arm: t for arm in self.seconds if (t := self.per_run(arm)) is not None}
        if not known:
            return None
        per_run = sum(known.values()) / len(known)
        drafting = [known[a] for a in assisted if a in known]
        per_probe = sum(drafting) / len(drafting) if drafting else per_run
        return max(0, runs_left) * per_run + max(0, probes_left) * per_probe


@dataclass
class Progress:
    """Runs done out of the runs that will most likely run (warm-up included), the most that may run, when the
    timed repetitions began, and the pace of the runs so far, from which every event gets the time so far and an
    estimate of the time left.

    `done` only grows. `total` only grows too (`expect`), until the run is over: a run that stops by its rule
    counts what will most likely run, not the most it may (shown as "at most"), and each repetition past that
    adds its runs. The time left shown moves by at most SHOWN_STEP a run (`smoothed`).
    """

    SHOWN_STEP = 2.0  # the most the time left shown may change from one run to the next, either way
    SHOWN_FLOOR_S = 5.0  # a figure near nothing still lets the next grow from here

    done: int = 0
    total: int = 0
    most: int = 0  # the most runs that may run (a rule that stops when the answer is clear); 0: `total`
    started: float | None = None  # clock reading when the first counted repetition began
    pace: Pace = field(default_factory=Pace)
    assisted: tuple[int, ...] = ()  # the assisted arms' indices: each has one drafting-cost run after the timing

    # Before any run is timed: the rough estimate of every run (results.estimate) and when it was made.
    rough_s: float | None = None
    rough_at: float = 0.0
    # The busy-machine watch's live record (contention.Monitor.record): while others use the machine, the
    # time left is said to be uncertain rather than given as a figure that the next burst would overturn.
    contention: dict | None = None
    # The time left last shown, and when (on the pace's clock): the next line's starts from it, less the time since.
    shown: tuple[float, float] | None = None
    # Seconds of untimed work still to come between runs (the block design's server starts: measure/blocks.py).
    untimed_left: Callable[[], float] | None = None

    def expect(self, runs: int) -> None:
        """At least `runs` runs will run (a repetition more than the likely count, a load phase): the total grows
        to it, never past the most that may run, and never shrinks."""
        ceiling = self.most or runs
        self.total = max(self.total, min(runs, ceiling))

    def unforeseen(self, runs: int) -> None:
        """Runs no count foresaw (in blocks, a fresh server's warm-up again): the total and the most grow by them,
        so the runs done never pass either."""
        self.total += runs
        if self.most:
            self.most += runs

    def smoothed(self, left: float, settle: bool = True) -> float:
        """`left` as shown: at most SHOWN_STEP times the figure settled last, and at least that figure divided by
        SHOWN_STEP or run down by the time since, whichever is less; so the figure a person reads does not leap,
        yet follows a lasting change within a few runs. `settle` (after a run, not on the lines between runs)
        makes this figure the one the next is held to, so it moves by SHOWN_STEP at most once per run."""
        now = self.pace.elapsed()
        if self.shown is not None:
            before, then = self.shown
            low = min(before / self.SHOWN_STEP, before - (now - then))
            left = min(max(left, low), max(before, self.SHOWN_FLOOR_S) * self.SHOWN_STEP)
        if settle or self.shown is None:
            self.shown = (left, now)
        return left

    def busy(self) -> bool:
        """Whether the watch has seen others use a meaningful share of the machine during the timed runs."""
        return bool(busy_mod.reasons(self.contention))

    def eta(self, probes_left: int | None = None, runs_left: int | None = None) -> float | None:
        """Seconds left for the timed runs not yet done and the drafting-cost runs (unless told, all of each).

        The runs left are those that will most likely run (`total`), not the most that may.
        """
        probes = len(self.assisted) if probes_left is None else probes_left
        runs = self.total - self.done if runs_left is None else runs_left
        left = self.pace.left(runs, probes, self.assisted)
        return left if left is None or self.untimed_left is None else left + self.untimed_left()

    def rough_left(self) -> float | None:
        """What is left of the rough estimate (never under a few seconds); None without one."""
        if self.rough_s is None:
            return None
        return max(5.0, self.rough_s - (self.pace.elapsed() - self.rough_at))

    def event(self, kind: str, message: str, report: Report | None = None, warmup: bool = False, step: str = "",
              eta_s: float | None = None, round_done: bool = False, took_s: float | None = None) -> Event:
        """An Event with the runs done, the time so far and the time left (the estimate unless `eta_s` is given):
        from the runs so far, or before any has been timed from the rough estimate, marked as such."""
        rough = False
        if eta_s is None:
            eta_s = self.eta()
            if eta_s is None and kind != "done" and self.rough_s is not None:
                eta_s, rough = self.rough_left(), True
        if eta_s is not None and kind != "done":
            eta_s = self.smoothed(eta_s, settle=kind == "run")
        return Event(kind, message, self.done, self.total, report, warmup, step=step,
                     elapsed_s=self.pace.elapsed(), eta_s=eta_s, round_done=round_done, eta_rough=rough, took_s=took_s,
                     eta_busy=kind != "done" and self.busy(), most=max(self.most, self.total))
