"""What a speculative method needs before AssistLab starts a vLLM server for it, checked first so that a method
that cannot work is one sentence rather than a minute of loading and a traceback: an EAGLE head vLLM can read,
the target's own MTP layers, arctic-inference in vLLM's Python for suffix decoding."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ...errors import AssistLabError, EngineError
from .. import catalog
from .arms import HEAD_METHODS, VllmArm
from .server import VllmPython, _server_env

# What vLLM 0.32's suffix decoding asks for when arctic-inference is missing (config/speculative.py).
ARCTIC_PACKAGE = "arctic-inference==0.1.1"
# Where a checkpoint's config says how many multi-token-prediction layers it has: DeepSeek-V3, GLM-4.5,
# MiMo, Ernie and most use num_nextn_predict_layers; Qwen3.5 mtp_num_hidden_layers; MiniMax num_mtp_modules.
MTP_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def mtp_layers(config: dict) -> int:
    """How many MTP layers a config.json (a dict) declares, at its top level, in its text_config or mtp_config."""
    found = 0
    for part in (config, config.get("text_config"), config.get("mtp_config")):
        if isinstance(part, dict):
            for name in MTP_FIELDS:
                value = part.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    found = max(found, value)
    return found


def _config(folder: str) -> dict:
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def arctic_inference(python: VllmPython, timeout: float = 120.0) -> str | None:
    """None when `import arctic_inference` works in vLLM's Python; else the reason, in a few words."""
    try:
        done = subprocess.run([python.path, "-c", "import arctic_inference"], capture_output=True, text=True,
                              timeout=timeout, env=_server_env(os.environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode == 0:
        return None
    return ((done.stderr.strip().splitlines() or ["no output"])[-1])[:200]


def _head(arm: VllmArm) -> dict:
    """Where vLLM finds the arm's EAGLE head: a folder here, or a hub id (and revision) it fetches itself."""
    kind = "EAGLE-3" if arm.method == "eagle3" else "EAGLE"
    try:
        ref = catalog.resolve(arm.draft_model)
    except AssistLabError as exc:
        raise type(exc)(f"vllm draft: {exc}") from None
    if ref.kind == "bundled":
        raise EngineError(f"{ref.text} is a whole model, not an {kind} head; give the head trained for the target "
                          f"with --vllm-draft, or time {ref.text} with --vllm-method draft_model.")
    if ref.kind == "hub":
        return {"model": ref.location, **({"revision": ref.revision} if ref.revision else {})}
    if not (Path(ref.location) / "config.json").is_file():
        raise EngineError(f"The {kind} head {ref.text} has no config.json, so vLLM cannot load it; give the folder "
                          f"of the head's checkpoint with --vllm-draft.")
    return {"model": ref.location}


def prepare(arm: VllmArm, target_name: str, target_folder: str, python: VllmPython) -> dict:
    """What the arm's --speculative-config takes beyond the arm's own settings ({} for most), once what the
    method needs is there; EngineError with the sentence a person reads when it is not."""
    if arm.method in HEAD_METHODS:
        return _head(arm)
    if arm.method == "mtp":
        layers = mtp_layers(_config(target_folder))
        if layers < 1:
            raise EngineError(
                f"vLLM's mtp method drafts with the target's own multi-token-prediction layers, and {target_name} "
                f"has none (its config.json has no {' or '.join(MTP_FIELDS[:2])}); use a target trained with them "
                f"(DeepSeek-V3, GLM-4.5, Qwen3-Next, MiMo) or another method.")
        return {}
    if arm.method == "suffix":
        missing = arctic_inference(python)
        if missing is not None:
            raise EngineError(
                f"vLLM's suffix method needs the arctic-inference package in {python.path} ({missing}); install it "
                f"with: {python.path} -m pip install {ARCTIC_PACKAGE}")
        return {}
    return {}
