"""A /compare_suite workload whose request is cancelled mid-run is kept as a cancelled /compare is: saved to the
history as stopped, with the whole repetitions it measured and none cut short."""

from __future__ import annotations

import json
import threading
import time

import pytest

from assistlab.history import History
from assistlab.measure import suite_runner

pytestmark = pytest.mark.slow  # a workload started, cancelled, then saved: a minute on a busy machine

PROMPTS = "\n".join(json.dumps(r) for r in [
    {"category": "fox", "prompt": "the quick brown fox"},
    {"category": "fox", "prompt": "the lazy dog"},
    {"category": "essay", "prompt": "write me a long essay"},
])
COUNTED = 5  # counted runs of two arms before the cancel: two whole repetitions and one cut short


def test_a_cancelled_workload_is_saved_as_stopped_with_its_whole_runs(models_dir, store, launch_app, tmp_path,
                                                                       monkeypatch):
    from gradio_client import Client

    real, seen = suite_runner.run_suite, threading.Event()

    def counting(*args, **kwargs):  # the runner as it is, telling the test when COUNTED runs are in
        runs = 0
        for event in real(*args, **kwargs):
            runs += event.kind == "run" and not event.warmup
            if runs >= COUNTED:
                seen.set()
            yield event

    monkeypatch.setattr(suite_runner, "run_suite", counting)
    history = History(f"sqlite:///{tmp_path / 'history.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url:
        job = Client(url, verbose=False).submit(
            target="target", strategy="prompt-lookup", also_prompt_lookup=False, suite="file", prompts_text=PROMPTS,
            prompts_filename="mine.jsonl", max_new_tokens=8, repeats=30, warmup=0, api_name="/compare_suite")
        assert seen.wait(300), "the workload never got to its fifth counted run"
        job.cancel()
        deadline = time.monotonic() + 120
        while history.count() == 0:
            assert time.monotonic() < deadline, "the cancelled workload was not saved"
            time.sleep(0.5)
    (entry,) = history.list().entries
    saved = history.get(entry.id)[1]
    history.close()
    assert saved["kind"] == "suite" and saved["status"] == "stopped", saved["message"]
    first = saved["suite"]["prompts"][0]
    assert first["status"] == "stopped" and first["repetitions"] >= 2, first
    for prompt in saved["suite"]["prompts"]:
        if prompt.get("runs"):  # every arm as many times as the repetitions: the one cut short is not kept
            assert {len(run["latencies_s"]) for run in prompt["runs"]} == {prompt["repetitions"]}, prompt["id"]
    assert [p["status"] for p in saved["suite"]["prompts"][1:]] == ["not run", "not run"]
