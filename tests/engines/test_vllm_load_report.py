"""Real vLLM under load, end to end: a comparison of a plain and an ngram server at levels 1 and 4 gives every
field of the report's `load` and `load_summary`, both charts draw from it, and no server is left, with servers
AssistLab starts and with servers the test starts itself (the operator's mode). Kept short: 8 new tokens,
2 rounds per level."""

from __future__ import annotations

import pytest
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers import bundled
from assistlab.engines.vllm import server
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner
from assistlab.views.load import load_html, load_pareto_figure, load_speedup_figure

pytestmark = pytest.mark.slow

PROMPT = "Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat,"
FIELDS = {"arm", "engine", "concurrency", "requests", "output_tokens_per_s", "per_user_tokens_per_s", "ttft_s",
          "itl_s", "e2e_s", "speedup", "acceptance", "client_cpu_s", "failed"}


def _request(arms) -> BenchRequest:
    return BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=PROMPT, chat_template=False,
                        max_new_tokens=8, repeats=2, warmup=1, engines=("vllm",), concurrency=(1, 4), load_rounds=2)


def _check(data: dict) -> None:
    assert data["status"] == "complete", data["message"]
    load = data["load"]
    assert [(e["arm"].split(" (")[0], e["concurrency"]) for e in load] == [
        ("vllm plain", 1), ("vllm ngram", 1), ("vllm plain", 4), ("vllm ngram", 4)]
    for e in load:
        assert FIELDS <= set(e) and e["failed"] is None, e
        assert e["requests"] == 2 * e["concurrency"] and e["output_tokens_per_s"] > 0
        for figure in ("ttft_s", "itl_s", "e2e_s"):
            assert set(e[figure]) == {"p50", "p90", "p99"} and e[figure]["p50"] > 0, (figure, e[figure])
        assert e["ttft_s"]["p50"] <= e["e2e_s"]["p50"] and e["client_cpu_s"]["share"] < 0.5
    ngram = [e for e in load if e["arm"].startswith("vllm ngram")]
    for e in ngram:
        assert e["baseline"] == "vllm plain" and e["speedup"]["n"] == 2 and e["speedup"]["median"] > 0
        assert e["acceptance"]["source"] == "per-request" and e["acceptance"]["drafted"] > 0, e["acceptance"]
        assert e["outputs_identical"] is True  # greedy: the same tokens as plain at every level
    summary = data["load_summary"]
    assert summary["levels"] == [1, 4] and summary["rounds"] == 2
    (verdict,) = summary["arms"]
    assert verdict["arm"].startswith("vllm ngram") and "stops_paying_at" in verdict
    assert summary["sentence"].startswith("vllm ngram") and summary["client"]
    speedup, pareto = load_speedup_figure(data), load_pareto_figure(data)
    assert [list(t.x) for t in speedup.data if t.name.startswith("vllm ngram")] == [[1, 4]]
    assert len(pareto.data) == 2 and all(len(t.x) == 2 for t in pareto.data)
    assert summary["sentence"].split(" (")[0] in load_html(data).replace("&nbsp;", " ")


def test_launched_plain_and_ngram_servers_under_load(store, real_vllm):
    before = set(vllm_processes())
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3))), store).to_dict()
    _check(data)
    servers = data["environment"]["engines"]["vllm"]["servers"]
    assert {s["max_num_seqs"] for s in servers.values()} == {4}
    assert own_vllm_processes(before) == []


def test_the_operator_s_servers_under_load(store, real_vllm):
    folder = str(bundled.ensure_converted(catalog.BUNDLED_TARGET))
    started = [server.start(real_vllm, f"the operator's {name} server", folder, catalog.BUNDLED_TARGET, "float32",
                            spec, 2048, max_num_seqs=4)
               for name, spec in (("plain", None), ("ngram", {"method": "ngram", "num_speculative_tokens": 3,
                                                              "prompt_lookup_min": 2, "prompt_lookup_max": 4}))]
    try:
        for s in started:
            s.wait_ready(server.start_timeout())
        arms = (VllmArm(url=started[0].url, name="plain"), VllmArm(url=started[1].url, name="ngram"))
        data = runner.run_to_report(_request(arms), store).to_dict()
    finally:
        for s in started:
            s.stop()
    _check(data)
