"""The schedule check's figures (results/schedule.py) from hand-made reports: the paired ratio of throughputs per
level worked out by hand, the band's three answers, failures and a refused schedule, a level where plain was best,
and a plan's check read with the plan's own arms, K per level and band."""

from __future__ import annotations

import pytest

from assistlab.config import BenchRequest
from assistlab.engines import registry
from assistlab.engines.vllm.arms import VllmArm
from assistlab.results import schedule, stats

SCHEDULE = {"method": "ngram", "schedule": [[1, 2, 4], [3, 8, 2]]}
K4, K2 = {"method": "ngram", "num_speculative_tokens": 4}, {"method": "ngram", "num_speculative_tokens": 2}
PLAIN = {"method": "plain"}


def _arm(name: str, spec: dict, error: str | None = None) -> dict:
    return {"name": name, "spec": spec, "strategy": spec["method"], "error": error}


def _load(index: int, level: int, rounds: list[float], failed: str | None = None) -> dict:
    return {"arm_index": index, "concurrency": level, "failed": failed, "output_tokens_per_s_rounds": rounds,
            "output_tokens_per_s": float(sorted(rounds)[len(rounds) // 2]) if rounds else None}


def _report(load: list[dict], error: str | None = None) -> dict:
    return {"arms": [_arm("vllm plain", PLAIN), _arm("k4", K4), _arm("k2", K2), _arm("sched", SCHEDULE, error)],
            "load": load}


def _check(report: dict, band: float = 0.03, ks: dict | None = None, fixed: dict | None = None) -> dict:
    return schedule.judge_arms(report, SCHEDULE, {1: K4, 4: K2} if fixed is None else fixed,
                              {1: 4, 4: 2} if ks is None else ks, band)


def test_the_ratio_is_the_schedule_over_the_fixed_k_paired_by_round():
    # level 1: schedule 100, 101, 99, 100, 102 over k4 100, 100, 100, 101, 101 -> ratios 1, 1.01, 0.99, 0.990.., 1.0099
    sched_1, k4_1 = [100, 101, 99, 100, 102], [100, 100, 100, 101, 101]
    # level 4: the schedule 20% slower in every round
    sched_4, k2_4 = [80, 80, 88, 72, 84], [100, 100, 110, 90, 105]
    out = _check(_report([_load(3, 1, sched_1), _load(1, 1, k4_1), _load(3, 4, sched_4), _load(2, 4, k2_4)]))
    one, four = out["levels"]
    ratios = sorted(s / k for s, k in zip(sched_1, k4_1))
    assert one["ratio"]["median"] == pytest.approx(ratios[2])
    assert (one["ratio"]["ci_low"], one["ratio"]["ci_high"]) == (pytest.approx(ratios[0]), pytest.approx(ratios[-1]))
    assert one["ratio"]["level"] == pytest.approx(0.9375) and one["ratio"]["n"] == 5  # [min, max] of 5
    assert one["within_band"] is True and "within ±3%, no practical difference" in one["sentence"]
    assert (one["schedule_k"], one["fixed_k"], one["fixed_arm"]) == (4, 4, "k4")
    assert (one["schedule_tokens_per_s"], one["fixed_tokens_per_s"]) == (100, 100)
    assert four["ratio"]["median"] == pytest.approx(0.8) and four["ratio"]["ci_high"] == pytest.approx(0.8)
    assert four["within_band"] is False and "slower than the fixed k=2 by more than ±3%" in four["sentence"]
    assert out["all_within_band"] is False and out["refused"] is None and out["band"] == 0.03


def test_a_wide_interval_is_neither_within_nor_outside_the_band():
    sched, fixed = [100, 100, 100, 100, 100], [95, 100, 100, 100, 105]  # ratios 0.952 .. 1.053
    out = _check(_report([_load(3, 1, sched), _load(1, 1, fixed)]), ks={1: 4}, fixed={1: K4})
    row = out["levels"][0]
    assert row["within_band"] is None and "more rounds would tell" in row["sentence"]
    assert out["all_within_band"] is None
    # the same figures inside a band of ±6% are no practical difference
    assert _check(_report([_load(3, 1, sched), _load(1, 1, fixed)]), 0.06, {1: 4}, {1: K4})["all_within_band"] is True


def test_band_verdict_by_hand():
    assert schedule.band_verdict(stats.speedup([1.02, 0.99, 1.0, 1.01, 0.98], [1] * 5), 0.03) is True
    assert schedule.band_verdict(stats.speedup([1.2, 1.1, 1.15, 1.3, 1.04], [1] * 5), 0.03) is False  # faster
    assert schedule.band_verdict(stats.speedup([1.0, 1.0], [1.0, 1.0]), 0.03) is None  # 2 rounds: no interval


def test_one_round_gives_a_figure_without_an_interval():
    out = _check(_report([_load(3, 1, [90.0]), _load(1, 1, [100.0])]), ks={1: 4}, fixed={1: K4})
    row = out["levels"][0]
    assert row["ratio"]["median"] == pytest.approx(0.9) and row["within_band"] is None
    assert "too few rounds (1) for an interval" in row["sentence"]


def test_a_refused_schedule_and_a_failed_level_say_why():
    refused = "vLLM refused the schedule of draft lengths (...) for the ngram method, so this arm was not timed: x."
    out = _check(_report([_load(1, 1, [100.0] * 5)], error=refused))
    assert out["refused"] == refused and out["all_within_band"] is None
    assert all(r["failed"] == refused and r["ratio"] is None for r in out["levels"])
    assert out["levels"][0]["sentence"].startswith("At 1 at once the schedule could not be compared: vLLM refused")
    out = _check(_report([_load(3, 1, [100.0] * 5), _load(1, 1, [100.0] * 5),
                          _load(3, 4, [], failed="the server fell over."), _load(2, 4, [90.0] * 5)]))
    assert out["levels"][0]["within_band"] is True and out["levels"][1]["failed"] == "the server fell over."
    assert out["all_within_band"] is None


def test_a_level_where_plain_was_best_is_compared_with_plain():
    out = schedule.judge_arms(_report([_load(3, 8, [50.0] * 5), _load(0, 8, [50.0] * 5)]), SCHEDULE, {}, {8: 0}, 0.03)
    row = out["levels"][0]
    assert (row["fixed_k"], row["fixed_arm"], row["within_band"]) == (0, "vllm plain", True)
    assert "the throughput of plain" in row["sentence"] and "k=0" not in row["sentence"]


def test_a_no_drafting_range_slower_than_plain_says_the_schedule_is_not_plain():
    # The schedule's 0 at 8 at once ran 10% below plain in every round (as vLLM 0.32's CPU build did at 16)
    out = schedule.judge_arms(_report([_load(3, 8, [45.0] * 5), _load(0, 8, [50.0] * 5)]), SCHEDULE, {}, {8: 0}, 0.03)
    row = out["levels"][0]
    assert row["within_band"] is False and "slower than plain by more than ±3%: 0.900×" in row["sentence"]
    assert "did not make the server plain" in row["sentence"] and "a plain server is faster" in row["sentence"]
    # a fixed K that beats the schedule gets no such words: its rival drafts too
    out = _check(_report([_load(3, 4, [80.0] * 5), _load(2, 4, [100.0] * 5)]), ks={4: 2}, fixed={4: K2})
    assert out["levels"][0]["within_band"] is False and "plain server" not in out["levels"][0]["sentence"]


def test_a_plan_s_check_reads_its_arms_ks_and_band():
    base = BenchRequest(target="t", arms=(VllmArm("plain"),), prompt="p", max_new_tokens=8, engines=("vllm",),
                        band=0.05)
    plan = registry.SCHEDULES.plan(base, VllmArm("ngram", 4), {1: 4, 4: 2})
    mine, fixed = plan.specs()
    arms = [{"name": arm.label, "spec": arm.to_dict(), "strategy": arm.method, "error": None}
            for arm in plan.request.arms]  # plain, k=4, k=2, the schedule
    report = {"arms": arms, "load": [_load(3, 1, [100.0] * 5), _load(1, 1, [100.0] * 5),
                                     _load(3, 4, [104.0] * 5), _load(2, 4, [100.0] * 5)]}
    out = schedule.judge(report, plan)
    assert out == schedule.judge_arms(report, mine, fixed, {1: 4, 4: 2}, 0.05) and out["band"] == 0.05
    assert [(r["concurrency"], r["schedule_k"], r["fixed_k"], r["within_band"]) for r in out["levels"]] == [
        (1, 4, 4, True), (4, 2, 2, True)]  # 1.04 is within ±5%
    assert out["levels"][1]["fixed_arm"] == "vllm ngram (k=2, lookup 2-4)"
    part = plan.per_level()[1]
    assert schedule.judge(report, part)["levels"] == [out["levels"][1]]


def test_in_blocks_the_ratio_pairs_blocks_and_says_so():
    """The servers took turns in blocks: the entries carry each block's throughput, and the ratio is taken over
    those (the rounds of one block share a server start), its sentence and assumption naming blocks."""
    k4 = {**_load(1, 1, [100, 100, 100, 100]), "paired_by": "blocks", "output_tokens_per_s_blocks": [100, 100]}
    mine = {**_load(3, 1, [100, 100, 100, 100]), "paired_by": "blocks", "output_tokens_per_s_blocks": [99, 101]}
    checked = _check(_report([k4, mine]), ks={1: 4}, fixed={1: K4})
    row = checked["levels"][0]
    assert row["paired_by"] == "blocks" and row["ratio"]["n"] == 2 and row["within_band"] is None
    assert row["sentence"] == ("At 1 request at once the schedule ran at 1.000× the throughput of the fixed k=4, from "
                               "too few blocks (2) for an interval.")
    assert checked["assumption"].startswith("independent blocks")
