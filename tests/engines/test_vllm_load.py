"""vLLM arms under load: a round of requests sent at once to a fake server (tests/fake_openai.py), each timed,
its acceptance per request or from /metrics, and the faults (a server that falls over, a stop, a level above
what an operator's server serves, figures that are not numbers); servers AssistLab starts serve the highest
level. The test marked `real` starts a plain and an ngram vLLM server (ASSISTLAB_VLLM_PYTHON) at levels 1, 4."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fake_openai import Behaviour, FakeServer
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.config import BenchRequest
from assistlab.engines.base import ArmInfo, LoadResult, RunFailure, unwatched
from assistlab.engines.vllm import arms as varms
from assistlab.engines.vllm import client, engine, memory, server, stream
from assistlab.engines.vllm.arms import VllmArm

TOKENS = 6
PROMPTS = [[1, 2, 3, 4]] * 4
# Three verify steps of k=3 that accepted 0, 1 and 3 drafts: 4 of 9 accepted, positions 0..2 accepted 2, 1, 1.
SPEC = {"mean_acceptance_length": 1 + 4 / 3, "draft_acceptance_rate": 4 / 9, "acceptance_histogram": [1, 1, 0, 1],
        "num_spec_steps": 3, "num_accepted_draft_tokens": 4, "num_draft_tokens": 9, "num_spec_tokens": 3}
SPEC_COUNTS = {"drafts": 3, "draft_tokens": 9, "accepted_tokens": 4, "accepted_per_position": [2, 1, 1]}


def _request(**kw) -> BenchRequest:
    return BenchRequest(target="target", arms=(VllmArm("plain"),), prompt="p", max_new_tokens=TOKENS,
                        engines=("vllm",), concurrency=(1, 4), **kw)


def _arm(url: str, name: str = "plain", api_key: str | None = None) -> engine.ServerArm:
    """The operator's server at `url` as the engine builds its arm (its /v1/models read and checked)."""
    spec = varms.parse_servers([f"{name}={url}"] + ([] if name == "plain" else ["plain=http://127.0.0.1:9"]),
                               api_key=api_key)
    spec = next(a for a in spec if a.name == name)
    endpoint = engine.operator_endpoint(spec, ("target",))
    assert endpoint.error is None, endpoint.error
    info = ArmInfo(endpoint.label, spec.method, engine="vllm", unavailable=list(endpoint.unavailable))
    return engine.ServerArm(info, endpoint, _request())


def _load(arm, prompts=PROMPTS, should_stop=lambda: False):
    return arm.run_load(prompts, 0, time.perf_counter, should_stop, unwatched)


def test_a_round_of_four_is_sent_at_once_and_each_request_timed():
    fake = Behaviour(delay_s=0.03)
    threads = threading.active_count()
    with FakeServer(fake) as url:
        arm = _arm(url)
        assert arm.loads
        result = _load(arm)
    assert isinstance(result, LoadResult), result
    assert result.concurrency == 4 and [r.index for r in result.requests] == [0, 1, 2, 3]
    assert fake.most_in_flight == 4  # all four were in the server at once
    for r in result.requests:
        assert r.tokens == TOKENS and len(r.itl) == TOKENS - 1 and r.token_ids == [7, 8, 9, 10, 11, 12]
        assert 0.02 < r.ttft <= r.latency and r.latency >= TOKENS * 0.03
        assert sum(r.itl) == pytest.approx(r.latency - r.ttft, abs=0.05)  # the gaps from the first token on
        assert r.client_cpu_s >= 0 and 0 <= r.started < 0.5 and r.counts is None
    assert max(r.latency for r in result.requests) <= result.wall_s < sum(r.latency for r in result.requests)
    assert result.counts_source is None and result.counts is None  # a plain arm: no acceptance
    assert all(b["stream_options"] == {"include_usage": True} and b["ignore_eos"] for b in fake.requests)
    assert threading.active_count() == threads  # every request's thread (and its watch) was joined


def test_each_request_s_own_acceptance_is_read_from_its_usage_chunk():
    # The /metrics counters grow too, by other figures: they must not be what is read.
    fake = Behaviour(delay_s=0.01, per_chunk=2, spec_metrics=SPEC, drafts=(1, 1, 1, [1]))
    with FakeServer(fake) as url:
        result = _load(_arm(url, "ngram"))
    assert isinstance(result, LoadResult), result
    assert result.counts_source == "per-request"
    assert [r.counts for r in result.requests] == [SPEC_COUNTS] * 4
    assert result.counts == {"drafts": 12, "draft_tokens": 36, "accepted_tokens": 16,
                             "accepted_per_position": [8, 4, 4]}
    # chunks of two tokens: the second token of the first chunk came with it (gap 0), then 3 gaps of half a chunk
    assert all(len(r.itl) == TOKENS - 1 and r.itl[0] == 0 and r.tokens == TOKENS for r in result.requests)


