"""Pure statistics on raw samples: medians, spread, an exact interval of a speedup. numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

# torch.utils.benchmark flags a measurement whose IQR is over 10% of its median.
WIDE_SPREAD = 0.10
# The confidence an interval aims for; the level it states is the one it has, at least this when n allows.
TARGET_LEVEL = 0.95
# Below this true level the [min, max] of the runs is only "a range of n runs": no verdict is drawn from it.
MIN_LEVEL = 0.90
# What a speedup's `interval` says it is.
ORDER_STATISTIC, RANGE, NONE = "order-statistic", "range", "none"


def summarize(values: Sequence[float]) -> dict:
    """Median first, then mean, IQR and range; empty input gives None everywhere."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"n": 0, "median": None, "mean": None, "iqr": None, "min": None, "max": None}
    q25, q50, q75 = np.percentile(arr, [25, 50, 75])
    return {
        "n": int(arr.size),
        "median": float(q50),
        "mean": float(arr.mean()),
        "iqr": float(q75 - q25),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def spread_is_wide(summary: dict) -> bool:
    """True when the IQR is over 10% of the median: the numbers are noisy, say so."""
    return bool(summary["n"] and summary["median"] and summary["iqr"] > WIDE_SPREAD * summary["median"])


def ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """Per-repetition speedups baseline[i] / candidate[i] over the repetitions both have."""
    n = min(len(baseline), len(candidate))
    return [float(b) / float(c) for b, c in zip(baseline[:n], candidate[:n]) if c > 0]


def order_statistic_level(n: int, j: int) -> float:
    """The exact chance that [x_(j), x_(n+1-j)] of n independent draws covers their distribution's median.

    The number of draws below the median is Binomial(n, 1/2); the interval misses it exactly when fewer
    than j fall below it or fewer than j above it, two disjoint events, so the level is
    1 - 2 P(Binomial(n, 1/2) <= j - 1). Exact for continuous data; with ties the closed interval covers at
    least this often. No assumption about the shape of the distribution is needed.
    """
    if not 1 <= j <= (n + 1) // 2:
        raise ValueError(f"j must be between 1 and {(n + 1) // 2} for n = {n}; got {j}.")
    tail = sum(comb(n, i) for i in range(j))
    return 1.0 - 2.0 * tail / 2**n


def fewest_runs(level: float = MIN_LEVEL) -> int:
    """The fewest runs whose widest interval, [min, max], reaches `level`: 5 for 90% (93.75%)."""
    return next(n for n in range(1, 64) if order_statistic_level(n, 1) >= level)


def median_interval(values: Sequence[float], aim: float = TARGET_LEVEL) -> dict:
    """The median with the narrowest order-statistic interval whose true level is at least `aim`.

    When no interval reaches `aim` (n too small), the widest one, [min, max], with its true level
    1 - 2^(1-n). `interval` says what it is: 'order-statistic' when its level is at least MIN_LEVEL, else
    'range' (the range of n runs, too few to be sure of anything), or 'none' with no values.
    """
    arr = np.sort(np.asarray(values, dtype=float))
    n = int(arr.size)
    if n == 0:
        return {"median": None, "ci_low": None, "ci_high": None, "level": None, "n": 0, "interval": NONE}
    j = 1
    while j + 1 <= (n + 1) // 2 and order_statistic_level(n, j + 1) >= aim:
        j += 1
    level = order_statistic_level(n, j)
    return {
        "median": float(np.median(arr)),
        "ci_low": float(arr[j - 1]),
        "ci_high": float(arr[n - j]),
        "level": level,
        "n": n,
        "interval": ORDER_STATISTIC if level >= MIN_LEVEL else RANGE,
    }


def speedup(baseline: Sequence[float], candidate: Sequence[float], aim: float = TARGET_LEVEL) -> dict:
    """Median of the per-repetition ratios baseline/candidate, with its order-statistic interval.

    Fields: median, ci_low, ci_high, level (the true confidence of [ci_low, ci_high]), n, interval.
    """
    return median_interval(ratios(baseline, candidate), aim)


def has_interval(speedup: dict) -> bool:
    """True when a speedup has a real interval (level at least MIN_LEVEL, or a time-uniform one of
    results.sequential), one a verdict may rest on."""
    return speedup.get("interval") in (ORDER_STATISTIC, "time-uniform") and speedup.get("ci_low") is not None


def relative_half_width(speedup: dict) -> float | None:
    """Half the interval's width over the median (0.05 is ±5%); None when there is no real interval yet."""
    if not has_interval(speedup) or not speedup.get("median"):
        return None
    return (speedup["ci_high"] - speedup["ci_low"]) / 2.0 / speedup["median"]


def compare_with_best(
    best: Sequence[float], rivals: Sequence[Sequence[float]], family: float = TARGET_LEVEL
) -> dict:
    """Is the arm with latencies `best` faster than every rival? Paired by repetition, Bonferroni over rivals.

    Each comparison is `speedup(rival, best)` (above 1: best is faster) at the per-comparison level
    1 - (1 - family) / m for m rivals. `family_level` is the Bonferroni bound 1 - sum(1 - level) of the
    levels reached; `clear` is True only when every interval lies above 1 and family_level >= MIN_LEVEL.
    With one rival this is that rival's own interval.

    The best is picked from the data, yet m comparisons suffice when the arms are ordered by speed: a wrong
    'clear' needs the interval between the picked arm and the truly fastest to miss on one given side,
    and the bound counts both sides of every interval (the argument of Hsu's comparisons with the best).
    """
    m = len(rivals)
    comparisons = [speedup(rival, best, aim=1.0 - (1.0 - family) / m) for rival in rivals] if m else []
    if not comparisons or any(c["level"] is None for c in comparisons):
        return {"comparisons": comparisons, "family_level": None, "clear": False}
    family_level = max(0.0, 1.0 - sum(1.0 - c["level"] for c in comparisons))
    clear = family_level >= MIN_LEVEL and all(c["ci_low"] > 1.0 for c in comparisons)
    return {"comparisons": comparisons, "family_level": family_level, "clear": clear}


def acceptance_rate(drafted: Sequence[int], accepted: Sequence[int]) -> float | None:
    """Accepted over drafted tokens, pooled; None when nothing was drafted."""
    total = sum(drafted)
    return float(sum(accepted)) / total if total else None


def first_difference(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first token where two sequences differ (or where one ends early); None if identical."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    if len(reference) != len(other):
        return min(len(reference), len(other))
    return None


def acceptance_by_position(draft_steps: Sequence[tuple[int, int]]) -> list[float]:
    """For each draft position i, the share of steps that drafted at least i+1 tokens and had it accepted.

    `draft_steps` holds (drafted, accepted) per verification step; a token at position i is accepted only
    when all tokens before it were.
    """
    longest = max((d for d, _ in draft_steps), default=0)
    rates = []
    for i in range(longest):
        offered = sum(1 for d, _ in draft_steps if d > i)
        taken = sum(1 for d, a in draft_steps if d > i and a > i)
        rates.append(taken / offered if offered else 0.0)
    return rates
