"""Loading a tokenizer and causal LM once: checks, dtype/device choice, memory estimate, a small cache."""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import gc
import json
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import torch

from ...errors import InputError, ModelLoadError, ResourceError
from .. import catalog
from . import bundled, cached, paths
from .loaded import LoadedModel, dtype_name

Progress = Callable[[str], None]

# The top-level files a checkpoint needs besides its weights, by exact name: a pattern such as "*.safetensors"
# would also match files in sub-folders (originals, other formats, adapters) that a load never reads.
HUB_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "tokenizer.model", "spiece.model", "vocab.json", "merges.txt", "vocab.txt",
    "tokenizer.tiktoken", "chat_template.jinja", "chat_template.json",
)
WEIGHTS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# Prefixes under which multimodal checkpoints keep their language model.
TEXT_KEY_MAPPING = {
    r"^model\.language_model\.": "model.",
    r"^language_model\.model\.": "model.",
    r"^language_model\.lm_head\.": "lm_head.",
}
# Where the docs say how to bring a model this machine does not have (a heading of docs/models.md).
BRING_A_MODEL = "docs/models.md#bringing-a-model"
# Memory a model needs beyond its weights (activations, cache, allocator slack), as a fraction.
MEMORY_HEADROOM = 1.2


def choose_device(name: str) -> torch.device:
    """'auto' is CUDA when present, else CPU; asking for CUDA without one is an input error."""
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise InputError("device is 'cuda' but no CUDA GPU is available here; choose 'cpu' or 'auto'.")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def choose_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' is bfloat16 on a CUDA GPU that supports it, else float32."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def _hub_error(exc: BaseException, ref: catalog.ModelRef) -> ModelLoadError:
    """Translate huggingface_hub's exceptions into one sentence that says what to do."""
    from huggingface_hub import errors as hub_errors

    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    name = ref.location
    for err in chain:
        if isinstance(err, hub_errors.GatedRepoError):
            return ModelLoadError(
                f"{name} is gated: accept its license on its page on huggingface.co, then give AssistLab a Hugging "
                f"Face access token that has access (create one at {catalog.TOKEN_PAGE}; start AssistLab with "
                f"HF_TOKEN=hf_... in its environment)."
            )
        if isinstance(err, hub_errors.RevisionNotFoundError):
            return ModelLoadError(f"{name} has no revision {ref.revision!r}; check the part after '@'.")
        if isinstance(err, hub_errors.RepositoryNotFoundError):
            return ModelLoadError(
                f"{name} was not found on the Hugging Face Hub (or it is private: set HF_TOKEN). Check the spelling."
            )
        if isinstance(err, (hub_errors.OfflineModeIsEnabled, hub_errors.LocalEntryNotFoundError)):
            return ModelLoadError(not_cached_words(name))
    return ModelLoadError(f"{name} could not be fetched from the Hugging Face Hub: {str(exc).splitlines()[0][:200]}")


def known_model_names() -> list[str]:
    """The model names this server knows: the presets' ids, the hub cache's models and the models folder's."""
    names = {m for p in catalog.PRESETS for m in (p.target, p.assistant) if m and not m.startswith("bundled:")}
    return sorted(names | set(cached.hub_repos()) | set(cached.folder_models()))


def not_cached_words(name: str) -> str:
    """One sentence: a hub model is neither on this machine nor fetchable, the names it may have meant, and the
    docs page that says how to bring it here (the how-to is too long for an error message).

    Names no path of this server's: where its cache and models folder are is the operator's business.
    """
    known = known_model_names()
    places = "Hugging Face cache or models folder" if catalog.models_dir() is not None else "Hugging Face cache"
    lead = f"{name} is"  # a preset's model (or one partly in the cache) is known here, just not on this machine
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        guess = f"did you mean {' or '.join(close)}?" if close else "check the spelling"
        lead = f"No model named {name} is known here ({guess}): it is"
    return (
        f"{lead} not in this machine's {places} and the Hub cannot be reached to download it; "
        f"{BRING_A_MODEL} says how to bring it here."
    )


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub's host answers at all; False at once when offline mode is set."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _shard_names(index_file: Path, ref: catalog.ModelRef) -> list[str]:
    """The weight files a safetensors index names; each must be a top-level *.safetensors file."""
    try:
        weight_map = json.loads(index_file.read_text())["weight_map"]
        names = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ModelLoadError(f"{ref.text}: {WEIGHTS_INDEX} is not a valid safetensors index.") from None
    for name in names:
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".") or not name.endswith(
            ".safetensors"
        ):
            raise ModelLoadError(
                f"{ref.text}: {WEIGHTS_INDEX} names {name!r}, which is not a safetensors file next to it."
            )
    return names


