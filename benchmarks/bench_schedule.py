"""A schedule of draft lengths per batch size, built from measurements and checked: vLLM's ngram on the bundled target.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_schedule.py [--ks 1,2,4,8]
     [--levels 1,4] [--tokens 32] [--rounds 5] [--best 1:8,16:2] [--block-rounds 1] [--by-level] [--only LEVEL]
     [--json out.json]
(--best skips the grid and checks the schedule of those Ks; ASSISTLAB_VLLM_TURNS=always checks it in blocks, each
of --block-rounds rounds, the interval's unit there.)
First the grid: ngram at each K beside vLLM plain, `--per-pass` Ks per pass (each server holds about 3.5 GB here),
every server started by AssistLab, timed under load at each level (`--rounds` rotated rounds per level, the load
phase of `bench --concurrency`). The best K of a level has the highest median throughput speedup over its pass's
plain (0 when none is above 1x). Then the check
(measure/schedule_check.py): a server with the schedule built from those Ks (engines/vllm/schedule.Schedule.from_levels)
timed at each level beside that level's best fixed K, the ratio of their throughputs with its interval, and
whether it lies within the band of no practical difference (±3%). Servers run eager with a 0.5 GiB KV cache, as
the real-vLLM tests start them. Not collected by pytest: its numbers depend on the machine and what else runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import dataclasses
import json
import os
import time

from assistlab.config import BenchRequest
from assistlab.engines import catalog, registry
from assistlab.engines.transformers.models import ModelStore
from assistlab.engines.vllm import server
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner
from assistlab.measure.schedule_check import check_schedule
from assistlab.results import schedule

PROMPT = ("Repeat after me, ten times: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat, "
          "the cat sat on the mat,")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def grid(base: BenchRequest, ks: list[int], store, per_pass: int) -> tuple[dict[int, int], list[dict]]:
    """Plain and ngram at each K under load, `per_pass` Ks beside their own plain at a time (each vLLM CPU server
    of the bundled target holds about 3.5 GB here): ({level: best K}, the assisted arms' load entries). The best
    K of a level has the highest median throughput over its pass's plain, 1 or more even where none is above 1x
    (a 0 in vLLM 0.32's schedule still runs the drafter; those levels are printed as plain's)."""
    entries = []
    for start in range(0, len(ks), per_pass):
        arms = (VllmArm("plain"), *(VllmArm("ngram", k, 1, 3) for k in ks[start:start + per_pass]))
        report = runner.run_to_report(dataclasses.replace(base, arms=arms), store).to_dict()
        if report["status"] != "complete":
            raise SystemExit(f"the grid did not finish: {report['message']}")
        broken = [f"{a['name']}: {a['error']}" for a in report["arms"] if a["error"]]
        if broken:
            raise SystemExit("arms failed: " + "; ".join(broken))
        for e in report["load"]:
            e["k"] = report["arms"][e["arm_index"]]["spec"].get("num_speculative_tokens") or 0
            e["pass"] = start // per_pass + 1
            entries.append(e)
    best = {}
    for level in base.concurrency:
        here = [e for e in entries if e["concurrency"] == level and e["k"] and not e["failed"]]
        top = max(here, key=lambda e: e["speedup"]["median"])
        best[level] = top["k"]
        if top["speedup"]["median"] <= 1.0:
            print(f"at {level} requests at once plain beat every K measured: a plain server is faster there")
    return best, entries


def check_one_level(base: BenchRequest, template: VllmArm, best: dict[int, int], level: int, store) -> dict:
    """The check of the schedule built from `best` at `level` alone (plain, that level's best K and the
    schedule: the tuner's part for that level), in check_schedule's shape."""
    plan = registry.SCHEDULES.plan(base, template, best)
    part = next(p for p in plan.per_level() if level in p.best)
    report = runner.run_to_report(part.request, store)
    checked = {**schedule.judge(report.to_dict(), part), "checked_by_level": True}
    return {"schedule": plan.record(), "schedule_check": checked, "report": report, "reports": [report]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,2,4,8")
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block-rounds", type=int, default=None, help="in blocks, rounds per block of the check "
                        "(default 1: every round its own block, the interval's unit)")
    parser.add_argument("--by-level", action="store_true", help="time the check one level at a time (plain, that "
                        "level's best K and the schedule), as the tuner does where the whole check would not fit")
    parser.add_argument("--only", type=int, default=None, metavar="LEVEL", help="check the schedule at this level "
                        "of --best alone")
    parser.add_argument("--per-pass", type=int, default=2, help="Ks timed beside one plain server at a time")
    parser.add_argument("--best", default=None, help="each level's best K as LEVEL:K,... (e.g. 1:8,16:2): no grid, "
                        "the check of that schedule alone")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault(server.ARGS_VAR, "--enforce-eager --kv-cache-memory-bytes 536870912")
    os.environ.setdefault(server.MEMORY_VAR, "0.3")
    os.environ.setdefault(server.START_VAR, "1800")  # on a busy 2-core machine a server took over 600 s to start
    python = server.find_python()
    store = ModelStore()
    base = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"),), prompt=PROMPT, chat_template=False,
                        max_new_tokens=args.tokens, repeats=1, warmup=0, stop_rule="fixed", engines=("vllm",),
                        concurrency=tuple(_ints(args.levels)), load_rounds=args.rounds,
                        load_block_rounds=args.block_rounds)
    began = time.monotonic()
    if args.best:
        best = {int(level): int(k) for level, k in (part.split(":") for part in args.best.split(","))}
        base = dataclasses.replace(base, concurrency=tuple(sorted(best)))
        load = []
    else:
        best, load = grid(base, _ints(args.ks), store, args.per_pass)
    grid_s = time.monotonic() - began
    print(f"vLLM {python.vllm}, {os.cpu_count()} CPUs, {args.tokens} tokens, {args.rounds} rounds per level; "
          f"grid {grid_s:.0f} s")
    for e in load:
        s = e["speedup"] or {}
        over = "" if s.get("median") is None else (f"  {s['median']:.3f}x plain ({s['ci_low']:.3f}-{s['ci_high']:.3f})"
                                                   if s.get("ci_low") is not None else f"  {s['median']:.3f}x plain")
        print(f"  pass {e['pass']} level {e['concurrency']}  {e['arm']:<30} {e['output_tokens_per_s']:7.2f} tok/s "
              f"(rounds {', '.join(f'{x:.1f}' for x in e['output_tokens_per_s_rounds'])}){over}")
    print(f"best K per level: {best}")
    began = time.monotonic()
    if args.only is not None:
        out = check_one_level(base, VllmArm("ngram", None, 1, 3), best, args.only, store)
    else:
        events = check_schedule(base, VllmArm("ngram", None, 1, 3), best, store,
                                max_servers=3 if args.by_level else None)
        try:
            while True:
                next(events)
        except StopIteration as done:
            out = done.value
    check_s = time.monotonic() - began
    checked = out["schedule_check"]
    print(f"schedule {out['schedule']['text']} ({out['schedule']['label']}); check {check_s:.0f} s")
    if checked["refused"]:
        print(f"  refused: {checked['refused']}")
    for row in checked["levels"]:
        print(f"  level {row['concurrency']}: schedule K {row['schedule_k']} {row['schedule_tokens_per_s'] or 0:.2f} "
              f"tok/s vs fixed K {row['fixed_k']} {row['fixed_tokens_per_s'] or 0:.2f} tok/s; {row['sentence']}")
    print(f"all within ±{checked['band']:.0%}: {checked['all_within_band']}")
    parts = [r.to_dict() for r in out["reports"]]
    for part in parts:  # each arm's throughput per block (in blocks) or per round: the units of the intervals
        for e in part["load"]:
            units = e.get("output_tokens_per_s_blocks") or e["output_tokens_per_s_rounds"]
            print(f"  level {e['concurrency']} {e['arm']:<34} by {e.get('paired_by', 'rounds')}: "
                  f"{', '.join(f'{x:.1f}' for x in units)}")
    for level in base.concurrency:  # what the server drafted: tokens per drafting step, by the schedule's K there
        rounds = [r["counts"] for data in parts for r in (data.get("load_raw") or {}).get("rounds", [])
                  if data["arms"][r["arm"]]["name"] == out["schedule"]["label"] and r["concurrency"] == level
                  and r["counts"]]
        if not rounds:
            continue
        steps, tokens = sum(c["drafts"] for c in rounds), sum(c["draft_tokens"] for c in rounds)
        print(f"  schedule at level {level}: {tokens} tokens drafted in {steps} drafting steps"
              + (f" ({tokens / steps:.2f} per step)" if steps else ""))
    if args.json is not None:
        args.json.write_text(json.dumps({"best": best, "grid_load": load, "schedule": out["schedule"],
                                         "schedule_check": checked, "grid_s": grid_s, "check_s": check_s,
                                         "check_load": [part["load"] for part in parts]}, indent=1))


if __name__ == "__main__":
    main()
