"""A model ready to generate: the loaded module, its tokenizer, device and where it came from."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..catalog import ModelRef


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class LoadedModel:
    """A ready model: eval mode, on its device, with its tokenizer and where it came from."""

    ref: ModelRef
    model: torch.nn.Module | None  # None: config and tokenizer only (models.tokenizer_only)
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    folder: str
    num_layers: int
    context_length: int | None
    load_seconds: float
    provenance: dict | None = None
    last_used: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.ref.text

    def describe(self) -> dict:
        if self.model is None:  # models.tokenizer_only: another engine's servers hold the weights
            info = {"ref": self.ref.text, "kind": self.ref.kind, "loaded": "config and tokenizer only",
                    "num_layers": self.num_layers, "load_seconds": round(self.load_seconds, 2)}
            if self.provenance:
                info["provenance"] = self.provenance
            return info
        info = {
            "ref": self.ref.text,
            "kind": self.ref.kind,
            "class": type(self.model).__name__,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "num_layers": self.num_layers,
            "dtype": dtype_name(self.dtype),
            "device": str(self.device),
            "load_seconds": round(self.load_seconds, 2),
        }
        if self.ref.revision:
            info["revision"] = self.ref.revision
        if self.provenance:
            info["provenance"] = self.provenance
        return info
