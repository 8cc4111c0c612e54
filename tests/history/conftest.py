"""The history tests' databases: a fresh SQLite file or a fresh database on a throwaway PostgreSQL cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pgcluster
import pytest

from assistlab import history as hist


def _cluster() -> Iterator[tuple[str, str]]:
    reason = pgcluster.why_unavailable()
    if reason:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    with pgcluster.cluster() as server:
        yield server


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL cluster for the history tests: (socket folder, user)."""
    yield from _cluster()


@pytest.fixture(scope="module")
def own_pg_server():
    """A cluster of the module's own, for tests that pause or break their server."""
    yield from _cluster()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / hist.DB_FILENAME}"
    socket_dir, user = request.getfixturevalue("pg_server")
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")[:12]
    name = f"t_{module}_" + request.node.name.split("[")[0][-40:].lower().replace("-", "_")
    return pgcluster.fresh_database(socket_dir, user, name)