def test_without_per_request_figures_the_round_reads_metrics_before_and_after():
    fake = Behaviour(delay_s=0.01, drafts=(2, 4, 3, [2, 1]))
    with FakeServer(fake) as url:
        arm = _arm(url, "ngram")
        result = _load(arm)
    assert isinstance(result, LoadResult), result
    assert result.counts_source == "metrics" and all(r.counts is None for r in result.requests)
    assert result.counts == {"drafts": 8, "draft_tokens": 16, "accepted_tokens": 12, "accepted_per_position": [8, 4]}
    with FakeServer(Behaviour(delay_s=0.01, metrics=False)) as url:
        arm = _arm(url, "ngram")
        result = _load(arm)
    assert result.counts_source is None and engine.NO_METRICS in arm.info.unavailable


@pytest.mark.parametrize("mode, words", [("503", "(HTTP 503): {\"error\": \"Server overloaded: more than 3 requests"),
                                         ("drop", "sent 1 of the 6 tokens asked")])
def test_a_server_that_falls_over_at_level_four_fails_that_round_with_its_sentence(mode, words):
    fake = Behaviour(delay_s=0.05, fail_above=3, fail_mode=mode)
    threads = threading.active_count()
    with FakeServer(fake) as url:
        arm = _arm(url)
        assert isinstance(_load(arm, PROMPTS[:1]), LoadResult)  # one at a time it serves
        began = time.monotonic()
        result = _load(arm)
        took = time.monotonic() - began
    assert isinstance(result, RunFailure) and not result.stopped, result
    assert words in result.reason and f"The server at {url}" in result.reason
    assert took < TOKENS * 0.05 + 1  # ended once the round failed, never at a deadline
    assert threading.active_count() == threads


def test_a_stop_mid_round_ends_every_request_at_once():
    fake = Behaviour(delay_s=0.2)
    stop = threading.Event()
    threads = threading.active_count()
    with FakeServer(fake) as url:
        arm = _arm(url)
        timer = threading.Timer(0.5, stop.set)
        timer.start()
        began = time.monotonic()
        result = arm.run_load([[1, 2]] * 4, 0, time.perf_counter, stop.is_set, unwatched)
        took = time.monotonic() - began
        timer.cancel()
        assert fake.disconnected.wait(5)
    assert isinstance(result, RunFailure) and result.stopped and result.reason == "stopped"
    assert took < 6  # 40 chunks of 0.2 s would be 8 s: under that, with room for a busy machine
    assert threading.active_count() == threads


def test_a_level_above_the_operator_server_s_max_num_seqs_is_refused_in_one_sentence():
    fake = Behaviour(delay_s=0.01, max_num_seqs=2)
    with FakeServer(fake) as url:
        arm = _arm(url)
        assert arm.endpoint.max_num_seqs == 2 and arm.endpoint.settings["max_num_seqs"] == 2
        assert isinstance(_load(arm, PROMPTS[:2]), LoadResult)
        sent = len(fake.requests)
        result = _load(arm)
    assert isinstance(result, RunFailure) and not result.stopped
    assert result.reason.startswith("concurrency 4 is more than the 2 requests at once") and "max_num_seqs" in result.reason
    assert result.reason.count(". ") == 0 and len(fake.requests) == sent  # one sentence; nothing was sent
    with FakeServer(Behaviour(max_num_seqs="many")) as url:
        assert _arm(url).endpoint.max_num_seqs is None  # not a whole number: not advertised


@pytest.mark.parametrize("spec", [{**SPEC, "num_spec_steps": -1}, {**SPEC, "acceptance_histogram": [1, "s3cret"]},
                                  {**SPEC, "draft_acceptance_rate": "s3cret"}, "s3cret", [1, 2]])
def test_per_request_figures_that_are_not_numbers_are_refused_in_one_sentence_without_the_key(spec):
    with FakeServer(Behaviour(delay_s=0.0, spec_metrics=spec, api_key="s3cret")) as url:
        result = _load(_arm(url, "ngram", api_key="s3cret"), PROMPTS[:2])
    assert isinstance(result, RunFailure) and not result.stopped
    assert result.reason.startswith(f"The server at {url} sent per-request speculative-decoding metrics that are not")
    assert "s3cret" not in result.reason and result.reason.count(". ") == 0


