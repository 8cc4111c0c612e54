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
    """A target/assistant pair people commonly try; `assistant` is empty when the target drafts for itself (MTP).

    `parameters` is both models' weights together, in billions (from their model cards; None: not known),
    from which `fit` says whether the pair fits this machine; `gated` says whether the hub asks for an access
    token (HF_TOKEN) before it lets anyone download them.
    """

    label: str
    target: str
    assistant: str
    note: str
    # The prompt the page starts with for this pair: an instruction for a chat model, the start of a text for a
    # base model (which continues text rather than answering it).
    prompt: str = DEFAULT_PROMPT
    strategy: str = "auto"  # the path 'auto' picks for this pair, named so lists can say it
    parameters: float | None = None
    gated: bool = False


BUNDLED_TARGET = "bundled:gemma-3-270m"
BUNDLED_ASSISTANT = "bundled:smollm2-135m-instruct"

PRESETS: tuple[Preset, ...] = (
    Preset(
        "Bundled, offline: Gemma 3 270M + SmolLM2-135M",
        BUNDLED_TARGET,
        BUNDLED_ASSISTANT,
        "Ships with AssistLab, so nothing is downloaded; small enough for an ordinary computer. The two models "
        "split text into words differently (different tokenizers), which AssistLab handles (universal assisted "
        "generation). Gemma 3 270M is a base model: it continues the prompt as text rather than answering it.",
        CONTINUATION_PROMPT,
        parameters=0.4,
    ),
    Preset(
        "Reference: Gemma 3 27B + Qwen2.5-0.5B",
        "google/gemma-3-27b-it",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "The reference benchmark's pair: 23.9 s plain vs 20.5 s assisted on a GPU.",
        parameters=27.9, gated=True,
    ),
    Preset(
        "Qwen2.5 7B + Qwen2.5 0.5B",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Same family and word list (tokenizer): classic assisted generation.",
        parameters=8.1,
    ),
    Preset(
        "Qwen2.5 1.5B + Qwen2.5 0.5B",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Same family; small enough for a modest GPU.",
        parameters=2.0,
    ),
    Preset(
        "Llama 3.1 8B + Llama 3.2 1B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        "Same word list (tokenizer).",
        parameters=9.3, gated=True,
    ),
    Preset(
        "SmolLM2 1.7B + SmolLM2 135M",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Same family; light enough for a CPU with patience.",
        parameters=1.8,
    ),
    # Drafters transformers ships beside the classic assistant (assistlab/drafters.py). Ids as published by
    # Google (ai.google.dev/gemma/docs/mtp: the assistant is the target's id + "-assistant") and as named in
    # transformers' own Glm4Moe docs; listed, not downloadable here. Their sizes are rounded from the model
    # cards (Gemma 4's E-models count their per-layer embeddings too).
    Preset(
        "Gemma 4 E2B + its assistant (gemma4-assistant)",
        "google/gemma-4-E2B-it",
        "google/gemma-4-E2B-it-assistant",
        "Google's small drafter (4 layers) that reads the target's own memory of the text so far (its hidden "
        "and key/value states).",
        strategy="gemma4-assistant", parameters=5.4, gated=True,
    ),
    Preset(
        "Gemma 4 E4B + its assistant (gemma4-assistant)",
        "google/gemma-4-E4B-it",
        "google/gemma-4-E4B-it-assistant",
        "The same kind of drafter for the E4B target.",
        strategy="gemma4-assistant", parameters=8.4, gated=True,
    ),
    Preset(
        "Gemma 4 31B + its assistant (gemma4-assistant)",
        "google/gemma-4-31B-it",
        "google/gemma-4-31B-it-assistant",
        "The dense 31B target with its drafter.",
        strategy="gemma4-assistant", parameters=31.5, gated=True,
    ),
    Preset(
        "GLM-4.5 with its own guessing layer (MTP)",
        "zai-org/GLM-4.5",
        "",
        "No second model: an extra layer built into the checkpoint guesses the next tokens (multi-token "
        "prediction, MTP). A 355B mixture-of-experts model.",
        strategy="mtp", parameters=355.0,
    ),
)

