"""results/load.py on rounds made up by hand: speedups' direction, percentiles, where assistance stops paying,
failed levels, too few rounds said honestly; the report's `load`, `load_summary` and CSV rows."""

import csv
import io

import pytest

from assistlab.engines.base import ArmInfo, RequestRecord
from assistlab.results import load
from assistlab.results.load import LoadRecord, LoadRound
from assistlab.results.report import Report, RunRecord

pytestmark = pytest.mark.fast

ARMS = [ArmInfo("plain", "plain"), ArmInfo("vllm plain", "plain", engine="vllm"),
        ArmInfo("vllm ngram", "ngram", engine="vllm")]


def rnd(arm, level, r, wall, tokens=10, latencies=None, counts=None, source=None):
    latencies = latencies or [wall] * level
    requests = [RequestRecord(i, 0.0, lat, lat / 4, [0.01, 0.03], tokens, 0.001, counts) for i, lat in enumerate(latencies)]
    return LoadRound(arm, level, r, wall, requests, source, None, 0)


def record(walls: dict, rounds=5, levels=(1, 2, 4)) -> LoadRecord:
    """walls: level -> (plain wall, ngram wall); round r adds r% to both, so pairs move together."""
    out = LoadRecord(levels=levels, rounds_asked=rounds, arms=[1, 2], done=list(levels))
    for level in levels:
        plain, ngram = walls[level]
        for r in range(rounds):
            out.rounds.append(rnd(1, level, r, plain * (1 + r / 100)))
            out.rounds.append(rnd(2, level, r, ngram * (1 + r / 100) * (1 + (r - 2) / 1000)))
    return out


def test_a_faster_assisted_arm_has_a_speedup_above_one_in_throughput_and_latency():
    entries = load.entries(record({1: (2.0, 1.0), 2: (2.0, 1.0), 4: (2.0, 1.0)}), ARMS)
    ngram = [e for e in entries if e["arm"] == "vllm ngram"]
    assert all(1.99 < e["speedup"]["median"] < 2.01 for e in ngram)
    assert all(1.99 < e["latency_speedup"]["median"] < 2.01 for e in ngram)
    assert all(e["speedup"]["level"] == 0.9375 and e["speedup"]["ci_low"] > 1 for e in ngram)
    plain = entries[0]
    assert plain["arm"] == "vllm plain" and plain["speedup"] is None and plain["acceptance"] is None
    assert plain["output_tokens_per_s"] == pytest.approx(10 / 2.04)  # median round: 10 tokens over 2 * 1.02 s


def test_it_helps_at_every_level_measured():
    parts = load.report_parts(record({1: (2.0, 1.0), 2: (2.0, 1.5), 4: (2.0, 1.8)}), ARMS)
    arm = parts["load_summary"]["arms"][0]
    assert arm["stops_paying_at"] is None and arm["helps_at"] == [1, 2, 4] and arm["costs_at"] == []
    assert arm["sentence"].startswith("vllm ngram helps at every level measured (1, 2, 4: 2.00× at 1, 1.33× at 2")
    assert parts["load_summary"]["sentence"] == arm["sentence"] and arm["baseline"] == "vllm plain"


def test_it_stops_paying_where_the_interval_reaches_one():
    arm = load.report_parts(record({1: (2.0, 1.0), 2: (2.0, 2.0), 4: (2.0, 4.0)}), ARMS)["load_summary"]["arms"][0]
    assert arm["stops_paying_at"] == 2 and arm["helps_at"] == [1] and arm["costs_at"] == [4]
    assert arm["sentence"] == ("vllm ngram helps up to 1 concurrent request (2.00× at 1), is not clearly faster at 2 "
                               "(1.00×, interval 1.00–1.00× at 93.75%, which contains 1×) and costs throughput at 4 (0.50×).")


def test_costs_from_the_first_level_on():
    arm = load.report_parts(record({1: (1.0, 2.0), 2: (1.0, 2.0), 4: (1.0, 2.0)}), ARMS)["load_summary"]["arms"][0]
    assert arm["stops_paying_at"] == 1 and arm["sentence"] == "vllm ngram costs throughput from 1 on (0.50× at 1)."