def test_spec_counts_and_the_versions_that_have_per_request_figures():
    assert stream.spec_counts(SPEC) == SPEC_COUNTS and stream.spec_counts(None) is None
    # a histogram with no step past 1: positions 1 and 2 accepted nothing
    assert stream.spec_counts({**SPEC, "acceptance_histogram": [2, 1, 0, 0]})["accepted_per_position"] == [1, 0, 0]
    has = server.has_per_request_metrics
    assert all(map(has, ["0.32.0", "0.32.1+cpu", "0.33.0.dev4", "1.0.0", "0.32.0rc1", "0.40"]))
    assert not any(map(has, ["0.31.2", "0.32.0.dev3+gabc", "0.0-fake", "None", None, "", "vllm", "0.4"]))
    args = server.server_args("/m", "m", 1, "float32", {"method": "ngram"}, 2048, 0.3, max_num_seqs=8,
                              per_request_metrics=True)
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert args[args.index("--per-request-spec-decode-metrics") + 1] == "summary"
    # vLLM refuses the flag without a speculative config
    assert "--per-request-spec-decode-metrics" not in server.server_args("/m", "m", 1, "float32", None, 2048, 0.3,
                                                                         per_request_metrics=True)


@pytest.fixture
def model_folder(tmp_path):
    """A folder with a config.json the servers' KV cache is sized from: 36,864 bytes a token in float32."""
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256}))
    return str(folder)


