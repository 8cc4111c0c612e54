"""What a search over vLLM settings asks of this engine: the settings it declares (engines/settings.py: what a
tuner searches, how the winner is re-timed with `bench`) and the `vllm serve` line that deploys an arm. The check
of a schedule of draft lengths is schedule_plan.py's."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass

from ...errors import EngineError, InputError
from ..settings import EngineSettings, Family, Setting
from ..transformers import cached
from ..transformers.tuning import deployed_model
from . import methods, server
from .arms import DEFAULT_LOOKUP, DEFAULT_SPECULATIVE_TOKENS, METHOD_SPECULATIVE_TOKENS, SUFFIX_CACHED_REQUESTS, VllmArm


def deploy(arm: VllmArm, target: str, *, max_num_seqs: int | None = None, draft_folder: str | None = None,
           revision: str | None = None) -> dict:
    """The `vllm serve` line that serves `arm`'s setting for deployment: {command, argv, speculative_config,
    notes}. `target` is the model as the deployment names it (with its hub `revision`, when one was asked);
    `max_num_seqs` is added when given (a schedule's ranges are batch sizes up to it); `draft_folder` replaces
    the draft model's reference where it lies on disk. AssistLab's measurement-only choices are left out and
    said in `notes`."""
    if arm.url is not None:
        raise InputError(f"The server {arm.name} is the operator's: its own command line is its deployment.")
    config = arm.speculative_config(draft_folder)
    notes = []
    if config is not None and config.get("suffix_decoding_max_cached_requests") == SUFFIX_CACHED_REQUESTS:
        del config["suffix_decoding_max_cached_requests"]  # vLLM's default cache learns from past answers
        notes.append("AssistLab timed suffix decoding without its cache of past answers (every repetition asks "
                     "the same prompt); a deployment keeps vLLM's default cache, which may draft better.")
    argv = ["vllm", "serve", target, *(["--revision", revision] if revision else [])]
    if max_num_seqs is not None:
        argv += ["--max-num-seqs", str(max_num_seqs)]
    if config is not None:
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if arm.schedule is not None:
        _, top, last_k = arm.schedule.ranges[-1]
        notes.append(f"The schedule's last K ({last_k}) holds past batch size {top} up to the "
                     f"server's --max-num-seqs; ranges were measured only at the levels timed.")
    return {"command": shlex.join(argv), "argv": argv, "speculative_config": config, "notes": notes}


# ---------------------------------------------------------------- the settings a tuner searches

ENGINE = "vllm"

TOKENS_HELP = f"vLLM num_speculative_tokens (default {DEFAULT_SPECULATIVE_TOKENS})"
TOKENS = Setting(
    "num_speculative_tokens", int, (None, 2, 4, 8), DEFAULT_SPECULATIVE_TOKENS,
    f"tokens drafted per step (empty: AssistLab's {DEFAULT_SPECULATIVE_TOKENS})", "--vllm-speculative-tokens",
    TOKENS_HELP, label="vLLM speculative tokens (num_speculative_tokens)",
    hint=f"vLLM's num_speculative_tokens (k) for every vLLM method. Empty = {DEFAULT_SPECULATIVE_TOKENS}.",
    empty=str(DEFAULT_SPECULATIVE_TOKENS))
LOOKUP_MIN = Setting(
    "prompt_lookup_min", int, (None,), DEFAULT_LOOKUP[0], "the shortest n-gram ngram matches", "--vllm-lookup-min",
    f"vLLM ngram prompt_lookup_min (default {DEFAULT_LOOKUP[0]})", label="vLLM lookup min (prompt_lookup_min)",
    hint=f"ngram's prompt_lookup_min: the shortest n-gram looked up. Empty = {DEFAULT_LOOKUP[0]}.",
    empty=str(DEFAULT_LOOKUP[0]))
LOOKUP_MAX = Setting(
    "prompt_lookup_max", int, (None,), DEFAULT_LOOKUP[1], "the longest n-gram ngram matches", "--vllm-lookup-max",
    f"vLLM ngram prompt_lookup_max (default {DEFAULT_LOOKUP[1]})", label="vLLM lookup max (prompt_lookup_max)",
    hint=f"ngram's prompt_lookup_max: the longest n-gram looked up. Empty = {DEFAULT_LOOKUP[1]}.",
    empty=str(DEFAULT_LOOKUP[1]))


def no_mtp_layers(target: str) -> str | None:
    """Why mtp cannot run for `target`, where its config.json is on this machine: it declares no MTP layers
    (methods.mtp_layers); None when it has some or when it is not here to read."""
    folder = cached.folder_of(target)
    try:
        config = json.loads((folder / "config.json").read_text()) if folder is not None else None
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict) or methods.mtp_layers(config) >= 1:
        return None
    return f"{target} has no MTP layers"


def _method(method: str):
    def build(values: dict, assistant: str | None) -> VllmArm:
        return VllmArm(method, draft_model=assistant, **values)
    return build


def _tokens(method: str) -> Setting:
    default = METHOD_SPECULATIVE_TOKENS.get(method, DEFAULT_SPECULATIVE_TOKENS)
    return Setting("num_speculative_tokens", int, (None,), default, f"tokens drafted per step (empty: {default})",
                   "--vllm-speculative-tokens", TOKENS_HELP)


FAMILIES = (
    Family(ENGINE, "ngram", "vLLM's n-gram lookup in the prompt", (TOKENS, LOOKUP_MIN, LOOKUP_MAX), _method("ngram")),
    Family(ENGINE, "draft_model", "vLLM with a draft model (another tokenizer: the shared tokens)", (TOKENS,),
           _method("draft_model"), needs_assistant=True, searched=False),
    Family(ENGINE, "mtp", "vLLM with the target's own MTP layers", (_tokens("mtp"),), _method("mtp"), searched=False,
           check=lambda target: no_mtp_layers(target)),
    Family(ENGINE, "suffix", "vLLM's suffix decoding (arctic-inference)", (_tokens("suffix"),), _method("suffix"),
           searched=False),
)


@dataclass(frozen=True)
class VllmSettings(EngineSettings):
    """vLLM's declaration: its methods, and how an arm of them is re-timed, served and said; a search's vLLM
    candidates are timed beside vLLM's own plain arm."""

    def default_arm(self, family: Family, assistant: str | None) -> VllmArm:
        """The arm with every setting left to its default (AssistLab's, where vLLM has none)."""
        return VllmArm(family.name, draft_model=assistant if family.needs_assistant else None)

    def arm_args(self, arm: VllmArm) -> list[str]:
        return ["--engines", "vllm", "--vllm-method", arm.method,
                *(["--assistant", arm.draft_model] if arm.draft_model else [])]

    def deploy(self, arm: VllmArm | None, target: str, info: dict | None = None,
               request: dict | None = None) -> dict:
        """The tuner's deploy block: `deploy`'s `vllm serve` line (plain when `arm` is None) with the models where
        they are (a bundled model's converted folder, a hub id, a folder), as the snippet to copy; after it, as a
        comment, the request that asks the server the searched prompt for the searched number of new tokens."""
        arm = arm or VllmArm("plain")
        where, revision, comment = deployed_model(target)
        draft = deployed_model(arm.draft_model)[0] if arm.draft_model else None
        served = deploy(arm, where, draft_folder=draft, revision=revision)
        lines = [*([comment] if comment else []), served["command"]]
        request = request or {}
        if isinstance(request.get("prompt"), str):
            chat = request.get("chat_template", True)
            body = {"model": where, **({"messages": [{"role": "user", "content": request["prompt"]}]} if chat
                                       else {"prompt": request["prompt"]}),
                    "max_tokens": request.get("max_new_tokens") or 256, "temperature": 0}
            url = "http://127.0.0.1:8000/v1/" + ("chat/completions" if chat else "completions")
            lines += ["# Once it is up, from another shell: the searched prompt, greedy, as the search timed it",
                      f"# curl -s {url} -H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}"]
        return {"engine": ENGINE, "method": arm.method, **served, "snippet": "\n".join(lines)}

    def simplicity(self, arm: VllmArm) -> tuple:
        """Lower is simpler: the defaults first, then the fewest tokens drafted."""
        defaults = arm == self.default_arm(next(f for f in FAMILIES if f.name == arm.method), arm.draft_model)
        return (0 if defaults else 1, arm.num_speculative_tokens or 0)

    def phrase(self, arm: VllmArm) -> str:
        """The arm in a few words: 'vLLM ngram with 4 tokens (lookup 2-4)'."""
        lookup = f" (lookup {arm.prompt_lookup_min}-{arm.prompt_lookup_max})" if arm.method == "ngram" else ""
        return f"vLLM {arm.method} with {arm.num_speculative_tokens} tokens{lookup}"

    def plain_arm(self) -> VllmArm:
        return VllmArm("plain")

    def unavailable(self) -> str | None:
        """Why vLLM's families cannot run on this server, in a few words, or None: the finder the engine uses when
        a search starts (server.find_python), asked once when a form is built. Quick where vLLM is not set up at all
        (no ASSISTLAB_VLLM_PYTHON); else one short probe of that Python, which never imports vLLM."""
        if not (os.environ.get(server.PYTHON_VAR) or "").strip():
            return f"vLLM is not installed on this server ({server.PYTHON_VAR} is not set)"
        try:
            server.find_python(timeout=20.0)
        except EngineError:
            return f"vLLM is not installed on this server (not found through {server.PYTHON_VAR})"
        return None


SETTINGS = VllmSettings(ENGINE, FAMILIES, title="vLLM")
