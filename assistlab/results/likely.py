"""The "likely" answer: a Student-t interval on an arm's mean log speedup at planned looks. numpy only.

What it assumes, said wherever its answer is shown: the log speedups log(plain / assisted) of the repetitions
are independent and roughly normal. Then at a look after n repetitions, mean ± t(n - 1) · sd / √n covers the
true mean log speedup with the stated chance. The error an arm may spend is split over the planned looks
(LOOKS: a third of it at the first, the rest equally over the others; `look_shares`) and over the arms
(Bonferroni), so the intervals of every look of every arm hold at once with at least the family's level however
the looks' results decide when to stop; between looks the last look's interval stands, and the running
intersection of an arm's intervals only narrows. The first look gets more because a clear difference is
answered there or nowhere sooner than a fixed count would be; an equal split answered the bundled pair's two
slower arms at 4 repetitions in 58% of simulated runs, this one in 78%.

What it costs and where it fails: it answers at the first planned look (4 repetitions) where the sign-based
sequence of sequential.py cannot before 6 or 7, because it leans on the normal shape; with strongly skewed log
speedups (one arm now and then much slower, a lognormal tail) this kind of interval is known to be wrong in
the direction of the skew. So each look also checks the sample's skewness, and an arm whose skewness has been
strong at any look gets no likely answer (`skewed`), only the sure one.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from math import atan, cos, pi, sin, sqrt

import numpy as np

from .sequential import settled

# The repetitions after which the likely interval is computed; the error is split over all of them.
LOOKS = (4, 5, 6, 8, 10, 15, 20, 30, 50)
# The share of an arm's error spent at the first look; the rest is split equally over the later ones.
FIRST_LOOK_SHARE = 1.0 / 3.0
# What a likely interval says it is, beside sequential.TIME_UNIFORM.
LIKELY = "likely"
ASSUMPTION = ("assuming roughly normal noise: a Student-t interval on the mean log speedup at planned looks after "
              f"{', '.join(map(str, LOOKS))} repetitions, the error split over the looks (a third at the first) and "
              "the assisted arms (Bonferroni)")
# The skewness, in standard errors of a normal sample's skewness at that n, past which no likely answer is given.
SKEW_LIMIT = 2.5


def _two_sided_tail(t: float, df: int) -> float:
    """P(|T| > t) for Student's t with integer df (the closed forms of Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = atan(t / sqrt(df))
    c2 = cos(theta) ** 2
    if df % 2:
        term, total = cos(theta), cos(theta) if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = 2.0 / pi * (theta + sin(theta) * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        inside = sin(theta) * total
    return max(0.0, 1.0 - inside)


@lru_cache(maxsize=4096)  # pure, and called once per look per search: a simulation asks the same few
def t_quantile(alpha: float, df: int) -> float:
    """The t with P(|T| > t) = alpha for df degrees of freedom (bisection on the closed form)."""
    if df < 1:
        raise ValueError(f"df must be at least 1; got {df}.")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1; got {alpha}.")
    low, high = 0.0, 1.0
    while _two_sided_tail(high, df) > alpha:
        high *= 2.0
    for _ in range(100):
        mid = (low + high) / 2.0
        low, high = (mid, high) if _two_sided_tail(mid, df) > alpha else (low, mid)
    return (low + high) / 2.0


def skewness_limit(n: int) -> float:
    """The adjusted skewness G1 past which a sample of n counts as strongly skewed: SKEW_LIMIT standard errors
    of a normal sample's G1 at that n."""
    se = sqrt(6.0 * n * (n - 1) / ((n - 2) * (n + 1) * (n + 3)))
    return SKEW_LIMIT * se


def skewness(x: np.ndarray) -> np.ndarray:
    """The adjusted sample skewness G1 along the last axis (0 where the sample does not vary)."""
    n = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    m2 = (centred ** 2).mean(axis=-1)
    m3 = (centred ** 3).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        g1 = np.where(m2 > 0, m3 / np.power(m2, 1.5), 0.0)
    return g1 * sqrt(n * (n - 1)) / (n - 2)


def look_shares(looks: Sequence[int]) -> tuple[float, ...]:
    """The share of the error each look spends: FIRST_LOOK_SHARE at the first, the rest equally after it (all of
    it when there is one look). They add up to 1, which is all Bonferroni asks."""
    if len(looks) < 2:
        return (1.0,) * len(looks)
    rest = (1.0 - FIRST_LOOK_SHARE) / (len(looks) - 1)
    return (FIRST_LOOK_SHARE,) + (rest,) * (len(looks) - 1)


def bounds(values: np.ndarray, alpha: float, looks: Sequence[int] = LOOKS) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    """(low, high, skewed) after each repetition for the paired log speedups along the last axis.

    `values` has shape (..., T). At each planned look t <= T the interval is mean ± t_q · sd / √t at
    alpha times that look's share (look_shares) two-sided, intersected with the earlier looks'; -inf/+inf
    before the first look.
    `skewed` is True from the first look whose sample was strongly skewed on (and the interval then stays
    unbounded, since an answer that leans on the normal shape is not given).
    """
    x = np.asarray(values, dtype=float)
    shape, T = x.shape, x.shape[-1]
    low, high = np.full(shape, -np.inf), np.full(shape, np.inf)
    skewed = np.zeros(shape, dtype=bool)
    for t, share in zip(looks, look_shares(looks)):
        if t > T:
            break
        sample = x[..., :t]
        mean, sd = sample.mean(axis=-1), sample.std(axis=-1, ddof=1)
        half = t_quantile(alpha * share, t - 1) * sd / sqrt(t)
        low[..., t - 1], high[..., t - 1] = mean - half, mean + half
        skewed[..., t - 1] = np.abs(skewness(sample)) > skewness_limit(t)
    low, high = np.maximum.accumulate(low, axis=-1), np.minimum.accumulate(high, axis=-1)
    skewed = np.logical_or.accumulate(skewed, axis=-1)
    return np.where(skewed, -np.inf, low), np.where(skewed, np.inf, high), skewed


def _exp(value: float) -> float | None:
    return float(np.exp(value)) if np.isfinite(value) else None


def speedup_sequence(baseline: Sequence[float], candidate: Sequence[float], alpha: float,
                     looks: Sequence[int] = LOOKS) -> dict:
    """The likely interval on the speedup baseline/candidate after each paired repetition.

    Fields as sequential.speedup_sequence's (median: here the geometric mean, ci_low, ci_high, level, n,
    interval 'likely' once bounded, else 'none', looks) and `skewed`: True when the sample's skewness ruled
    the likely answer out.
    """
    pairs = [(float(b), float(c)) for b, c in zip(baseline, candidate) if b > 0 and c > 0]
    n = len(pairs)
    empty = {"median": None, "ci_low": None, "ci_high": None, "level": 1.0 - alpha, "n": n, "interval": "none",
             "looks": [], "skewed": False, "assumption": ASSUMPTION}
    if not n:
        return empty
    logs = np.log([b / c for b, c in pairs])
    low, high, skewed = bounds(logs, alpha, looks)
    looks_out = [[_exp(lo), _exp(hi)] for lo, hi in zip(low, high)]
    ci_low, ci_high = looks_out[-1]
    bounded = ci_low is not None and ci_high is not None
    return {**empty, "median": float(np.exp(logs.mean())), "ci_low": ci_low, "ci_high": ci_high,
            "interval": LIKELY if bounded else "none", "looks": looks_out, "skewed": bool(skewed[-1])}


def settled_at(sequence: dict, band: float) -> int | None:
    """The repetition at which the sequence's verdict (sequential.settled's rule) first held, or None."""
    for index, (low, high) in enumerate(sequence.get("looks") or []):
        if settled({"ci_low": low, "ci_high": high}, band) is not None:
            return index + 1
    return None


def arm_answer(stopping: dict, name: str) -> str:
    """One arm's answer so far in the words every view uses: 'Slower, 95% sure, assuming nothing' once its sure
    answer settled, else 'Likely slower (4 repetitions, assuming roughly normal noise)' once its likely one did,
    else ''."""
    sure = (stopping.get("arms") or {}).get(name, {}).get("settled")
    if sure and stopping.get("level"):
        return f"{sure[0].upper()}{sure[1:]}, {stopping['level']:.0%} sure, assuming nothing"
    verdict = (stopping.get("likely") or {}).get(name)
    if verdict:
        at = (stopping.get("likely_at") or {}).get(name)
        return f"Likely {verdict} ({at} repetitions, assuming roughly normal noise)"
    return ""


def answer_words(stopping: dict) -> str:
    """Every assisted arm's answer so far (arm_answer), 'universal: Likely slower (4 repetitions, assuming roughly
    normal noise); prompt lookup: Slower, 95% sure, assuming nothing'; empty while none has one."""
    said = [f"{name}: {words}" for name in (stopping.get("arms") or {}) if (words := arm_answer(stopping, name))]
    return "; ".join(said)
