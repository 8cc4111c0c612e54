"""vLLM servers in blocks, where there is no sleep mode (vLLM's CPU build) and they do not fit together: the
block order worked out by hand, the plan, and fake servers that log their starts and stops (one running at a
time, each block on a server started afresh and warmed up, no start inside a timed span, the stopping rule
looking at whole cycles, nothing left after a stop)."""

from __future__ import annotations

import pytest
from server_events import GB, events, most_at_once
from server_events import reservation as _server
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.config import BenchRequest
from assistlab.engines.vllm import memory, turns
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import blocks, runner
from assistlab.views.panels import servers_words



def test_the_block_order_mirrors_each_cycle():
    first, second = blocks.halves(0, 30)
    assert (list(first), list(second)) == ([0, 1], [2, 3])
    assert blocks.cycle([0, 1, 2], first, second) == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1]),
                                                      (2, [2, 3]), (1, [2, 3]), (0, [2, 3])]  # A B C C B A
    assert blocks.orders([0, 1, 2], first, second) == [[0, 1, 2], [0, 1, 2], [2, 1, 0], [2, 1, 0]]
    first, second = blocks.halves(4, 5)  # the last cycle of 5 repetitions: one, forward only
    assert (list(first), list(second)) == ([4], [])
    assert blocks.cycle([0, 1], first, second) == [(0, [4]), (1, [4])]
    first, second = blocks.halves(4, 7)
    assert (list(first), list(second)) == ([4, 5], [6])


def test_without_sleep_mode_servers_that_do_not_fit_together_take_turns_in_blocks():
    five = [_server(f"k{k}", 4) for k in range(5)]  # 7 GB each, 35 together; each fits alone in 24
    plan = turns.plan(five, 24 * GB, sleep_mode=False)
    assert plan.design == turns.BLOCKS and plan.refused == {}
    assert plan.words == ("servers took turns in blocks (one at a time, each started afresh for its block; this vLLM "
                          "has no sleep mode): the 5 servers did not fit together in memory (35.0 GB needed, 24.0 GB "
                          "free)")
    # One that cannot fit even alone keeps its sentence; the others take turns.
    plan = turns.plan([_server("plain", 4), _server("ngram", 4), _server("draft", 30)], 10 * GB, sleep_mode=False)
    assert plan.design == turns.BLOCKS and list(plan.refused) == ["draft"]
    # Asked for: blocks on a vLLM without sleep mode.
    asked = turns.plan([_server("plain", 1), _server("ngram", 1)], 100 * GB, sleep_mode=False, force=True)
    assert asked.design == turns.BLOCKS and "as asked" in asked.words
    # Asked for where vLLM sizes the servers itself (ASSISTLAB_VLLM_MEMORY: no reservations): the count decides.
    assert turns.plan([], 100 * GB, sleep_mode=False, force=True, servers=2).design == turns.BLOCKS
    assert turns.plan([], 100 * GB, sleep_mode=True, force=True, servers=2).design == turns.SLEEP
    assert turns.plan([], 100 * GB, sleep_mode=False, force=True, servers=1).design == turns.TOGETHER


def _request(arms, **kw) -> BenchRequest:
    return BenchRequest(target="target", arms=tuple(arms), prompt="write me a long essay", max_new_tokens=6,
                        repeats=kw.pop("repeats", 5), warmup=1, engines=("vllm",), **kw)


@pytest.fixture
def logged(fake_vllm_python, allowed_models, tmp_path, monkeypatch):
    """A fake vLLM without sleep mode (as the CPU build); every server appends its moments to one log."""
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FAKE_EVENT_LOG", str(log))
    monkeypatch.setenv("FAKE_START_S", "0.1")
    monkeypatch.delenv("ASSISTLAB_VLLM_MEMORY", raising=False)
    return log


def _most_running(moments: list[dict]) -> int:
    return most_at_once(moments, ("start",), ("stop",))


