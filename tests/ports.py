"""A free port on loopback, for tests that start a server of their own (a helper module: conftest.py files are
per folder, so `from conftest import ...` finds whichever folder's came first)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
