"""What a search over vLLM settings asks of this engine: the settings it declares (engines/settings.py: what a
tuner searches, how the winner is re-timed with `bench`), the request that checks a schedule against the best
fixed K of each level, and the `vllm serve` line that deploys an arm."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass

from ...config import BenchRequest
from ...errors import EngineError, InputError
from ..settings import EngineSettings, Family, Setting
from ..transformers import cached
from ..transformers.tuning import deployed_model
from . import methods, server
from . import schedule as schedules
from .arms import DEFAULT_LOOKUP, DEFAULT_SPECULATIVE_TOKENS, METHOD_SPECULATIVE_TOKENS, SUFFIX_CACHED_REQUESTS, VllmArm


@dataclass(frozen=True)
class SchedulePlan:
    """The comparison that checks a schedule: `request` times plain, each level's best fixed K and the schedule
    under load at `levels`; `schedule` and `fixed` ({level: arm}) say which of its arms is which (each arm's
    to_dict() is its `spec` in the report, the one rule results.schedule matches arms by)."""

    request: BenchRequest
    schedule: VllmArm
    fixed: dict[int, VllmArm]
    best: dict[int, int]
    ranges: schedules.Schedule

    def ks(self) -> dict[int, int]:
        """The schedule's K at each level checked."""
        return {level: schedules.k_at(self.ranges, level) for level in sorted(self.best)}

    def specs(self) -> tuple[dict, dict[int, dict]]:
        """(the schedule arm's spec, {level: its best fixed arm's spec}): how the report names them."""
        return self.schedule.to_dict(), {level: arm.to_dict() for level, arm in self.fixed.items()}

    def per_level(self) -> list[SchedulePlan]:
        """The same check as one comparison per level: plain, that level's best fixed K (none where plain was
        best) and the schedule, each served at that level alone. The schedule (its ranges) stays the one built
        from every level. At most three servers at once, where the whole check starts two plus one per
        distinct best K."""
        parts = []
        for level in sorted(self.best):
            fixed = {level: self.fixed[level]} if level in self.fixed else {}
            arms = (VllmArm("plain"), *fixed.values(), self.schedule)
            request = dataclasses.replace(self.request, arms=arms, concurrency=(level,))
            parts.append(SchedulePlan(request, self.schedule, fixed, {level: self.best[level]}, self.ranges))
        return parts

    def record(self) -> dict:
        """The report's `tune.schedule`: the method, each level's best K, the ranges and their rule, and the
        --speculative-config the check's server was started with."""
        return {"method": self.schedule.method, "best_k_by_level": {str(c): k for c, k in sorted(self.best.items())},
                "ranges": [list(r) for r in self.ranges], "text": schedules.text(self.ranges),
                "label": self.schedule.label, "rule": schedules.RULE,
                "speculative_config": self.schedule.speculative_config()}


def schedule_family(arm) -> tuple | None:
    """What a schedule keeps while its draft length varies by batch size: (method, lookup min, lookup max, draft
    model) of a speculative method AssistLab starts a server for; None for plain, an operator's server, another
    engine's arm or an arm that already has a schedule."""
    if not isinstance(arm, VllmArm) or not arm.assisted or arm.url is not None or arm.schedule is not None:
        return None
    return arm.method, arm.prompt_lookup_min, arm.prompt_lookup_max, arm.draft_model


def schedule_plan(base: BenchRequest, template: VllmArm, best: dict[int, int],
                  max_batch: int | None = None) -> SchedulePlan:
    """The check of the schedule built from `best` ({level: best K}, 0 where plain was best) for `template`'s
    method and settings (its draft model, lookup window): plain, one arm per distinct best K above 0, and the
    schedule arm, at the levels of `best`, `base.load_rounds` rounds each; one untimed single request per arm
    (the load phase's own warm-up rounds warm each level). `max_batch`: as schedule.from_levels takes it."""
    if template.url is not None or not template.assisted:
        raise InputError("A schedule is checked for a speculative method AssistLab starts a server for (ngram, "
                         "draft_model, eagle, eagle3, mtp, suffix), not plain or an operator's server.")
    ranges = schedules.from_levels(best, max_batch)
    levels = tuple(sorted(best))
    like = {"prompt_lookup_min": template.prompt_lookup_min, "prompt_lookup_max": template.prompt_lookup_max,
            "draft_model": template.draft_model}
    fixed = {level: VllmArm(template.method, best[level], **like) for level in levels if best[level] > 0}
    scheduled = VllmArm(template.method, **like, schedule=ranges)
    arms = (VllmArm("plain"), *dict.fromkeys(fixed.values()), scheduled)
    request = dataclasses.replace(base, arms=arms, engines=("vllm",), concurrency=levels, repeats=1, warmup=0,
                                  stop_rule="fixed", precision=None, max_time_s=None)
    return SchedulePlan(request, scheduled, fixed, dict(best), ranges)


def started_servers(arms) -> int:
    """How many vLLM servers a comparison of these arms starts: one per vLLM arm that is not an operator's."""
    return sum(1 for arm in arms if isinstance(arm, VllmArm) and arm.url is None)


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
        top = arm.schedule[-1][1]
        notes.append(f"The schedule's last K ({arm.schedule[-1][2]}) holds past batch size {top} up to the "
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


def unavailable() -> str | None:
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


def default_arm(family: Family, assistant: str | None) -> VllmArm:
    """The arm with every setting left to its default (AssistLab's, where vLLM has none)."""
    return VllmArm(family.name, draft_model=assistant if family.needs_assistant else None)


def _deploy(arm: VllmArm | None, target: str, info: dict | None = None, request: dict | None = None) -> dict:
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


def simplicity(arm: VllmArm) -> tuple:
    """Lower is simpler: the defaults first, then the fewest tokens drafted."""
    defaults = arm == default_arm(next(f for f in FAMILIES if f.name == arm.method), arm.draft_model)
    return (0 if defaults else 1, arm.num_speculative_tokens or 0)


def phrase(arm: VllmArm) -> str:
    """The arm in a few words: 'vLLM ngram with 4 tokens (lookup 2-4)'."""
    lookup = f" (lookup {arm.prompt_lookup_min}-{arm.prompt_lookup_max})" if arm.method == "ngram" else ""
    return f"vLLM {arm.method} with {arm.num_speculative_tokens} tokens{lookup}"


@dataclass(frozen=True)
class VllmSettings(EngineSettings):
    """vLLM's declaration: its methods, and how an arm of them is re-timed, served and said; a search's vLLM
    candidates are timed beside vLLM's own plain arm."""

    def default_arm(self, family: Family, assistant: str | None) -> VllmArm:
        return default_arm(family, assistant)

    def arm_args(self, arm: VllmArm) -> list[str]:
        return ["--engines", "vllm", "--vllm-method", arm.method,
                *(["--assistant", arm.draft_model] if arm.draft_model else [])]

    def deploy(self, arm: VllmArm | None, target: str, info: dict | None = None,
               request: dict | None = None) -> dict:
        return _deploy(arm, target, info, request)

    def simplicity(self, arm: VllmArm) -> tuple:
        return simplicity(arm)

    def phrase(self, arm: VllmArm) -> str:
        return phrase(arm)

    def plain_arm(self) -> VllmArm:
        return VllmArm("plain")

    def unavailable(self) -> str | None:
        return unavailable()


SETTINGS = VllmSettings(ENGINE, FAMILIES, title="vLLM")
