"""A saved comparison with load levels downloads the same CSV of runs from the history as from the live report,
and its arm names are cleaned in the load figures as everywhere else."""

from __future__ import annotations

import json

import pytest

from assistlab.engines.base import ArmInfo, RequestRecord
from assistlab.history import derive
from assistlab.results.load import LoadRecord, LoadRound
from assistlab.results.report import Report, RunRecord

pytestmark = pytest.mark.fast

ARMS = [ArmInfo("plain", "plain"), ArmInfo("vllm plain", "plain", engine="vllm"),
        ArmInfo("vllm ngram", "ngram", engine="vllm")]


def report_with_load(levels=(1, 2), rounds=3) -> Report:
    """Three arms with one single-request run each, and vLLM's two timed at `levels` (ngram twice as fast)."""
    report = Report(request={"concurrency": list(levels)}, environment={}, arms=list(ARMS))
    for arm in range(3):
        report.runs.append(RunRecord(arm, 0, 1.0, 4, 0.1, [0.1, 1.0], [1, 3], [], [], [1, 2, 3, 4], "text"))
    report.load = LoadRecord(levels=levels, rounds_asked=rounds, arms=[1, 2], done=list(levels))
    counts = {"drafts": 2, "draft_tokens": 6, "accepted_tokens": 4, "accepted_per_position": [2, 1, 1]}
    for level in levels:
        for r in range(rounds):
            for arm, wall in ((1, 2.0), (2, 1.0)):
                requests = [RequestRecord(i, 0.0, wall, wall / 4, [0.01, 0.03], 10, 0.001,
                                          counts if arm == 2 else None) for i in range(level)]
                report.load.rounds.append(LoadRound(arm, level, r, wall * (1 + r / 100), requests,
                                                    "per-request" if arm == 2 else None, None, arm - 1))
    return report


def test_the_history_csv_of_a_report_with_load_is_the_live_csv():
    report = report_with_load(levels=(1, 2))
    saved = json.loads(json.dumps(report.to_dict()))  # as the history keeps it
    assert derive.runs_csv(saved) == report.to_csv()
    assert "concurrency,request" in derive.runs_csv(saved).splitlines()[0]


def test_a_failed_level_has_no_rows_in_either_csv():
    report = report_with_load(levels=(1, 2))
    report.load.failures[(2, 2)] = "The server stopped answering at 2 requests at once."
    saved = json.loads(json.dumps(report.to_dict()))
    assert derive.runs_csv(saved) == report.to_csv()
    assert not [line for line in report.to_csv().splitlines() if line.startswith("vllm ngram") and line.endswith(",2,1")]


def test_arm_names_with_markup_are_cleaned_in_the_load_figures_too():
    data = json.loads(json.dumps(report_with_load().to_dict()))
    dirty = "vllm <b>ngram</b>"
    for arm in data["arms"]:
        if arm["name"] == "vllm ngram":
            arm["name"] = dirty
    for entry in data["load"]:
        if entry["arm"] == "vllm ngram":
            entry["arm"] = dirty
    data["load_summary"]["arms"][0]["arm"] = dirty
    clean = derive.canonical_report(data)
    names = {e["arm"] for e in clean["load"]} | {a["arm"] for a in clean["load_summary"]["arms"]}
    assert not any("<" in n for n in names) and {a["name"] for a in clean["arms"]} >= names
