"""The vLLM engine's settings, declared once (engines/settings.py): what a tuner searches, how the winner is
re-timed with `bench`, and the `vllm serve` line that deploys it."""

from __future__ import annotations

import json
import shlex

from ..settings import EngineSettings, Family, Setting
from .arms import DEFAULT_LOOKUP, DEFAULT_SPECULATIVE_TOKENS, METHOD_SPECULATIVE_TOKENS, VllmArm

ENGINE = "vllm"

TOKENS = Setting("num_speculative_tokens", int, (None, 2, 4, 8), DEFAULT_SPECULATIVE_TOKENS,
                 f"tokens drafted per step (empty: AssistLab's {DEFAULT_SPECULATIVE_TOKENS})", "--vllm-speculative-tokens")
LOOKUP_MIN = Setting("prompt_lookup_min", int, (None,), DEFAULT_LOOKUP[0], "the shortest n-gram ngram matches",
                     "--vllm-lookup-min")
LOOKUP_MAX = Setting("prompt_lookup_max", int, (None,), DEFAULT_LOOKUP[1], "the longest n-gram ngram matches",
                     "--vllm-lookup-max")


def _method(method: str):
    def build(values: dict, assistant: str | None) -> VllmArm:
        return VllmArm(method, draft_model=assistant, **values)
    return build


def _tokens(method: str) -> Setting:
    default = METHOD_SPECULATIVE_TOKENS.get(method, DEFAULT_SPECULATIVE_TOKENS)
    return Setting("num_speculative_tokens", int, (None,), default, f"tokens drafted per step (empty: {default})",
                   "--vllm-speculative-tokens")


FAMILIES = (
    Family(ENGINE, "ngram", "vLLM's n-gram lookup in the prompt", (TOKENS, LOOKUP_MIN, LOOKUP_MAX), _method("ngram")),
    Family(ENGINE, "draft_model", "vLLM with a same-vocabulary draft model", (TOKENS,), _method("draft_model"),
           needs_assistant=True, searched=False),
    Family(ENGINE, "mtp", "vLLM with the target's own MTP layers", (_tokens("mtp"),), _method("mtp"), searched=False),
    Family(ENGINE, "suffix", "vLLM's suffix decoding (arctic-inference)", (_tokens("suffix"),), _method("suffix"),
           searched=False),
)


def default_arm(family: Family, assistant: str | None) -> VllmArm:
    """The arm with every setting left to its default (AssistLab's, where vLLM has none)."""
    return VllmArm(family.name, draft_model=assistant if family.needs_assistant else None)


def bench_args(arm: VllmArm) -> list[str]:
    """The `bench` options that time this arm alone beside vLLM's plain arm (and transformers')."""
    args = ["--engines", "vllm", "--vllm-method", arm.method]
    if arm.draft_model:
        args += ["--assistant", arm.draft_model]
    for name, flag in (("num_speculative_tokens", TOKENS.flag), ("prompt_lookup_min", LOOKUP_MIN.flag),
                       ("prompt_lookup_max", LOOKUP_MAX.flag)):
        if getattr(arm, name) is not None:
            args += [flag, str(getattr(arm, name))]
    return args


def deploy(arm: VllmArm, target: str, info: dict | None = None) -> dict:
    """The `vllm serve` line with the winner's --speculative-config JSON."""
    config = arm.speculative_config()
    line = f"vllm serve {shlex.quote(target)} --speculative-config {shlex.quote(json.dumps(config))}"
    return {"engine": ENGINE, "method": arm.method, "speculative_config": config, "command": line,
            "snippet": line}


def simplicity(arm: VllmArm) -> tuple:
    """Lower is simpler: the defaults first, then the fewest tokens drafted."""
    defaults = arm == default_arm(next(f for f in FAMILIES if f.name == arm.method), arm.draft_model)
    return (0 if defaults else 1, arm.num_speculative_tokens or 0)


def phrase(arm: VllmArm) -> str:
    """The arm in a few words: 'vLLM ngram with 4 tokens (lookup 2-4)'."""
    lookup = f" (lookup {arm.prompt_lookup_min}-{arm.prompt_lookup_max})" if arm.method == "ngram" else ""
    return f"vLLM {arm.method} with {arm.num_speculative_tokens} tokens{lookup}"


SETTINGS = EngineSettings(ENGINE, FAMILIES, default_arm, bench_args, deploy, simplicity, phrase,
                          plain_arm=lambda: VllmArm("plain"), title="vLLM")
