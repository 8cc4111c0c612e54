"""vLLM servers all at once against servers in turns: the same two arms (plain, ngram K=4) on the bundled target.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_turns.py [--tokens 32] [--repeats 5]
     [--designs together,turns] [--json out.json]
Each design is one comparison of vLLM plain and ngram (k=4, lookup 2-4) on the prompt docs/load.md uses (ngram's
good case), `--tokens` new tokens, one warm-up, `--repeats` repetitions (a fixed count), servers started by
AssistLab in eager mode with the KV cache AssistLab sizes. `together`: both servers held at once, the runs
rotated. `turns`: ASSISTLAB_VLLM_TURNS=always, so they take turns even though they fit: with sleep mode (vLLM's
CUDA and ROCm builds) each run wakes its server and puts it to sleep after; vLLM's CPU build has no sleep mode,
and there they run in blocks (measure/blocks.py: A B B A, each block on a server started afresh). Printed per
design: the speedup with its interval, the wall time, the design's words, the wake and sleep seconds or the
starts; then whether the two speedups agree within the band (±3%). Not collected by pytest: its numbers depend
on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import json
import os
import statistics
import time

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.models import ModelStore
from assistlab.engines.vllm import server, turns
from assistlab.engines.vllm.arms import VllmArm
from assistlab.errors import AssistLabError
from assistlab.measure import runner

PROMPT = "Repeat this line four times: the cat sat on the mat, the dog sat on the log."
BAND = 0.03


def one(design: str, tokens: int, repeats: int, store) -> dict:
    """One comparison under `design` ('together' or 'turns'): its speedup, wall time and what the turns cost."""
    os.environ[turns.TURNS_VAR] = "always" if design == "turns" else "auto"
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain"), VllmArm("ngram", 4)),
                           prompt=PROMPT, max_new_tokens=tokens, repeats=repeats, warmup=1, engines=("vllm",),
                           stop_rule="fixed")
    began = time.monotonic()
    try:
        data = runner.run_to_report(request, store).to_dict()
    except AssistLabError as exc:
        return {"design": design, "error": str(exc), "wall_s": round(time.monotonic() - began, 1)}
    held = data["environment"]["engines"]["vllm"].get("turns") or {}
    entry = next((c for c in data["comparison"] if c.get("engine") == "vllm"), None) or {}
    speedup = entry.get("speedup") or {}
    wakes = [s for a in (held.get("arms") or {}).values() for s in a.get("wake_s") or []]
    sleeps = [s for a in (held.get("arms") or {}).values() for s in a.get("sleep_s") or []]
    return {"design": design, "asked_turns": design == "turns", "held": held.get("design"),
            "words": held.get("words"), "status": data["status"], "message": data["message"],
            "errors": {a["name"]: a["error"] for a in data["arms"] if a["error"]},
            "speedup": {k: speedup.get(k) for k in ("median", "ci_low", "ci_high", "level", "n")},
            "median_latency_s": {a["name"]: (a["latency_summary"] or {}).get("median") for a in data["arms"]},
            "latencies_s": {a["name"]: [round(x, 3) for x in a["latencies_s"]] for a in data["arms"]},
            "wake_s_median": statistics.median(wakes) if wakes else None, "wakes": len(wakes),
            "sleep_s_median": statistics.median(sleeps) if sleeps else None,
            "starts_s": [s for a in (held.get("arms") or {}).values() for s in a.get("start_s") or []],
            "untimed_starts_s": data["timing"].get("starts_s"), "wall_s": round(time.monotonic() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--designs", default="together,turns")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault(server.ARGS_VAR, "--enforce-eager")
    os.environ.pop(server.MEMORY_VAR, None)  # AssistLab sizes each server, so the plan can weigh them
    store = ModelStore(max_models=2)
    results = []
    for design in [d.strip() for d in args.designs.split(",") if d.strip()]:
        result = one(design, args.tokens, args.repeats, store)
        results.append(result)
        print(json.dumps(result), flush=True)
    by = {r["design"]: r for r in results if (r.get("speedup") or {}).get("median")}
    if {"together", "turns"} <= set(by) and by["turns"]["held"] in (turns.SLEEP, turns.BLOCKS):
        ratio = by["turns"]["speedup"]["median"] / by["together"]["speedup"]["median"]
        print(f"turns ({by['turns']['held']}) / together speedup: {ratio:.3f} "
              f"({'within' if abs(ratio - 1) <= BAND else 'outside'} ±{BAND:.0%})")
    elif "turns" in by:
        print(f"turns: not held in turns here ({by['turns'].get('words')})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