# ---------------------------------------------------------------- does a preset fit this machine?

TOKEN_ENV = "HF_TOKEN"
TOKEN_PAGE = "https://huggingface.co/settings/tokens"
# What a gated preset needs, in words for someone who has never made a token.
TOKEN_QUESTION = f"What is {TOKEN_ENV}, and how do I get one?"
TOKEN_HOWTO = (
    f"{TOKEN_ENV} is a Hugging Face access token: a password-like key that lets AssistLab download models whose "
    f"makers ask people to accept a license first (gated models, such as Gemma and Llama). Sign in on "
    f"huggingface.co, accept the license on the model's page, create a token with read access at {TOKEN_PAGE}, "
    f"then start AssistLab with it in its environment: {TOKEN_ENV}=hf_... python app.py (on a Space, add it "
    f"as a secret named {TOKEN_ENV})."
)
# Bytes per weight: bfloat16 on a GPU, float32 on a CPU (what dtype 'auto' picks), and the hub's files.
GPU_BYTES, CPU_BYTES, DOWNLOAD_BYTES = 2, 4, 2
LARGEST_GPU = 141e9  # the most memory one GPU has had so far (an H200): past it, a pair needs several
# What loading needs beyond the weights, as models.MEMORY_HEADROOM (the loader refuses with the same rule).
HEADROOM = 1.2


@dataclass(frozen=True)
class Machine:
    """What this machine offers a pair: its RAM and each GPU's (name, memory), in bytes."""

    ram_bytes: int
    gpus: tuple[tuple[str, int], ...] = ()

    def words(self) -> str:
        """'this machine has 24 GB of RAM and no GPU' / '... and an NVIDIA H100 with 80 GB'."""
        ram = f"{_gb(self.ram_bytes)} of RAM"
        if not self.gpus:
            return f"this machine has {ram} and no GPU"
        if len(self.gpus) == 1:
            name, size = self.gpus[0]
            return f"this machine has {ram} and one GPU ({name}, {_gb(size)})"
        sizes = ", ".join(_gb(size) for _name, size in self.gpus)
        return f"this machine has {ram} and {len(self.gpus)} GPUs ({sizes})"


def _gb(n: float) -> str:
    gb = n / 1e9
    return f"{gb:,.0f} GB" if gb >= 10 else f"{gb:.1f} GB"


def this_machine() -> Machine:
    """Read this machine's RAM (psutil) and its CUDA GPUs (torch), once, for the presets' fit."""
    import psutil
    import torch

    gpus = ()
    if torch.cuda.is_available():
        gpus = tuple((torch.cuda.get_device_name(i), int(torch.cuda.get_device_properties(i).total_memory))
                     for i in range(torch.cuda.device_count()))
    return Machine(int(psutil.virtual_memory().total), gpus)


@dataclass(frozen=True)
class Fit:
    """Whether a preset fits a machine: a short tag for the list ('runs here') and the sentence behind it."""

    runs: bool
    tag: str
    sentence: str


