"""One read of a GGUF file: its metadata, tokenizer and de-quantized weights, saved as float32 safetensors.

transformers' own GGUF path (`from_pretrained(..., gguf_file=...)`) parses the file's metadata once for the
tokenizer and again for the model, through `gguf.GGUFReader`, whose field parser walks the 262,144-token
vocabulary of Gemma 3 item by item (about 26 s on two busy cores, most of the conversion's time). This
module reads the header once with `struct` (using the `gguf` package's type constants), builds the tokenizer
with transformers' own GGUF tokenizer builders from that metadata, and de-quantizes every tensor with
`gguf.quants.dequantize` (numpy), which is what transformers' path runs for these architectures too, so the
tensors come out bit for bit the same (tests/engines/test_bundled_models.py checks it against `from_pretrained`).
"""

from __future__ import annotations

import concurrent.futures
import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np

Progress = Callable[[str], None]

# The architectures the bundled models use; another one is refused rather than converted wrongly.
SUPPORTED = ("gemma3", "llama")
# GGUF value types (gguf.GGUFValueType): fixed-size scalars by struct format; 8 is a string, 9 an array.
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dims: tuple[int, ...]  # ggml order: the fastest-moving dimension first
    qtype: int
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class GgufFile:
    """A GGUF file's metadata (numeric arrays as numpy, string arrays as lists) and its tensor table."""

    path: Path
    metadata: dict
    tensors: tuple[TensorEntry, ...]
    data_start: int

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]


def read_gguf(path: Path) -> GgufFile:
    """Parse the header of a GGUF file (v2 or v3) without reading its tensor data."""
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        if blob[:4] != b"GGUF":
            raise ValueError(f"{path.name} is not a GGUF file")
        version, tensor_count, kv_count = struct.unpack_from("<IQQ", blob, 4)
        if version not in (2, 3):
            raise ValueError(f"{path.name} is GGUF version {version}; only versions 2 and 3 are read")
        pos = 24

        def string(at: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", blob, at)
            return blob[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n

        def value(kind: int, at: int):
            if kind in _SCALAR:
                return struct.unpack_from(_SCALAR[kind], blob, at)[0], at + struct.calcsize(_SCALAR[kind])
            if kind == _STRING:
                return string(at)
            if kind == _ARRAY:
                item, count = struct.unpack_from("<IQ", blob, at)
                at += 12
                if item in _NUMPY:
                    arr = np.frombuffer(blob, dtype=_NUMPY[item], count=count, offset=at).copy()
                    return arr, at + arr.nbytes
                items = []
                for _ in range(count):
                    v, at = value(item, at)
                    items.append(v)
                return items, at
            raise ValueError(f"{path.name} holds a metadata value of unknown type {kind}")

        metadata = {}
        for _ in range(kv_count):
            key, pos = string(pos)
            (kind,) = struct.unpack_from("<I", blob, pos)
            metadata[key], pos = value(kind, pos + 4)
        tensors = []
        for _ in range(tensor_count):
            name, pos = string(pos)
            (ndim,) = struct.unpack_from("<I", blob, pos)
            dims = struct.unpack_from(f"<{ndim}Q", blob, pos + 4)
            qtype, offset = struct.unpack_from("<IQ", blob, pos + 4 + 8 * ndim)
            pos += 4 + 8 * ndim + 12
            tensors.append(TensorEntry(name, tuple(dims), qtype, offset))
    alignment = int(metadata.get("general.alignment", 32))
    if "general.architecture" not in metadata:
        raise ValueError(f"{path.name} names no architecture")
    return GgufFile(path, metadata, tuple(tensors), (pos + alignment - 1) // alignment * alignment)


def config_dict(gguf: GgufFile) -> dict:
    """The transformers config the file describes, renamed with transformers' own GGUF key tables."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = gguf.architecture
    out = dict(GGUF_CONFIG_DEFAULTS_MAPPING.get(arch, {}))
    out["tie_word_embeddings"] = all(t.name != "output.weight" for t in gguf.tensors)
    for key, raw in gguf.metadata.items():
        prefix, _, rest = key.partition(".")
        target = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if target is None or target == -1:
            continue
        if isinstance(raw, np.ndarray):
            raw = raw.tolist()
        if isinstance(raw, list) and len(raw) == 1:
            raw = raw[0]
        out[target] = raw.item() if isinstance(raw, np.generic) else raw
    if out.get("model_type") == "gemma3":
        out["model_type"] = "gemma3_text"  # the file holds only Gemma 3's text model
    if "vocab_size" not in out:
        out["vocab_size"] = len(gguf.metadata.get("tokenizer.ggml.tokens", ()))
    return out


def merges_by_position(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """transformers' `generate_merges(vocab, scores)` (best score first, then the longer left piece), for scores
    that are all different, as a Gemma file's positions are: then that order is the whole order, so one pass
    over the tokens, best first, gives it without sorting half a million merges. Otherwise, theirs."""
    from transformers.tokenization_utils_base import generate_merges

    if len(set(scores.values())) != len(scores):
        return generate_merges(vocab, scores)
    merges = []
    for token in sorted(scores, key=scores.__getitem__, reverse=True):
        for cut in range(len(token) - 1, 0, -1):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                merges.append((left, right))
    return merges


def build_tokenizer(gguf: GgufFile):
    """The tokenizer the metadata describes, built with transformers' GGUF tokenizer pieces from what was read
    once. Gemma's is built in one go (transformers builds it, copies it, and builds it again)."""
    from transformers import TokenizersBackend
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        add_gguf_special_tokens,
        convert_gguf_tokenizer,
        set_split_regex,
    )
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

    meta = gguf.metadata

    def plain(v):
        return v.tolist() if isinstance(v, np.ndarray) else v

    spec = {name: plain(meta[f"tokenizer.{key}"])
            for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items() if f"tokenizer.{key}" in meta}
    options = {name: plain(meta[f"tokenizer.{key}"])
               for key, name in GGUF_TOKENIZER_MAPPING["tokenizer_config"].items() if f"tokenizer.{key}" in meta}
    if spec.get("tokenizer_type") == "llama":
        options.setdefault("add_bos_token", True)  # as transformers: llama.cpp adds BOS to such a vocabulary
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                      ("pad", "padding_token_id")):
        index = meta.get(f"tokenizer.ggml.{key}")
        options[f"{role}_token"] = spec["tokens"][int(index)] if index is not None else None
    if gguf.architecture.startswith("gemma") and spec.get("tokenizer_type") == "llama" and "merges" not in spec:
        # As transformers' gemma_tokenizer: runs of spaces are spelled with "▁", and the merges come from
        # the vocabulary in the order the tokens stand in the file.
        tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in spec["tokens"]]
        vocab = {token: index for index, token in enumerate(tokens)}
        positions = {token: -index for index, token in enumerate(tokens)}
        inner = GemmaTokenizer(vocab=vocab, merges=merges_by_position(vocab, positions))
        backend = set_split_regex(add_gguf_special_tokens(inner, spec), spec).backend_tokenizer
        return GemmaTokenizer(tokenizer_object=_Handover(backend), **options)
    backend, extra = convert_gguf_tokenizer(gguf.architecture, spec)
    return TokenizersBackend(tokenizer_object=_Handover(backend), **options, **extra)


