"""Shared fixtures: a models directory of tiny random checkpoints, built once per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import tiny  # noqa: E402


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    root = tiny.build_models_dir(tmp_path_factory.mktemp("models"))
    tiny.make_gemma3_multimodal(root / "gemma3-mm")
    return root


@pytest.fixture
def allowed_models(models_dir, monkeypatch) -> Path:
    """Point ASSISTLAB_MODELS_DIR at the tiny models for one test."""
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    return models_dir


@pytest.fixture(scope="session")
def store():
    from assistlab.models import ModelStore

    return ModelStore(max_models=8)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: uses the bundled real models (minutes on a CPU)")
    config.addinivalue_line("markers", "browser: drives Chromium through Playwright")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
