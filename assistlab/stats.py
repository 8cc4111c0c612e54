"""Pure statistics on raw samples: medians, spread, bootstrap interval of a speedup. numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# torch.utils.benchmark flags a measurement whose IQR is over 10% of its median.
WIDE_SPREAD = 0.10


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


def bootstrap_median_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = 5000, seed: int = 0
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the median; a fixed seed keeps the report reproducible."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None, None
    if arr.size == 1:
        return float(arr[0]), float(arr[0])
    rng = np.random.default_rng(seed)
    samples = rng.choice(arr, size=(resamples, arr.size), replace=True)
    medians = np.median(samples, axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


def speedup(baseline: Sequence[float], candidate: Sequence[float], seed: int = 0) -> dict:
    """Median of per-repetition ratios with its 95% bootstrap interval."""
    r = ratios(baseline, candidate)
    low, high = bootstrap_median_ci(r, seed=seed)
    return {"median": float(np.median(r)) if r else None, "ci_low": low, "ci_high": high, "n": len(r)}


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
