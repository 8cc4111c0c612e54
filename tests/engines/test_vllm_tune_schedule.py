"""The tuner with load levels on a vLLM method (issue 34): every draft length is timed under load, each level's
best becomes a schedule, and a server with that schedule is started and timed beside each level's best fixed K.
Fake vLLM servers (tests/fake_openai.py) whose speed depends on the draft length and on the requests in flight:
k=4 is the fastest alone, k=2 with four requests at once; a schedule drafts the k of its range."""

from __future__ import annotations

import json

import pytest
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.cli.tune import format_summary
from assistlab.measure import tune, tune_schedule
from assistlab.views.tune import sentence_html

# Seconds per chunk (alone, with others in flight); 8 tokens are 8 chunks plain, 4 with drafts (2 per chunk).
DELAYS = {"0": [0.02, 0.02], "2": [0.03, 0.012], "4": [0.015, 0.03]}


@pytest.fixture
def started(monkeypatch, fake_vllm_python, tmp_path):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.setenv("FAKE_DELAYS_BY_K", json.dumps(DELAYS))

    def configs() -> list[dict | None]:
        out = []
        for line in log.read_text().splitlines():
            argv = json.loads(line)
            out.append(json.loads(argv[argv.index("--speculative-config") + 1])
                       if "--speculative-config" in argv else None)
        return out

    return configs


def _request(**kw):
    return tune.tune_request("target", assistants=[], engines=("vllm",),
                             candidates="vllm ngram:num_speculative_tokens=2,4", prompt="the quick brown fox",
                             max_new_tokens=8, warmup=0, repeats=6, concurrency=(1, 4), load_rounds=3, **kw)


