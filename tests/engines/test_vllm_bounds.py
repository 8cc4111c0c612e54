"""A server's drafting figures bounded by the work it was asked (bounds.py): a huge claim in a request's own
metrics or on /metrics, a counter that went backwards, more accepted than drafted, each fails its run at once in
one sentence naming the server, and nothing of it reaches the report."""

from __future__ import annotations

import json
import time

import pytest
from fake_openai import Behaviour, FakeServer

from assistlab.config import BenchRequest
from assistlab.engines.base import ArmInfo, LoadResult, RunFailure, RunResult, unwatched
from assistlab.engines.vllm import arms as varms
from assistlab.engines.vllm import bounds, engine
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner

TOKENS = 6
HUGE = 20_000_000
SPEC = {"mean_acceptance_length": 1 + 4 / 3, "draft_acceptance_rate": 4 / 9, "acceptance_histogram": [1, 1, 0, 1],
        "num_spec_steps": 3, "num_accepted_draft_tokens": 4, "num_draft_tokens": 9, "num_spec_tokens": 3}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def _request() -> BenchRequest:
    return BenchRequest(target="target", arms=(VllmArm("plain"),), prompt="p", max_new_tokens=TOKENS,
                        engines=("vllm",), concurrency=(1, 2))


def _arm(url: str, k: int | None = None) -> engine.ServerArm:
    """An ngram arm at `url`: the operator's (no k of its own), or one started with draft length `k`."""
    if k is None:
        spec = next(a for a in varms.parse_servers([f"ngram={url}", "plain=http://127.0.0.1:9"]) if a.name == "ngram")
        endpoint = engine.operator_endpoint(spec, ("target",))
        assert endpoint.error is None, endpoint.error
    else:
        spec = VllmArm("ngram", num_speculative_tokens=k)
        endpoint = engine.Endpoint(spec, spec.label, url=url, model="target")
    return engine.ServerArm(ArmInfo(endpoint.label, spec.method, engine="vllm"), endpoint, _request())


def _timed(call):
    began = time.monotonic()
    result = call()
    return result, time.monotonic() - began


def _run(arm):
    return _timed(lambda: arm.run([1, 2, 3], 0, time.perf_counter, lambda: False, unwatched))


def _load(arm):
    return _timed(lambda: arm.run_load([[1, 2, 3]] * 2, 0, time.perf_counter, lambda: False, unwatched))


def _refused(result, url: str, *words: str) -> str:
    assert isinstance(result, RunFailure) and not result.stopped, result
    assert url in result.reason and "cannot be true" in result.reason, result.reason
    assert result.reason.count(". ") == 0 and result.reason.endswith("."), result.reason  # one sentence
    for word in words:
        assert word in result.reason, result.reason
    return result.reason


@pytest.mark.parametrize("claim, words", [
    ({"num_spec_tokens": HUGE}, ("num_spec_tokens 20000000", "per-request metrics")),
    ({"num_draft_tokens": HUGE}, ("20000000 drafted tokens",)),
    ({"num_accepted_draft_tokens": HUGE, "num_draft_tokens": HUGE}, ("20000000 drafted tokens",)),
    ({"num_spec_steps": HUGE}, ("20000000 drafting steps",)),
])
def test_a_request_s_huge_claim_fails_its_round_at_once(claim, words):
    with FakeServer(Behaviour(delay_s=0.0, spec_metrics={**SPEC, **claim})) as url:
        result, took = _load(_arm(url))
    _refused(result, url, *words)
    assert took < 2, took  # refused before a list of 2e7 positions is built


def test_a_request_claiming_more_accepted_than_drafted_fails_its_round():
    with FakeServer(Behaviour(delay_s=0.0, spec_metrics={**SPEC, "num_accepted_draft_tokens": 5,
                                                         "num_draft_tokens": 4})) as url:
        result, _ = _load(_arm(url))
    _refused(result, url, "5 accepted tokens", "of 4 drafted")


def test_a_request_past_its_arm_s_draft_length_fails_its_round():
    with FakeServer(Behaviour(delay_s=0.0, spec_metrics=SPEC)) as url:  # k=3 figures from an arm started with 2
        result, _ = _load(_arm(url, k=2))
    _refused(result, url, "num_spec_tokens 3", "draft length of 2")


def test_honest_figures_at_their_bounds_pass():
    with FakeServer(Behaviour(delay_s=0.0, spec_metrics=SPEC)) as url:
        assert isinstance(_load(_arm(url, k=3))[0], LoadResult)
    with FakeServer(Behaviour(delay_s=0.0, drafts=(6, 18, 6, [3, 2, 1]))) as url:
        result, _ = _run(_arm(url, k=3))
    assert isinstance(result, RunResult), result
    assert result.counts == {"drafts": 6, "draft_tokens": 18, "accepted_tokens": 6, "accepted_per_position": [3, 2, 1]}


def test_a_metrics_position_of_2e7_fails_the_run_at_once():
    fake = Behaviour(delay_s=0.0, drafts=(2, 4, 3, [2, 1]),
                     extra_metrics=[f'{PER_POS}{{engine="0",model_name="target",position="{HUGE}"}} 1.0'])
    with FakeServer(fake) as url:
        result, took = _run(_arm(url))
        _refused(result, url, "position 20000000", "/metrics")
        assert took < 2, took
        result, took = _load(_arm(url))
    _refused(result, url, "position 20000000")
    assert took < 2, took


