"""Stop when clear against a fixed count: the time to the first final answer of `python -m assistlab bench`
with the default (no --repeats: stop once every assisted arm's time-uniform interval settles), with
`--stop likely` (stop once every assisted arm has its likely answer, assuming roughly normal noise) and with
`--repeats 5`, same command otherwise, each a fresh process on one warm cache.

    python benchmarks/bench_stop_when_clear.py [--pairs 1] [--fixed 5] [--keep] [bench options...]

The bundled pair is converted first, untimed, into a temporary ASSISTLAB_CACHE_DIR (~/.cache/assistlab is never
touched). Then each pair runs the three commands in turn, the order rotating from pair to pair. The answer's moment is
when the command writes the progress line of the answer ("The answer · ..."), which ends the timed repetitions
and comes before the untimed drafting-cost runs; both times
count from the command's start, loading included. The verdicts agree when every arm the default (or the likely
rule) settled as faster or slower has a fixed-count interval that excludes 1x on the same side. What other processes used meanwhile
is printed with each run, since on a shared machine that often decides the figure.
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
from pathlib import Path

import psutil
from bench_first_run import ROOT, busy_seconds  # this folder is on the path when a script here runs
ANSWER_STEP = "The answer · "  # the progress line (the page's, word for word) of the runner's answer event


def timed(cache: Path, extra: list[str], label: str) -> dict:
    """One `assistlab bench` process: seconds to its answer line and to its end, its report, others' CPU use."""
    env = {**os.environ, "ASSISTLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    report = cache.parent / f"{label}.json"
    command = [sys.executable, "-m", "assistlab", "bench", "--json", str(report), *extra]
    busy0, began = busy_seconds(), time.perf_counter()
    own = psutil.Process()
    cpu0 = own.cpu_times()
    answer = None
    with subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as child:
        tail = []
        for line in child.stderr:
            tail = (tail + [line])[-20:]
            if answer is None and line.startswith(ANSWER_STEP):
                answer = time.perf_counter() - began
        code = child.wait()
    wall = time.perf_counter() - began
    cpu1 = own.cpu_times()
    children = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)
    if code != 0:
        sys.exit(f"{label}: bench failed with code {code}:\n{''.join(tail)}")
    data = json.loads(report.read_text())
    return {"label": label, "answer_s": answer, "wall_s": wall, "others_cores": max(0.0, busy_seconds() - busy0
            - children) / wall, "repetitions": data["counted_repetitions"], "stopping": data["stopping"],
            "speedups": {c["arm"]: c["speedup"] for c in data["comparison"]}, "timing": data.get("timing") or {}}


def verdicts(run: dict) -> dict[str, str | None]:
    """Each assisted arm's verdict: the sequence's, or (fixed count) its interval's: faster or slower only when
    the fixed count's interval excludes 1x (None when it has no interval or contains 1x)."""
    settled = {name: arm.get("settled") for name, arm in (run["stopping"].get("arms") or {}).items()}
    if run["stopping"]["rule"] == "likely":  # the sure verdict when it came, else the likely one
        return {name: side or (run["stopping"].get("likely") or {}).get(name) for name, side in settled.items()}
    if run["stopping"]["rule"] != "fixed":
        return settled
    return {name: "faster" if (s.get("ci_low") or 0) > 1 else "slower" if (s.get("ci_high") or 2) < 1 else None
            for name, s in run["speedups"].items()}


def likely(run: dict) -> dict[str, str | None]:
    """Each assisted arm's likely verdict and the repetition it came at (every run computes it)."""
    stop = run["stopping"]
    return {name: f"{verdict} at {stop['likely_at'][name]}" if verdict else None
            for name, verdict in (stop.get("likely") or {}).items()}


def describe(run: dict) -> str:
    answer = "never" if run["answer_s"] is None else f"{run['answer_s']:6.1f} s"
    speeds = ", ".join(f"{name} {s['median']:.2f}x" for name, s in run["speedups"].items() if s.get("median"))
    return (f"{run['label']:>6}: answer at {answer}, done at {run['wall_s']:6.1f} s, {run['repetitions']} repetitions "
            f"({run['stopping']['ended_by']}); others used {run['others_cores']:.2f} cores; {speeds}; verdicts "
            f"{verdicts(run)}; likely {likely(run)}; timing {run['timing']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--fixed", type=int, default=5, help="the fixed count compared with (default 5)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary cache folder")
    args, extra = parser.parse_known_args()
    work = Path(tempfile.mkdtemp(prefix="assistlab-stop-when-clear-"))
    cache = work / "cache"
    print(f"{psutil.cpu_count()} CPUs; cache {cache}; bench options {extra or 'none'}", flush=True)
    try:
        prepared = timed(cache, ["--max-new-tokens", "2", "--repeats", "1", "--warmup", "0", *extra], "convert")
        print(f"converted the bundled pair in {prepared['wall_s']:.0f} s (untimed)", flush=True)
        ratios: dict[str, list[float]] = {"clear": [], "likely": []}
        rules = ("clear", "likely", "fixed")
        for pair in range(args.pairs):
            runs = {}
            order = rules[pair % 3:] + rules[:pair % 3]
            for label in order:
                more = {"fixed": ["--repeats", str(args.fixed)], "likely": ["--stop", "likely"]}.get(label, [])
                runs[label] = timed(cache, [*extra, *more], label)
                print(describe(runs[label]), flush=True)
            fixed = runs["fixed"]
            for label in ("clear", "likely"):
                run = runs[label]
                # Judged by the fixed run's interval: every verdict this rule gave, the fixed count's interval
                # gives too (an interval that contains 1x does not agree with "slower").
                agree = all(verdicts(fixed).get(name) == side for name, side in verdicts(run).items()
                            if side in ("faster", "slower"))
                ratio = run["answer_s"] / fixed["answer_s"]
                ratios[label].append(ratio)
                print(f"pair {pair + 1}: {label}: answer {run['answer_s']:.1f} s ({run['repetitions']} repetitions) "
                      f"against {fixed['answer_s']:.1f} s ({args.fixed} fixed): ratio {ratio:.2f}; verdicts "
                      f"{'agree' if agree else 'DISAGREE'}", flush=True)
        for label, found in ratios.items():
            print(f"{label}: ratios {', '.join(f'{r:.2f}' for r in found)}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