class _Handover:
    """Gives a tokenizer backend to TokenizersBackend(tokenizer_object=...) without the deep copy it makes of
    it (a JSON round trip of Gemma's 262,144 tokens, seconds): the backend is ours and used nowhere else.
    Should transformers stop copying, the tokenizer breaks at once (the equivalence test loads and uses it)."""

    def __init__(self, backend):
        self.backend = backend

    def __deepcopy__(self, memo):
        return self.backend


def _tensor_names(gguf: GgufFile, config) -> tuple[type, dict[str, str], list[str]]:
    """The model class, {gguf name: transformers name} and the weights the model needs from the file, from the
    model's own keys (built on the meta device); a tied output layer is not among them."""
    import torch
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    model_cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    with torch.device("meta"):
        keys = list(model_cls(config).state_dict())
    arch = next(k for k, v in MODEL_ARCH_NAMES.items() if v == gguf.architecture)
    name_map = get_tensor_name_map(arch, config.num_hidden_layers)
    names = {}
    for key in keys:
        stem, _, suffix = key.rpartition(".")
        found = name_map.get_name(stem)
        if found is not None:
            names[f"{found}.{suffix}"] = key
    tied = config.tie_word_embeddings
    return model_cls, names, [k for k in keys if not (tied and k == "lm_head.weight")]


def _undo_llama_cpp(arch: str, name: str, w: np.ndarray, config) -> np.ndarray:
    """What llama.cpp's converter changed: Gemma's norms are stored as 1 + w; Llama's q/k rows are permuted."""
    if arch == "gemma3" and name.endswith("norm.weight"):
        return w - 1
    if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
        heads = config.num_attention_heads if ".attn_q." in name else config.num_key_value_heads
        half = w.shape[0] // heads // 2
        return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)
    return w


def convert(path: Path, out: Path, say: Progress, workers: int | None = None) -> None:
    """De-quantize a GGUF checkpoint and save it as float32 safetensors with its config and tokenizer."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize
    from safetensors.numpy import save_file
    from transformers import AutoConfig, GenerationConfig

    say(f"Reading {path.name}...")
    gguf = read_gguf(path)
    arch = gguf.architecture
    if arch not in SUPPORTED:
        raise ValueError(f"{path.name} is a {arch!r} model; only {', '.join(SUPPORTED)} are converted")
    settings = config_dict(gguf)
    config = AutoConfig.for_model(**settings)
    model_cls, names, needed = _tensor_names(gguf, config)

    blob = np.memmap(path, dtype=np.uint8, mode="r")

    def one(entry: TensorEntry) -> tuple[str, np.ndarray]:
        qtype = GGMLQuantizationType(entry.qtype)
        block, size = GGML_QUANT_SIZES[qtype]
        rows = list(reversed(entry.dims[1:]))
        row_bytes = entry.dims[0] // block * size
        start = gguf.data_start + entry.offset
        raw = blob[start:start + prod(rows) * row_bytes].reshape(*rows, row_bytes)
        w = dequantize(np.asarray(raw), qtype).astype(np.float32, copy=False)
        return names[entry.name], np.ascontiguousarray(_undo_llama_cpp(arch, entry.name, w, config))

    wanted = [t for t in gguf.tensors if t.name in names]
    say(f"De-quantizing {len(wanted)} tensors of {path.name}...")
    # numpy releases the GIL inside its array operations, so two workers use two cores.
    with concurrent.futures.ThreadPoolExecutor(workers or min(4, os.cpu_count() or 1)) as pool:
        tensors = dict(pool.map(one, wanted))
    del blob
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise ValueError(f"{path.name} lacks {len(missing)} weights, e.g. {missing[0]}")

    say(f"Building the tokenizer of {path.name}...")
    tokenizer = build_tokenizer(gguf)
    say("Saving as safetensors...")
    out.mkdir(parents=True, exist_ok=True)
    config.architectures = [model_cls.__name__]
    config.dtype = "float32"
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(out)
