"""The history keeps load levels apart (issue 27): a pairing at 4 requests at once is never ranked with one at a
time, the comparison's own result stays one request at a time, and older databases gain the level column."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from sample_reports import LOAD_NGRAM, load_report

from assistlab import history as hist
from assistlab.views import history_html

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
LABEL = "vllm ngram (k=5, lookup 2-4)"


def _rows(sections):
    return {s.concurrency: [(r.label, r.speedup, r.comparisons) for r in s.rows] for s in sections}


def test_the_load_rows_are_the_assisted_arms_above_one_request_that_did_not_fail():
    rows = hist.derive.load_rows(load_report())
    assert [(r["concurrency"], r["speedup"], r["ci_low"], r["n"], r["label"]) for r in rows] == [
        (2, 1.22, 1.08, 5, LABEL), (4, 0.87, 0.80, 5, LABEL)]  # 1 is the comparison's own; 8 failed
    assert [r["arm_index"] for r in rows] == [2001, 4001]
    assert all(r["engine"] == "vllm" and r["ci_kind"] == "order-statistic" for r in rows)
    assert [r["concurrency"] for r in hist.board_rows(load_report())] == [1, 2, 4]
    assert hist.derive.load_rows({**load_report(), "load": "junk"}) == []


def test_each_level_is_its_own_board_and_the_comparison_ranks_one_request_at_a_time(db_url):
    db = hist.History(db_url, max_entries=None)
    try:
        first = db.save(load_report(), now=T0)
        assert first.saved
        other = load_report()
        other["comparison"][0]["speedup"].update(median=1.3)
        for entry in other["load"]:
            if entry["speedup"] and entry["concurrency"] == 4:
                entry["speedup"].update(median=0.75, ci_low=0.7, ci_high=0.8)
        db.save(other, now=T0)
        sections = db.leaderboard()
        by_level = _rows(sections)
        assert sorted(by_level) == [1, 2, 4] and len(sections) == 3
        assert by_level[1] == [(LABEL, 1.4, 2)]  # median of 1.5 and 1.3: the comparisons' own results
        assert by_level[2] == [(LABEL, 1.22, 2)]
        assert by_level[4] == [(LABEL, 0.81, 2)]  # median of 0.87 and 0.75, never mixed with 1 or 2
        four = next(s for s in sections if s.concurrency == 4)
        assert four.measured.endswith("at 4 requests at once (throughput)")
        assert not four.beaten and four.to_dict()["concurrency"] == 4
        one = next(s for s in sections if s.concurrency == 1)
        assert "requests at once" not in one.measured
        page = history_html.board_html(sections)
        assert "at 4 requests at once (throughput)" in page and "one request at a time" in page
        # the listing and the best arm are still the comparison's own, one request at a time
        assert db.get(first.id)[0].best_speedup == 1.5
    finally:
        db.close()


def test_a_report_without_load_keeps_one_board(db_url):
    db = hist.History(db_url, max_entries=None)
    try:
        plain = {k: v for k, v in load_report().items() if k not in ("load", "load_summary")}
        db.save(plain, now=T0)
        assert [s.concurrency for s in db.leaderboard()] == [1]
    finally:
        db.close()


def _version_4_columns(report: dict) -> dict:
    """The comparisons columns a database at schema version 4 has (version 6 added kind and recommendation)."""
    return {k: v for k, v in hist.summary_columns(report).items() if k not in ("kind", "recommendation")}


def test_upgrading_from_version_4_adds_the_level_and_the_load_rows_of_kept_reports(db_url):
    engine = hist.History(db_url)._make_engine()
    report = load_report()
    try:
        assert hist.upgrade(engine, to_version=4) == 4
        with engine.begin() as conn:
            seq = conn.execute(hist.comparisons.insert().values(
                id="e" * 16, created_at=T0, report=json.dumps(report), **_version_4_columns(report)
            ).returning(hist.comparisons.c.seq)).scalar_one()
            conn.execute(hist.arms_table.insert(), [{**a, "comparison_seq": seq} for a in hist.arm_rows(report)])
            seq2 = conn.execute(hist.comparisons.insert().values(
                id="f" * 16, created_at=T0, report="not json {", **_version_4_columns(report)
            ).returning(hist.comparisons.c.seq)).scalar_one()
            assert seq2
    finally:
        engine.dispose()
    store = hist.History(db_url, max_entries=None)
    try:
        assert _rows(store.leaderboard()) == {1: [(LABEL, 1.5, 1)], 2: [(LABEL, 1.22, 1)], 4: [(LABEL, 0.87, 1)]}
        with store._ready().connect() as conn:
            assert hist.current_version(conn) == hist.SCHEMA_VERSION == 6
            columns = {c["name"] for c in sa.inspect(conn).get_columns(hist.arms_table.name)}
            assert "concurrency" in columns
        store.save(copy.deepcopy(report), now=T0)  # saved now, beside the upgraded one: the same boards
        assert _rows(store.leaderboard())[4] == [(LABEL, 0.87, 2)]
    finally:
        store.close()


def test_the_sample_report_names_its_ngram_arm_as_the_load_entries_do():
    report = load_report()
    assert {e["arm"] for e in report["load"]} == {a["name"] for a in report["arms"]}
    assert report["arms"][1]["name"] == LOAD_NGRAM
