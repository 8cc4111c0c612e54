"""The models this machine has that fit a target as assistants (engines/transformers/cached.py): the tuner's
default assistants beyond the presets. Folders with a config and sparse weight files of chosen sizes stand in
for real checkpoints, in a models folder and in a Hugging Face cache laid out as the hub lays it out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assistlab.engines import catalog
from assistlab.engines.transformers import cached
from assistlab.measure.tune import default_assistants
from assistlab.ui.tune_fields import default_assistants_text

MB = 1 << 20


def checkpoint(folder: Path, size: int, architecture: str = "LlamaForCausalLM") -> Path:
    """A config naming `architecture` and `size` bytes of weights (sparse: nothing is written)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    if size:
        with (folder / "model.safetensors").open("wb") as fh:
            fh.truncate(size)
    return folder


def hub_checkpoint(hub: Path, repo: str, size: int) -> Path:
    """The hub cache's layout: refs/main names a snapshot whose files link to blobs."""
    root = hub / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("abc123")
    blob = root / "blobs" / "weights"
    blob.parent.mkdir()
    with blob.open("wb") as fh:
        fh.truncate(size)
    snapshot = root / "snapshots" / "abc123"
    checkpoint(snapshot, 0)
    (snapshot / "model.safetensors").symlink_to(blob)
    return snapshot


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A models folder and a hub cache with a 400 MB target and models around it; the bundled cache empty."""
    from huggingface_hub import constants

    models, hub = tmp_path / "models", tmp_path / "hub"
    hub.mkdir()
    checkpoint(models / "big", 400 * MB)
    checkpoint(models / "small", 80 * MB)  # a fifth: fits
    checkpoint(models / "family" / "tiny", 10 * MB)  # fits, in a sub-folder
    checkpoint(models / "mid", 150 * MB)  # over a quarter: does not
    checkpoint(models / "encoder", 50 * MB, "BertModel")  # not a causal LM
    checkpoint(models / "no-weights", 0)  # nothing to load here
    hub_checkpoint(hub, "org/hub-small", 90 * MB)
    outside = checkpoint(tmp_path / "elsewhere", 20 * MB)
    (models / "linked-out").symlink_to(outside)  # a link out of the models folder: not offered, not read
    broken = hub / "models--org--half-downloaded"  # refs/main names a snapshot that is not there
    (broken / "refs").mkdir(parents=True)
    (broken / "refs" / "main").write_text("gone")
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(models))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("ASSISTLAB_CACHE_DIR", str(tmp_path / "assistlab-cache"))
    return models, hub


def test_the_largest_causal_models_at_most_a_quarter_of_the_target_come_first(machine):
    assert cached.cached_assistants("big") == ["org/hub-small", "small"]
    assert cached.cached_assistants("big", most=5) == ["org/hub-small", "small", "family/tiny"]
    assert cached.cached_assistants("big", exclude=["small"]) == ["org/hub-small", "family/tiny"]


def test_a_target_in_the_hub_cache_is_sized_from_its_snapshot(machine):
    _models, hub = machine
    hub_checkpoint(hub, "org/hub-target", 60 * MB)
    assert cached.cached_assistants("org/hub-target", most=5) == ["family/tiny"]


def test_a_target_not_on_this_machine_gets_no_cached_assistants(machine):
    assert cached.cached_assistants("org/not-here") == []
    assert cached.cached_assistants("no-weights") == []
    assert cached.cached_assistants("../outside") == []  # refused by the models folder's rule: nothing read


def test_the_tuner_tries_the_presets_then_the_models_here(machine):
    assert default_assistants("big") == ["org/hub-small", "small"]
    assert default_assistants_text("big") == "org/hub-small, small"
    # The bundled target: its preset's assistant; nothing else is on this machine that fits it (not converted).
    assert default_assistants(catalog.BUNDLED_TARGET) == [catalog.BUNDLED_ASSISTANT]
