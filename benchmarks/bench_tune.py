"""The tuner against a grid: `python -m assistlab tune` on the bundled pair, and the same candidates each timed a
fixed 10 repetitions in one comparison (the grid), each a fresh process on one warm cache.

    python benchmarks/bench_tune.py [--max-new-tokens 32] [--grid-repeats 10] [--candidates TEXT] [--keep]
                                    [--other-work 2x0.6]

The bundled pair is converted first, untimed, into a temporary ASSISTLAB_CACHE_DIR (~/.cache/assistlab is never
touched). Then the grid and the tuner run in turn, both counted from the command's start, loading included.
The grid's best is its highest median speedup over plain; the tuner's choice is "as good" when it is the grid's
best, or when the grid's own paired interval of (choice's latency / best's latency), at 95%, reaches below
1 + band (the grid cannot tell them apart by more than the band). What other processes used meanwhile is
printed with each run, since on a shared machine that often decides the figure; `--other-work` makes such work
itself (other_work.py), for the busy figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from bench_first_run import ROOT, busy_seconds, children_seconds  # this folder is on the path when a script here runs
from other_work import other_work, parse


GRID = """
import json, sys
from assistlab.config import BenchRequest
from assistlab.engines.transformers.models import ModelStore
from assistlab.measure.runner import run_to_report
from assistlab.measure.tune import tune_request
args = json.loads(sys.argv[1])
searched = tune_request(args["target"], candidates=args["candidates"], max_new_tokens=args["tokens"])
grid = BenchRequest(target=searched.target, arms=searched.arms, engines=searched.engines, prompt=searched.prompt,
                    max_new_tokens=args["tokens"], repeats=args["repeats"], warmup=1)
text = run_to_report(grid, ModelStore()).to_json()
open(args["out"], "w").write(text)
"""


def timed(cache: Path, command: list[str], label: str) -> tuple[dict, float, float]:
    """One process: its report (JSON at the path the command writes), its wall seconds, others' CPU cores."""
    env = {**os.environ, "ASSISTLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    busy0, mine0, began = busy_seconds(), children_seconds(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{label} failed with code {done.returncode}:\n{done.stderr[-3000:]}")
    # The machine's busy time less the command's own (its processes, waited for): what others used.
    others = max(0.0, busy_seconds() - busy0 - (children_seconds() - mine0)) / wall
    return done, wall, others


def latency_ratio(grid: dict, slower: str, faster: str) -> dict:
    """The grid's paired interval of latency(slower) / latency(faster), fixed count (stats.speedup's rule)."""
    from assistlab.results import stats

    arms = {arm["name"]: arm["latencies_s"] for arm in grid["arms"]}
    return stats.speedup(arms[slower], arms[faster])  # speedup(baseline, candidate) is baseline / candidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--grid-repeats", type=int, default=10)
    parser.add_argument("--candidates", default=None, help="the tuner's --candidates (default: the declared space)")
    parser.add_argument("--band", type=float, default=0.03)
    parser.add_argument("--keep", action="store_true", help="keep the temporary cache folder")
    parser.add_argument("--other-work", type=parse, default=None, metavar="PROCESSESxSHARE",
                        help="time both beside other work: that many processes, each busy that share of the time")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from assistlab.engines import catalog

    work = Path(tempfile.mkdtemp(prefix="assistlab-bench-tune-"))
    cache = work / "cache"
    target = catalog.BUNDLED_TARGET
    try:
        _, wall, _ = timed(cache, [sys.executable, "-m", "assistlab", "prepare"], "prepare")
        print(f"converted the bundled pair in {wall:.0f} s (untimed)", flush=True)
        beside = other_work(*args.other_work) if args.other_work else nullcontext()
        if args.other_work:
            print(f"beside other work: {args.other_work[0]} processes, each busy {args.other_work[1]:.0%} of the time")
        grid_out, tune_out = work / "grid.json", work / "tune.json"
        spec = {"target": target, "candidates": args.candidates, "tokens": args.max_new_tokens,
                "repeats": args.grid_repeats, "out": str(grid_out)}
        command = [sys.executable, "-m", "assistlab", "tune", "--target", target, "--max-new-tokens",
                   str(args.max_new_tokens), "--band", str(args.band), "--json", str(tune_out), "--quiet"]
        if args.candidates:
            command += ["--candidates", args.candidates]
        with beside:
            _, grid_s, grid_busy = timed(cache, [sys.executable, "-c", GRID, json.dumps(spec)], "grid")
            done, tune_s, tune_busy = timed(cache, command, "tune")
        grid, report = json.loads(grid_out.read_text()), json.loads(tune_out.read_text())
        summary = report["tune"]
        speedups = {c["arm"]: c["speedup"] for c in grid["comparison"] if c["speedup"].get("median")}
        best = max(speedups, key=lambda name: speedups[name]["median"])
        rec = summary["recommendation"] or {}
        choice = rec.get("arm")
        print(f"\ngrid ({args.grid_repeats} repetitions each, {len(speedups)} candidates): {grid_s:.0f} s, others "
              f"used {grid_busy:.1f} cores on average")
        for name, s in sorted(speedups.items(), key=lambda kv: -kv[1]["median"]):
            print(f"  {name:<48} {s['median']:.2f}x ({s['ci_low']:.2f}-{s['ci_high']:.2f})")
        print(f"tuner: {tune_s:.0f} s, others used {tune_busy:.1f} cores on average; {summary['repetitions']} "
              f"repetitions, runs used {summary['runs_used']} of {summary['runs_without_elimination']}; "
              f"{summary['outcome']}; confirmed {summary['confirmed']}")
        print(f"  {summary['sentence']}")
        for c in summary["candidates"]:
            print(f"  {c['arm']:<48} runs {c['runs']:>2}  {c['why'] or 'still in'}")
        if choice is None:
            print("the tuner recommends no candidate")
            return
        ratio = latency_ratio(grid, choice, best)
        good = choice == best or (ratio["ci_low"] is not None and ratio["ci_low"] <= 1 + args.band)
        print(f"\ngrid's best: {best}; tuner's choice: {choice}; grid's interval of choice/best latency: "
              f"{ratio['median']:.3f} ({ratio['ci_low']:.3f}-{ratio['ci_high']:.3f}); as good by the grid: {good}")
        print(f"time: tuner {tune_s:.0f} s against grid {grid_s:.0f} s: {tune_s / grid_s:.2f} of the grid's time")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
