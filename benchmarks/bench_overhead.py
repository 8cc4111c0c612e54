"""How much the harness adds to a run: AssistLab's timed runs against bare generate() in the same process.

Run: python benchmarks/bench_overhead.py [--target REF] [--assistant REF] [--tokens N] [--repeats R]
Not collected by pytest: it is a benchmark (it proves speed), and its numbers depend on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import statistics
import time

import torch

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.transformers.models import ModelStore
from assistlab.measure import runner
from assistlab.engines.transformers import prompt as tprompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=catalog.BUNDLED_TARGET)
    parser.add_argument("--assistant", default=catalog.BUNDLED_ASSISTANT)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    store = ModelStore()
    request = BenchRequest(
        target=args.target, arms=(ArmSpec("auto", args.assistant),), max_new_tokens=args.tokens,
        repeats=1, warmup=0, device="cpu" if not torch.cuda.is_available() else "auto",
    )
    runner.run_to_report(request, store)  # load and warm both models
    target = store.loaded()[0]
    helper = store.loaded()[1]
    inputs = tprompt.encode_prompt(request.resolved(target.device.type), target)
    bare_kwargs = {
        "plain": dict(max_new_tokens=args.tokens, do_sample=False, eos_token_id=-1),
        "assisted": dict(max_new_tokens=args.tokens, do_sample=False, eos_token_id=-1, assistant_model=helper.model,
                         tokenizer=target.tokenizer, assistant_tokenizer=helper.tokenizer),
    }

    def bare(kind: str) -> float:
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            target.model.generate(**inputs, **bare_kwargs[kind])
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    harness = {"plain": [], "assisted": []}
    direct = {"plain": [], "assisted": []}
    def through_harness() -> None:
        data = runner.run_to_report(request, store).to_dict()
        harness["plain"].append(data["arms"][0]["latencies_s"][0])
        harness["assisted"].append(data["arms"][1]["latencies_s"][0])

    def directly() -> None:
        for kind in ("plain", "assisted"):
            direct[kind].append(bare(kind))

    for i in range(args.repeats):  # alternate which goes first so drift and order hit both alike
        for step in (through_harness, directly) if i % 2 == 0 else (directly, through_harness):
            step()
    for kind in ("plain", "assisted"):
        h, d = statistics.median(harness[kind]), statistics.median(direct[kind])
        ratios = sorted(a / b for a, b in zip(harness[kind], direct[kind]))
        print(
            f"{kind:9s} harness median {h:.3f} s, bare generate() median {d:.3f} s, "
            f"overhead {100 * (h / d - 1):+.1f}% (per-pair ratios {ratios[0]:.3f}-{ratios[-1]:.3f})"
        )


if __name__ == "__main__":
    main()
