"""The two rules as the product runs them, simulated: 10,000 sequences of the product's family (two assisted arms
at 2.5% each, at most 30 repetitions, band ±3%), stopping as measure/stopping.py does, at equal speeds.

- "sure" (the rule 'clear'): stop once both arms' time-uniform sequences (results/sequential.py) settle.
- "likely": stop once each arm has its likely answer (results/likely.py) or its sure one; an arm whose sample
  is too skewed has no likely answer and waits for the sure one; the verdict kept is the sure one when both are
  in, as the stopping block says it.

A family error is a run whose verdicts, where the run stopped, call either arm faster or slower. The noise on the
log speedups: resampled from benchmarks/noise/recorded.csv, a Student-t with 3 degrees of freedom, and normal
noise with one arm 1.5-2x slower in 5% of its runs; then a strongly skewed (lognormal) noise for the skew check.
`python3 tests/results/test_stopping_simulation.py` prints the figures docs/measuring.md gives.
"""

from __future__ import annotations

import numpy as np
import pytest

from assistlab.results import likely, sequential
from recorded_noise import resampler

SEQUENCES, BUDGET, FAMILY_ALPHA, ARMS, BAND = 10_000, 30, 0.05, 2, 0.03
ARM_ALPHA = sequential.arm_alpha(1.0 - FAMILY_ALPHA, ARMS)


def t3_noise(rng, shape, arm):
    return 0.04 * rng.standard_t(3, size=shape)


def contaminated_noise(rng, shape, arm):
    """Normal noise on the log speedup, and in 5% of the first arm's runs that arm 1.5-2x slower."""
    spikes = np.where(rng.random(shape) < 0.05, -np.log(rng.uniform(1.5, 2.0, size=shape)), 0.0)
    return 0.04 * rng.standard_normal(shape) + (spikes if arm == 0 else 0.0)


def recorded_noise():
    draw = resampler()
    return lambda rng, shape, arm: draw(rng, shape)


def lognormal_noise(rng, shape, arm=0):
    """A strongly skewed noise on the log speedup itself (a centred lognormal, sigma 1: skewness about 6)."""
    return 0.04 * (rng.lognormal(0.0, 1.0, size=shape) - np.exp(0.5))


def _verdicts(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Per look: 1 faster, -1 slower, 2 within the band, 0 none (sequential.settled's order)."""
    faster, slower = low > 0, high < 0
    same = (low >= np.log1p(-BAND)) & (high <= np.log1p(BAND))
    return np.where(faster, 1, np.where(slower, -1, np.where(same, 2, 0)))


def simulate(noise, true_log: float | tuple[float, ...] = 0.0, seed: int = 11) -> dict:
    """Both rules on the same sequences: family error, repetitions to the stop (their median, and the share of
    sequences stopped at each count), runs that reached the budget. `true_log`: one log speedup for every arm,
    or one per arm."""
    rng = np.random.default_rng(seed)
    truths = tuple(true_log) if isinstance(true_log, tuple) else (true_log,) * ARMS
    sure, answer = [], []
    for arm, truth in enumerate(truths):
        x = truth + noise(rng, (SEQUENCES, BUDGET), arm)
        s = _verdicts(*sequential.bounds(x, ARM_ALPHA))
        low, high, _skewed = likely.bounds(x, ARM_ALPHA)  # a skewed look is unbounded: no likely answer
        lk = _verdicts(low, high)
        sure.append(s)
        answer.append(np.where(s != 0, s, lk))  # the sure verdict when in, else the likely one
    out = {}
    for rule, per_arm in (("sure", sure), ("likely", answer)):
        done = np.all([v != 0 for v in per_arm], axis=0)
        stopped = np.where(done.any(axis=-1), done.argmax(axis=-1), BUDGET - 1)
        rows = np.arange(SEQUENCES)
        final = [v[rows, stopped] for v in per_arm]
        wrong = np.any([((v == 1) & (t <= 0)) | ((v == -1) & (t >= 0)) | ((v == 2) & (abs(t) > np.log1p(BAND)))
                        for v, t in zip(final, truths)], axis=0)
        counts = np.bincount(stopped + 1, minlength=BUDGET + 1)
        out[rule] = {"family_error": float(wrong.mean()), "median_repetitions": float(np.median(stopped + 1)),
                     "budget": float(np.mean(~done.any(axis=-1))),
                     "stopped_at": {n: float(c / SEQUENCES) for n, c in enumerate(counts) if c}}
    return out


NOISES = {"recorded": recorded_noise(), "t3": t3_noise, "contaminated": contaminated_noise}


@pytest.fixture(scope="module")
def figures() -> dict:
    return {name: simulate(noise) for name, noise in NOISES.items()}


@pytest.mark.parametrize("noise", list(NOISES))
@pytest.mark.parametrize("rule", ["sure", "likely"])
def test_each_rules_family_error_stays_within_alpha(figures, noise, rule):
    assert figures[noise][rule]["family_error"] <= FAMILY_ALPHA, figures[noise]


def test_a_wrong_answer_is_counted_as_one():
    """The counting itself can fail: at equal speeds, noise that always reads 0.6x makes every answer wrong."""
    assert simulate(lambda rng, shape, arm: np.full(shape, -0.5))["likely"]["family_error"] == 1.0


def test_a_clear_slowdown_is_answered_sooner_by_the_likely_rule():
    """The bundled pair's universal arm, truly 0.27x, under the recorded noise: both rules say slower, the likely
    one after fewer repetitions."""
    found = simulate(NOISES["recorded"], true_log=np.log(0.27))
    assert found["likely"]["family_error"] == found["sure"]["family_error"] == 0.0
    assert found["likely"]["median_repetitions"] < found["sure"]["median_repetitions"]


def skew_declined(seed: int = 12) -> float:
    """The share of lognormal sequences in which the likely interval never answers within the budget."""
    rng = np.random.default_rng(seed)
    low, high, _ = likely.bounds(lognormal_noise(rng, (SEQUENCES, BUDGET)), ARM_ALPHA)
    return float(np.mean(~(_verdicts(low, high) != 0).any(axis=-1)))


def test_the_skew_check_declines_most_strongly_skewed_sequences():
    assert skew_declined() > 0.5


if __name__ == "__main__":
    print(f"{SEQUENCES:,} sequences, two arms at {ARM_ALPHA:.1%} each, at most {BUDGET} repetitions, band ±{BAND:.0%}, "
          "equal speeds")
    for name, noise in NOISES.items():
        print(name, simulate(noise))
    print("truly 0.27x, recorded noise:", simulate(NOISES["recorded"], true_log=np.log(0.27)))
    print(f"lognormal: no likely answer in {skew_declined():.1%} of sequences")
    idle = resampler("idle")
    print("the bundled pair's arms (0.51x, 0.72x), idle recordings:",
          simulate(lambda rng, shape, arm: idle(rng, shape), true_log=(np.log(0.51), np.log(0.72))))
