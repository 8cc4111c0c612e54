"""The ui tests' shared fixtures: one live app and a gradio client of its API per module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def api_client(models_dir, store, launch_app):
    """A gradio Client of a live app on loopback (the tiny models), for the tests that call its API."""
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)
