"""The load phase end to end through run_benchmark against two operator servers (tests/fake_openai.py) beside
the tiny transformers target: levels 1 and 4, the ngram server falling over at 4."""

from __future__ import annotations

from fake_openai import Behaviour, FakeServer

from assistlab.config import BenchRequest
from assistlab.engines.base import Arm
from assistlab.engines.vllm import arms as varms
from assistlab.engines.vllm import engine
from assistlab.measure import runner


def test_operator_servers_are_timed_under_load_and_a_level_that_falls_over_is_marked(store, allowed_models):
    assert engine.ServerArm.run_load is not Arm.run_load  # the vLLM arm times its own load rounds
    plain = Behaviour(model="target", root=str(allowed_models / "target"), delay_s=0.01)
    ngram = Behaviour(model="target", delay_s=0.01, per_chunk=2, drafts=(2, 4, 3, [2, 1]), fail_above=3)
    with FakeServer(plain) as plain_url, FakeServer(ngram) as ngram_url:
        arms = varms.parse_servers([f"plain={plain_url}", f"ngram={ngram_url}"])
        request = BenchRequest(target="target", arms=arms, prompt="the quick brown fox", max_new_tokens=6,
                               repeats=2, warmup=1, engines=("transformers", "vllm"), concurrency="1,4",
                               load_rounds=5)
        events = list(runner.run_benchmark(request, store))
    data = events[-1].report.to_dict()
    assert data["status"] == "complete", data["message"]
    assert [(e["arm"], e["concurrency"]) for e in data["load"]] == [
        ("vllm plain", 1), ("vllm ngram", 1), ("vllm plain", 4), ("vllm ngram", 4)]
    at_1 = data["load"][1]
    assert at_1["rounds"] == 5 and at_1["requests"] == 5 and at_1["speedup"]["median"] > 1
    assert at_1["acceptance"]["drafted"] > 0
    assert data["load"][2]["requests"] == 20 and data["load"][2]["failed"] is None
    assert "Server overloaded" in data["load"][3]["failed"]
    arm = data["load_summary"]["arms"][0]
    assert arm["stops_paying_at"] == 4 and "has no result at 4" in arm["sentence"]
    assert plain.most_in_flight == 4
