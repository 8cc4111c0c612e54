"""Presets and how a model reference resolves: hub id, bundled name, or a folder the operator allowed."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..config import CONTINUATION_PROMPT, DEFAULT_PROMPT, FIELD_CHARS, check_encodable
from ..errors import AssistLabError, InputError, ModelLoadError
from .transformers import bundled

MODELS_DIR_ENV = "ASSISTLAB_MODELS_DIR"

# org/name or a legacy single name, optionally @revision (branch, tag or commit).
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:@[A-Za-z0-9._/-]{1,128})?$")


@dataclass(frozen=True)
class Preset:
    """A target/assistant pair people commonly try; `assistant` is empty when the target drafts for itself (MTP)."""

    label: str
    target: str
    assistant: str
    note: str
    # The prompt the page starts with for this pair: an instruction for a chat model, the start of a text for a
    # base model (which continues text rather than answering it).
    prompt: str = DEFAULT_PROMPT
    strategy: str = "auto"  # the path 'auto' picks for this pair, named so lists can say it


BUNDLED_TARGET = "bundled:gemma-3-270m"
BUNDLED_ASSISTANT = "bundled:smollm2-135m-instruct"

PRESETS: tuple[Preset, ...] = (
    Preset(
        "Bundled, offline: Gemma 3 270M + SmolLM2-135M",
        BUNDLED_TARGET,
        BUNDLED_ASSISTANT,
        "Ships with AssistLab; different tokenizers (universal assisted generation), runs on a CPU. Gemma 3 270M "
        "is a base model: it continues the prompt as text rather than answering it.",
        CONTINUATION_PROMPT,
    ),
    Preset(
        "Reference: Gemma 3 27B + Qwen2.5-0.5B",
        "google/gemma-3-27b-it",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "The reference benchmark's pair: 23.9 s plain vs 20.5 s assisted on a GPU. Needs ~55 GB and HF_TOKEN.",
    ),
    Preset(
        "Qwen2.5 7B + Qwen2.5 0.5B",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Same family and tokenizer: classic assisted generation.",
    ),
    Preset(
        "Qwen2.5 1.5B + Qwen2.5 0.5B",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Same family; small enough for a modest GPU.",
    ),
    Preset(
        "Llama 3.1 8B + Llama 3.2 1B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        "Same tokenizer; gated, needs HF_TOKEN.",
    ),
    Preset(
        "SmolLM2 1.7B + SmolLM2 135M",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Same family; light enough for a CPU with patience.",
    ),
    # Drafters transformers ships beside the classic assistant (assistlab/drafters.py). Ids as published by
    # Google (ai.google.dev/gemma/docs/mtp: the assistant is the target's id + "-assistant") and as named in
    # transformers' own Glm4Moe docs; listed, not downloadable here.
    Preset(
        "Gemma 4 E2B + its assistant (gemma4-assistant)",
        "google/gemma-4-E2B-it",
        "google/gemma-4-E2B-it-assistant",
        "Google's 4-layer drafter that reads the target's own hidden and key/value states; gated, needs HF_TOKEN.",
        strategy="gemma4-assistant",
    ),
    Preset(
        "Gemma 4 E4B + its assistant (gemma4-assistant)",
        "google/gemma-4-E4B-it",
        "google/gemma-4-E4B-it-assistant",
        "The same kind of drafter for the E4B target; gated, needs HF_TOKEN.",
        strategy="gemma4-assistant",
    ),
    Preset(
        "Gemma 4 31B + its assistant (gemma4-assistant)",
        "google/gemma-4-31B-it",
        "google/gemma-4-31B-it-assistant",
        "The dense 31B target with its drafter; needs a large GPU (about 62 GB in bfloat16) and HF_TOKEN.",
        strategy="gemma4-assistant",
    ),
    Preset(
        "GLM-4.5 with its own MTP layer (mtp)",
        "zai-org/GLM-4.5",
        "",
        "Self-speculation: the checkpoint's MTP layer drafts, no second model. A 355B MoE: several large GPUs.",
        strategy="mtp",
    ),
)


def default_prompt(target: str) -> str:
    """The prompt a pair starts with when none is given: its preset's, else the reference prompt."""
    return next((p.prompt for p in PRESETS if p.target == target), DEFAULT_PROMPT)


