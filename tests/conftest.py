"""Shared fixtures: a models directory of tiny random checkpoints built once per test session, the app on loopback,
a throwaway PostgreSQL; browser tests are slow too. tests/ is on sys.path, so every folder imports its helpers
(tiny, fake_openai, pgcluster, browsing, commandline, sample_reports, vllm_processes, server_events)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import pgcluster  # noqa: E402
import tiny  # noqa: E402
from ports import free_port  # noqa: E402


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


@pytest.fixture(scope="session", autouse=True)
def private_history(tmp_path_factory):
    """Tests never write to the real history: the session gets an empty data folder and no database URL."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ASSISTLAB_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    mp.delenv("ASSISTLAB_DATABASE_URL", raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def store():
    from assistlab.engines.transformers.models import ModelStore

    return ModelStore(max_models=8)


@pytest.fixture
def pg_url_and_data():
    """(database URL, data folder) of a PostgreSQL cluster of the test's own; skipped where it cannot start."""
    reason = pgcluster.why_unavailable()
    if reason:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    with pgcluster.cluster() as (socket_dir, user):
        yield pgcluster.fresh_database(socket_dir, user, "held"), Path(socket_dir) / "data"


@pytest.fixture(scope="session")
def launch_app(tmp_path_factory):
    """Start the app on loopback: `with launch_app(models_dir, store, **build_app_kwargs) as url: ...`.

    ASSISTLAB_MODELS_DIR (and any `env`) is set while the server runs; the server closes when the block ends.
    """

    @contextlib.contextmanager
    def launch(models: Path, model_store, env: dict | None = None, **build_kwargs):
        from assistlab import ui

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ASSISTLAB_MODELS_DIR", str(models))
            for name, value in (env or {}).items():
                mp.setenv(name, value)
            build_kwargs.setdefault("reports_dir", tmp_path_factory.mktemp("reports"))
            demo = ui.build_app(model_store, **build_kwargs)
            _app, url, _share = demo.launch(
                prevent_thread_lock=True, server_port=free_port(), quiet=True, **ui.launch_options({})
            )
            try:
                yield url
            finally:
                demo.close()

    return launch


@pytest.fixture
def known_latencies(monkeypatch):
    """Replace every timed run's latency by table[arm name] times seeded log-normal noise (sd 0.02); a list gives
    the latency of each repetition in turn; 'fail' makes the run fail with a sentence."""
    import numpy as np

    from assistlab.engines.base import RunFailure
    from assistlab.engines.transformers import engine as transformers_engine

    table: dict[str, object] = {}
    rng = np.random.default_rng(11)
    original = transformers_engine.TransformersArm.run

    def run(self, prompt_ids, round_index, clock, should_stop, watch):
        outcome = original(self, prompt_ids, round_index, clock, should_stop, watch)
        wanted = table.get(self.info.name)
        if wanted == "fail":
            return RunFailure("ran out of memory (simulated)")
        if isinstance(wanted, list):
            wanted = wanted[min(round_index, len(wanted) - 1)]
        if wanted is not None and not isinstance(outcome, RunFailure):
            outcome.latency = float(wanted) * float(np.exp(0.02 * rng.standard_normal()))
        return outcome

    monkeypatch.setattr(transformers_engine.TransformersArm, "run", run)
    return table


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Fixtures that load the tiny models or start the app: each test using one costs seconds of CPU (measured: most
# 5-70 s on the 2-core machine), which the fast tier cannot afford for all of them.
MODEL_FIXTURES = {"models_dir", "allowed_models", "store", "launch_app"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Slow, so `-m "not slow"` leaves it out: a browser test, and a test that loads models or starts the app,
    unless it is marked `fast` (cheap, or the fast tier's one end-to-end run of a module)."""
    for item in items:
        if item.get_closest_marker("slow") or item.get_closest_marker("fast"):
            continue
        if item.get_closest_marker("browser") or MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
