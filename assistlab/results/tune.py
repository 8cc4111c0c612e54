"""The tuner's elimination: which candidates are still in after each planned look, and when the search ends.
numpy only; the same function decides a real run's latest look and runs thousands of simulated searches.

The rule. Each repetition times every baseline (plain) and every candidate still in. At each planned look of
the likely rule (likely.LOOKS: after 4, 5, 6, 8, 10, 15, 20, 30, 50 repetitions) and for every candidate still
in, in this order:
  1. it leaves when it is clearly slower than its own engine's plain (the interval of its latency ratio over
     plain lies above 1);
  2. the leader is the candidate still in with the lowest median log latency ratio over its plain; every other
     candidate leaves when it is clearly slower than the leader (the interval of their latency ratio lies
     above 1).
Each comparison's interval is two at once: the likely rule's Student-t interval on the mean log ratio (likely.py,
at the planned looks) and the sign-based time-uniform interval on the median log ratio (sequential.py, the
rule that assumes nothing), each at half the comparison's share; a comparison decides when either does. The
likely one decides first on well-behaved noise; the sign-based one still decides when a pair's sample is too
skewed for the likely one (one arm now and then much slower), where the likely rule alone would never drop
anything. Ranking by the median (the leader, and the best so far of a search that ends open) keeps one slow
outlier from reordering candidates a few percent apart.
The search ends when one candidate is left and it is clearly faster than plain ("clear": it is clearly ahead
of every other), when every pair left lies within 1 ± band of each other and each is clearly faster than plain
("same": then the simplest is picked, the engine's defaults if among them, else the shortest draft), when none
is left ("none": every candidate was clearly slower than plain), or at the budget ("open": the best so far, not
settled).

The level, and how it is split. A search over m candidates may make m comparisons with plain and m(m-1)/2
between candidates, m(m+1)/2 in all; each gets an equal share of 1 - family (Bonferroni over comparisons),
half of it for each of its two intervals, and the likely rule splits its half equally over its planned looks
(Bonferroni over looks; the sign-based interval holds at every look at once). When the budget ends before the
sign-based half could decide anything (too few repetitions for its share), the likely interval gets all of it.
So with chance at least `family` every interval of every look holds at once, however the looks decide which
candidates stay; then the true best is never dropped (nothing is clearly faster than it), and a "same" pick is
within the band of it. `Levels` holds that split, and it alone: the search, the summary's intervals (each at one
comparison's level, the interval shown being the search's own where only it excludes 1x) and the confirmation
(the winner against its nearest rival at that comparison's sign-based share) all read it. `ranking` is the one
statistic that ranks candidates: the median log latency ratio over plain.

What it assumes: for a candidate dropped by the likely interval, that of likely.py, named in every report
(ASSUMPTION): that pair's log latency ratios are independent and roughly normal (a pair whose sample is
strongly skewed gets no likely interval); for one dropped by the sign-based interval, only that the
repetitions are independent. Where the two intervals' ends are combined (a "same" end), the mean and the
median log ratio are taken as one, as they are for roughly normal noise. The winner can then be confirmed by
the rule that assumes nothing (sequential.py), `confirm`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import log

import numpy as np

from ..config import CLEAR_MAX_REPEATS
from . import likely, sequential

FAMILY = 0.95
# The share of each comparison's error spent on the likely interval; the rest goes to the sign-based one.
LIKELY_SHARE = 0.5
ASSUMPTION = (f"candidates leave on the likely rule, {likely.ASSUMPTION}, or on the sign-based rule that assumes "
              f"nothing; the level {FAMILY:.0%} is split equally over every comparison the search may make (each "
              "candidate with plain, and each pair of candidates), then in half between the two rules, and the "
              "likely rule's half over its looks")
# Why a candidate left, as codes (0: still in) and as words.
STILL_IN, SLOWER_THAN_PLAIN, SLOWER_THAN_LEADER, FAILED = 0, 1, 2, 3
# How a search ended.
OPEN, CLEAR, SAME, NONE = "not settled", "clear", "no practical difference", "none faster than plain"


def planned_looks(repeats: int | None) -> tuple[int, ...]:
    """The likely rule's planned looks within a budget of `repeats` repetitions (None: the clear rule's most):
    the error is split over these only."""
    return tuple(t for t in likely.LOOKS if t <= (repeats or CLEAR_MAX_REPEATS))


def comparisons(m: int) -> int:
    """How many comparisons a search over m candidates may make: each with plain, and each pair."""
    return m * (m + 1) // 2


def comparison_alpha(m: int, family: float = FAMILY) -> float:
    """The error each comparison may spend (before the likely rule splits it over its looks)."""
    return (1.0 - family) / max(1, comparisons(m))


@dataclass(frozen=True)
class Levels:
    """The one error split of a search over m candidates, read by the search, the nearest rival, the summary's
    intervals and the confirmation: the family level, spent equally over the m(m+1)/2 comparisons (`alpha`
    each), each comparison's share split between the likely interval (`likely_alpha`, over its `looks`) and
    the sign-based one (`sure_alpha`). Every interval a search shows or decides on is one of these, at `level`."""

    m: int
    looks: tuple[int, ...] = tuple(likely.LOOKS)
    family: float = FAMILY

    @property
    def comparisons(self) -> int:
        return comparisons(self.m)

    @property
    def alpha(self) -> float:
        return comparison_alpha(self.m, self.family)

    @property
    def level(self) -> float:
        """The level every interval of the search is said at: one comparison's."""
        return 1.0 - self.alpha

    @property
    def likely_alpha(self) -> float:
        return self.alpha * likely_share(self.alpha, self.looks)

    @property
    def sure_alpha(self) -> float:
        """The sign-based interval's share: the summary's sure intervals and the confirmation, the winner against
        its nearest rival, one comparison of the search's (so the confirmation spends no error of its own)."""
        return self.alpha * (1.0 - LIKELY_SHARE)

    def bounds(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The interval a comparison decides on after each repetition (pair_bounds at this split)."""
        return pair_bounds(x, self.alpha, self.looks)


def ranking(log_ratios: np.ndarray, t: int | None = None) -> np.ndarray:
    """The one ranking statistic: the median log latency ratio over plain of the first t repetitions (lower is
    faster; NaN where one is missing). The leader, the best so far, and the winner's nearest rival all use it."""
    x = np.asarray(log_ratios, dtype=float)
    return np.median(x if t is None else x[..., :t], axis=-1)


@dataclass
class Search:
    """The state of many searches (axis 0) after the looks so far. `left_at[s, i]`: the repetition at which
    candidate i left (0: still in); `why[s, i]`: a code above; `beaten_by[s, i]`: the leader it left behind
    (-1 when it left for plain or not at all); `ended[s]`: OPEN, CLEAR, SAME or NONE; `ended_at[s]`: the
    repetition it ended at (the last repetition seen when open); `pick[s]`: the candidate chosen (-1: none)."""

    left_at: np.ndarray
    why: np.ndarray
    beaten_by: np.ndarray
    ended: np.ndarray
    ended_at: np.ndarray
    pick: np.ndarray

    def runs(self, baselines: int) -> tuple[np.ndarray, np.ndarray]:
        """(runs used, runs a grid would use to the same repetition): every baseline and every candidate
        until it left, against every arm to the end."""
        stop = self.ended_at[:, None]
        ran = np.where(self.left_at > 0, np.minimum(self.left_at, stop), stop)
        used = baselines * self.ended_at + ran.sum(axis=1)
        return used, (baselines + self.left_at.shape[1]) * self.ended_at


def likely_share(alpha: float, looks: Sequence[int]) -> float:
    """The share of a comparison's error the likely interval gets: LIKELY_SHARE, or all of it when the
    sign-based interval could not decide anything by the last planned look at the rest (its floor,
    sequential.fewest_for_verdict, is past the budget). Fixed by the budget and the number of candidates
    before any data, so the split holds its level."""
    floor = sequential.fewest_for_verdict(alpha * (1.0 - LIKELY_SHARE))
    return LIKELY_SHARE if looks and floor <= max(looks) else 1.0


def pair_bounds(x: np.ndarray, alpha: float, looks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on the log ratios `x` (..., T) after each repetition: the likely interval at its share of
    `alpha` (likely_share) and the sign-based one at the rest, intersected (either one's end decides)."""
    share = likely_share(alpha, looks)
    with np.errstate(invalid="ignore", divide="ignore"):
        low, high, _ = likely.bounds(x, alpha * share, looks)
        if share == 1.0:
            return low, high
        sure_low, sure_high = sequential.bounds(x, alpha * (1.0 - share), at=looks)
    # NaN (a repetition missing) leaves the likely end unbounded; max/min keep the other's end.
    return np.fmax(low, sure_low), np.fmin(high, sure_high)


def search(logs: np.ndarray, baseline: Sequence[int], candidates: Sequence[int], band: float,
           simplicity: Sequence[float] | None = None, failed: np.ndarray | None = None, family: float = FAMILY,
           looks: Sequence[int] = likely.LOOKS, decide_at: Sequence[int] | None = None) -> Search:
    """Run the elimination over `logs`, log latencies of shape (S, arms, T) (S searches, T repetitions; NaN
    where an arm did not run). `candidates[i]` is an arm index and `baseline[i]` the index of its engine's plain
    arm. `simplicity[i]` orders a "same" pick (lowest first; default: the order given). `failed` (S, m) marks
    candidates already out (they could not run, or a search run one look at a time retired them earlier).
    `looks` are the planned looks the error is split over; `decide_at` those of them decided here (default:
    all), so a running search can decide only its latest look with the state it kept.
    """
    logs = np.asarray(logs, dtype=float)
    S, _, T = logs.shape
    m = len(candidates)
    cand, base = np.asarray(candidates), np.asarray(baseline)
    simple = np.asarray(simplicity if simplicity is not None else range(m), dtype=float)
    levels = Levels(m, tuple(looks), family)
    # Intervals of log(t_candidate / t_plain) and of log(t_i / t_j) for i < j, at every repetition.
    plain_low, plain_high = levels.bounds(logs[:, cand] - logs[:, base])
    iu, ju = np.triu_indices(m, k=1)
    pair_low, pair_high = levels.bounds(logs[:, cand[iu]] - logs[:, cand[ju]])
    with np.errstate(invalid="ignore"):
        mean = np.cumsum(logs[:, cand], axis=2) / np.arange(1, T + 1)
    ratios = logs[:, cand] - logs[:, base]  # each candidate's log latency ratio over its plain, per repetition

    left_at = np.zeros((S, m), dtype=int)
    why = np.where(failed, FAILED, STILL_IN) if failed is not None else np.zeros((S, m), dtype=int)
    beaten_by = np.full((S, m), -1)
    ended = np.full(S, OPEN, dtype=object)
    ended_at = np.full(S, T)
    alive = why == STILL_IN
    rows = np.arange(S)
    for t in (t for t in (looks if decide_at is None else decide_at) if t <= T):
        k = t - 1
        open_ = ended == OPEN
        if not open_.any():
            break
        alive &= np.isfinite(mean[:, :, k])  # a candidate with a repetition missing is no longer in
        with np.errstate(invalid="ignore"):
            slow = alive & open_[:, None] & (plain_low[:, :, k] > 0)
        left_at[slow], why[slow] = t, SLOWER_THAN_PLAIN
        alive &= ~slow
        # low[s, i, j] bounds log(t_i / t_j) from below: above 0, i is clearly slower than j.
        low = np.full((S, m, m), -np.inf)
        low[:, iu, ju], low[:, ju, iu] = pair_low[:, :, k], -pair_high[:, :, k]
        leader = np.argmin(np.where(alive, ranking(ratios, t), np.inf), axis=1)
        with np.errstate(invalid="ignore"):
            behind = alive & open_[:, None] & (low[rows, :, leader] > 0)
        behind[rows, leader] = False
        left_at[behind], why[behind] = t, SLOWER_THAN_LEADER
        beaten_by[behind] = np.broadcast_to(leader[:, None], (S, m))[behind]
        alive &= ~behind
        high = np.full((S, m, m), np.inf)
        high[:, iu, ju], high[:, ju, iu] = pair_high[:, :, k], -pair_low[:, :, k]
        for outcome, mask in _endings(alive, low, high, plain_high[:, :, k], band):
            hit = open_ & mask & (ended == OPEN)
            ended[hit], ended_at[hit] = outcome, t
    return Search(left_at, why, beaten_by, ended, ended_at, _picks(ended, ended_at, alive, simple, mean, ratios))


def _endings(alive: np.ndarray, low: np.ndarray, high: np.ndarray, plain_high: np.ndarray,
             band: float) -> tuple[tuple[str, np.ndarray], ...]:
    """(outcome, which searches it ends) at one look, from who is still in, the pair bounds low/high[s, i, j] on
    log(t_i / t_j) and each candidate's upper bound on its log ratio over plain."""
    count = alive.sum(axis=1)
    with np.errstate(invalid="ignore"):
        inside = (low >= log(1.0 - band)) & (high <= log(1.0 + band))
        # A pick is only said once what is left is clearly faster than plain too: the last one standing, or a
        # group alike, may still turn out no faster than plain (then it leaves, or the budget ends the search).
        beats_plain = np.all(~alive | (plain_high < 0), axis=1)
    pair_alive = alive[:, :, None] & alive[:, None, :] & ~np.eye(alive.shape[1], dtype=bool)
    together = np.all(inside | ~pair_alive, axis=(1, 2))
    return ((NONE, count == 0), (CLEAR, (count == 1) & beats_plain), (SAME, (count > 1) & together & beats_plain))


def _picks(ended: np.ndarray, ended_at: np.ndarray, alive: np.ndarray, simple: np.ndarray, mean: np.ndarray,
           ratios: np.ndarray) -> np.ndarray:
    """Each search's pick: none after NONE; the simplest still in after SAME; else the best so far by `ranking`
    (-1 when every candidate failed)."""
    pick = np.full(len(ended), -1)
    for s in range(len(ended)):
        if ended[s] == NONE:
            continue
        if ended[s] == SAME:
            pick[s] = int(np.argmin(np.where(alive[s], simple, np.inf)))
        else:
            k = ended_at[s] - 1
            ranked = np.where(alive[s] & np.isfinite(mean[s, :, k]), ranking(ratios[s], k + 1), np.inf)
            pick[s] = int(np.argmin(ranked)) if np.isfinite(ranked).any() else -1
    return pick


def confirm(winner: Sequence[float], rival: Sequence[float], outcome: str, band: float,
            levels: Levels) -> bool | None:
    """The winner against its nearest rival by the rule that assumes nothing (sequential.py, at the search's
    `levels.sure_alpha`: that comparison's sign-based share), over the repetitions both ran: True when it
    agrees with the search (the winner clearly faster after a "clear" end; faster or within the band after a
    "same" end), False when it says otherwise, None while it cannot say (too few repetitions, or undecided)."""
    seq = sequential.speedup_sequence(rival, winner, levels.sure_alpha)
    verdict = sequential.settled(seq, band)
    if verdict is None:
        return None
    if verdict == sequential.FASTER:
        return True
    if verdict == sequential.SAME:
        return outcome == SAME
    return False
