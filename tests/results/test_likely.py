"""The likely answer (results/likely.py): the t quantile against scipy, an interval by hand, then the family
error of two arms sharing 95% under noise recorded from real runs (benchmarks/noise/recorded.csv), t3 and
contaminated noise, the skew check under lognormal noise, and power."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from assistlab.results import likely, sequential
from recorded_noise import resampler

SEQUENCES, BUDGET, FAMILY_ALPHA, ARMS, BAND = 4_000, 30, 0.05, 2, 0.03


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 9, 29, 49])
@pytest.mark.parametrize("alpha", [0.05, 0.025 / 9])
def test_t_quantile_is_students(df, alpha):
    assert likely.t_quantile(alpha, df) == pytest.approx(scipy_stats.t.ppf(1 - alpha / 2, df), rel=1e-9)


def test_an_interval_by_hand_at_the_first_look():
    plain = [1.0, 1.0, 1.0, 1.0]
    assisted = [2.0, 2.1, 1.9, 2.05]
    seq = likely.speedup_sequence(plain, assisted, 0.05)
    logs = np.log(np.divide(plain, assisted))
    # A third of the 5% at the first look (docs/measuring.md), worked out here, not read from the code.
    half = scipy_stats.t.ppf(1 - 0.05 / 3 / 2, 3) * logs.std(ddof=1) / 2
    assert seq["interval"] == likely.LIKELY and not seq["skewed"]
    assert seq["ci_low"] == pytest.approx(np.exp(logs.mean() - half))
    assert seq["ci_high"] == pytest.approx(np.exp(logs.mean() + half))
    assert seq["looks"][:3] == [[None, None]] * 3  # no interval before the first planned look
    assert sequential.settled(seq, BAND) == sequential.SLOWER and likely.settled_at(seq, BAND) == 4


def test_no_answer_from_a_strongly_skewed_sample():
    seq = likely.speedup_sequence([1.0] * 8, [1.0, 1.01, 0.99, 1.0, 1.01, 0.99, 1.0, 3.0], 0.05)
    assert seq["skewed"] and seq["interval"] == "none" and sequential.settled(seq, BAND) is None


def _first_verdicts(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence: the verdict at the first look that settles ('' for none), and that look (0 for none)."""
    low, high, _ = likely.bounds(x, alpha)
    faster, slower = low > 0, high < 0
    same = (low >= np.log(1 - BAND)) & (high <= np.log(1 + BAND))
    ended = faster | slower | same
    at = np.where(ended.any(axis=-1), ended.argmax(axis=-1), 0)
    rows = np.arange(len(x))
    verdict = np.where(~ended.any(axis=-1), "", np.where(faster[rows, at], "faster",
                                                           np.where(slower[rows, at], "slower", "same")))
    return verdict, np.where(ended.any(axis=-1), at + 1, 0)


def family_error(noise, true_log: float = 0.0) -> float:
    """The share of searches in which any of ARMS arms (each at FAMILY_ALPHA / ARMS) gives a wrong verdict."""
    rng = np.random.default_rng(7)
    wrong = np.zeros(SEQUENCES, dtype=bool)
    for _ in range(ARMS):
        verdict, _ = _first_verdicts(true_log + noise(rng, (SEQUENCES, BUDGET)), FAMILY_ALPHA / ARMS)
        inside = abs(true_log) <= np.log(1 + BAND)
        wrong |= ((verdict == "faster") & (true_log <= 0)) | ((verdict == "slower") & (true_log >= 0)) | (
            (verdict == "same") & (not inside))
    return float(wrong.mean())


def t3_noise(rng, shape):
    return 0.04 * rng.standard_t(3, size=shape)


def contaminated_noise(rng, shape):
    """Normal noise on the log speedup, and in 5% of one arm's runs that arm 1.5-2x slower."""
    spikes = np.where(rng.random(shape) < 0.05, -np.log(rng.uniform(1.5, 2.0, size=shape)), 0.0)
    return 0.04 * rng.standard_normal(shape) + spikes


def lognormal_noise(rng, shape):
    """A strongly skewed noise on the log speedup itself (a centred lognormal, sigma 1: skewness about 6)."""
    return 0.04 * (rng.lognormal(0.0, 1.0, size=shape) - np.exp(0.5))


@pytest.mark.parametrize("noise", [resampler(), t3_noise, contaminated_noise], ids=["recorded", "t3", "contaminated"])
def test_family_error_of_two_arms_within_alpha(noise):
    assert family_error(noise) <= FAMILY_ALPHA


def test_the_skew_check_declines_most_lognormal_sequences():
    rng = np.random.default_rng(3)
    verdict, _ = _first_verdicts(lognormal_noise(rng, (SEQUENCES, BUDGET)), FAMILY_ALPHA / ARMS)
    _, _, skewed = likely.bounds(lognormal_noise(rng, (SEQUENCES, BUDGET)), FAMILY_ALPHA / ARMS)
    assert np.mean(verdict == "") > 0.5  # most sequences get no likely answer within the budget
    assert skewed[:, -1].mean() > 0.9
    normal = likely.bounds(0.04 * rng.standard_normal((SEQUENCES, BUDGET)), FAMILY_ALPHA / ARMS)[2]
    assert normal[:, -1].mean() < 0.1  # and seldom flags normal noise


def test_a_clear_slowdown_is_likely_at_the_first_look_and_sure_later():
    rng = np.random.default_rng(5)
    x = np.log(0.27) + 0.06 * rng.standard_normal((SEQUENCES, BUDGET))
    verdict, at = _first_verdicts(x, FAMILY_ALPHA / ARMS)
    assert (verdict == "slower").all() and (at == likely.LOOKS[0]).all()
    assert sequential.fewest_for_verdict(FAMILY_ALPHA / ARMS) > likely.LOOKS[0]


def test_the_looks_shares_add_up_to_the_whole_error_with_a_third_at_the_first():
    shares = likely.look_shares((4, 5, 6, 8, 10, 15, 20, 30, 50))
    assert shares == pytest.approx((1 / 3,) + (2 / 3 / 8,) * 8)  # a third first, the rest equally over eight
    assert likely.look_shares((4,)) == (1.0,) and likely.look_shares((4, 6)) == pytest.approx((1 / 3, 2 / 3))
    # A later look's interval is the Student-t one at its own share.
    logs = np.log([0.50, 0.52, 0.49, 0.51, 0.50])
    low, high, _ = likely.bounds(logs, 0.05)
    half = scipy_stats.t.ppf(1 - 0.05 * shares[1] / 2, 4) * logs.std(ddof=1) / np.sqrt(5)
    first = scipy_stats.t.ppf(1 - 0.05 * shares[0] / 2, 3) * logs[:4].std(ddof=1) / 2
    assert high[4] == pytest.approx(min(logs.mean() + half, logs[:4].mean() + first))