def test_too_few_rounds_have_no_real_interval_and_say_so():
    arm = load.report_parts(record({1: (2.0, 1.0), 2: (2.0, 1.0), 4: (2.0, 1.0)}, rounds=3),
                            ARMS)["load_summary"]["arms"][0]
    assert arm["stops_paying_at"] == 1 and arm["helps_at"] == []
    assert "3 rounds give only a 75% range, too few to be sure (5 rounds give a 93.75% interval)" in arm["sentence"]


def test_a_failed_level_has_its_sentence_and_no_figures():
    rec = record({1: (2.0, 1.0), 2: (2.0, 1.0), 4: (2.0, 1.0)})
    rec.rounds = [r for r in rec.rounds if not (r.arm == 2 and r.concurrency == 4)]
    rec.failures[(2, 4)] = "its server answered 503."
    entry = [e for e in load.entries(rec, ARMS) if e["arm"] == "vllm ngram"][-1]
    assert entry["failed"] == "its server answered 503." and entry["rounds"] == 0 and entry["requests"] == 0
    assert entry["speedup"]["median"] is None and entry["ttft_s"] == {"p50": None, "p90": None, "p99": None}
    arm = load.summary(rec, ARMS, load.entries(rec, ARMS))["arms"][0]
    assert arm["stops_paying_at"] == 4 and arm["helps_at"] == [1, 2]
    assert arm["sentence"] == ("vllm ngram helps up to 2 concurrent requests (2.00× at 2) and has no result at 4: "
                               "its server answered 503.")


def test_percentiles_over_the_levels_requests():
    assert load.percentiles(list(range(1, 11))) == pytest.approx({"p50": 5.5, "p90": 9.1, "p99": 9.91})
    rec = LoadRecord(levels=(4,), rounds_asked=1, arms=[1, 2], done=[4])
    rec.rounds.append(rnd(1, 4, 0, 4.0, latencies=[1.0, 2.0, 3.0, 4.0]))
    counts = [{"drafts": 2, "draft_tokens": 6, "accepted_tokens": a, "accepted_per_position": [2, a - 2, 0]}
              for a in (2, 3, 4, 5)]
    other = rnd(2, 4, 0, 2.0, latencies=[0.5, 1.0, 1.5, 2.0], source="per-request")
    for q, c in zip(other.requests, counts):
        q.counts = c
    rec.rounds.append(other)
    plain, ngram = load.entries(rec, ARMS)
    assert plain["e2e_s"] == pytest.approx({"p50": 2.5, "p90": 3.7, "p99": 3.97})
    assert plain["ttft_s"]["p50"] == pytest.approx(2.5 / 4) and plain["itl_s"]["p50"] == pytest.approx(0.02)
    assert plain["per_user_tokens_per_s"] == pytest.approx((10 / 2 + 10 / 3) / 2)
    assert plain["client_cpu_s"] == pytest.approx({"per_request": 0.001, "total": 0.004, "share": 0.001})
    acc = ngram["acceptance"]
    assert acc["source"] == "per-request" and acc["drafted"] == 24 and acc["accepted"] == 14 and acc["note"] is None
    assert acc["rate"] == pytest.approx(14 / 24) and acc["per_position"] == pytest.approx([1.0, 6 / 8, 0.0])
    assert acc["per_request_rate"]["p50"] == pytest.approx(3.5 / 6)
    assert ngram["speedup"]["median"] == 2.0 and ngram["latency_speedup"]["median"] == 2.0


def test_acceptance_from_the_metrics_says_others_are_counted_too():
    rec = LoadRecord(levels=(2,), rounds_asked=1, arms=[1, 2], done=[2])
    rec.rounds.append(rnd(1, 2, 0, 1.0))
    rec.rounds.append(LoadRound(2, 2, 0, 1.0, rnd(2, 2, 0, 1.0).requests, "metrics",
                                {"drafts": 4, "draft_tokens": 12, "accepted_tokens": 6, "accepted_per_position": [4, 2, 0]}))
    acc = load.entries(rec, ARMS)[1]["acceptance"]
    assert acc["source"] == "metrics" and acc["rate"] == 0.5 and acc["per_request_rate"] is None
    assert "another client of the same server would be counted too" in acc["note"]


