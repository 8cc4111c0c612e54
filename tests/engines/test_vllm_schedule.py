"""A draft length per batch size (vLLM's num_speculative_tokens_per_batch_size): the ranges checked and built from
measured levels, the arm that carries them (label, --speculative-config, refusals), the `vllm serve` line, the
check's plan, and a fake vLLM serving the check at levels 1 and 4. The test marked `real` serves a schedule on the
bundled target with ngram (ASSISTLAB_VLLM_PYTHON)."""

from __future__ import annotations

import json
import os
import shlex

import pytest
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.config import BenchRequest
from assistlab.engines import registry
from assistlab.engines.vllm import engine, server, tuning
from assistlab.engines.vllm import schedule as schedules
from assistlab.engines.vllm.schedule import Schedule
from assistlab.engines.vllm.schedule_plan import SchedulePlan
from assistlab.engines.vllm.arms import VllmArm
from assistlab.errors import InputError
from assistlab.history import derive
from assistlab.measure.schedule_check import check_schedule

# ---------------------------------------------------------------- the ranges


def test_a_schedule_reads_as_vllm_does_and_k_at_each_size():
    plan = Schedule.checked([[1, 2, 4], (3, 16, 2), [17, 64, 1]])
    assert plan.ranges == ((1, 2, 4), (3, 16, 2), (17, 64, 1))
    assert [plan.k_at(n) for n in (1, 2, 3, 16, 17, 64, 200)] == [4, 4, 2, 2, 1, 1, 1]
    assert plan.largest == 4
    assert plan.words() == "k=4 for 1-2, 2 for 3-16, 1 for 17-64 at once"
    assert plan.text() == "1-2:4,3-16:2,17-64:1"
    assert plan.as_list() == [[1, 2, 4], [3, 16, 2], [17, 64, 1]]
    assert Schedule.parse("1-2:4, 3-16:2,17-64:1") == plan
    assert Schedule.parse("1:3,2-8:1").ranges == ((1, 1, 3), (2, 8, 1))
    assert Schedule.checked(plan) is plan and Schedule(plan.ranges) == plan
    assert hash(Schedule(plan.ranges)) == hash(plan)  # an arm that carries one keys a dict


@pytest.mark.parametrize("value, words", [
    ([], "must be a list of ranges"),
    ("1-2:4", "must be a list of ranges"),
    ([[2, 4, 3]], "range 2-4 should start at batch size 1"),
    ([[1, 2, 3], [4, 8, 2]], "range 4-8 should start at 3, right after the one before"),
    ([[1, 4, 3], [3, 8, 2]], "range 3-8 should start at 5"),
    ([[1, 4, 3], [5, 4, 2]], "must end at or after its start"),
    ([[1, 4, 65]], "must be from 1 to 64; got 65"),
    ([[1, 4, -1]], "got -1"),
    ([[1, 4, 2], [5, 8, 0]], "A K of 0 for batch sizes 5-8 in the schedule does not make vLLM serve plain"),
    ([[1, 4]], "three whole numbers"),
    ([[1, 4, 2.5]], "whole numbers; got 2.5"),
    ([[1, True, 2]], "whole numbers; got True"),
    ([[1, 70000, 2]], "at most at batch size 65536"),
])
def test_bad_schedules_are_one_sentence_naming_the_schedule(value, words):
    with pytest.raises(InputError) as caught:
        Schedule.checked(value)
    assert words in str(caught.value) and "schedule" in str(caught.value)
    assert str(caught.value).count(". ") == 0  # one sentence


@pytest.mark.parametrize("text, words", [("1-2", "needs its K after a colon"), ("1-x:2", "FIRST-LAST:K"),
                                         ("", "must be a list of ranges")])
def test_bad_schedule_texts_say_the_form(text, words):
    with pytest.raises(InputError, match=words):
        Schedule.parse(text)