def test_a_metrics_position_past_the_arm_s_draft_length_fails_the_run():
    with FakeServer(Behaviour(delay_s=0.0, drafts=(2, 4, 3, [2, 1, 1]))) as url:
        result, _ = _run(_arm(url, k=2))
    _refused(result, url, "position 2", "draft length of 2")


@pytest.mark.parametrize("drafts, words", [
    ((-99, -19800, -22000, []), ("drafts -99", "went backwards", "restarted")),
    ((1, 2, 5, [1]), ("5 accepted tokens", "drafted, which")),
    ((2, 4, 3, [2, -1]), ("-1 accepted tokens", "at one draft position")),
])
def test_metrics_that_go_backwards_or_accept_more_than_drafted_fail_the_run(drafts, words):
    with FakeServer(Behaviour(delay_s=0.0, drafts=drafts)) as url:
        result, _ = _run(_arm(url))
        _refused(result, url, *words)
        _refused(_load(_arm(url))[0], url, *words[1:])  # a round of two: its first figure doubled


def test_a_refused_figure_reaches_no_report(store, allowed_models):
    plain = Behaviour(model="target", delay_s=0.0)
    restarted = Behaviour(model="target", delay_s=0.0, drafts=(-99, -19800, -22000, []))
    with FakeServer(plain) as plain_url, FakeServer(restarted) as ngram_url:
        arms = varms.parse_servers([f"plain={plain_url}", f"ngram={ngram_url}"])
        request = BenchRequest(target="target", arms=arms, prompt="write me an essay", max_new_tokens=TOKENS,
                               repeats=1, warmup=0, engines=("vllm",))
        data = runner.run_to_report(request, store).to_dict()
    arm = next(a for a in data["arms"] if a["name"] == "vllm ngram")
    assert arm["error"] and ngram_url in arm["error"] and "went backwards" in arm["error"], arm["error"]
    assert not arm["latencies_s"] and not arm.get("drafted_tokens") and not arm.get("accepted_tokens")
    entry = next((c for c in data["comparison"] if c["arm"] == "vllm ngram"), None)
    assert entry is None or not entry.get("acceptance_rate"), entry


def test_the_bounds_of_one_request():
    ok = {"drafts": 6, "draft_tokens": 18, "accepted_tokens": 6, "accepted_per_position": [3, 2, 1]}
    assert bounds.counts_problem(ok, "u", 6, 3, "/metrics") is None
    assert "7 drafting steps" in bounds.counts_problem({**ok, "drafts": 7}, "u", 6, 3, "/metrics")
    assert "19 drafted tokens" in bounds.counts_problem({**ok, "draft_tokens": 19}, "u", 6, 3, "/metrics")
    assert "position 3" in bounds.counts_problem({**ok, "accepted_per_position": [1, 1, 1, 1]}, "u", 6, 3, "x")
    assert "counter of inf" in bounds.reading_problem({"drafts": float("inf"), "per_position": {}}, "u", 3)
    assert bounds.reading_problem({"drafts": 1.0, "per_position": {0: 1.0, 2: 0.0}}, "u", 3) is None
    assert bounds.draft_length(None, 6) == 6 and bounds.draft_length(4, 6) == 4 and bounds.draft_length(None, 0) == 1


@pytest.mark.parametrize("hostile", [
    dict(drafts=(2, 4, 3, [2, 1]), extra_metrics=[f'{PER_POS}{{engine="0",model_name="target",position="{HUGE}"}} 1.0']),
    dict(drafts=(HUGE, HUGE, HUGE, [])),
], ids=["position-2e7", "counts-2e7"])
def test_a_report_of_a_2e7_claim_is_built_in_under_2_s_and_half_a_gb(store, allowed_models, hostile):
    """The issue's measure: such a run said Complete, then spent over 240 s and 3.0 GB building its report."""
    import tracemalloc

    plain = Behaviour(model="target", delay_s=0.0)
    with FakeServer(plain) as plain_url, FakeServer(Behaviour(model="target", delay_s=0.0, **hostile)) as ngram_url:
        arms = varms.parse_servers([f"plain={plain_url}", f"ngram={ngram_url}"])
        request = BenchRequest(target="target", arms=arms, prompt="write me an essay", max_new_tokens=TOKENS,
                               repeats=2, warmup=0, engines=("vllm",))
        tracemalloc.start()
        try:
            report = runner.run_to_report(request, store)
            began = time.monotonic()
            text = report.to_json()
            took = time.monotonic() - began
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    arm = next(a for a in json.loads(text)["arms"] if a["name"] == "vllm ngram")
    assert ngram_url in arm["error"] and "cannot be true" in arm["error"], arm["error"]
    assert took < 2.0, f"the report took {took:.2f} s to build"
    assert peak < 0.5 * 2**30, f"{peak / 2**30:.2f} GB at the peak"
    print(f"report built in {took:.3f} s; Python's peak {peak / 2**10:.0f} KiB over the run and the report")
