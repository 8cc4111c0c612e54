"""What fake vLLM servers (tests/fake_openai.py with FAKE_EVENT_LOG) logged, read back: their moments in order, and
the most of them that were up at once; and a server's memory reservation written by hand in GB."""

from __future__ import annotations

import json
from pathlib import Path

from assistlab.engines.vllm.memory import Reservation

GB = 10**9


def reservation(label: str, weights_gb: float, kv_gb: float = 1.0, overhead_gb: float = 2.0) -> Reservation:
    """What one server reserves: `weights_gb` of weights, a KV cache of `kv_gb`, processes of `overhead_gb`."""
    kv = int(kv_gb * GB)
    return Reservation(label, kv, kv, int(weights_gb * GB), int(overhead_gb * GB))


def events(log: Path) -> list[dict]:
    """Every server's logged moments ({"t", "port", "event"}), in the order they happened."""
    return sorted((json.loads(line) for line in log.read_text().splitlines()), key=lambda e: e["t"])


def most_at_once(moments: list[dict], up: tuple[str, ...], down: tuple[str, ...]) -> int:
    """The most servers that were up at once, a server going up at an event in `up` and down at one in `down`:
    ("start", "wake") and ("sleep",) count those awake; ("start",) and ("stop",) those running."""
    now, most = set(), 0
    for e in moments:
        if e["event"] in up:
            now.add(e["port"])
        elif e["event"] in down:
            now.discard(e["port"])
        most = max(most, len(now))
    return most