def test_servers_that_do_not_fit_run_in_blocks_one_at_a_time(store, logged, monkeypatch):
    # Two servers of about 5.5 GB each (a 1 GiB KV space, the tiny weights, 4.4 GB of processes): 11 GB together.
    monkeypatch.setattr(memory, "available_bytes", lambda: int(8 * GB))
    before = set(vllm_processes())
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3))), store).to_dict()
    assert data["status"] == "complete", data["message"]
    held = data["environment"]["engines"]["vllm"]["turns"]
    assert held["design"] == "blocks" and "the target did not fit twice in memory" in held["words"]
    moments = events(logged)
    assert _most_running(moments) == 1  # one server at a time, from the first start to the last run
    # Cycle 1 (repetitions 1-4): plain, ngram, ngram (the same server), plain; cycle 2 (the 5th): plain (still
    # running), ngram.
    starts = [e["port"] for e in moments if e["event"] == "start"]
    assert len(starts) == 4 and len(set(starts)) == 4  # every block on a server started afresh
    ngram = "vllm ngram (k=3, lookup 2-4)"
    assert held["arms"]["vllm plain"]["starts"] == 2 and held["arms"][ngram]["starts"] == 2
    assert data["orders"] == [[0, 1], [0, 1], [1, 0], [1, 0], [0, 1]]
    # Each fresh server is warmed up before its first counted run: one warm-up per start, then its blocks' runs.
    requests = [e["port"] for e in moments if e["event"] == "request"]
    assert [requests.count(port) for port in starts] == [1 + 2, 1 + 2 + 2, 1 + 2 + 1, 1 + 1]
    # No start nor stop inside a timed run, and the starts are left out of the time budget.
    moments = [e["t"] for e in moments if e["event"] in ("start", "stop")]
    windows = [tuple(w) for arm in data["arms"] for w in arm["wall_windows"] if w]
    assert len(windows) == 10 and not [(t, w) for t in moments for w in windows if w[0] <= t <= w[1]]
    assert data["timing"]["starts_s"] > 0
    said = servers_words(data)
    assert said.startswith("vLLM servers took turns in blocks") and "A B B A" in said
    assert own_vllm_processes(before) == []


def test_the_runs_done_never_pass_the_count_shown_though_every_fresh_server_warms_up(store, logged, monkeypatch):
    """Each block's fresh server is warmed up again (4 starts for 5 repetitions of 2 arms: 4 warm-ups where a
    comparison all at once has 2): the progress line's count grows by them as they come, never "14 of 12"."""
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    seen = [(e.done, e.total, e.most) for e in runner.run_benchmark(
        _request((VllmArm("plain"), VllmArm("ngram", 3))), store)]
    assert all(done <= total <= most for done, total, most in seen), seen
    assert seen[-1][:2] == (4 + 5 * 2, 4 + 5 * 2)  # 4 warm-ups and 10 timed runs, all counted and all done


def test_the_stopping_rule_looks_only_at_whole_cycles(store, logged, monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    looked: list[int] = []

    def decide(request, report, count, elapsed):
        looked.append(count)
        return runner.stop_rules.after_repetition(request, report, count, elapsed)

    comparison = runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3)), repeats=6), store,
                                      decide=decide)
    final = runner.to_the_end(comparison)[0]
    assert final.status == "complete" and looked == [4, 6]  # after each cycle, never inside one


def test_a_stop_inside_a_cycle_keeps_the_whole_cycles_and_leaves_nothing(store, logged, monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    counted = {"runs": 0}

    def should_stop() -> bool:
        return counted["runs"] >= 10  # the 10th counted run is in the second cycle

    final = None
    for event in runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3)), repeats=8), store,
                                      should_stop=should_stop):
        if event.kind == "run" and not event.warmup:
            counted["runs"] += 1
        final = event
    data = final.report.to_dict()
    assert data["status"] == "stopped" and data["counted_repetitions"] == 4
    assert all(len(arm["latencies_s"]) == 4 for arm in data["arms"])
    assert own_vllm_processes(before) == []


def test_the_load_phase_runs_in_blocks_too(store, logged, monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    seen = list(runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3)), repeats=4,
                                              concurrency=(1, 2), load_rounds=2), store))
    data = seen[-1].report.to_dict()
    assert data["status"] == "complete", data["message"]
    # A fresh server's warm-up round again (plain at each level): the count shown grows by it, never passed.
    wrong = [(e.done, e.total, e.most, e.message) for e in seen if e.done > e.total or e.total > (e.most or e.total)]
    assert not wrong, wrong[:3]  # `most` 0: no "at most" shown
    moments = events(logged)
    assert _most_running(moments) == 1
    held = data["environment"]["engines"]["vllm"]["turns"]
    # Repetitions: plain, ngram (both its blocks), plain; then at each level plain (still running), ngram afresh
    # for its two rounds, plain afresh for its second round.
    assert held["arms"]["vllm plain"]["starts"] == 4 and held["arms"]["vllm ngram (k=3, lookup 2-4)"]["starts"] == 3
    load = data["load_raw"]
    assert load["orders"] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert sorted((r["arm"], r["concurrency"], r["round"]) for r in load["rounds"]) == [
        (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 1, 0), (1, 1, 1), (1, 2, 0), (1, 2, 1)]
    assert own_vllm_processes(before) == []


