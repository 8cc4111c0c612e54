"""What a stop keeps: whole repetitions only, and the operator's time cap stops a comparison."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assistlab import history as hist
from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.history import History
from assistlab.measure import runner


def test_a_stopped_report_keeps_whole_repetitions_only(allowed_models, store):
    from assistlab.measure.runner import run_benchmark

    request = BenchRequest("target", (ArmSpec("auto", "assistant-same"), ArmSpec("prompt-lookup")),
                           prompt="deep learning", max_new_tokens=6, repeats=5, warmup=0)
    counted = {"runs": 0}
    arms = 3
    events = run_benchmark(request, store, should_stop=lambda: counted["runs"] >= arms + 1)
    final = None
    for event in events:
        if event.kind == "run" and not event.warmup:
            counted["runs"] += 1
        final = event
    report = final.report.to_dict()
    assert report["status"] == "stopped" and len(report["arms"]) == arms
    assert report["counted_repetitions"] == 1 and report["stopping"]["repetitions"] == 1
    assert all(len(arm["latencies_s"]) == 1 for arm in report["arms"]) and len(report["orders"]) == 1
    assert report["message"].startswith("Stopped after 1 of 5")
    assert hist.savable(report)
    # stopped inside the first repetition: nothing whole, nothing kept
    counted["runs"] = 0
    events = run_benchmark(request, store, should_stop=lambda: counted["runs"] >= 1)
    for event in events:
        if event.kind == "run" and not event.warmup:
            counted["runs"] += 1
        final = event
    report = final.report.to_dict()
    assert report["counted_repetitions"] == 0 and not any(arm["latencies_s"] for arm in report["arms"])
    assert not hist.savable(report)
    saved = History(f"sqlite:///{Path(os.environ['ASSISTLAB_DATA_DIR']) / 'stop.sqlite3'}").save(report)
    assert not saved.saved and "no whole repetition" in saved.warning


def test_the_operators_time_cap_stops_a_comparison(models_dir, store, monkeypatch):
    import time

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    # 50 repetitions of 64 tokens take about 10 s here (of 8 tokens, 1.5 s: a quiet machine finished them all
    # before the cap).
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=64,
                           repeats=50, warmup=0)
    import dataclasses

    runner.run_to_report(dataclasses.replace(request, repeats=1), store)  # loads the models first
    monkeypatch.setenv(runner.MAX_RUN_ENV, "1.5")
    started = time.monotonic()
    report = runner.run_to_report(request, store)
    assert time.monotonic() - started < 15
    assert report.status == "stopped" and "ASSISTLAB_MAX_RUN_S" in report.message
    monkeypatch.setenv(runner.MAX_RUN_ENV, "soon")
    with pytest.raises(Exception, match="ASSISTLAB_MAX_RUN_S must be a number of seconds"):
        runner.max_run_s()
