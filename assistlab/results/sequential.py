"""Time-uniform confidence sequences for a median speedup: intervals that hold at every look at once. numpy only.

The method, a sequential sign test turned into a confidence sequence for the median (in the spirit of Howard
and Ramdas 2022, "Sequential estimation of quantiles with applications to A/B-testing and best-arm
identification"): let m be the median of the paired log ratios log(plain / assisted). The number of the first
t ratios at or below m is a sum of t fair coin flips (exactly so for continuous data, such as latencies), so

    L_t(k) = 2^t B(a + k, a + t - k) / B(a, a)

(the likelihood of k heads under a Beta(a, a) mixture over the coin's bias, over that of a fair coin) is a
martingale with mean 1 when k counts the ratios at or below m. By Ville's inequality it reaches 1/alpha at
any t with chance at most alpha. The counts k with L_t(k) < 1/alpha form a range [k_lo, k_hi] around t/2, and
the medians whose counts fall in it are the order statistics [x_(k_lo), x_(k_hi + 1)] of the t ratios: that
interval covers m at every t at once with chance at least 1 - alpha, however often one looks, whatever the
distribution (heavy tails, spikes, skew), with no variance assumed. Keeping the running intersection of the
intervals keeps that guarantee and makes them only ever narrow.

The mixture's a = 0.1 puts weight near a lopsided coin, so a clear-cut result (every ratio on one side) is
found at the same count as a fixed-n sign test: 6 repetitions at 95%, 7 at 97.5% (two arms sharing 95%).
Order statistics do not change under a monotone map, so the interval on the log ratio, exponentiated, is the
interval on the speedup itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lgamma, log

import numpy as np

# The Beta(a, a) mixture over the coin's bias: small a finds lopsided results soonest.
PRIOR = 0.1
# What a sequence's `interval` says it is (beside stats' 'order-statistic', 'range' and 'none').
TIME_UNIFORM = "time-uniform"
# The verdicts an arm's sequence can reach; None while it is not settled.
FASTER, SLOWER, SAME = "faster", "slower", "no practical difference"
# The band called no practical difference for a report whose request does not say (config.NO_DIFFERENCE_BAND).
DEFAULT_BAND = 0.03


def _log_beta(x: float, y: float) -> float:
    return lgamma(x) + lgamma(y) - lgamma(x + y)


def count_range(t: int, alpha: float, prior: float = PRIOR) -> tuple[int, int]:
    """(k_lo, k_hi): the counts of t fair coin flips the Beta mixture's martingale has not rejected at alpha."""
    if t < 1:
        raise ValueError(f"t must be at least 1; got {t}.")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1; got {alpha}.")
    threshold = log(1.0 / alpha)
    kept = [k for k in range(t + 1)
            if t * log(2.0) + _log_beta(prior + k, prior + t - k) - _log_beta(prior, prior) < threshold]
    return min(kept), max(kept)  # never empty: k = t/2 (or next to it) has L_t below 1


def fewest_for_verdict(alpha: float, prior: float = PRIOR) -> int:
    """The fewest repetitions after which a sequence can exclude anything (every ratio on one side)."""
    t = 1
    while count_range(t, alpha, prior)[1] == t:
        t += 1
    return t