@pytest.mark.parametrize("best, top, ranges", [
    ({1: 4, 4: 2}, None, ((1, 2, 4), (3, 4, 2))),  # √(1·4) = 2: sizes 1-2 take level 1's K
    ({1: 4, 4: 2}, 64, ((1, 2, 4), (3, 64, 2))),
    ({1: 5, 2: 4, 4: 3, 8: 1}, 16, ((1, 1, 5), (2, 2, 4), (3, 5, 3), (6, 16, 1))),  # √2 → 1, √8 → 2, √32 → 5
    ({4: 3, 16: 1}, 32, ((1, 8, 3), (9, 32, 1))),  # below the lowest level: its K; √64 = 8
    ({1: 4, 4: 4, 16: 2}, None, ((1, 8, 4), (9, 16, 2))),  # the same K merged
    ({3: 2, 5: 1}, None, ((1, 3, 2), (4, 5, 1))),  # √15 = 3.87: 3 goes to level 3
])
def test_from_levels_puts_each_boundary_at_the_geometric_midpoint(best, top, ranges):
    assert Schedule.from_levels(best, top).ranges == ranges


def test_from_levels_refuses_what_cannot_be_a_schedule():
    with pytest.raises(InputError, match="at least one measured load level"):
        Schedule.from_levels({})
    with pytest.raises(InputError, match="from the highest level measured \\(4\\)"):
        Schedule.from_levels({1: 2, 4: 1}, max_batch=2)
    with pytest.raises(InputError, match="A K of 0 for batch sizes 1-4 in the schedule built from the measured "
                                         "levels does not make vLLM serve plain there"):
        Schedule.from_levels({1: 0, 4: 0})


def test_too_old_and_refusal_words():
    assert schedules.too_old("0.31.2") and schedules.too_old("0.9.1")
    assert not schedules.too_old("0.32.0") and not schedules.too_old("0.32.1+cpu") and not schedules.too_old("1.0.0")
    assert not schedules.too_old("0.0-fake") and not schedules.too_old(None)  # unknown: tried, vLLM answers
    plan = Schedule(((1, 2, 4), (3, 8, 2)))
    said = schedules.refusal("ngram", plan, "The vLLM server exited; Its last lines: ValueError: Batch-size ranges "
                             "must be non-overlapping and sorted.")
    assert said.startswith("vLLM refused the schedule of draft lengths (num_speculative_tokens_per_batch_size "
                           "1-2:4,3-8:2) for the ngram method") and "non-overlapping" in said
    assert schedules.refusal("ngram", plan, "The vLLM server exited; KV cache memory is too small") is None


# ---------------------------------------------------------------- the arm that carries one


