"""Statistics on numbers worked out by hand."""

import pytest

from assistlab import stats


def test_summarize_by_hand():
    s = stats.summarize([4.0, 1.0, 3.0, 2.0])
    # sorted 1 2 3 4: median 2.5, mean 2.5, numpy's linear quartiles 1.75 and 3.25
    assert s == {"n": 4, "median": 2.5, "mean": 2.5, "iqr": 1.5, "min": 1.0, "max": 4.0}


def test_summarize_empty():
    assert stats.summarize([])["median"] is None


def test_spread_is_wide():
    assert stats.spread_is_wide(stats.summarize([1.0, 1.0, 2.0, 2.0]))  # IQR 0.75 > 10% of 1.5
    assert not stats.spread_is_wide(stats.summarize([1.0, 1.01, 1.02]))


def test_ratios_pair_by_position():
    assert stats.ratios([2.0, 3.0, 4.0], [1.0, 2.0]) == [2.0, 1.5]


def test_speedup_median_and_interval():
    s = stats.speedup([2.0, 2.0, 2.0], [1.0, 2.0, 4.0])  # ratios 2, 1, 0.5 -> median 1
    assert s["median"] == 1.0
    assert 0.5 <= s["ci_low"] <= 1.0 <= s["ci_high"] <= 2.0
    assert s["n"] == 3


def test_bootstrap_constant_sample_is_a_point():
    assert stats.bootstrap_median_ci([1.3, 1.3, 1.3]) == (1.3, 1.3)


def test_bootstrap_is_reproducible_and_brackets_median():
    values = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    a = stats.bootstrap_median_ci(values, seed=7)
    assert a == stats.bootstrap_median_ci(values, seed=7)
    assert a[0] <= 1.3 <= a[1]
    assert a[0] >= 1.0 and a[1] <= 1.6


def test_acceptance_rate():
    assert stats.acceptance_rate([5, 5, 4], [5, 2, 0]) == pytest.approx(7 / 14)
    assert stats.acceptance_rate([], []) is None


def test_first_difference():
    assert stats.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert stats.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert stats.first_difference([1, 2, 3], [1, 2]) == 2


def test_acceptance_by_position_by_hand():
    # steps (drafted, accepted): position 0 offered 3 times, taken twice; position 1 offered 3, taken once;
    # position 2 offered once (only the first step drafted 3), taken 0 times.
    steps = [(3, 1), (2, 2), (2, 0)]
    assert stats.acceptance_by_position(steps) == [pytest.approx(2 / 3), pytest.approx(1 / 3), 0.0]
