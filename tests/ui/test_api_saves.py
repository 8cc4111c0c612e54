"""Both measuring routes save to the history off the event loop: a locked database never freezes serving."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.request


from assistlab.history import History


PROMPTS = "\n".join(json.dumps(r) for r in [
    {"category": "fox", "prompt": "the quick brown fox"},
    {"category": "dog", "prompt": "the lazy dog"},
])
WORKLOAD = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "suite": "file",
            "prompts_text": PROMPTS, "prompts_filename": "mine.jsonl", "max_new_tokens": 4, "repeats": 1,
            "warmup": 0}


class Pinger:
    """GETs the page's root URL every 0.1 s on a thread, keeping (began, took) of each answer."""

    def __init__(self, url: str) -> None:
        self.url, self.times, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with urllib.request.urlopen(self.url, timeout=60) as answer:
                answer.read()
            self.times.append((began, time.monotonic() - began))
            self._stop.wait(0.1)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(70)

    def slowest(self, since: float, until: float) -> tuple[float, int]:
        """The longest answer to a GET under way at some time between `since` and `until`, and how many were."""
        inside = [took for began, took in self.times if began <= until and began + took >= since]
        return max(inside, default=float("inf")), len(inside)


def test_a_workload_saved_into_a_locked_sqlite_file_never_freezes_the_server(models_dir, store, launch_app,
                                                                             tmp_path):
    from gradio_client import Client

    path = tmp_path / "h.sqlite3"
    busy = 3.0  # how long the save waits for the lock before it gives up with its warning
    history = History(f"sqlite:///{path}", busy_timeout_s=busy)
    with launch_app(models_dir, store, history=history) as url:
        client = Client(url, verbose=False)
        first, _ = client.predict(**WORKLOAD, api_name="/compare_suite")  # loads the model, makes the file
        assert first["status"] == "complete" and first["saved"]["id"]
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # as a backup or `history delete` in another process would
        try:
            with Pinger(url) as pinger:
                report, _ = client.predict(**WORKLOAD, api_name="/compare_suite")
                done = time.monotonic()
                time.sleep(0.3)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # The workload reached its result, with the reason it was not saved.
        assert report["status"] == "complete" and report["suite"]["overall"]["prompts"] == 2
        assert report["saved"]["id"] is None and "locked" in report["saved"]["warning"]
        slowest, pings = pinger.slowest(done - busy, done)
        assert pings >= 5 and slowest < 1.0, (
            f"GET / took {slowest:.2f} s ({pings} answers) while the workload's save waited for the lock")
        print(f"GET / answered within {slowest:.3f} s ({pings} answers) during a {busy} s blocked save")
        again, _ = client.predict(**WORKLOAD, api_name="/compare_suite")
        assert again["saved"]["id"] and history.count() == 2