def test_started_servers_serve_the_highest_level_with_a_kv_cache_for_it(fake_vllm_python, model_folder, tmp_path,
                                                                        monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.delenv(server.MEMORY_VAR, raising=False)
    monkeypatch.delenv(server.ARGS_VAR, raising=False)
    one = engine._reservation("x", model_folder, None, 2048, "float32")
    four = engine._reservation("x", model_folder, None, 2048, "float32", 4)
    assert four.kv_cache_bytes == 4 * one.kv_cache_bytes == 4 * 2048 * 36_864 * 3 // 2
    python = server.VllmPython(str(fake_vllm_python), "0.32.0", None, None)
    endpoints = [engine.Endpoint(VllmArm("plain"), "vllm plain"), engine.Endpoint(VllmArm("ngram", 3), "vllm ngram")]
    before = set(vllm_processes())
    try:
        engine.start_servers(endpoints, python, model_folder, "float32", 2048, {}, "target", sequences=4)
        engine.wait_all(endpoints, lambda: False, lambda *_: None)
        assert [e.error for e in endpoints] == [None, None] and [e.max_num_seqs for e in endpoints] == [4, 4]
    finally:
        engine.stop_all(endpoints)
    assert own_vllm_processes(before) == []
    plain, ngram = (e.settings for e in endpoints)
    assert plain["max_num_seqs"] == ngram["max_num_seqs"] == 4 and plain["memory"]["kv_cache_bytes"] == four.kv_cache_bytes
    assert plain["per_request_spec_decode_metrics"] is None and ngram["per_request_spec_decode_metrics"] == "summary"
    argv = {("--speculative-config" in a): a for a in map(json.loads, log.read_text().splitlines())}
    assert argv[False][argv[False].index("--max-num-seqs") + 1] == argv[True][argv[True].index("--max-num-seqs") + 1] == "4"
    assert "--per-request-spec-decode-metrics" not in argv[False]
    assert argv[True][argv[True].index("--per-request-spec-decode-metrics") + 1] == "summary"


def test_a_level_whose_kv_cache_does_not_fit_is_refused_before_any_server_starts(fake_vllm_python, model_folder,
                                                                                 tmp_path, monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.delenv(server.MEMORY_VAR, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * memory.GIB)
    python = server.VllmPython(str(fake_vllm_python), "0.0-fake", None, None)
    endpoints = [engine.Endpoint(VllmArm("plain"), "vllm plain")]
    engine.start_servers(endpoints, python, model_folder, "float32", 2048, {}, "target", sequences=1)
    engine.stop_all(endpoints)
    assert endpoints[0].error is None and endpoints[0].server is not None  # one sequence fits in 8 GiB
    endpoints = [engine.Endpoint(VllmArm("plain"), "vllm plain")]
    engine.start_servers(endpoints, python, model_folder, "float32", 2048, {}, "target", sequences=128)
    # 128 sequences of 2,048 tokens × 36,864 B × 1.5: 14.5 GB of KV cache
    assert "KV cache 15.0 GB for 128 requests at once" in endpoints[0].error
    assert "alone needs about 19.4 GB and this machine has 8.6 GB of memory free" in endpoints[0].error
    assert "lower load levels" in endpoints[0].error
    assert endpoints[0].server is None and not log.exists()


# ---------------------------------------------------------------- real vLLM (ASSISTLAB_VLLM_PYTHON)


@pytest.mark.slow
def test_real_plain_and_ngram_servers_under_load(real_vllm):
    """The engine starts a plain and an ngram server for levels 1 and 4 (--max-num-seqs 4); a round of four
    requests on each is timed, the ngram arm's acceptance comes per request; nothing is left after close."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from assistlab.engines import catalog
    from assistlab.engines.base import Preparation
    from assistlab.engines.transformers import bundled

    folder = str(bundled.ensure_converted(catalog.BUNDLED_TARGET))
    ids = AutoTokenizer.from_pretrained(folder)("Repeat after me: the cat sat on the mat, the cat sat on the mat, "
                                                "the cat sat on the mat,")["input_ids"]
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"), VllmArm("ngram", 3)), prompt="p",
                           max_new_tokens=8, engines=("vllm",), concurrency=(1, 4))
    target = SimpleNamespace(name=catalog.BUNDLED_TARGET, folder=folder, tokenizer=None, context_length=None)
    prep = Preparation(request, None, "cpu", "float32", lambda: False, time.monotonic,
                       host=SimpleNamespace(target=target), prompt_tokens=lambda: len(ids))
    before = set(vllm_processes())
    began = time.monotonic()
    vllm = engine.VllmEngine(prep)
    try:
        for _ in vllm.prepare():
            pass
        plain, ngram = vllm.arms()
        assert [plain.info.error, ngram.info.error] == [None, None]
        servers = vllm.environment()["servers"]
        for arm in (plain, ngram):
            argv = arm.endpoint.server.args
            assert argv[argv.index("--max-num-seqs") + 1] == "4" and servers[arm.info.name]["max_num_seqs"] == 4
        assert servers[ngram.info.name]["per_request_spec_decode_metrics"] == (
            "summary" if server.has_per_request_metrics(real_vllm.vllm) else None)
        ready = time.monotonic() - began
        results, single = {}, {}
        for arm in (plain, ngram):
            assert isinstance(arm.run_load([ids], 0, time.perf_counter, lambda: False, unwatched), LoadResult)
            # Level 1 against today's single-request run of the same arm, alternated (printed, not asserted:
            # the machine is shared).
            pairs = [(arm.run(ids, 0, time.perf_counter, lambda: False, unwatched).latency,
                      arm.run_load([ids], 0, time.perf_counter, lambda: False, unwatched).requests[0].latency)
                     for _ in range(3)]
            single[arm.info.name] = [sorted(side)[1] for side in zip(*pairs)]
            results[arm] = arm.run_load([ids] * 4, 1, time.perf_counter, lambda: False, unwatched)
            assert isinstance(results[arm], LoadResult), results[arm]
        body = stream.completion_body(ngram.endpoint.model, ids, 8, usage=True)
        raw = client.stream_completion(ngram.endpoint.url, None, body, time.perf_counter).spec  # for the log
    finally:
        vllm.close()
    took = time.monotonic() - began
    assert own_vllm_processes(before) == []
    texts = {tuple(r.token_ids) for result in results.values() for r in result.requests}
    assert len(texts) == 1  # greedy: every request of both arms gives the target's same 8 tokens
    for result in results.values():
        assert result.concurrency == 4 and result.memory > 0 and result.wall_s > 0
        for r in result.requests:
            assert r.tokens == 8 and len(r.itl) == 7 and 0 < r.ttft <= r.latency and r.client_cpu_s >= 0
    assert results[plain].counts_source is None
    if server.has_per_request_metrics(real_vllm.vllm):
        assert results[ngram].counts_source == "per-request"
        assert all(r.counts["draft_tokens"] >= r.counts["accepted_tokens"] >= 0 for r in results[ngram].requests)
    else:
        assert results[ngram].counts_source == "metrics"
    print(f"\nservers ready in {ready:.0f} s, test {took:.0f} s; ngram per request: "
          f"{[r.counts for r in results[ngram].requests]}; walls plain {results[plain].wall_s:.3f} s, ngram "
          f"{results[ngram].wall_s:.3f} s; one request's own figures: {raw}; median latency run() vs level 1: "
          f"{single}; client CPU per request at 4: "
          f"{[round(r.client_cpu_s, 4) for result in results.values() for r in result.requests]}")