CONTRACT_FIELDS = {"arm", "arm_index", "engine", "baseline", "concurrency", "rounds", "requests", "failed",
                   "output_tokens_per_s", "output_tokens_per_s_rounds", "per_user_tokens_per_s", "ttft_s", "itl_s",
                   "e2e_s", "speedup", "latency_speedup", "acceptance", "client_cpu_s"}


def report_with_load(levels=(1, 2)) -> Report:
    report = Report(request={"concurrency": list(levels)}, environment={}, arms=list(ARMS))
    for arm in range(3):
        report.runs.append(RunRecord(arm, 0, 1.0, 4, 0.1, [0.1, 1.0], [1, 3], [], [], [1, 2, 3, 4], "text"))
    report.load = record({1: (2.0, 1.0), 2: (2.0, 1.5)}, levels=levels)
    return report


def test_the_report_has_every_contract_field():
    data = report_with_load().to_dict()
    assert [(e["arm"], e["concurrency"]) for e in data["load"]] == [
        ("vllm plain", 1), ("vllm ngram", 1), ("vllm plain", 2), ("vllm ngram", 2)]
    for entry in data["load"]:
        assert CONTRACT_FIELDS <= set(entry)
        for key in ("ttft_s", "itl_s", "e2e_s"):
            assert set(entry[key]) == {"p50", "p90", "p99"}
    ngram = data["load"][1]
    assert set(ngram["speedup"]) >= {"median", "ci_low", "ci_high", "level", "n", "interval"}
    assert set(ngram["acceptance"]) == {"source", "drafted", "accepted", "rate", "per_position", "per_request_rate",
                                        "note"}
    assert set(ngram["client_cpu_s"]) == {"per_request", "total", "share"}
    summary = data["load_summary"]
    assert set(summary) == {"levels", "rounds", "arms", "sentence", "notes", "client"}
    assert summary["levels"] == [1, 2] and summary["rounds"] == 5
    assert set(summary["arms"][0]) == {"arm", "baseline", "stops_paying_at", "helps_at", "costs_at", "sentence"}
    assert summary["notes"][0] == ("The transformers arms (plain) stay at one request at a time: their generation "
                                   "does not batch requests, so they are not timed under load.")
    # single-request runs of 1.0 s against load rounds' median end-to-end of 2.04 s and 1.02 s at C=1
    assert data["load"][0]["single_request_ratio"] == pytest.approx(2.04)
    assert summary["notes"][1] == ("At 1 request at once the load rounds' median end-to-end time was within 104% of "
                                   "the single-request runs' median (vllm plain 2.04×, vllm ngram 1.02×).")
    assert "The client's own CPU time was" in summary["client"]
    raw = data["load_raw"]
    assert len(raw["rounds"]) == 20 and raw["rounds"][0]["requests"][0]["client_cpu_s"] == 0.001
    assert raw["failures"] == [] and "token_ids" not in raw["rounds"][0]["requests"][0]
    import json

    json.dumps(data)  # every figure is plain JSON


def test_a_busy_machine_during_the_load_rounds_is_a_note():
    busy = {"other_cpu_cores": 0.6, "other_cpu_percent": 30.0, "cpu_count": 2}
    notes = load.report_parts(record({1: (2.0, 1.0), 2: (2.0, 1.0), 4: (2.0, 1.0)}), ARMS, busy)["load_summary"]["notes"]
    assert any(n.startswith("The machine was busy: other processes used 0.60 CPU cores on average (30% of this "
                            "machine's 2) while the load rounds were timed") for n in notes)
    idle = {"other_cpu_cores": 0.01, "other_cpu_percent": 0.5, "cpu_count": 2}
    assert not any("busy" in n for n in load.report_parts(record({1: (2.0, 1.0), 2: (2.0, 1.0), 4: (2.0, 1.0)}),
                                                            ARMS, idle)["load_summary"]["notes"])