def _locate(ref: catalog.ModelRef, say: Progress, **fetch) -> tuple[Path, dict | None]:
    """Where a model's files are (converting a bundled one, fetching a hub one's files as `fetch` says) and
    where they came from."""
    if ref.kind == "bundled":
        return bundled.ensure_converted(ref.text, progress=say), bundled.provenance(bundled.lookup(ref.text))
    if ref.kind == "hub":
        return _fetch_hub(ref, say, **fetch), None
    return Path(ref.location), None


def tokenizer_only(text: str, progress: Progress | None = None) -> LoadedModel:
    """A model as far as a server's arms need it: its config, tokenizer and folder, never its weights.

    For a target that only another engine's servers run (it may be far larger than this machine), and for a
    vLLM draft model, whose vocabulary is checked against the target's.
    """
    from transformers import AutoTokenizer

    say = progress or (lambda _msg: None)
    ref = catalog.resolve(text)
    started = time.perf_counter()
    folder, provenance = _locate(ref, say, tokenizer_only=True)
    config, _cls, _text_only = _read_config(folder, ref)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception as exc:  # tokenizers fail in many ways; all mean the same to a user
        raise ModelLoadError(f"{ref.text} has no usable tokenizer ({str(exc).splitlines()[0][:160]}).") from None
    text_cfg = config.get_text_config()
    return LoadedModel(ref=ref, model=None, tokenizer=tokenizer, device=torch.device("cpu"), dtype=torch.float32,
                       folder=str(folder), num_layers=int(getattr(text_cfg, "num_hidden_layers", 0) or 0),
                       context_length=getattr(text_cfg, "max_position_embeddings", None),
                       load_seconds=time.perf_counter() - started, provenance=provenance)


def _fetch_hub(ref: catalog.ModelRef, progress: Progress, config_only: bool = False,
               tokenizer_only: bool = False) -> Path:
    """Download (or find in the cache) the files a load reads: config, tokenizer and the safetensors weights
    (the shards its index names, or the one file), all from the repository's top level."""
    from huggingface_hub import hf_hub_download, snapshot_download

    token = os.environ.get("HF_TOKEN") or None
    # Without a network huggingface_hub retries for half a minute; look once, then use only the local cache.
    local_only = not _hub_reachable()

    def fetch(names: list[str]) -> Path:
        return Path(
            snapshot_download(
                ref.location, revision=ref.revision, token=token, allow_patterns=names, local_files_only=local_only
            )
        )

    try:
        if config_only:
            return Path(
                hf_hub_download(
                    ref.location, "config.json", revision=ref.revision, token=token, local_files_only=local_only
                )
            ).parent
        if tokenizer_only:
            progress(f"Fetching {ref.location}'s config and tokenizer...")
            return fetch(list(HUB_FILES))
        progress(f"Fetching {ref.location} (safetensors only)...")
        folder = fetch([*HUB_FILES, WEIGHTS_INDEX])
        index = folder / WEIGHTS_INDEX
        weights = _shard_names(index, ref) if index.is_file() else [SINGLE_WEIGHTS]
        return fetch(weights)
    except ModelLoadError:
        raise
    except Exception as exc:  # huggingface_hub raises many types; all become one message
        raise _hub_error(exc, ref) from None


