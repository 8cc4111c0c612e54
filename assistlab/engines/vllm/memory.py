"""What each vLLM server AssistLab starts reserves (a KV cache sized for the comparison, its weights, its
processes), and whether all of them fit in the free memory before the first one starts."""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20
MARGIN = 1.5  # over the exact KV bytes: vLLM rounds to blocks and keeps a few spare ones
BLOCK_TOKENS = 16  # vLLM's default block size
FLOOR_BYTES = 64 * MIB
# A vLLM server's processes besides the weights and the KV cache (API server, engine core, worker, torch). vLLM
# 0.32's CPU build serving the bundled 270M target in float32 (1.07 GB of weights, a 1 GiB KV space) held 6.5 GB
# of its own memory (the unique set size of its four processes, 2026-12-03): 4.4 GB beyond weights and KV
# cache. The 1.6 GB once measured here let five servers start on this 24 GiB machine, and the kernel's
# out-of-memory killer then ended two of them.
OVERHEAD_BYTES = int(4.4e9)
# On a GPU: a server's CUDA context, activations and allocator slack on the device besides weights and KV cache.
# An estimate (vLLM's own profiling reserves about this much for a small model), not measured here: no GPU.
GPU_OVERHEAD_BYTES = int(2.0e9)
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
CPU_SPACE_VAR = "VLLM_CPU_KVCACHE_SPACE"  # the CPU backend's KV cache, in whole GiB


def _config(folder: str | None) -> dict | None:
    try:
        with open(os.path.join(str(folder), "config.json")) as fh:
            config = json.load(fh)
    except (OSError, ValueError, TypeError):
        return None
    return config if isinstance(config, dict) else None


def kv_bytes_per_token(config: dict, dtype: str) -> int:
    """Keys and values of one token in every layer: 2 × layers × KV heads × head size × dtype bytes."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = int(text.get("num_hidden_layers") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head = int(text.get("head_dim") or (int(text.get("hidden_size") or 0) // heads if heads else 0))
    return 2 * layers * kv_heads * head * DTYPE_BYTES.get(dtype, 2)


def kv_cache_bytes(folders: list[str], context: int, dtype: str, sequences: int = 1) -> int | None:
    """The KV cache a server needs for `sequences` of `context` tokens of every model in `folders` (target,
    then a draft model or head), with MARGIN; None when a folder's config cannot be read."""
    per_token = 0
    for folder in folders:
        config = _config(folder)
        if config is None:
            return None
        per_token += kv_bytes_per_token(config, dtype)
    if per_token <= 0:
        return None
    tokens = math.ceil(max(context, 1) / BLOCK_TOKENS) * BLOCK_TOKENS * max(sequences, 1)
    return max(FLOOR_BYTES, math.ceil(per_token * tokens * MARGIN))


def weights_bytes(folder: str | None, dtype: str | None = None) -> int:
    """The size of a model folder's weight files (what a server loads into memory); with `dtype`, in the
    server's dtype (a bfloat16 checkpoint served in float32 holds twice its files), when its config says its own."""
    total = 0
    for pattern in ("*.safetensors", "*.bin", "*.pt"):
        for path in glob.glob(os.path.join(str(folder), pattern)):
            try:
                total += os.path.getsize(os.path.realpath(path))
            except OSError:
                continue
    config = _config(folder) or {}
    saved = config.get("torch_dtype") or config.get("dtype")
    if dtype in DTYPE_BYTES and saved in DTYPE_BYTES:
        total = total * DTYPE_BYTES[dtype] // DTYPE_BYTES[saved]
    return total


def cpu_space_gib(kv_bytes: int) -> int:
    """The CPU backend's VLLM_CPU_KVCACHE_SPACE (whole GiB, at least 1) that holds `kv_bytes`."""
    return max(1, math.ceil(kv_bytes / GIB))


@dataclass(frozen=True)
class Reservation:
    """What one server reserves: its KV cache (as asked, and as the CPU backend rounds it), weights, processes."""

    label: str
    kv_cache_bytes: int
    reserved_kv_bytes: int
    weights_bytes: int
    overhead_bytes: int = OVERHEAD_BYTES
    sequences: int = 1  # the requests at once its KV cache holds (the highest load level)

    @property
    def total(self) -> int:
        return self.reserved_kv_bytes + self.weights_bytes + self.overhead_bytes

    def to_dict(self) -> dict:
        return {"kv_cache_bytes": self.kv_cache_bytes, "reserved_kv_bytes": self.reserved_kv_bytes,
                "weights_bytes": self.weights_bytes, "overhead_bytes": self.overhead_bytes,
                "reserved_bytes": self.total, "sequences": self.sequences}


def device_free_bytes() -> list[int] | None:
    """The free memory of each visible GPU, in the order vLLM numbers them (CUDA_VISIBLE_DEVICES), by NVML, which
    opens no CUDA context; else by torch, the first device only (a context on each GPU would hold memory there).
    None without a readable GPU. A server AssistLab starts runs on the first (no tensor parallelism)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            indices = ([int(v) for v in visible] if visible and all(v.isdigit() for v in visible)
                       else range(pynvml.nvmlDeviceGetCount()))
            return [int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free)
                    for i in indices] or None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: try torch
        pass
    try:
        import torch

        if torch.cuda.is_available():
            return [int(torch.cuda.mem_get_info(0)[0])]
    except Exception:  # noqa: BLE001 - no GPU, or none readable
        pass
    return None


def available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - unknown: the check is skipped
        return None


def gb(n: int) -> str:
    """Bytes as '6.5 GB'."""
    return f"{n / 1e9:.1f} GB"
