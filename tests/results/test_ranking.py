"""The ranking of arms: plain among them at 1x, failures last, and whether the first is really ahead."""

import pytest

from assistlab.results import ranking, stats


def test_rank_arms_orders_by_speedup_and_keeps_failures_last():
    def entry(name, median, **extra):
        return {"arm": name, "speedup": {"median": median, "ci_low": median and median - 0.1,
                                         "ci_high": median and median + 0.1, "n": 2},
                "acceptance_rate": 0.5, **extra}

    report = {
        "arms": [{"name": "plain", "strategy": "plain", "error": None},
                 {"name": "a", "strategy": "assistant", "error": None},
                 {"name": "b", "strategy": "prompt-lookup", "error": None},
                 {"name": "c", "strategy": "universal", "error": "ran out of memory"},
                 {"name": "d", "strategy": "assistant", "error": None}],
        "comparison": [entry("a", 1.2, c=0.1, alpha=0.7, limit="x"), entry("b", 1.8),
                       entry("c", None), entry("d", 0.9)],
    }
    ranked = ranking.rank_arms(report)
    # Plain ranks among the arms, at 1×: below every arm that beats it, above every arm it beats.
    assert [r["arm"] for r in ranked] == ["b", "a", "plain", "d", "c"]
    assert [r["rank"] for r in ranked] == [1, 2, 3, 4, None]
    assert [r["plain"] for r in ranked] == [False, False, True, False, False] and ranked[2]["speedup"] == 1.0
    assert ranked[1]["c"] == 0.1 and ranked[1]["alpha"] == 0.7 and ranked[0]["c"] is None
    assert ranked[4]["error"] == "ran out of memory"
    # No runs to pair: the first is not called clearly ahead.
    assert ranked[0]["clearly_first"] is False and ranked[0]["family_level"] is None


def _ranked_report(latencies: dict[str, list[float]]) -> dict:
    plain = [1.0] * len(next(iter(latencies.values())))
    arms = [{"name": "plain", "strategy": "plain", "error": None, "latencies_s": plain}]
    comparison = []
    for name, lat in latencies.items():
        arms.append({"name": name, "strategy": "assistant", "error": None, "latencies_s": lat})
        comparison.append({"arm": name, "speedup": stats.speedup(plain, lat)})
    return {"arms": arms, "comparison": comparison}


def test_rank_arms_says_whether_the_first_is_really_ahead():
    jitter = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.02, 0.98]
    ranked = ranking.rank_arms(_ranked_report({
        "slow": [0.9 * j for j in jitter],
        "fast": [0.6 * j for j in reversed(jitter)],
        "mid": [0.8 * j for j in jitter],
    }))
    assert [r["arm"] for r in ranked] == ["fast", "mid", "slow", "plain"]
    first = ranked[0]
    # Three rivals, plain included, each needing >= 1 - 0.05/3: at 10 runs that is the 1st and 10th of the
    # ratios, 1 - 2/1024 each, so 1 - 6/1024 together.
    assert first["clearly_first"] is True and first["family_level"] == 1 - 6 / 1024
    assert first["n"] == 10 and first["level"] == 1002 / 1024 and first["interval"] == "order-statistic"
    # Each rival's paired comparison: its latency over the first's, run by run.
    assert ranked[1]["behind_first"]["median"] == pytest.approx(0.8 / 0.6, rel=0.05)
    assert ranked[1]["behind_first"]["ci_low"] > 1.0 and ranked[1]["clearly_first"] is None
    # Three runs each: the same order, but too few runs to call the first ahead.
    few = ranking.rank_arms(_ranked_report({"slow": [0.9] * 3, "fast": [0.6, 0.61, 0.59], "mid": [0.8] * 3}))
    assert few[0]["arm"] == "fast" and few[0]["clearly_first"] is False
    assert few[0]["family_level"] == 0.25  # 1 - 3 * (1 - 0.75): two assisted rivals and plain
    assert few[1]["behind_first"]["interval"] == "range"


def test_a_run_that_stopped_when_clear_ranks_with_intervals_that_hold_at_every_look():
    # 10 runs: the first arm beat "mid" in all but the first repetition and beat plain in every one. A fixed count
    # of 10 calls it clearly first; read at a stop the data chose, the fixed-count interval claims more than it
    # holds, and the time-uniform comparison (the first look's ratio below 1 is never outweighed at 97.5%) does not.
    fast = [1.0] * 10
    report = {"arms": [{"name": "plain", "strategy": "plain", "latencies_s": [1.3] * 10},
                       {"name": "fast", "strategy": "assistant", "latencies_s": fast},
                       {"name": "mid", "strategy": "assistant", "latencies_s": [0.9] + [1.2] * 9}],
              "comparison": [{"arm": "fast", "speedup": stats.speedup([1.3] * 10, fast)},
                             {"arm": "mid", "speedup": stats.speedup([1.3] * 10, [0.9] + [1.2] * 9)}]}
    fixed = ranking.rank_arms({**report, "stopping": {"rule": "fixed"}})
    assert fixed[0]["arm"] == "fast" and fixed[0]["clearly_first"] is True
    for rule in ("clear", "precision"):
        peeked = ranking.rank_arms({**report, "stopping": {"rule": rule}})
        assert peeked[0]["arm"] == "fast" and peeked[0]["clearly_first"] is False
        assert peeked[0]["family_level"] == stats.TARGET_LEVEL
        behind = {row["arm"]: row["behind_first"] for row in peeked[1:]}
        assert behind["mid"]["interval"] == "time-uniform" and behind["mid"]["ci_low"] < 1.0
        assert behind["plain"]["ci_low"] > 1.0 and len(behind["plain"]["looks"]) == 10
    # Too few runs for any time-uniform interval: no level, and never clear.
    short = ranking.rank_arms({**report, "arms": [{**a, "latencies_s": a["latencies_s"][:3]} for a in report["arms"]],
                               "stopping": {"rule": "clear"}})
    assert short[0]["clearly_first"] is False and short[0]["family_level"] is None
