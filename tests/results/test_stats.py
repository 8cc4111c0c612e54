"""Statistics on numbers worked out by hand."""

import numpy as np
import pytest

from assistlab.results import stats


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


# ---------------------------------------------------------------- the order-statistic interval, by hand


def test_levels_by_hand():
    # 1 - 2 P(Binomial(n, 1/2) <= j - 1): the chance that [x_(j), x_(n+1-j)] covers the median.
    assert stats.order_statistic_level(2, 1) == 0.5  # 1 - 2/4
    assert stats.order_statistic_level(3, 1) == 0.75  # 1 - 2/8
    assert stats.order_statistic_level(5, 1) == 0.9375  # 1 - 2/32
    assert stats.order_statistic_level(6, 1) == 31 / 32
    assert stats.order_statistic_level(9, 2) == 1 - 2 * (1 + 9) / 512
    assert stats.order_statistic_level(10, 2) == 1 - 2 * (1 + 10) / 1024
    assert stats.order_statistic_level(10, 3) == 1 - 2 * (1 + 10 + 45) / 1024
    assert stats.order_statistic_level(20, 6) == 1 - 2 * (1 + 20 + 190 + 1140 + 4845 + 15504) / 2**20
    with pytest.raises(ValueError, match="j must be between 1 and 2"):
        stats.order_statistic_level(3, 3)


@pytest.mark.parametrize(
    "n, j, level, kind",
    [
        (2, 1, 0.5, "range"),
        (3, 1, 0.75, "range"),
        (4, 1, 0.875, "range"),
        (5, 1, 0.9375, "order-statistic"),  # no interval reaches 95%: the widest one, at its 93.75%
        (6, 1, 31 / 32, "order-statistic"),
        (8, 1, 254 / 256, "order-statistic"),  # j = 2 would give 92.97%, under 95%
        (9, 2, 492 / 512, "order-statistic"),
        (10, 2, 1002 / 1024, "order-statistic"),  # j = 3 would give 89.06%
        (20, 6, 1 - 43400 / 2**20, "order-statistic"),  # 95.86%; j = 7 would give 88.47%
    ],
)
def test_the_narrowest_interval_at_or_above_95_percent(n, j, level, kind):
    values = [float(v) for v in range(n, 0, -1)]  # n..1, unsorted on purpose
    s = stats.median_interval(values)
    assert (s["ci_low"], s["ci_high"]) == (float(j), float(n + 1 - j))
    assert s["level"] == pytest.approx(level, abs=1e-15)
    assert s["interval"] == kind and s["n"] == n
    assert s["median"] == (n + 1) / 2


def test_speedup_of_three_runs_is_a_range_at_75_percent():
    s = stats.speedup([2.0, 2.0, 2.0], [1.0, 2.0, 4.0])  # ratios 2, 1, 0.5
    assert s == {"median": 1.0, "ci_low": 0.5, "ci_high": 2.0, "level": 0.75, "n": 3, "interval": "range"}
    # The example: three ratios are a range of 3 runs, never a 95% interval.
    t = stats.speedup([0.9, 1.05, 1.3], [1.0, 1.0, 1.0])
    assert (t["ci_low"], t["ci_high"], t["level"], t["interval"]) == (0.9, 1.3, 0.75, "range")


def test_speedup_of_ten_runs_drops_one_from_each_end():
    plain = [1.0] * 10
    assisted = [1 / r for r in (1.30, 1.05, 1.21, 1.18, 0.98, 1.25, 1.15, 1.19, 1.12, 1.40)]
    s = stats.speedup(plain, assisted)  # sorted ratios 0.98 1.05 1.12 1.15 1.18 1.19 1.21 1.25 1.30 1.40
    assert s["median"] == pytest.approx(1.185)
    assert s["ci_low"] == pytest.approx(1.05) and s["ci_high"] == pytest.approx(1.30)
    assert s["level"] == 1002 / 1024 and s["interval"] == "order-statistic"


def test_a_stricter_aim_widens_the_interval():
    values = [float(v) for v in range(1, 11)]
    assert stats.median_interval(values, aim=0.99)["ci_low"] == 1.0  # j = 1 (99.8%), j = 2 is 97.85%
    assert stats.median_interval(values, aim=0.99)["level"] == 1 - 2 / 1024


def test_no_runs_and_one_run():
    assert stats.speedup([], []) == {"median": None, "ci_low": None, "ci_high": None, "level": None, "n": 0,
                                     "interval": "none"}
    one = stats.speedup([1.2], [1.0])
    assert (one["median"], one["ci_low"], one["ci_high"], one["level"], one["interval"]) == (1.2, 1.2, 1.2, 0.0,
                                                                                              "range")


def test_a_constant_sample_is_a_point_at_its_level():
    s = stats.median_interval([1.3] * 6)
    assert (s["ci_low"], s["ci_high"], s["level"]) == (1.3, 1.3, 31 / 32)


def test_relative_half_width():
    s = stats.median_interval([float(v) for v in range(1, 11)])  # 2..9 around 5.5
    assert stats.relative_half_width(s) == pytest.approx((9 - 2) / 2 / 5.5)
    assert stats.relative_half_width(stats.median_interval([1.0, 2.0, 3.0])) is None  # a range: no interval
    assert stats.relative_half_width(stats.median_interval([])) is None
    assert stats.has_interval(s) and not stats.has_interval(stats.median_interval([1.0, 2.0, 3.0, 4.0]))


# ---------------------------------------------------------------- coverage, simulated