def bounds(values: np.ndarray, alpha: float, prior: float = PRIOR,
           at: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The sequence's (low, high) after each look, for the paired values along the last axis.

    `values` has shape (..., T): many sequences at once for simulations, one for a report. Each look t uses
    the first t values; the result at t is the intersection of the intervals of looks 1..t. -inf and +inf mark
    an end the data do not bound yet. `at` computes only those looks (the others keep the last one's interval):
    any subset of a time-uniform family holds at the same level, and a search that decides at a few planned
    looks need not sort at every repetition.
    """
    x = np.asarray(values, dtype=float)
    shape, T = x.shape, x.shape[-1]
    low = np.full(shape, -np.inf)
    high = np.full(shape, np.inf)
    for t in (range(1, T + 1) if at is None else sorted(t for t in set(at) if 1 <= t <= T)):
        k_lo, k_hi = count_range(t, alpha, prior)
        ordered = np.sort(x[..., :t], axis=-1)
        if k_lo >= 1:
            low[..., t - 1] = ordered[..., k_lo - 1]
        if k_hi + 1 <= t:
            high[..., t - 1] = ordered[..., k_hi]
    return np.maximum.accumulate(low, axis=-1), np.minimum.accumulate(high, axis=-1)


def arm_alpha(family_level: float, arms: int) -> float:
    """Each arm's error when `arms` sequences share one level (Bonferroni: the errors add up to at most 1 - level)."""
    return (1.0 - family_level) / max(1, arms)


def _exp(value: float) -> float | None:
    """A bound on the log scale as a speedup; None for an end not yet bounded."""
    return float(np.exp(value)) if np.isfinite(value) else None


def speedup_sequence(baseline: Sequence[float], candidate: Sequence[float], alpha: float) -> dict:
    """The time-uniform interval on the median speedup baseline/candidate after each paired repetition.

    Fields as stats.speedup's (median, ci_low, ci_high, level, n, interval) for the latest look, the interval
    'time-uniform' once both ends are bounded ('none' before), and `looks`: [low, high] after each look
    (None for an end not yet bounded), so the stopping can be checked afterwards.
    """
    pairs = [(float(b), float(c)) for b, c in zip(baseline, candidate) if b > 0 and c > 0]
    n = len(pairs)
    empty = {"median": None, "ci_low": None, "ci_high": None, "level": 1.0 - alpha, "n": n, "interval": "none",
             "looks": []}
    if not n:
        return empty
    logs = np.log([b / c for b, c in pairs])
    low, high = bounds(logs, alpha)
    looks = [[_exp(lo), _exp(hi)] for lo, hi in zip(low, high)]
    ci_low, ci_high = looks[-1]
    bounded = ci_low is not None and ci_high is not None
    return {**empty, "median": float(np.exp(np.median(logs))), "ci_low": ci_low, "ci_high": ci_high,
            "interval": TIME_UNIFORM if bounded else "none", "looks": looks}


def settled(sequence: dict, band: float) -> str | None:
    """'faster' or 'slower' once the interval excludes 1×, 'no practical difference' once it lies within
    1 ± band; None while it is neither."""
    low, high = sequence.get("ci_low"), sequence.get("ci_high")
    if low is not None and low > 1.0:
        return FASTER
    if high is not None and high < 1.0:
        return SLOWER
    if low is not None and high is not None and low >= 1.0 - band and high <= 1.0 + band:
        return SAME
    return None


def within(sequence: dict, precision: float) -> bool:
    """True when the interval lies within ±precision of its median (the Careful mode's target)."""
    median, low, high = sequence.get("median"), sequence.get("ci_low"), sequence.get("ci_high")
    if sequence.get("interval") != TIME_UNIFORM or not median or low is None or high is None:
        return False
    return low >= median * (1.0 - precision) and high <= median * (1.0 + precision)


def compare_with_best(best: Sequence[float], rivals: Sequence[Sequence[float]], family: float = 0.95) -> dict:
    """stats.compare_with_best for a run whose number of repetitions followed the data (stopped when clear, or
    at a precision): each comparison is the time-uniform sequence of the ratio rival/best per repetition at
    1 - (1 - family) / m for m rivals, so 'clear' keeps its level at whatever look the run stopped.

    `family_level` is `family` once every comparison's interval is bounded, None before (too few runs to say).
    """
    m = len(rivals)
    comparisons = [speedup_sequence(rival, best, (1.0 - family) / m) for rival in rivals] if m else []
    if not comparisons or any(c["interval"] != TIME_UNIFORM for c in comparisons):
        return {"comparisons": comparisons, "family_level": None, "clear": False}
    return {"comparisons": comparisons, "family_level": family, "clear": all(c["ci_low"] > 1.0 for c in comparisons)}