def fit(preset: Preset, machine: Machine) -> Fit:
    """Whether `preset` fits `machine`'s memory, in words that say memory of what: the GPU's, or RAM."""
    if preset.parameters is None:
        return Fit(False, "size unknown", "Its size is not known here; AssistLab checks it before loading.")
    gpu = preset.parameters * 1e9 * GPU_BYTES * HEADROOM
    cpu = preset.parameters * 1e9 * CPU_BYTES * HEADROOM
    has = machine.words()
    if machine.gpus:
        largest = max(size for _name, size in machine.gpus)
        if gpu <= largest:
            return Fit(True, "runs here", f"Runs here: needs about {_gb(gpu)} of GPU memory (bfloat16); {has}.")
        if len(machine.gpus) > 1 and gpu <= sum(size for _name, size in machine.gpus):
            return Fit(True, "runs here over all GPUs",
                       f"Runs here spread over every GPU (tick “Spread the target over all GPUs” in Settings): "
                       f"needs about {_gb(gpu)} of GPU memory (bfloat16); {has}.")
    if cpu <= machine.ram_bytes:
        where = " on the CPU (choose Device: cpu in Settings)" if machine.gpus else ""
        slow = ", slowly" if preset.parameters >= 1 else ""
        return Fit(True, "runs here" if not machine.gpus else "runs here on the CPU",
                   f"Runs here{where}{slow}: needs about {_gb(cpu)} of RAM (float32); {has}.")
    gpus = "a GPU with" if gpu <= LARGEST_GPU else "several large GPUs with, together,"
    return Fit(False, "too big for this machine",
               f"Too big for this machine: needs {gpus} about {_gb(gpu)} of memory (bfloat16), or about "
               f"{_gb(cpu)} of RAM on a CPU; {has}.")


def describe(preset: Preset, machine: Machine, environ: dict | None = None, markdown: bool = False) -> str:
    """Everything the page and `presets` say of a preset: its note, whether it fits here (memory of what), what
    it downloads and, for a gated pair, whether HF_TOKEN is set, with what HF_TOKEN is and how to get one (on
    the page, one click away)."""
    env = os.environ if environ is None else environ
    parts = [preset.note, fit(preset, machine).sentence]
    if preset.parameters is not None and not bundled.is_bundled(preset.target):
        parts.append(f"The first run downloads about {_gb(preset.parameters * 1e9 * DOWNLOAD_BYTES)} of weights "
                     f"from the Hugging Face Hub to this machine's disk (kept in its cache for later runs).")
    if preset.gated:
        state = "set" if env.get(TOKEN_ENV) else "not set"
        parts.append(f"Gated: it needs a Hugging Face access token ({TOKEN_ENV}), which is {state} on this server.")
        if not markdown:
            parts.append(TOKEN_HOWTO)
    text = " ".join(parts)
    if markdown:
        text = text.replace("_", "\\_")  # no emphasis from HF_TOKEN's underscore
        if preset.gated:
            howto = TOKEN_HOWTO.replace(f"{TOKEN_ENV}=hf_... python app.py", f"`{TOKEN_ENV}=hf_... python app.py`")
            text += f"<details><summary>{TOKEN_QUESTION}</summary>{howto}</details>"
    return text


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


def inside(path: Path, root: Path) -> bool:
    """Whether `path` (resolved) lies in `root`."""
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
    if not inside(real, root):
        raise InputError(
            f"{text!r} is outside the allowed models folder ({MODELS_DIR_ENV}); only folders inside it can be used."
        )
    if not real.is_dir():
        raise ModelLoadError(f"There is no model folder {text!r} inside the allowed models folder.")
    return ModelRef(real.relative_to(root).as_posix(), "local", str(real))


def resolve(text: str) -> ModelRef:
    """Turn what a user typed into a ModelRef, refusing anything outside what they may use."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("A model reference is empty; choose a preset, or type a Hugging Face model name (its hub "
                         "id, org/name, such as Qwen/Qwen2.5-0.5B-Instruct) or a folder name.")
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
        f"{text!r} is not a hub id (a Hugging Face model name, org/name, such as Qwen/Qwen2.5-0.5B-Instruct, "
        f"optionally @revision), a bundled model ({bundled.PREFIX}NAME) or a folder inside the allowed models folder."
    )


def resolve_field(field: str, text: str) -> ModelRef:
    """`resolve(text)`, with a refusal that starts with the field it came from ('target: ...', the field kept
    on an InputError), so the page can name the box by its label and the command line its option."""
    try:
        return resolve(text)
    except InputError as exc:
        raise InputError(f"{{{field}}}: {exc}", field) from None
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
