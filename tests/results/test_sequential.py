"""The time-uniform confidence sequence on a median speedup: numbers by hand, then error under peeking and power,
simulated with heavy-tailed latency noise (seconds, no models). `python tests/test_sequential.py` prints the figures."""

import numpy as np
import pytest

from assistlab.results import sequential, stats
from recorded_noise import resampler

SEQUENCES, LOOKS, ALPHA = 10_000, 50, 0.05


def noisy_latencies(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Latencies of 1 s with noise shaped like a shared CPU's: Student-t (3 degrees of freedom, no finite
    skew or kurtosis) of 2% scale on the log, plus in 5% of runs a spike of +30% on average (exponential), as
    when another process takes a core. No saved report in the repository holds raw latencies, so this model
    stands in for them; its tails are heavier than the 1-3% run-to-run spread the README reports."""
    log_noise = 0.02 * rng.standard_t(3, size=shape)
    spikes = np.where(rng.random(shape) < 0.05, np.log1p(rng.exponential(0.3, size=shape)), 0.0)
    return np.exp(log_noise + spikes)


def log_ratios(rng: np.random.Generator, speedup: float, n: int = SEQUENCES, looks: int = LOOKS) -> np.ndarray:
    """Paired log(plain / assisted) for `n` sequences of `looks` repetitions. A machine that slowly warms or
    cools moves the two runs of a repetition apart by a little (the second run of a pair starts one run later):
    a random walk of 0.5% per run on the log scale, so the pair's two runs differ by one step of it; the
    runner's rotation puts plain first in half the repetitions, so the step's sign alternates."""
    walk = np.cumsum(0.005 * rng.standard_normal((n, 2 * looks)), axis=-1)
    first, second = walk[:, 0::2], walk[:, 1::2]
    plain_first = np.arange(looks) % 2 == 0
    plain_drift = np.exp(np.where(plain_first, first, second))
    assisted_drift = np.exp(np.where(plain_first, second, first))
    plain = plain_drift * noisy_latencies(rng, (n, looks))
    assisted = assisted_drift * noisy_latencies(rng, (n, looks)) / speedup
    return np.log(plain / assisted)


def first_verdict(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The look (1-based) at which each sequence first excludes 0 (1×), or 0 for never."""
    excluded = (low > 0) | (high < 0)
    return np.where(excluded.any(axis=-1), excluded.argmax(axis=-1) + 1, 0)


def fixed_n_bounds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Today's fixed-n interval (stats.median_interval, aiming at 95%) recomputed at every look, as a peeking
    user would; only looks where it states a real interval (90% or more) can give a verdict."""
    low = np.full(x.shape, -np.inf)
    high = np.full(x.shape, np.inf)
    for t in range(1, x.shape[-1] + 1):
        shape = stats.median_interval(np.arange(t, dtype=float))  # which order statistics it takes at this n
        if not stats.has_interval(shape):
            continue
        ordered = np.sort(x[..., :t], axis=-1)
        low[..., t - 1] = ordered[..., int(shape["ci_low"])]
        high[..., t - 1] = ordered[..., int(shape["ci_high"])]
    return low, high


# --- by hand ------------------------------------------------------------------------------------------------------

def test_count_range_is_the_mixture_martingale_below_one_over_alpha():
    # t = 6, every flip heads: L = 2^6 B(6.1, 0.1) / B(0.1, 0.1) = 25.1 > 20, so k = 6 is rejected at 5%.
    assert sequential.count_range(6, 0.05) == (1, 5)
    assert sequential.count_range(5, 0.05) == (0, 5)  # 2^5 B(5.1, 0.1)/B(0.1, 0.1) = 12.8 < 20: nothing yet
    assert sequential.fewest_for_verdict(0.05) == 6 and sequential.fewest_for_verdict(0.025) == 7


def test_bounds_are_order_statistics_and_only_narrow():
    x = np.array([-0.5, -0.4, -0.6, -0.45, -0.55, -0.52, -0.48, 0.3])
    low, high = sequential.bounds(x, 0.05)
    assert np.all(np.isinf(low[:5])) and np.all(np.isinf(high[:5]))
    assert (low[5], high[5]) == (-0.6, -0.4)  # [x_(1), x_(6)] of the first six
    assert np.all(low[1:] >= low[:-1]) and np.all(high[1:] <= high[:-1])  # the running intersection


def test_speedup_sequence_records_every_look_and_its_verdict():
    plain, assisted = [1.0] * 7, [1.85, 1.80, 1.9, 1.86, 1.84, 1.83, 1.87]
    seq = sequential.speedup_sequence(plain, assisted, 0.025)
    assert seq["interval"] == sequential.TIME_UNIFORM and seq["n"] == 7 and len(seq["looks"]) == 7
    assert seq["looks"][5] == [None, None] and seq["ci_high"] == pytest.approx(1 / 1.8)
    assert sequential.settled(seq, 0.03) == sequential.SLOWER
    same = sequential.speedup_sequence([1.0] * 8, [1.0 + 0.001 * i for i in range(8)], 0.05)
    assert sequential.settled(same, 0.03) == sequential.SAME
    assert sequential.settled({"ci_low": None, "ci_high": None}, 0.03) is None
    assert sequential.within(same, 0.05) and not sequential.within(seq, 0.0001)


# --- simulated: error under peeking and power ----------------------------------------------------------------------

def peeking_error(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    x = log_ratios(rng, 1.0)
    sequence = first_verdict(*sequential.bounds(x, ALPHA))
    low, high = fixed_n_bounds(x)
    return {"sequence": float(np.mean(sequence > 0)), "fixed_n_peeking": float(np.mean(first_verdict(low, high) > 0)),
            "fixed_n_at_50_only": float(np.mean((low[:, -1] > 0) | (high[:, -1] < 0)))}


def family_peeking_error(arms: int = 2, seed: int = 4) -> float:
    """The product's family at equal speeds: `arms` assisted arms sharing 95%, looking after every repetition;
    the share of runs in which any arm's sequence excludes 1x at some look."""
    rng = np.random.default_rng(seed)
    wrong = np.zeros(SEQUENCES, dtype=bool)
    for _ in range(arms):
        wrong |= first_verdict(*sequential.bounds(log_ratios(rng, 1.0), sequential.arm_alpha(0.95, arms))) > 0
    return float(wrong.mean())