def _read_config(folder: Path, ref: catalog.ModelRef):
    """Load and vet a config: no remote code, and a causal LM (or a multimodal model with one inside)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{ref.text} has no config.json, so it is not a transformers checkpoint.")
    try:
        raw = json.loads(config_file.read_text())
    except ValueError:
        raise ModelLoadError(f"{ref.text}: config.json is not valid JSON.") from None
    if "auto_map" in raw or "auto_map" in raw.get("text_config", {}):
        raise ModelLoadError(
            f"{ref.text} asks to run its own code (auto_map in config.json); AssistLab never runs code from a "
            f"checkpoint. Use a model that transformers supports natively."
        )
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (ValueError, KeyError, OSError) as exc:
        raise ModelLoadError(
            f"{ref.text}: transformers cannot read this config ({str(exc).splitlines()[0][:160]})."
        ) from None
    if type(config) in MODEL_FOR_MASKED_LM_MAPPING and not getattr(config, "is_decoder", False):
        raise ModelLoadError(
            f"{ref.text} is an encoder ({type(config).__name__}), not a causal language model that can generate "
            f"text; choose a decoder model such as Llama, Qwen or Gemma."
        )
    own_class = paths.model_class(config)  # a Gemma 4 assistant or a DFlash drafter: load it whole
    if own_class is not None:
        return config, own_class, False
    text_config = config.get_text_config()
    if text_config is not config and type(text_config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return text_config, MODEL_FOR_CAUSAL_LM_MAPPING[type(text_config)], True
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return config, MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], False
    raise ModelLoadError(
        f"{ref.text} is a {config.model_type!r} model ({type(config).__name__}), not a causal language model that "
        f"can generate text; choose a decoder model such as Llama, Qwen or Gemma."
    )


def _check_weights(folder: Path, ref: catalog.ModelRef) -> None:
    if any(folder.glob("*.safetensors")):
        return
    if any(p.suffix in PICKLE_SUFFIXES for p in folder.iterdir()):
        raise ModelLoadError(
            f"{ref.text} has only pickle weights (.bin/.pt), which can run code when loaded; AssistLab loads "
            f"safetensors only. Convert the checkpoint to safetensors first."
        )
    raise ModelLoadError(f"{ref.text} has no weights (*.safetensors) in its folder.")


def estimate_bytes(config, model_cls, dtype: torch.dtype) -> int:
    """Weight memory of a model built on the meta device (no allocation), in bytes."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        shell = model_cls._from_config(config)
    params = {id(p): p.numel() for p in shell.parameters()}  # tied weights count once
    itemsize = torch.empty((), dtype=dtype).element_size()
    return sum(params.values()) * itemsize


def free_bytes(device: torch.device) -> int:
    """Memory available for a new model on this device."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


# The GPUs the comparison on this thread holds (see `placed_on`); unset means every GPU. A context variable,
# so each job thread sees only its own.
_RUN_GPUS: contextvars.ContextVar[tuple[int, ...] | None] = contextvars.ContextVar("assistlab_run_gpus", default=None)


@contextlib.contextmanager
def placed_on(gpus: tuple[int, ...]) -> Iterator[None]:
    """Run the block on these GPUs (from slots.Placement): models load onto the first, and clock readings wait
    only for these, never for another person's comparison on another GPU. Empty: the CPU, nothing to do."""
    if not gpus:
        yield
        return
    token = _RUN_GPUS.set(tuple(gpus))
    try:
        with torch.cuda.device(gpus[0]):  # choose_device reads the thread's current device
            yield
    finally:
        _RUN_GPUS.reset(token)


def synchronize_all() -> None:
    """Wait for every GPU this run uses before a clock reading: an assistant, or part of a split target, may
    sit on another."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in _RUN_GPUS.get() or range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


def release_memory() -> None:
    """Return cached allocator memory after a failure or eviction."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