def _paired_timings(rng, trials: int, n: int, true_speedup: float, spikes: bool = False):
    """Plain and assisted latencies whose per-repetition ratio has median `true_speedup`.

    Lognormal noise on both arms (sigma 0.15), and optionally a 20% chance per run of a 1.6× stall (a busy
    machine): both arms draw their noise from the same law, so the log ratio is symmetric about
    log(true_speedup) and the median ratio is exactly the true speedup.
    """
    def noise():
        factor = np.exp(rng.normal(0.0, 0.15, size=(trials, n)))
        if spikes:
            factor *= np.where(rng.random((trials, n)) < 0.2, 1.6, 1.0)
        return factor

    return 2.0 * noise(), 2.0 / true_speedup * noise()


def _within_tolerance(hits: int, trials: int, level: float) -> bool:
    """Empirical coverage within 4 binomial standard errors of the stated level (plus a hair for level 1)."""
    return abs(hits / trials - level) <= 4 * np.sqrt(level * (1 - level) / trials) + 1e-3


@pytest.mark.parametrize("spikes", [False, True])
def test_the_stated_level_is_the_coverage_for_n_from_2_to_20(spikes):
    rng = np.random.default_rng(20261130)
    trials, true_speedup = 1500, 1.2
    for n in range(2, 21):
        plain, assisted = _paired_timings(rng, trials, n, true_speedup, spikes)
        results = [stats.speedup(plain[t], assisted[t]) for t in range(trials)]
        level = results[0]["level"]
        assert all(r["level"] == level and r["n"] == n for r in results)
        hits = sum(r["ci_low"] <= true_speedup <= r["ci_high"] for r in results)
        assert _within_tolerance(hits, trials, level), (n, hits / trials, level)
        # A real interval (the kind verdicts rest on) covers at least 90% of the time.
        if results[0]["interval"] == "order-statistic":
            assert hits / trials >= 0.90 - 4 * np.sqrt(0.09 / trials)


def _old_percentile_bootstrap(values: np.ndarray, rng, resamples: int = 1000, level: float = 0.95):
    """What stats did before: the percentile bootstrap of the median, said to be a 95% interval."""
    samples = rng.choice(values, size=(resamples, values.size), replace=True)
    tail = (1.0 - level) / 2.0 * 100.0
    return np.percentile(np.median(samples, axis=1), [tail, 100.0 - tail])


def test_the_old_bootstrap_fails_the_same_coverage_check_at_three_runs():
    rng = np.random.default_rng(7)
    trials, true_speedup = 1500, 1.2
    plain, assisted = _paired_timings(rng, trials, 3, true_speedup)
    hits = 0
    for t in range(trials):
        low, high = _old_percentile_bootstrap(plain[t] / assisted[t], rng)
        hits += low <= true_speedup <= high
    assert not _within_tolerance(hits, trials, 0.95)  # it claimed 95%...
    assert _within_tolerance(hits, trials, 0.75)  # ...and covered as often as [min, max] does: 75%
    assert stats.speedup(plain[0], assisted[0])["level"] == 0.75  # the new one says so


# ---------------------------------------------------------------- several arms against one baseline


def test_compare_with_best_by_hand():
    best = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    rivals = [[1.3, 1.2, 1.25, 1.4, 1.1, 1.35], [1.05, 0.95, 1.1, 1.2, 1.02, 1.08]]
    out = stats.compare_with_best(best, rivals)
    # Two rivals: each comparison aims at 1 - 0.05/2 = 97.5%; at n = 6 only [min, max] (31/32 = 96.9%) exists.
    assert [c["level"] for c in out["comparisons"]] == [31 / 32, 31 / 32]
    assert out["family_level"] == 1 - 2 / 32
    assert (out["comparisons"][0]["ci_low"], out["comparisons"][0]["ci_high"]) == (1.1, 1.4)
    assert (out["comparisons"][1]["ci_low"], out["comparisons"][1]["ci_high"]) == (0.95, 1.2)
    assert out["clear"] is False  # the second rival was faster once
    assert stats.compare_with_best(best, rivals[:1])["clear"] is True
    assert stats.compare_with_best([1.0], [[2.0]])["clear"] is False  # one run: never clear
    assert stats.compare_with_best(best, []) == {"comparisons": [], "family_level": None, "clear": False}


def test_naming_a_best_among_equals_is_rarely_clear():
    """Two settings of the same true speed lead three slower ones (20 runs each). Whichever of the two has
    the higher median is picked from the data; it may be called clearly ahead of every other setting in at
    most 5% of trials, since the comparisons together are at least 95% sure."""
    rng = np.random.default_rng(11)
    trials, n = 1500, 20
    clear = 0
    for _ in range(trials):
        plain = np.exp(rng.normal(0.0, 0.15, n))
        latencies = np.exp(rng.normal(0.0, 0.15, (5, n)))
        latencies[2:] *= 1.5
        medians = [stats.speedup(plain, lat)["median"] for lat in latencies]
        best = int(np.argmax(medians))
        out = stats.compare_with_best(latencies[best], [lat for i, lat in enumerate(latencies) if i != best])
        assert out["family_level"] >= 0.95
        clear += out["clear"]
    assert clear / trials <= 0.05 + 4 * np.sqrt(0.05 * 0.95 / trials)


def test_a_real_winner_is_found_with_enough_runs():
    rng = np.random.default_rng(12)
    n = 12
    best = np.exp(rng.normal(0.0, 0.05, n))
    rivals = [1.3 * np.exp(rng.normal(0.0, 0.05, n)) for _ in range(3)]
    out = stats.compare_with_best(best, rivals)
    assert out["clear"] is True and out["family_level"] >= 0.95


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