def test_the_time_left_counts_the_server_starts_still_to_come():
    """Three arms, a fake clock: a fresh start (with its warm-up) takes 10 s, a run 1 s. After the first block
    of the first cycle, the time left owes the starts still to come in it (B, C; C's second block shares its
    server, then B and A again: 4) and in the next cycle, which is likely (2 × 3 - 2 = 4)."""
    from types import SimpleNamespace

    from assistlab.measure.progress import Progress

    now = [0.0]
    arms = [SimpleNamespace(info=SimpleNamespace(error=None, left=None)) for _ in range(3)]
    report = SimpleNamespace(orders=[], warmup_orders=[], timing={})
    progress = Progress(total=(1 + 8) * 3)  # a warm-up and 8 likely repetitions of 3 arms
    seen = []

    def enter(index):
        now[0] += 9.0
        return True
        yield

    def run(index, repetition, warmup, position, last):
        now[0] += 1.0
        if not warmup and repetition == 1 and index == 0 and not seen:
            seen.append(progress.untimed_left())
        return False
        yield

    def after(count, untimed_s):
        return count >= 8
        yield

    stopped = yield_all(blocks.repetitions(arms, report, 8, 1, enter, run, after, lambda: now[0], progress))
    assert stopped is False and seen == [10.0 * (4 + 4)]
    assert progress.untimed_left is None  # only while the blocks run
    assert report.timing["starts_s"] == 9.0 * 9 and report.timing["warmup_s"] == 1.0 * 9  # 5 + 4 fresh starts


def yield_all(generator):
    """Run a generator to its end and return its value."""
    while True:
        try:
            next(generator)
        except StopIteration as done:
            return done.value


def test_a_comparison_closed_while_a_block_s_server_starts_leaves_nothing(store, logged, monkeypatch):
    """A cancelled request (the generator closed) while the second block's server is still starting: the wait
    ends at once, not when that server would have answered, and no server is left."""
    import time

    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    comparison = runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3))), store)
    for event in comparison:
        if event.kind == "run" and not event.warmup:  # plain's block is under way: ngram's server will be slow
            monkeypatch.setenv("FAKE_START_S", "30")
        if event.step.startswith("Starting the vLLM server for vllm ngram"):
            break
    began = time.monotonic()
    comparison.close()
    assert time.monotonic() - began < 15  # a start left waiting would take its 30 s
    assert own_vllm_processes(before) == []


def test_an_interrupt_inside_a_cycle_keeps_only_repetitions_every_arm_ran():
    """The command line's second Ctrl-C keeps runner.whole_repetitions: in blocks the orders of the whole cycle
    under way are written before its runs, so every repetition of it may lack an arm, not only the last."""
    from types import SimpleNamespace

    arms = [SimpleNamespace(error=None) for _ in range(2)]
    runs = [SimpleNamespace(arm=a, repetition=r) for r in range(4) for a in (0, 1)]
    runs += [SimpleNamespace(arm=0, repetition=4), SimpleNamespace(arm=0, repetition=5),
             SimpleNamespace(arm=1, repetition=4)]  # cycle 2: A's block (4, 5), then B's cut after 4
    report = SimpleNamespace(orders=[[0, 1]] * 6 + [[1, 0]] * 2, runs=runs, arms=arms)
    assert runner.whole_repetitions(report) == 5


def test_the_load_phase_in_blocks_of_one_round_runs_cycle_after_cycle_and_pairs_blocks(store, logged, monkeypatch):
    """load_block_rounds=1: 3 rounds at each level make two cycles, A B B A then A B, each round a block of its
    own (so an interval has 3 units, not the 2 halves of one cycle), every block after its fresh server's
    warm-up round. Worked out by hand, with plain running after the repetitions' A B B A: level 1 starts ngram,
    plain, ngram; level 2 plain, ngram, plain, ngram."""
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    seen = list(runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3)), repeats=4, concurrency=(1, 2),
                                              load_rounds=3, load_block_rounds=1), store))
    data = seen[-1].report.to_dict()
    assert data["status"] == "complete", data["message"]
    wrong = [(e.done, e.total, e.message) for e in seen if e.done > e.total]
    assert not wrong, wrong[:3]  # each fresh server's warm-up round grows the count shown, never passes it
    assert _most_running(events(logged)) == 1
    held = data["environment"]["engines"]["vllm"]["turns"]
    assert held["arms"]["vllm plain"]["starts"] == 2 + 1 + 2
    assert held["arms"]["vllm ngram (k=3, lookup 2-4)"]["starts"] == 1 + 2 + 2
    load = data["load_raw"]
    assert load["blocks"] == [[0], [1], [2]]
    assert load["orders"] == [[0, 1], [1, 0], [0, 1]] * 2
    ngram = [e for e in data["load"] if e["arm"].startswith("vllm ngram")]
    assert [e["paired_by"] for e in ngram] == ["blocks", "blocks"] and [e["speedup"]["n"] for e in ngram] == [3, 3]
    assert any(n.startswith("The servers ran one at a time, in blocks of 1 round (3 blocks an arm at each level)")
               for n in data["load_summary"]["notes"])
    assert own_vllm_processes(before) == []
