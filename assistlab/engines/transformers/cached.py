"""The models this machine already has and which of them could assist a target: the tuner's default assistants
beyond the presets.

What counts as had: a model in the Hugging Face cache with its weights (the snapshot `refs/main` names), a model
folder inside the operator's models folder (ASSISTLAB_MODELS_DIR), a bundled model once converted. Nothing is
downloaded and nothing outside those places is read.

What counts as fitting a target: a causal language model (its config's architecture ends in ForCausalLM) whose
safetensors weights are at most ASSISTANT_SHARE of the target's, so that drafting costs a small share of
verifying; the largest of those first (a larger assistant agrees with its target more often), at most
MOST_CACHED of them, since each assistant adds every universal setting the engine declares to a search.
Whether the pair shares a tokenizer is `auto`'s call once both are loaded (universal when not).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ...errors import AssistLabError
from .. import catalog
from . import bundled

ASSISTANT_SHARE = 0.25
MOST_CACHED = 2


def weights_bytes(folder: Path) -> int:
    """The size of a folder's safetensors weights (0 when it has none; a hub snapshot's links are followed)."""
    total = 0
    for file in folder.glob("*.safetensors"):
        try:
            total += file.stat().st_size
        except OSError:  # a link whose blob has gone: not had
            return 0
    return total


def causal_lm(folder: Path) -> bool:
    """Whether the folder's config names a causal language model."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    architectures = config.get("architectures") if isinstance(config, dict) else None
    return any(str(a).endswith("ForCausalLM") for a in architectures or [])


def _hub_root() -> Path | None:
    try:
        from huggingface_hub import constants
    except ImportError:  # the hub cache is optional here
        return None
    return Path(constants.HF_HUB_CACHE)


def hub_snapshot(repo: str) -> Path | None:
    """The snapshot folder of a hub id in this machine's cache (the one refs/main names), or None."""
    root = _hub_root()
    if root is None:
        return None
    folder = root / f"models--{repo.replace('/', '--')}"
    try:
        snapshot = folder / "snapshots" / (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    return snapshot if snapshot.is_dir() else None


def hub_repos() -> list[str]:
    """The hub ids the Hugging Face cache has a folder for (with or without weights yet)."""
    root = _hub_root()
    try:
        return sorted(e.name[len("models--"):].replace("--", "/") for e in root.glob("models--*")) if root else []
    except OSError:  # the cache is a hint only
        return []


def folder_models() -> dict[str, Path]:
    """The model folders inside the models folder (ASSISTLAB_MODELS_DIR), by their path relative to it; a link
    out of the folder is not the operator's and is left out."""
    models = catalog.models_dir()
    if models is None or not models.is_dir():
        return {}
    configs = sorted(models.rglob("config.json"))
    return {c.parent.relative_to(models).as_posix(): c.parent for c in configs if catalog.inside(c.parent.resolve(), models)}


def cached_folders() -> dict[str, Path]:
    """Every model this machine has, by the name a person would type: org/name, a models-folder path, bundled:."""
    found = {repo: snapshot for repo in hub_repos() if (snapshot := hub_snapshot(repo)) is not None}
    found.update(folder_models())
    for name in bundled.BUNDLED:
        ref = bundled.PREFIX + name
        if not bundled.needs_conversion(ref):
            found[ref] = bundled.converted_dir(bundled.lookup(ref))
    return found


def folder_of(ref: str) -> Path | None:
    """Where a model reference's files are on this machine, or None when it is not here (or not valid)."""
    try:
        model = catalog.resolve(ref)
    except AssistLabError:
        return None
    if model.kind == "bundled":
        return None if bundled.needs_conversion(ref) else bundled.converted_dir(bundled.lookup(ref))
    if model.kind == "local":
        return Path(model.location)
    return hub_snapshot(model.location)


def cached_assistants(target: str, exclude: Iterable[str] = (), most: int = MOST_CACHED) -> list[str]:
    """The models this machine has that fit `target` as assistants (the module's rule), largest first; none
    when the target itself is not here (its size is then unknown)."""
    folder = folder_of(target)
    size = weights_bytes(folder) if folder is not None else 0
    if not size:
        return []
    skip = set(exclude) | {target}
    fits = []
    for name, path in cached_folders().items():
        if name in skip or path.resolve() == folder.resolve():
            continue
        mine = weights_bytes(path)
        if 0 < mine <= ASSISTANT_SHARE * size and causal_lm(path):
            fits.append((-mine, name))
    return [name for _, name in sorted(fits)[:most]]
