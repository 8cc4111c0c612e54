"""How soon the default comparison gives its first answer: `python -m assistlab bench` with every default (the
bundled pair, the CPU's default length, stop once the answer is clear), on an idle machine and beside another
process that keeps one core busy, each a fresh process on one warm cache.

    python benchmarks/bench_first_answer.py [--runs 1] [--keep] [bench options...]

The bundled pair is converted first, untimed, into a temporary ASSISTLAB_CACHE_DIR (~/.cache/assistlab is never
touched). Each run prints the report's `timing.first_answer_s` (seconds from the comparison's start, loading
included, until every assisted arm has an answer, likely or sure: what the headline leads with), the seconds
from the command's start to its answer line (process start and imports included), the whole command's time, and
what other processes used meanwhile. Idle and busy runs alternate, the first idle.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import psutil
from bench_stop_when_clear import timed  # this folder is on the path when a script here runs
from other_work import other_work


def describe(label: str, run: dict) -> str:
    first = run["timing"].get("first_answer_s")
    likely = {name: f"{v} at {run['stopping']['likely_at'][name]}" if v else None
              for name, v in (run["stopping"].get("likely") or {}).items()}
    speeds = ", ".join(f"{name} {s['median']:.2f}x" for name, s in run["speedups"].items() if s.get("median"))
    return (f"{label:>5}: first_answer_s {'never' if first is None else f'{first:.1f}'}; sure answer line at "
            f"{run['answer_s'] or float('nan'):.1f} s, whole run {run['wall_s']:.1f} s, {run['repetitions']} "
            f"repetitions ({run['stopping']['ended_by']}); likely {likely}; {speeds}; others used "
            f"{run['others_cores']:.2f} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="runs of each kind, idle and busy (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary cache folder")
    args, extra = parser.parse_known_args()
    work = Path(tempfile.mkdtemp(prefix="assistlab-first-answer-"))
    cache = work / "cache"
    print(f"{psutil.cpu_count()} CPUs; cache {cache}; bench options {extra or 'none'}", flush=True)
    try:
        prepared = timed(cache, ["--max-new-tokens", "2", "--repeats", "1", "--warmup", "0", *extra], "convert")
        print(f"converted the bundled pair in {prepared['wall_s']:.0f} s (untimed)", flush=True)
        for index in range(args.runs):
            print(describe("idle", timed(cache, extra, f"idle-{index}")), flush=True)
            with other_work(1, 1.0):  # one of the cores kept busy, as another person's job would
                print(describe("busy", timed(cache, extra, f"busy-{index}")), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
