"""A schedule of draft lengths vLLM serves as intended: K is 1 or more at every level, since a 0 in vLLM 0.32's
num_speculative_tokens_per_batch_size does not make a server plain (its drafter still runs); where plain beat
every K at a level, the sentence says that a plain server is faster for those loads."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.config import BenchRequest
from assistlab.engines.vllm.arms import VllmArm
from assistlab.errors import InputError
from assistlab.measure import tune, tune_schedule
from assistlab.measure.schedule_check import check_schedule


def _spec(k: int):
    return SimpleNamespace(num_speculative_tokens=k)


def test_the_best_k_stays_1_or_more_where_plain_was_faster():
    members = [(1, _spec(2)), (2, _spec(4))]
    speedups = {(1, 1): 1.4, (2, 1): 1.9, (1, 4): 0.93, (2, 4): 0.81, (1, 16): 0.9, (2, 16): 0.9}
    assert tune_schedule.best_by_level(members, speedups, (1, 4, 16)) == {1: 4, 4: 2, 16: 2}  # a tie: shorter
    assert tune_schedule.plain_best_at(members, speedups, (1, 4, 16)) == [4, 16]
    assert tune_schedule.plain_best_at(members, speedups, (1,)) == []


def test_a_schedule_with_a_0_is_refused_before_any_server_starts(store):
    base = BenchRequest(target="target", arms=(VllmArm("plain"),), prompt="x", engines=("vllm",), concurrency=(1, 4))
    with pytest.raises(InputError, match="K of 1 or more at every level .levels \\[4\\] have \\[0\\]"):
        next(check_schedule(base, VllmArm("ngram", 4), {1: 4, 4: 0}, store))


# Seconds per chunk (alone, with others in flight); 8 tokens are 8 chunks plain, 4 with drafts (2 per chunk).
# Alone k=4 is fastest; at 4 requests at once plain beats both draft lengths (k=2 the closer).
DELAYS = {"0": [0.02, 0.01], "2": [0.03, 0.025], "4": [0.015, 0.035]}


def test_where_plain_was_best_the_schedule_keeps_a_k_and_says_a_plain_server_is_faster(
        store, allowed_models, fake_vllm_python, tmp_path, monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.setenv("FAKE_DELAYS_BY_K", json.dumps(DELAYS))
    before = set(vllm_processes())
    request = tune.tune_request("target", assistants=[], engines=("vllm",),
                                candidates="vllm ngram:num_speculative_tokens=2,4", prompt="the quick brown fox",
                                max_new_tokens=8, warmup=0, repeats=6, concurrency=(1, 4), load_rounds=3)
    report = tune.run_tune(request, store)[0]
    schedule = report.tune.schedule
    assert schedule["best_k_by_level"] == {"1": 4, "4": 2} and schedule["plain_best_at"] == [4]
    assert schedule["ranges"] == [[1, 2, 4], [3, 4, 2]]
    served = []
    for line in log.read_text().splitlines():
        argv = json.loads(line)
        if "--speculative-config" in argv:
            served.append(json.loads(argv[argv.index("--speculative-config") + 1]))
    scheduled = [c["num_speculative_tokens_per_batch_size"] for c in served
                 if "num_speculative_tokens_per_batch_size" in c]
    assert scheduled and all(k >= 1 for ranges in scheduled for _, _, k in ranges)
    assert ("At 4 requests at once plain beat every ngram draft length measured: a plain server is faster for "
            "those loads") in schedule["sentence"]
    assert own_vllm_processes(before) == []
