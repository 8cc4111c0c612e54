"""The tuner over vLLM plain and ngram K 1, 2, 4, 8 at load levels 1 and 4 on the bundled target, where the five
servers do not fit in memory together (issue 44's proof): the command line's search, its time, and the peak
memory of AssistLab and every server it started against what the plan allowed.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_tune_turns.py [--tokens 32]
     [--ks 1,2,4,8] [--concurrency 1,4] [--json out.json]
(ASSISTLAB_VLLM_TURNS=always takes turns even where the servers would fit together.)
It runs `python -m assistlab tune --engines vllm --no-assistants --candidates "vllm ngram:num_speculative_tokens=
1,2,4,8" --concurrency 1,4` on a repetition prompt (ngram's good case), servers in eager mode with the KV cache
AssistLab sizes, and samples twice a second the resident memory of that process and all its descendants (the
servers and their workers). Printed: the wall time, the design the plan chose with its figures, the peak against
the free memory the plan counted, the search's answer, the schedule served and its check at each level, and
whether any vLLM process was left. Not collected by pytest: its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PROMPT = ("Repeat after me, ten times: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat, "
          "the cat sat on the mat,")


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and every descendant (0 for those gone while read)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def vllm_left() -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any("vllm" in part and "serve" in " ".join(p.info["cmdline"] or []) for part in p.info["cmdline"] or [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--ks", default="1,2,4,8", help="the draft lengths searched (default 1,2,4,8)")
    parser.add_argument("--concurrency", default="1,4", help="the load levels (default 1,4)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("ASSISTLAB_VLLM_ARGS", "--enforce-eager")
    env.pop("ASSISTLAB_VLLM_MEMORY", None)  # AssistLab sizes each server, so the plan can weigh them
    env.setdefault("ASSISTLAB_VLLM_START_S", "1800")
    with tempfile.TemporaryDirectory() as tmp:
        prompt, out = Path(tmp) / "prompt.txt", Path(tmp) / "tune.json"
        prompt.write_text(PROMPT)
        command = [sys.executable, "-m", "assistlab", "tune", "--engines", "vllm", "--no-assistants",
                   "--candidates", f"vllm ngram:num_speculative_tokens={args.ks}", "--concurrency", args.concurrency,
                   "--max-new-tokens", str(args.tokens), "--prompt-file", str(prompt), "--no-chat-template",
                   "--json", str(out)]
        print(" ".join(command), flush=True)
        began = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, env=env)
        peak = {"bytes": 0, "at_s": 0.0}

        def sample() -> None:
            while proc.poll() is None:
                now = tree_rss(proc.pid)
                if now > peak["bytes"]:
                    peak.update(bytes=now, at_s=round(time.monotonic() - began, 1))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        sampler.join()
        wall = time.monotonic() - began
        data = json.loads(out.read_text()) if out.exists() else {}
    held = ((data.get("environment") or {}).get("engines") or {}).get("vllm", {}).get("turns") or {}
    tune = data.get("tune") or {}
    free = held.get("free_bytes")
    result = {
        "exit_code": code, "wall_s": round(wall, 1), "design": held.get("design"), "words": held.get("words"),
        "need_bytes": held.get("need_bytes"), "free_bytes": free, "peak_bytes": peak["bytes"],
        "peak_at_s": peak["at_s"], "peak_within_plan": None if not free else peak["bytes"] <= free,
        "starts": {label: a.get("starts") for label, a in (held.get("arms") or {}).items()},
        "median_start_s": {label: a.get("median_start_s") for label, a in (held.get("arms") or {}).items()},
        "sentence": tune.get("sentence"), "schedule": (tune.get("schedule") or {}).get("sentence"),
        "schedule_check": [{k: row.get(k) for k in ("concurrency", "schedule_k", "fixed_k", "ratio", "within_band",
                                                     "sentence")}
                           for row in ((tune.get("schedule_check") or {}).get("levels") or [])],
        "vllm_left": vllm_left(),
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps({"result": result, "report": data}, indent=1))


if __name__ == "__main__":
    main()
