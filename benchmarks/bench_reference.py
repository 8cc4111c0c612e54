"""Does AssistLab's default arm measure what the reference benchmark measures? Both methods, one script.

The reference benchmark times bare `generate()` calls with `torch.utils.benchmark.Timer.blocked_autorange`,
passing no drafting settings (so transformers' defaults apply), greedy, `eos_token_id=-1`, and both models'
`cache_implementation` set to None. Here the same is done on freshly loaded copies of the pair (so nothing
AssistLab configured can leak into them), then AssistLab times the same pair, prompt and token count with no
drafting flags. The two speedups should agree within --tolerance (15% by default).

Run: python benchmarks/bench_reference.py [--target REF] [--assistant REF] [--tokens N] [--min-run-time S]
Not collected by pytest: it is a benchmark (it proves speed), and its numbers depend on the machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse

import torch
from torch.utils import benchmark
from transformers import AutoModelForCausalLM, AutoTokenizer

from assistlab.config import DEFAULT_PROMPT, BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.transformers.models import ModelStore
from assistlab.measure import runner
from assistlab.engines.transformers import prompt as tprompt


def fresh_copy(loaded, device: torch.device):
    """The same checkpoint loaded again from the folder AssistLab loaded it from, untouched by AssistLab."""
    folder = loaded.folder
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=loaded.model.dtype).to(device).eval()
    model.generation_config.cache_implementation = None  # as the reference benchmark does, on both models
    return model, AutoTokenizer.from_pretrained(folder)


def reference_speedup(store: ModelStore, request: BenchRequest, min_run_time: float) -> dict:
    """The reference benchmark's method: blocked_autorange over bare generate(), plain then assisted."""
    target, helper = store.loaded()[0], store.loaded()[1]
    device = target.device
    large, large_tok = fresh_copy(target, device)
    small, small_tok = fresh_copy(helper, device)
    inputs = tprompt.encode_prompt(request.resolved(device.type), target)
    common = dict(do_sample=False, max_new_tokens=request.resolved(device.type).max_new_tokens, eos_token_id=-1)

    def plain():
        with torch.inference_mode():
            large.generate(**inputs, **common)

    def assisted():
        with torch.inference_mode():
            large.generate(**inputs, **common, assistant_model=small, tokenizer=large_tok,
                           assistant_tokenizer=small_tok)

    plain(), assisted()  # blocked_autorange warms up with one call too; one more keeps the first block honest
    measurements = {}
    for name, fn in (("plain", plain), ("assisted", assisted)):
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(),
                                label="Generation", sub_label=name, description="generation")
        measurements[name] = timer.blocked_autorange(min_run_time=min_run_time)
    benchmark.Compare(list(measurements.values())).print()
    return {
        "plain_s": measurements["plain"].median,
        "assisted_s": measurements["assisted"].median,
        "speedup": measurements["plain"].median / measurements["assisted"].median,
        "runs": {k: len(m.times) for k, m in measurements.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=catalog.BUNDLED_TARGET)
    parser.add_argument("--assistant", default=catalog.BUNDLED_ASSISTANT)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5, help="AssistLab's counted repetitions")
    parser.add_argument("--min-run-time", type=float, default=20.0, help="seconds per arm for blocked_autorange")
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args()

    store = ModelStore()
    # No drafting settings: the assisted arm is whatever transformers does by default.
    request = BenchRequest(target=args.target, arms=(ArmSpec("auto", args.assistant),), prompt=args.prompt,
                           max_new_tokens=args.tokens, repeats=args.repeats, warmup=1)
    report = runner.run_to_report(request, store).to_dict()
    entry = report["comparison"][0]
    ours = entry["speedup"]
    low, high = ours.get("ci_low"), ours.get("ci_high")
    interval = f"{low:.3f}-{high:.3f} at level {ours.get('level')}" if low is not None else "no interval"
    print(f"AssistLab: {entry['arm']}: speedup {ours['median']:.3f} ({interval}, n={ours['n']})")
    print(f"AssistLab settings: {report['arms'][1].get('settings')}")

    ref = reference_speedup(store, request, args.min_run_time)
    print(f"Reference method: plain {ref['plain_s']:.3f} s, assisted {ref['assisted_s']:.3f} s, "
          f"speedup {ref['speedup']:.3f} (runs {ref['runs']})")
    ratio = ours["median"] / ref["speedup"]
    agrees = abs(ratio - 1.0) <= args.tolerance
    print(f"AssistLab / reference = {ratio:.3f}: {'agrees' if agrees else 'DISAGREES'} within {args.tolerance:.0%}")
    return 0 if agrees else 1


if __name__ == "__main__":
    sys.exit(main())
