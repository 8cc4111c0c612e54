"""Under load greedy decoding must still give every request the target's own tokens: each level says whether it
did, and a level where an assisted arm's tokens differ from plain's is named in a note."""

from __future__ import annotations

import pytest

from assistlab.engines.base import ArmInfo, RequestRecord
from assistlab.results import load
from assistlab.results.load import LoadRecord, LoadRound

pytestmark = pytest.mark.fast

ARMS = [ArmInfo("vllm plain", "plain", engine="vllm"), ArmInfo("vllm ngram", "ngram", engine="vllm")]


def _record(ngram_ids) -> LoadRecord:
    record = LoadRecord(levels=(2,), rounds_asked=2, arms=[0, 1], done=[2])
    for r in range(2):
        for arm, wall in ((0, 2.0), (1, 1.0)):
            ids = [[5, 6, 7], [5, 6, 7]] if arm == 0 else ngram_ids
            requests = [RequestRecord(i, 0.0, wall, 0.1, [0.1, 0.1], 3, 0.001, token_ids=list(ids[i]))
                        for i in range(2)]
            record.rounds.append(LoadRound(arm, 2, r, wall, requests))
    return record


def test_the_same_tokens_as_plain_at_a_level_is_said():
    parts = load.report_parts(_record([[5, 6, 7], [5, 6, 7]]), ARMS)
    assert [e["outputs_identical"] for e in parts["load"]] == [True, True]
    assert not any("same tokens" in n for n in parts["load_summary"]["notes"])


def test_other_tokens_than_plain_under_load_are_named_in_a_note():
    parts = load.report_parts(_record([[5, 6, 7], [5, 6, 9]]), ARMS)
    assert [e["outputs_identical"] for e in parts["load"]] == [True, False]
    assert any("vllm ngram at 2" in n and "same tokens" in n for n in parts["load_summary"]["notes"])


def test_requests_without_token_ids_say_nothing_either_way():
    record = _record([[5, 6, 7], [5, 6, 7]])
    for rnd in record.rounds:
        for q in rnd.requests:
            q.token_ids = []
    assert [e["outputs_identical"] for e in load.report_parts(record, ARMS)["load"]] == [None, None]


def test_the_load_table_marks_a_level_with_other_tokens():
    from assistlab.views.load import load_html

    parts = load.report_parts(_record([[5, 6, 7], [5, 6, 9]]), ARMS)
    page = load_html({"request": {"concurrency": [2]}, "arms": [{"name": a.name} for a in ARMS], **parts})
    assert page.count("other tokens</span>") == 1