@dataclass(frozen=True)
class ModelRef:
    """A resolved reference: `kind` is 'hub', 'bundled' or 'local'; `location` a repo id or a folder.

    `text` is canonical, never what someone typed: the hub id (with its @revision), the bundled name, or the
    folder's path relative to the models folder. It is what pages and reports show and what caches keep, so
    one person's spelling (markup included) never reaches another person's report.
    """

    text: str
    kind: str
    location: str
    revision: str | None = None

    @property
    def short_name(self) -> str:
        return self.location.rstrip("/").split("/")[-1] if self.kind != "bundled" else self.text[len(bundled.PREFIX):]


def models_dir() -> Path | None:
    """The one directory local folders may come from, or None when local folders are disabled."""
    value = os.environ.get(MODELS_DIR_ENV)
    return Path(value).expanduser().resolve() if value else None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _local(text: str, root: Path | None) -> ModelRef:
    if root is None:
        raise InputError(
            f"Local folders are disabled on this server, so {text!r} cannot be used. The operator can allow a "
            f"folder of models by setting {MODELS_DIR_ENV}; otherwise use a hub id like org/name."
        )
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    real = candidate.resolve()  # follows symlinks, so a link pointing out is judged by where it points
    if not _inside(real, root):
        raise InputError(
            f"{text!r} is outside the allowed models folder ({MODELS_DIR_ENV}); only folders inside it can be used."
        )
    if not real.is_dir():
        raise ModelLoadError(f"There is no model folder {text!r} inside the allowed models folder.")
    return ModelRef(real.relative_to(root).as_posix(), "local", str(real))


def resolve(text: str) -> ModelRef:
    """Turn what a user typed into a ModelRef, refusing anything outside what they may use."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("A model reference is empty; choose a preset, type a hub id (org/name) or a folder name.")
    text = text.strip()
    if "\x00" in text or len(text) > FIELD_CHARS["target"]:
        raise InputError("That model reference is not valid; use a hub id like org/name or a folder name.")
    check_encodable("model reference", text)
    if bundled.is_bundled(text):
        bundled.lookup(text)  # raises with the list of bundled names
        return ModelRef(text, "bundled", text)
    root = models_dir()
    looks_like_path = text.startswith(("/", ".", "~")) or "\\" in text or ".." in Path(text).parts
    if looks_like_path:
        return _local(text, root)
    if root is not None and (root / text).exists():
        return _local(text, root)
    if _HUB_ID.match(text) and ".." not in text and "--" not in text:
        repo, _, revision = text.partition("@")
        return ModelRef(f"{repo}@{revision}" if revision else repo, "hub", repo, revision or None)
    raise InputError(
        f"{text!r} is not a hub id (org/name, optionally @revision), a bundled model ({bundled.PREFIX}NAME) or a "
        f"folder inside the allowed models folder."
    )


def resolve_field(field: str, text: str) -> ModelRef:
    """`resolve(text)`, with a refusal that starts with the field it came from ('target: ...'), so the page can
    name the box by its label and the command line its option."""
    try:
        return resolve(text)
    except AssistLabError as exc:
        raise type(exc)(f"{field}: {exc}") from None


def canonical_request(request):
    """`request` (a BenchRequest) with every model reference resolved to its canonical text.

    Raises on the first reference a user may not use, before anything is loaded; the message starts with the
    field ('target: ', 'assistant: ').
    """
    def canonical(arm):
        if arm.engine == "vllm":  # a draft model is an assistant; an EAGLE head comes from --vllm-draft
            field = "vllm draft" if arm.method in ("eagle", "eagle3") else "assistant"
            return dataclasses.replace(arm, draft_model=resolve_field(field, arm.draft_model).text) if arm.draft_model else arm
        return dataclasses.replace(arm, assistant=resolve_field("assistant", arm.assistant).text) if arm.assistant else arm

    arms = tuple(canonical(arm) for arm in request.arms)
    return dataclasses.replace(request, target=resolve_field("target", request.target).text, arms=arms)
