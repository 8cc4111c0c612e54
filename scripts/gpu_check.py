"""The GPU check: run `python scripts/gpu_check.py` on a machine with a CUDA GPU (about 3-6 minutes).

1. The default comparison on the bundled pair in bfloat16 on CUDA, synchronised timing: every arm's speedup,
   prediction and peak GPU memory, and no busy-machine warning while the GPU is otherwise idle.
2. The same with a second process keeping the GPU busy (bfloat16 matmuls): the busy-machine warning appears.
3. Out of memory: this process holds nearly all free GPU memory, so the plain run cannot fit; AssistLab
   must say so in words (ResourceError), and after the memory is freed the next comparison must work.

Exits 0 when every check holds, 1 when one fails, 0 with a message on a machine without CUDA.
Not collected by pytest: it needs a GPU and the bundled models (converted on first use).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: the repository's package

import torch

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.arms import assisted_arms
from assistlab.engines.transformers.models import ModelStore
from assistlab.errors import ResourceError
from assistlab.measure.runner import run_to_report

TOKENS = 48
BUSY = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(__import__("sys").argv[1])
while time.monotonic() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def request(repeats: int = 5, tokens: int = TOKENS) -> BenchRequest:
    arms = assisted_arms("auto", [catalog.BUNDLED_ASSISTANT])
    return BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, max_new_tokens=tokens, repeats=repeats,
                        warmup=1, device="cuda", dtype="bfloat16")


def show(title: str, data: dict) -> None:
    env, gpu = data["environment"], data["environment"]["contention"]["gpu"]
    print(f"\n== {title}: {env.get('gpu_name')} {env['dtype']}, {data['counted_repetitions']} repetitions")
    for arm in data["arms"]:
        peak = max((m for m in arm["memory_bytes"] if m), default=0)
        print(f"  {arm['name'][:44]:44} median {arm['latency_summary']['median']:.4f} s, "
              f"peak GPU memory {peak / 2**20:,.0f} MiB" + (f", FAILED: {arm['error']}" if arm["error"] else ""))
    for entry in data["comparison"]:
        a = entry["analysis"]
        predicted = "-" if a["predicted_speedup"] is None else f"{a['predicted_speedup']:.2f}x"
        print(f"  {entry['arm'][:44]:44} speedup {entry['speedup']['median']:.2f}x, predicted {predicted}")
    print(f"  GPU during timed runs: {gpu}")
    for warning in data["warnings"]:
        print(f"  WARNING ({warning['code']}): {warning['message']}")


def main() -> int:
    if not torch.cuda.is_available():
        print("No CUDA GPU on this machine: the GPU check has nothing to run. Run it where `nvidia-smi` works.")
        return 0
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("  ok: " if ok else "  FAILED: ") + what)
        if not ok:
            failures.append(what)

    store = ModelStore()
    started = time.monotonic()
    idle = run_to_report(request(), store).to_dict()
    show("idle GPU", idle)
    check(idle["status"] == "complete", "the default comparison completes in bfloat16 on CUDA")
    check(idle["environment"]["dtype"] == "bfloat16" and idle["environment"]["device"] == "cuda", "bfloat16 on CUDA")
    check(all(m and m > 0 for a in idle["arms"] for m in a["memory_bytes"]), "peak GPU memory recorded per run")
    check(idle["environment"]["contention"]["gpu"].get("available") is True, "NVML reads the GPU")
    check(not idle["warnings"], "no busy-machine warning on an otherwise idle GPU")

    burner = subprocess.Popen([sys.executable, "-c", BUSY, "240"])
    try:
        time.sleep(10)  # let it allocate and reach full speed
        busy = run_to_report(request(repeats=3), store).to_dict()
    finally:
        burner.kill()
        burner.wait(timeout=30)
    show("GPU kept busy by another process", busy)
    check([w["code"] for w in busy["warnings"]] == ["busy-machine"], "the busy-machine warning appears")
    check(all("may not hold" in w["message"] for w in busy["warnings"]), "the warning says the result may not hold")

    hog, chunk = [], 1 << 30
    while chunk >= 1 << 20:  # take every free byte the allocator will give, in shrinking pieces
        try:
            hog.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            chunk //= 2
    print(f"\n== out of memory: holding {sum(t.numel() for t in hog) / 2**30:.1f} GiB, "
          f"{torch.cuda.mem_get_info()[0] / 2**20:.0f} MiB left free")
    try:
        run_to_report(request(repeats=1, tokens=16), store)
        check(False, "a run with no GPU memory left fails")
    except ResourceError as exc:
        print(f"  AssistLab said: {exc}")
        check("ran out of memory" in str(exc), "the out-of-memory message is a sentence for a person")
    except Exception as exc:  # noqa: BLE001 - any other error is the failure being checked for
        check(False, f"out of memory is reported as a ResourceError, not {type(exc).__name__}: {exc}")
    del hog
    torch.cuda.empty_cache()
    after = run_to_report(request(repeats=1, tokens=16), store).to_dict()
    check(after["status"] == "complete", "after the memory is freed the next comparison works")

    print(f"\n{len(failures)} check(s) failed in {time.monotonic() - started:.0f} s." if failures
          else f"\nAll GPU checks passed in {time.monotonic() - started:.0f} s.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