def power(speedup: float, arms: int = 2, budget: int = 30, band: float = 0.03, seed: int = 2) -> dict:
    """Repetitions to a settled answer for one of `arms` arms sharing 95%, stopping within `budget`."""
    rng = np.random.default_rng(seed)
    x = log_ratios(rng, speedup, looks=budget)
    low, high = sequential.bounds(x, sequential.arm_alpha(0.95, arms))
    faster, slower = low > 0, high < 0
    same = (low >= np.log1p(-band)) & (high <= np.log1p(band))
    ended = faster | slower | same
    at = np.where(ended.any(axis=-1), ended.argmax(axis=-1), budget - 1)
    rows = np.arange(len(x))
    outcome = np.where(~ended.any(axis=-1), "budget",
                       np.where(faster[rows, at], "faster", np.where(slower[rows, at], "slower", "same")))
    return {"median_repetitions": float(np.median(at + 1)),
            **{name: float(np.mean(outcome == name)) for name in ("faster", "slower", "same", "budget")}}


def test_peeking_after_every_repetition_keeps_the_error_within_alpha():
    error = peeking_error()
    assert error["sequence"] <= ALPHA
    # Today's fixed-n interval, recomputed after every repetition and trusted at the first that excludes 1×:
    # well over alpha (about four times it with this noise), though once at n = 50 it holds.
    assert error["fixed_n_peeking"] > 2 * ALPHA
    assert error["fixed_n_at_50_only"] <= ALPHA + 0.01


def test_the_products_family_of_two_arms_keeps_its_error_within_alpha():
    assert family_peeking_error() <= ALPHA


def test_the_family_under_noise_recorded_from_real_runs():
    """Equal speeds, the recorded log speedups (centred) resampled: two arms at 2.5% each, 30 looks."""
    rng, noise = np.random.default_rng(6), resampler()
    wrong = np.zeros(SEQUENCES, dtype=bool)
    for _ in range(2):
        low, high = sequential.bounds(noise(rng, (SEQUENCES, 30)), sequential.arm_alpha(0.95, 2))
        wrong |= first_verdict(low, high) > 0
    assert wrong.mean() <= ALPHA


def test_power_a_clear_slowdown_and_a_small_speedup():
    slow = power(0.54)
    assert slow["median_repetitions"] == sequential.fewest_for_verdict(0.025) == 7 and slow["slower"] > 0.99
    small = power(1.05)
    assert small["slower"] < 0.01 and small["faster"] > 0.5  # rarely wrong, usually found within the budget
    assert small["same"] < 0.05  # 1.05× lies outside the ±3% band: seldom called no practical difference


if __name__ == "__main__":
    print("false verdicts at 5%, equal speeds, 10,000 sequences, a look after each of 50 repetitions:",
          peeking_error())
    for s in (0.54, 0.7, 1.05, 1.0):
        print(f"true {s}x, two arms sharing 95%, budget 30, band ±3%:", power(s))
