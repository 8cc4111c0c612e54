"""The two engines side by side on the bundled target: transformers' plain and prompt lookup against vLLM's
plain and ngram, on the same prompt ids, in one interleaved comparison.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_engines.py [--tokens N] [--repeats R]
     [--compiled] [--json out.json]
Not collected by pytest: it is a benchmark, and its numbers depend on the machine (and on what else runs).
By default the vLLM servers run eager (--enforce-eager; compiling takes minutes on two cores); --compiled
lets vLLM compile, as a deployment would.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import os
import time

from assistlab.cli.tables import format_table
from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.transformers.models import ModelStore
from assistlab.engines.vllm import server
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--lookup", type=int, default=5, help="tokens proposed per step by both engines' lookup")
    parser.add_argument("--compiled", action="store_true", help="let vLLM compile (no --enforce-eager)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    # A KV cache for one sequence (0.5 GiB) rather than a share of the machine's memory, which is shared.
    os.environ.setdefault(server.ARGS_VAR, ("" if args.compiled else "--enforce-eager ") +
                          "--kv-cache-memory-bytes 536870912")
    arms = (ArmSpec("prompt-lookup", prompt_lookup_num_tokens=args.lookup), VllmArm("plain"),
            VllmArm("ngram", args.lookup))
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=catalog.default_prompt(catalog.BUNDLED_TARGET),
                           max_new_tokens=args.tokens, repeats=args.repeats, warmup=args.warmup,
                           engines=("transformers", "vllm"))
    began = time.monotonic()
    final = None
    for event in runner.run_benchmark(request, ModelStore()):
        if event.kind != "status" or "so far" not in event.message:
            sys.stderr.write(f"[{time.monotonic() - began:6.0f} s] {event.message}\n")
        final = event
    data = final.report.to_dict()
    print(format_table(data))
    contention = data["environment"].get("contention") or {}
    print(f"Others used {contention.get('other_cpu_cores') or 0:.2f} cores during the timed runs "
          f"(of {contention.get('cpu_count')}); wall time {time.monotonic() - began:.0f} s in all.")
    if args.json is not None:
        args.json.write_text(final.report.to_json())


if __name__ == "__main__":
    main()