def test_a_comparison_that_ended_before_its_load_phase_says_so():
    report = report_with_load()
    report.load = None
    data = report.to_dict()
    assert data["load"] == [] and data["load_summary"]["notes"] == ["The load phase did not run."]
    assert data["load_summary"]["arms"] == [] and data["load_summary"]["client"] is None


def test_a_report_without_levels_has_no_load():
    report = report_with_load()
    report.request = {}
    data = report.to_dict()
    assert "load" not in data and "load_summary" not in data


def test_the_csv_has_concurrency_and_a_request_index_with_one_row_per_load_request():
    rows = list(csv.DictReader(io.StringIO(report_with_load().to_csv())))
    single = [r for r in rows if r["concurrency"] == "1" and r["request"] == "0"][:3]
    assert [r["arm"] for r in single] == ["plain", "vllm plain", "vllm ngram"]
    loaded = rows[3:]
    assert len(loaded) == 2 * 5 * (1 + 2)  # two arms, five rounds, 1 + 2 requests
    assert [r["request"] for r in loaded if r["concurrency"] == "2"][:2] == ["0", "1"]
    assert {r["repetition"] for r in loaded} == {"0", "1", "2", "3", "4"}


def test_a_failed_vllm_arm_is_said_to_have_failed_not_to_lack_batching():
    arms = [ArmInfo("plain", "plain"), ArmInfo("vllm plain", "plain", engine="vllm"),
            ArmInfo("vllm ngram", "ngram", engine="vllm", error="its server did not start")]
    rec = LoadRecord(levels=(1, 2), rounds_asked=5, arms=[1], done=[1, 2])
    for level in (1, 2):
        rec.rounds += [rnd(1, level, r, 1.0) for r in range(5)]
    notes = load.summary(rec, arms, load.entries(rec, arms))["notes"]
    assert notes[0] == "vllm ngram failed before the load phase, so it was not timed under load (see its error)."
    assert notes[1] == ("The transformers arms (plain) stay at one request at a time: their generation does not "
                        "batch requests, so they are not timed under load.")
    assert not any("vllm arms" in note for note in notes), notes


def test_in_blocks_the_interval_pairs_blocks_not_rounds():
    """Servers one at a time: each arm's rounds of a block ran on one server start, at one moment. Two blocks
    of 3 rounds here, each round of a block alike but the blocks 10% apart (a drift between them): paired by
    round, the six pairs would give a 98.4% interval of [1.0, 1.1] from what are two moments; paired by block,
    the two give no interval, and the note says why."""
    out = LoadRecord(levels=(4,), rounds_asked=6, arms=[1, 2], done=[4], blocks=[[0, 1, 2], [3, 4, 5]])
    for r in range(6):
        drift = 1.0 if r < 3 else 1.1  # the ngram's second block met a slower machine than plain's
        out.rounds.append(rnd(1, 4, r, 2.0))
        out.rounds.append(rnd(2, 4, r, 1.0 * drift))
    entries = load.entries(out, ARMS)
    ngram = entries[1]
    assert ngram["paired_by"] == "blocks" and entries[0]["paired_by"] == "blocks"
    assert ngram["output_tokens_per_s_blocks"] == pytest.approx([120 / 3.0, 120 / 3.3])  # 3 rounds of 4 x 10
    assert ngram["speedup"]["n"] == 2 and not load.stats.has_interval(ngram["speedup"])
    assert ngram["speedup"]["median"] == pytest.approx((2.0 + 2.0 / 1.1) / 2)
    summary = load.summary(out, ARMS, entries)
    assert "(1.91×: 2 blocks give only a 50% range, too few to be sure (5 blocks give a 93.75% interval))" in \
        summary["arms"][0]["sentence"]
    assert summary["notes"][-1].startswith("The servers ran one at a time, in blocks of 3 rounds (2 blocks an arm "
                                           "at each level): rounds of one block share their server's start")
    assert load.raw(out)["blocks"] == [[0, 1, 2], [3, 4, 5]]
    # The same rounds alternating (no blocks): six independent pairs, as before.
    out.blocks = None
    ngram = load.entries(out, ARMS)[1]
    assert ngram["paired_by"] == "rounds" and ngram["speedup"]["n"] == 6 and "output_tokens_per_s_blocks" not in ngram
