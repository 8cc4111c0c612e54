"""The first answer on a fresh machine against a warm one: `python -m assistlab bench` timed from start to
report on an empty cache (the bundled pair converts first), then again once the cache exists.

    python benchmarks/bench_first_run.py [--warm-runs 1] [--keep] [bench options...]

Each run is a fresh process with ASSISTLAB_CACHE_DIR pointing at one temporary folder (removed at the end
unless --keep), so ~/.cache/assistlab is never touched. What other processes used meanwhile is printed with
each time (the machine's busy CPU time less this command's own, per second of wall time, and the load
average), since on a shared machine that, not AssistLab, often decides the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def busy_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def children_seconds() -> float:
    """CPU seconds of this process's children that have been waited for (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_bench(cache: Path, extra: list[str], label: str) -> dict:
    env = {**os.environ, "ASSISTLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    report = cache.parent / f"{label}.json"
    command = [sys.executable, "-m", "assistlab", "bench", "--json", str(report), *extra]
    load_before = os.getloadavg()
    busy0, own0, began = busy_seconds(), children_seconds(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - began
    busy, own = busy_seconds() - busy0, children_seconds() - own0
    if done.returncode != 0:
        sys.exit(f"{label}: bench failed with code {done.returncode}:\n{done.stderr[-2000:]}")
    data = json.loads(report.read_text())
    speedups = {c["arm"] if "arm" in c else c.get("name", "?"): c["speedup"]["median"] for c in data["comparison"]}
    markers = {p.parent.name: json.loads(p.read_text())["seconds"] for p in (cache / "bundled").glob("*/assistlab-converted.json")}
    return {
        "label": label, "wall_s": wall, "own_cpu_s": own, "others_cores": max(0.0, busy - own) / wall,
        "load_before": load_before, "load_after": os.getloadavg(), "speedups": speedups,
        "contention": data["environment"].get("contention", {}), "conversions_s": markers,
    }


def describe(run: dict) -> str:
    load = "/".join(f"{x:.1f}" for x in run["load_before"][:1] + run["load_after"][:1])
    extra = f", conversions {run['conversions_s']}" if run["label"] == "cold" else ""
    return (f"{run['label']:>5}: {run['wall_s']:6.1f} s wall, {run['own_cpu_s']:6.1f} s CPU of its own; others used "
            f"{run['others_cores']:.2f} cores meanwhile (1-min load {load} before/after){extra}; speedups "
            + ", ".join(f"{v:.2f}x" for v in run["speedups"].values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary cache folder")
    args, extra = parser.parse_known_args()
    work = Path(tempfile.mkdtemp(prefix="assistlab-first-run-"))
    cache = work / "cache"
    print(f"{psutil.cpu_count()} CPUs, torch threads as bench sets them; cache {cache}", flush=True)
    try:
        cold = timed_bench(cache, extra, "cold")
        print(describe(cold), flush=True)
        warm = []
        for i in range(args.warm_runs):
            warm.append(timed_bench(cache, extra, "warm"))
            print(describe(warm[-1]), flush=True)
        best = min(w["wall_s"] for w in warm)
        print(f"first answer {cold['wall_s']:.1f} s, warm {best:.1f} s: ratio {cold['wall_s'] / best:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