class ModelStore:
    """A small cache of loaded models keyed by (reference, dtype, device, device_map).

    Models unused for `idle_seconds` are dropped; when memory is short the least recently used go first.
    """

    def __init__(self, max_models: int = 4, idle_seconds: float = 1800.0):
        self.max_models = max_models
        self.idle_seconds = idle_seconds
        self._models: OrderedDict[tuple, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._models)

    def loaded(self) -> list[LoadedModel]:
        return list(self._models.values())

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
        release_memory()

    def _evict(self, keep: set[tuple], predicate: Callable[[LoadedModel], bool]) -> int:
        dropped = 0
        for key in list(self._models):
            if key not in keep and predicate(self._models[key]):
                del self._models[key]
                dropped += 1
        if dropped:
            release_memory()
        return dropped

    def get(
        self,
        text: str,
        device: torch.device,
        dtype: torch.dtype,
        device_map_auto: bool = False,
        progress: Progress | None = None,
        keep: set[tuple] = frozenset(),
    ) -> tuple[tuple, LoadedModel]:
        """Return (cache key, model), loading it the first time. `keep` names keys that must not be evicted."""
        say = progress or (lambda _msg: None)
        ref = catalog.resolve(text)
        key = (ref.kind, ref.location, ref.revision, dtype, str(device), device_map_auto)
        with self._lock:
            now = time.monotonic()
            self._evict(keep | {key}, lambda m: now - m.last_used > self.idle_seconds)
            if key in self._models:
                self._models.move_to_end(key)
                loaded = self._models[key]
                loaded.last_used = now
                return key, loaded
            # Least recently used first (the OrderedDict keeps use order), never one the caller still needs.
            for old in [k for k in self._models if k not in keep][: max(0, len(self._models) - self.max_models + 1)]:
                del self._models[old]
            loaded = self._load(ref, device, dtype, device_map_auto, say, keep)
            self._models[key] = loaded
            return key, loaded

    def _load(self, ref, device, dtype, device_map_auto, say, keep) -> LoadedModel:
        started = time.perf_counter()
        folder, provenance = _locate(ref, say, config_only=True)
        config, model_cls, text_only = _read_config(folder, ref)

        try:
            needed = int(estimate_bytes(config, model_cls, dtype) * MEMORY_HEADROOM)
        except (ValueError, TypeError, RuntimeError) as exc:  # transformers cannot build this config at all
            raise ModelLoadError(
                f"{ref.text} could not be built from its config: {str(exc).splitlines()[0][:200]}"
                f"{paths.load_hint(config, exc)}"
            ) from None
        available = free_bytes(device)
        if needed > available and self._evict(keep, lambda m: True):
            available = free_bytes(device)
        if needed > available and not (device_map_auto and device.type == "cuda"):
            where = "GPU" if device.type == "cuda" else "memory"
            raise ResourceError(
                f"{ref.text} needs about {_gb(needed)} in {dtype_name(dtype)}, but only {_gb(available)} of {where} "
                f"is free. Choose a smaller model, a smaller dtype (bfloat16), or device_map auto across GPUs."
            )
        if ref.kind == "hub":
            folder = _fetch_hub(ref, say)
        _check_weights(folder, ref)

        say(f"Loading {ref.text}...")
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-tensor bars would flood the CLI and the server log

        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        except Exception as exc:  # tokenizers fail in many ways; all mean the same to a user
            if paths.is_drafter_only(config):  # drafts in the target's tokens; many ship no tokenizer
                tokenizer = None
            else:
                raise ModelLoadError(
                    f"{ref.text} has no usable tokenizer ({str(exc).splitlines()[0][:160]}); it cannot be benchmarked."
                ) from None
        kwargs = {"config": config, "dtype": dtype, "use_safetensors": True, "trust_remote_code": False}
        if text_only:
            kwargs["key_mapping"] = TEXT_KEY_MAPPING
        if device_map_auto and device.type == "cuda":
            kwargs["device_map"] = "auto"
        try:
            model, info = model_cls.from_pretrained(folder, output_loading_info=True, **kwargs)
        except torch.OutOfMemoryError:
            release_memory()
            raise ResourceError(f"{ref.text} did not fit in GPU memory while loading; choose a smaller model or dtype.") from None
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelLoadError(
                f"{ref.text} could not be loaded: {str(exc).splitlines()[0][:200]}{paths.load_hint(config, exc)}"
            ) from None
        missing = [k for k in info.get("missing_keys", []) if "lm_head" not in k]
        if missing:
            raise ModelLoadError(
                f"{ref.text}: {len(missing)} weights are missing from the checkpoint (e.g. {missing[0]}), so it would "
                f"generate noise. Check that the folder holds a complete causal LM."
            )
        if "device_map" not in kwargs:
            try:
                model.to(device)
            except torch.OutOfMemoryError:
                del model
                release_memory()
                raise ResourceError(f"{ref.text} did not fit on {device}; choose a smaller model or dtype.") from None
        model.eval()
        # Both arms must use the same cache kind; some models (Gemma 3) default to one assisted decoding cannot use.
        if getattr(model, "generation_config", None) is not None:  # a DFlash drafter has none
            model.generation_config.cache_implementation = None
        text_cfg = model.config.get_text_config()
        return LoadedModel(
            ref=ref,
            model=model,
            tokenizer=tokenizer,
            device=model.device,
            dtype=dtype,
            folder=str(folder),
            num_layers=int(getattr(text_cfg, "num_hidden_layers", 0) or 0),
            context_length=getattr(text_cfg, "max_position_embeddings", None),
            load_seconds=time.perf_counter() - started,
            provenance=provenance,
        )
