"""How far a freshly started vLLM server's throughput moves from start to start: what a block design cannot cancel.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_restarts.py [--runs 6] [--rounds 5]
     [--json out.json]
Each run is one comparison of vLLM plain and ngram (k=2, lookup 1-3) on the bundled target, both servers held at
once and started afresh for the run, their load rounds alternating at 1 and 16 requests at once (`--rounds`
timed rounds each, 32 new tokens, a repetitive prompt). Printed per arm and level: each run's median throughput,
the spread of the rounds within a run and of the runs' means (as a share, on the log scale); then the spread of
the two arms' ratio from run to run. Where both arms move together from run to run but their ratio does not,
the moment of the machine moved them, which alternating rounds cancel and servers in blocks (one at a time, at
different moments) do not. Not collected by pytest: its numbers depend on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import json
import math
import os
import statistics

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.models import ModelStore
from assistlab.engines.vllm import server, turns
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner

PROMPT = ("Repeat after me, ten times: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat, "
          "the cat sat on the mat,")
LEVELS = (1, 16)


def spread(logs: list[float]) -> float:
    """The standard deviation of log figures, as a share (0.01 is about 1%)."""
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault(server.ARGS_VAR, "--enforce-eager --kv-cache-memory-bytes 536870912")
    os.environ.setdefault(server.MEMORY_VAR, "0.3")
    os.environ[turns.TURNS_VAR] = "auto"  # both servers at once: the rounds alternate
    store = ModelStore()
    runs = []
    for number in range(args.runs):
        request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"), VllmArm("ngram", 2, 1, 3)),
                               prompt=PROMPT, chat_template=False, max_new_tokens=32, repeats=1, warmup=0,
                               stop_rule="fixed", engines=("vllm",), concurrency=LEVELS, load_rounds=args.rounds)
        data = runner.run_to_report(request, store).to_dict()
        if data["status"] != "complete":
            raise SystemExit(f"run {number + 1} did not finish: {data['message']}")
        runs.append([{"arm": e["arm"], "concurrency": e["concurrency"], "rounds": e["output_tokens_per_s_rounds"],
                      "speedup": (e["speedup"] or {}).get("median")} for e in data["load"]])
        print(f"run {number + 1} of {args.runs} done", flush=True)
    for arm in ("vllm plain", "vllm ngram (k=2, lookup 1-3)"):
        for level in LEVELS:
            entries = [next(e for e in run if e["arm"] == arm and e["concurrency"] == level) for run in runs]
            logs = [[math.log(x) for x in e["rounds"]] for e in entries]
            within = math.sqrt(statistics.mean(spread(x) ** 2 for x in logs))
            means = [statistics.mean(x) for x in logs]
            medians = ", ".join(f"{statistics.median(e['rounds']):.2f}" for e in entries)
            print(f"{arm:<30} at {level:>2}: run medians {medians} tok/s; rounds within a run {within:.2%}, the "
                  f"runs' means {spread(means):.2%}")
    for level in LEVELS:
        ratios = [next(e for e in run if e["speedup"] and e["concurrency"] == level)["speedup"] for run in runs]
        print(f"ngram / plain at {level:>2}: {', '.join(f'{r:.3f}' for r in ratios)}; from run to run "
              f"{spread([math.log(r) for r in ratios]):.2%}")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