def test_each_level_s_best_k_becomes_a_schedule_that_is_served_and_checked(store, allowed_models, started):
    before = set(vllm_processes())
    events = list(tune.tune(_request(), store))
    report = events[-1].report
    summary = report.tune.to_dict()
    assert events[-1].kind == "done" and report.status == "complete", report.message
    assert summary["recommendation"]["settings"]["num_speculative_tokens"] == 4  # alone, k=4 wins the search
    # Both lengths were timed under load, the one that left the search included.
    loaded = {(e["arm"], e["concurrency"]) for e in report.to_dict()["load"]}
    assert {("vllm ngram (k=2, lookup 2-4)", 4), ("vllm ngram (k=4, lookup 2-4)", 4)} <= loaded
    schedule = summary["schedule"]
    assert schedule["best_k_by_level"] == {"1": 4, "4": 2}
    assert schedule["ranges"] == [[1, 2, 4], [3, 4, 2]]
    served = [c for c in started() if c and "num_speculative_tokens_per_batch_size" in c]
    assert served and all(c["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 4, 2]] for c in served)
    checked = summary["schedule_check"]
    assert checked["refused"] is None
    # The search ran three servers side by side (plain, k=2, k=4); the whole check would start four (plain, both
    # fixed K and the schedule), so it is timed one level at a time, three servers each: plain, that level's
    # best K and the schedule.
    assert checked["checked_by_level"] is True
    check_starts = [None if c is None else c.get("num_speculative_tokens_per_batch_size") or c["num_speculative_tokens"]
                    for c in started()[-6:]]
    # (servers start side by side, so within a level in any order)
    assert [sorted(map(str, check_starts[i:i + 3])) for i in (0, 3)] == [
        sorted(map(str, [None, 4, [[1, 2, 4], [3, 4, 2]]])), sorted(map(str, [None, 2, [[1, 2, 4], [3, 4, 2]]]))]
    assert [(r["concurrency"], r["schedule_k"], r["fixed_k"]) for r in checked["levels"]] == [(1, 4, 4), (4, 2, 2)]
    assert all(r["ratio"]["median"] is not None and r["sentence"] for r in checked["levels"])
    # Said where the person reads: the check's steps on the progress line, its sentences in the CLI and the page.
    assert any(e.message.startswith(tune_schedule.CHECKING) for e in events[:-1])
    assert not any(e.kind == "done" for e in events[:-1])
    assert schedule["sentence"].startswith(
        "Under load, ngram: k=4 for 1–2 requests at once, k=2 for 3–4 requests at once: served")
    assert schedule["sentence"] in report.message
    text = format_summary(summary)
    assert schedule["sentence"] in text and checked["levels"][1]["sentence"] in text
    assert "At 4 requests at once" in sentence_html(report.to_dict())
    assert own_vllm_processes(before) == []


def test_one_best_k_at_every_level_needs_no_schedule(store, allowed_models, started, monkeypatch):
    monkeypatch.setenv("FAKE_DELAYS_BY_K", json.dumps({"0": [0.02, 0.02], "2": [0.03, 0.03], "4": [0.015, 0.015]}))
    report = tune.run_tune(_request(), store)[0]
    schedule = report.tune.schedule
    assert schedule["best_k_by_level"] == {"1": 4, "4": 4}
    assert "a fixed k serves them all" in schedule["sentence"] and report.tune.schedule_check is None
    assert not any(c and "num_speculative_tokens_per_batch_size" in c for c in started())  # nothing checked


def test_a_refused_schedule_is_said_in_a_sentence(store, allowed_models, started, monkeypatch):
    monkeypatch.setenv("FAKE_REFUSE_SCHEDULE", "1")
    report = tune.run_tune(_request(), store)[0]
    checked = report.tune.schedule_check
    assert "batch-size range must start at 1" in checked["refused"]
    assert "vLLM refused the schedule" in report.tune.schedule["sentence"]
    assert report.status == "complete" and report.tune.recommendation is not None  # the search's answer stays


def test_a_check_that_cannot_run_is_said_and_the_searchs_answer_stays(store, allowed_models, started, monkeypatch):
    """A check refused as a whole (here: its plain server would not start, as when memory runs short) is a
    sentence in the schedule's, and the search's answer and load figures are kept."""
    from assistlab.errors import EngineError

    def refused(*args, **kwargs):
        raise EngineError("The plain (unassisted) run could not start: no memory left")
        yield  # a generator, as check_schedule is

    monkeypatch.setattr(tune_schedule, "check_schedule", refused)
    report = tune.run_tune(_request(), store)[0]
    assert report.status == "complete" and report.tune.recommendation is not None
    assert report.tune.schedule_check["failed"] == "The plain (unassisted) run could not start: no memory left"
    assert report.tune.schedule["ranges"] == [[1, 2, 4], [3, 4, 2]]
    assert report.tune.schedule["sentence"].endswith(
        "the check could not run, so the schedule is not verified: The plain (unassisted) run could not start: no "
        "memory left.")


def test_the_search_and_its_check_run_in_blocks_where_servers_cannot_sleep(store, allowed_models, started, tmp_path,
                                                                            monkeypatch):
    """Issue 44: on a vLLM without sleep mode whose servers do not fit together, the search and its schedule
    check still run, one server at a time in blocks (ASSISTLAB_VLLM_TURNS=always stands in for the memory)."""
    from assistlab.engines.vllm import turns

    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FAKE_EVENT_LOG", str(log))
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    report = tune.run_tune(_request(), store)[0]
    assert report.status == "complete", report.message
    assert report.to_dict()["environment"]["engines"]["vllm"]["turns"]["design"] == "blocks"
    from server_events import events, most_at_once

    assert most_at_once(events(log), ("start",), ("stop",)) == 1  # never two servers at once, search and check alike
    assert report.tune.schedule["best_k_by_level"] == {"1": 4, "4": 2}
    checked = report.tune.schedule_check
    assert checked["refused"] is None and all(r["ratio"]["median"] is not None for r in checked["levels"])
    # In blocks the check times each round as a block of its own: its ratios pair blocks, as many as rounds.
    rounds = _request().load_rounds
    assert [(r["paired_by"], r["ratio"]["n"]) for r in checked["levels"]] == [("blocks", rounds)] * 2
    assert checked["assumption"].startswith("independent blocks")
    assert own_vllm_processes(before) == []