def test_an_arm_with_a_schedule_says_it_and_hands_it_to_vllm():
    arm = VllmArm("ngram", schedule=[[1, 2, 4], [3, 16, 2]])
    assert arm.schedule == Schedule(((1, 2, 4), (3, 16, 2))) and arm.num_speculative_tokens == 4
    assert VllmArm("ngram", schedule=arm.schedule) == arm and hash(VllmArm("ngram", schedule=arm.schedule)) == hash(arm)
    assert arm.label == "vllm ngram (k=4 for 1-2, 2 for 3-16 at once, lookup 2-4)"
    assert arm != VllmArm("ngram", 4) and arm.label != VllmArm("ngram", 4).label
    config = arm.speculative_config()
    assert config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                      "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 16, 2]]}
    argv = server.server_args("/m", "m", 8000, "float32", config, 2048, 0.3, max_num_seqs=16)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == config
    spec = arm.to_dict()
    assert json.loads(json.dumps(spec)) == spec and spec["schedule"] == [[1, 2, 4], [3, 16, 2]]
    assert VllmArm("ngram", 3).to_dict()["schedule"] is None
    # the history names it as the arm does, apart from the fixed K of its largest
    assert derive._vllm_pairing("ngram", spec)[2] == arm.label
    assert derive._vllm_pairing("ngram", {**spec, "schedule": [[2, 3, 1]]})[2] == "vllm ngram (k=4, lookup 2-4)"
    head = VllmArm("eagle3", draft_model="org/head", schedule=((1, 4, 3), (5, 8, 1)))
    assert head.label == "vllm eagle3: head (k=3 for 1-4, 1 for 5-8 at once)"
    assert head.speculative_config("/heads/h")["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 8, 1]]


@pytest.mark.parametrize("kwargs, words", [
    (dict(method="ngram", num_speculative_tokens=3, schedule=[[1, 2, 4], [3, 8, 2]]),
     "num_speculative_tokens (3) must be the schedule's largest K (4)"),
    (dict(method="plain", schedule=[[1, 2, 4]]), "vLLM plain does not draft"),
    (dict(url="http://127.0.0.1:8000", name="spec", schedule=[[1, 2, 4]]), "server spec was started with its own"),
    (dict(method="ngram", schedule=[[1, 2, 4], [4, 8, 2]]), "range 4-8 should start at 3"),
])
def test_an_arm_s_bad_schedule_is_one_sentence(kwargs, words):
    with pytest.raises(InputError, match=words.replace("(", "\\(").replace(")", "\\)")):
        VllmArm(**kwargs)


# ---------------------------------------------------------------- the deployment line


def test_the_vllm_serve_line_carries_the_arm_s_config():
    fixed = tuning.deploy(VllmArm("ngram", 3, 1, 3), "google/gemma-3-270m-it")
    assert fixed["argv"][:3] == ["vllm", "serve", "google/gemma-3-270m-it"]
    assert fixed["command"] == ("vllm serve google/gemma-3-270m-it --speculative-config "
                                "'{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_min\":1,"
                                "\"prompt_lookup_max\":3}'")
    assert shlex.split(fixed["command"]) == fixed["argv"] and fixed["notes"] == []
    timed = VllmArm("ngram", schedule=[[1, 2, 4], [3, 16, 2]])
    line = tuning.deploy(timed, "org/t", max_num_seqs=16)
    argv = shlex.split(line["command"])
    assert argv[3:5] == ["--max-num-seqs", "16"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == timed.speculative_config()
    assert "last K (2) holds past batch size 16" in line["notes"][0]
    suffix = tuning.deploy(VllmArm("suffix"), "org/t")
    assert "suffix_decoding_max_cached_requests" not in suffix["speculative_config"]  # a deployment keeps the cache
    assert "without its cache" in suffix["notes"][0]
    assert VllmArm("suffix").speculative_config()["suffix_decoding_max_cached_requests"] == 0  # the timing did not
    draft = tuning.deploy(VllmArm("draft_model", 2, draft_model="org/small"), "org/t", draft_folder="/models/small")
    assert draft["speculative_config"]["model"] == "/models/small"
    assert tuning.deploy(VllmArm("plain"), "org/t")["command"] == "vllm serve org/t"
    with pytest.raises(InputError, match="its own command line is its deployment"):
        tuning.deploy(VllmArm(url="http://127.0.0.1:8000", name="plain"), "org/t")


# ---------------------------------------------------------------- the check's plan


def test_the_plan_times_plain_each_level_s_best_k_and_the_schedule():
    base = BenchRequest(target="target", arms=(VllmArm("plain"),), prompt="p", max_new_tokens=8, engines=("vllm",),
                        repeats=7, load_rounds=3, band=0.05)
    plan = registry.SCHEDULES.plan(base, VllmArm("ngram", 1, 1, 3), {1: 4, 4: 2, 16: 2, 64: 1})
    assert plan.schedule.ranges == ((1, 2, 4), (3, 32, 2), (33, 64, 1))
    assert [a.label for a in plan.request.arms] == [
        "vllm plain", "vllm ngram (k=4, lookup 1-3)", "vllm ngram (k=2, lookup 1-3)",
        "vllm ngram (k=1, lookup 1-3)",
        "vllm ngram (k=4 for 1-2, 2 for 3-32, 1 for 33-64 at once, lookup 1-3)"]
    assert plan.request.concurrency == (1, 4, 16, 64) and plan.request.load_rounds == 3
    assert (plan.request.repeats, plan.request.warmup, plan.request.band) == (1, 0, 0.05)
    assert sorted(plan.fixed) == [1, 4, 16, 64] and plan.ks() == {1: 4, 4: 2, 16: 2, 64: 1}
    mine, fixed = plan.specs()
    assert mine["schedule"] == [[1, 2, 4], [3, 32, 2], [33, 64, 1]] and fixed[4] == fixed[16]
    record = plan.record()
    assert record["ranges"] == mine["schedule"] and record["best_k_by_level"] == {"1": 4, "4": 2, "16": 2, "64": 1}
    assert record["speculative_config"]["num_speculative_tokens_per_batch_size"] == mine["schedule"]
    # five servers at once (plain, three distinct K, the schedule): within a limit of five, one comparison;
    # under it, one per level of three servers, each with the schedule built from every level
    assert plan.parts() == [plan] and plan.parts(5) == [plan]
    parts = plan.parts(4)
    assert parts == plan.per_level() and [p.request.concurrency for p in parts] == [(1,), (4,), (16,), (64,)]
    assert all(len(p.request.arms) == 3 and p.schedule == plan.schedule for p in parts)
    assert parts[1].ks() == {4: 2} and parts[1].specs() == (mine, {4: fixed[4]})
    with pytest.raises(InputError, match="not plain or an operator's server"):
        SchedulePlan.build(base, VllmArm("plain"), {1: 2})


# ---------------------------------------------------------------- a fake vLLM serves the check


def _base(**kw) -> BenchRequest:
    return BenchRequest(target="target", arms=(VllmArm("plain"),), prompt="write me a long essay", max_new_tokens=6,
                        engines=("vllm",), load_rounds=2, **kw)


def _run(generator):
    events = []
    try:
        while True:
            events.append(next(generator))
    except StopIteration as done:
        return events, done.value


def test_a_fake_vllm_serves_the_check_at_levels_1_and_4(store, allowed_models, fake_vllm_python, tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    before = set(vllm_processes())
    events, out = _run(check_schedule(_base(), VllmArm("ngram", 1, 1, 3), {1: 3, 4: 1}, store))
    assert events[-1].kind == "done" and out["report"].to_dict()["status"] == "complete"
    assert own_vllm_processes(before) == []
    configs = [json.loads(a[a.index("--speculative-config") + 1]) for a in
               map(json.loads, (tmp_path / "argv.jsonl").read_text().splitlines()) if "--speculative-config" in a]
    assert {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3,
            "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4, 1]]} in configs
    assert len(configs) == 3  # k=3, k=1 and the schedule; plain has none
    assert out["schedule"]["ranges"] == [[1, 2, 3], [3, 4, 1]]
    checked = out["schedule_check"]
    assert checked["refused"] is None and checked["band"] == 0.03
    assert [(r["concurrency"], r["schedule_k"], r["fixed_k"]) for r in checked["levels"]] == [(1, 3, 3), (4, 1, 1)]
    for row in checked["levels"]:
        assert row["failed"] is None and row["ratio"]["n"] == 2 and row["schedule_tokens_per_s"] > 0
        assert row["fixed_arm"] == f"vllm ngram (k={row['fixed_k']}, lookup 1-3)" and row["sentence"]


def test_a_check_that_would_start_more_servers_than_the_search_runs_one_level_at_a_time(
        store, allowed_models, fake_vllm_python, tmp_path, monkeypatch):
    """At most three servers at a time (the search's own count): level 1 with plain, k=3 and the schedule, then
    level 4 with plain, k=1 and the schedule; the same rows as the whole check, and a count of runs that only
    goes up."""
    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    before = set(vllm_processes())
    events, out = _run(check_schedule(_base(), VllmArm("ngram", 1, 1, 3), {1: 3, 4: 1}, store, max_servers=3))
    assert own_vllm_processes(before) == []
    starts = [a[a.index("--max-num-seqs") + 1] for a in
              map(json.loads, (tmp_path / "argv.jsonl").read_text().splitlines())]
    assert starts == ["1"] * 3 + ["4"] * 3  # each level's three servers, sized for that level
    checked = out["schedule_check"]
    assert checked["checked_by_level"] is True and len(out["reports"]) == 2 and checked["refused"] is None
    assert [(r["concurrency"], r["schedule_k"], r["fixed_k"]) for r in checked["levels"]] == [(1, 3, 3), (4, 1, 1)]
    assert all(r["failed"] is None and r["ratio"]["n"] == 2 for r in checked["levels"])
    done = [e.done for e in events]
    assert done == sorted(done) and done[-1] > max(e.done for e in events if e.report is out["reports"][0])
    assert out["schedule"]["ranges"] == [[1, 2, 3], [3, 4, 1]]


def test_a_schedule_vllm_refuses_is_its_sentence_and_the_fixed_arms_still_run(store, allowed_models,
                                                                               fake_vllm_python, monkeypatch):
    monkeypatch.setenv("FAKE_REFUSE_SCHEDULE", "1")
    before = set(vllm_processes())
    _, out = _run(check_schedule(_base(), VllmArm("ngram", 1, 1, 3), {1: 3, 4: 1}, store))
    data = out["report"].to_dict()
    assert own_vllm_processes(before) == []
    errors = {a["name"]: a["error"] for a in data["arms"]}
    refused = errors["vllm ngram (k=3 for 1-2, 1 for 3-4 at once, lookup 1-3)"]
    assert refused.startswith("vLLM refused the schedule of draft lengths (num_speculative_tokens_per_batch_size "
                              "1-2:3,3-4:1) for the ngram method, so this arm was not timed")
    assert "first batch-size range must start at 1" in refused
    assert [n for n, e in errors.items() if e] == ["vllm ngram (k=3 for 1-2, 1 for 3-4 at once, lookup 1-3)"]
    assert {e["concurrency"] for e in data["load"] if e["arm"] == "vllm ngram (k=1, lookup 1-3)"} == {1, 4}
    checked = out["schedule_check"]
    assert checked["refused"] == refused and checked["all_within_band"] is None
    assert all(r["failed"] == refused and r["ratio"] is None for r in checked["levels"])


def test_a_vllm_older_than_0_32_is_not_asked_to_serve_a_schedule(monkeypatch):
    python = server.VllmPython("/usr/bin/false", "0.31.2", None, None)
    arm = VllmArm("ngram", schedule=[[1, 2, 3], [3, 4, 1]])
    endpoint = engine.Endpoint(arm, arm.label)
    monkeypatch.setattr(server, "start", lambda *a, **k: pytest.fail("no server may start"))
    engine.start_servers([endpoint], python, "/m", "float32", 2048, {}, "m", sequences=4)
    assert endpoint.error == ("vLLM 0.31.2 cannot serve a schedule of draft lengths (num_speculative_tokens_per_"
                              "batch_size came in vLLM 0.32); upgrade the vLLM in ASSISTLAB_VLLM_PYTHON, or time a "
                              "fixed K.")


# ---------------------------------------------------------------- real vLLM (ASSISTLAB_VLLM_PYTHON)


@pytest.mark.slow
def test_real_vllm_serves_a_schedule_with_ngram_at_levels_1_and_4(store, real_vllm):
    """The bundled target with ngram and the schedule k=2 for 1-2, 1 for 3-4 beside vLLM plain: the server
    starts with it (vLLM accepted it), answers every request at levels 1 and 4 with the target's tokens, and
    nothing is left after."""
    from assistlab.engines import catalog
    from assistlab.measure import runner

    arm = VllmArm("ngram", None, 1, 3, schedule=((1, 2, 2), (3, 4, 1)))
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"), arm),
                           prompt="Repeat after me: the cat sat on the mat, the cat sat on the mat,",
                           chat_template=False, max_new_tokens=16, repeats=1, warmup=0, engines=("vllm",),
                           concurrency=(1, 4), load_rounds=1, stop_rule="fixed")
    before = set(vllm_processes())
    data = runner.run_to_report(request, store).to_dict()
    assert own_vllm_processes(before) == []
    assert data["status"] == "complete", data["message"]
    assert [a["error"] for a in data["arms"]] == [None, None], data["arms"]
    served = data["environment"]["engines"]["vllm"]["servers"][arm.label]
    assert served["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 2], [3, 4, 1]]
    assert served["max_num_seqs"] == 4
    mine = {e["concurrency"]: e for e in data["load"] if e["arm"] == arm.label}
    assert sorted(mine) == [1, 4]
    for level, entry in mine.items():
        assert entry["failed"] is None and entry["requests"] == level and entry["output_tokens_per_s"] > 0
        assert entry["outputs_identical"] is True  # greedy: the schedule keeps the target's tokens
    # The server drafted by the schedule: up to 2 tokens a step alone, 1 while 3 or 4 requests ran (2 only in
    # steps where fewer were left), never more than the schedule's largest K.
    index = next(i for i, a in enumerate(data["arms"]) if a["name"] == arm.label)
    counts = {r["concurrency"]: r["counts"] for r in data["load_raw"]["rounds"] if r["arm"] == index}
    assert 0 < counts[1]["drafts"] < counts[1]["draft_tokens"] <= 2 * counts[1]["drafts"], counts
    assert counts[4]["drafts"] <= counts[4]["draft_tokens"] < 2 * counts[4]["drafts"], counts
    print(f"\nvLLM {real_vllm.vllm}: {[(c, e['output_tokens_per_s'], e['acceptance']) for c, e in mine.items()]}")
