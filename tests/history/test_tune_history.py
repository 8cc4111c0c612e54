"""A tuner's search in the history (issue 34): kept as a run of kind 'tune' with its sentence, listed with a tuner
badge, only its pick on the leaderboard; schema version 6 gives searches saved before the same."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from sample_reports import minimal_report

from assistlab import history as hist
from assistlab.views import history_html

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
SENTENCE = "Use org/draft as assistant (k=5): 1.50× faster than plain (1.20–1.70)."


def _tune_report() -> dict:
    """Two candidates: 'arm 0' picked, 'arm 1' dropped early (its figures are from fewer repetitions)."""
    report = minimal_report(arms=(("org/draft", 1.5, 1.2, 1.7), ("org/other", 1.1, 0.9, 1.3)))
    report["tune"] = {"sentence": SENTENCE, "settled": True, "recommendation": {"arm": "arm 0"},
                      "candidates": [{"arm": "arm 0", "left_at": None}, {"arm": "arm 1", "left_at": 4}]}
    return report


def _labels(store) -> list[str]:
    return [row.label for section in store.leaderboard() for row in section.rows]


def test_a_search_is_kept_as_a_tuner_s_run_with_its_sentence_and_only_its_pick_is_ranked(db_url):
    store = hist.History(db_url, max_entries=None)
    try:
        tuned = store.save(_tune_report(), now=T0)
        plain = store.save(minimal_report(arms=(("org/other", 1.3, 1.1, 1.5),)), now=T0)
        entries = {e.id: e for e in store.list().entries}
        assert (entries[tuned.id].kind, entries[tuned.id].recommendation) == ("tune", SENTENCE)
        assert (entries[plain.id].kind, entries[plain.id].recommendation) == ("comparison", None)
        assert entries[tuned.id].to_dict()["kind"] == "tune"
        # The dropped candidate's rows are not ranked: org/other comes only from the plain comparison.
        board = {row.label: row.comparisons for section in store.leaderboard() for row in section.rows}
        assert [n for label, n in board.items() if "org/draft" in label] == [1]
        assert [n for label, n in board.items() if "org/other" in label] == [1]
        listing = history_html.entries_html(store.list())
        assert listing.count("al-badge\">tuner</span>") == 1 and SENTENCE in listing
    finally:
        store.close()


def test_upgrading_from_version_5_marks_the_searches_kept_and_drops_their_dropped_candidates_rows(db_url):
    engine = hist.History(db_url)._make_engine()
    try:
        assert hist.upgrade(engine, to_version=5) == 5
        with engine.begin() as conn:
            for run_id, report in (("a" * 16, _tune_report()), ("b" * 16, minimal_report())):
                columns = {k: v for k, v in hist.summary_columns(report).items()
                           if k not in ("kind", "recommendation")}
                seq = conn.execute(hist.comparisons.insert().values(
                    id=run_id, created_at=T0, report=json.dumps(report), **columns
                ).returning(hist.comparisons.c.seq)).scalar_one()
                rows = [{**a, "comparison_seq": seq} for a in hist.board_rows(minimal_report(
                    arms=(("org/draft", 1.5, 1.2, 1.7), ("org/other", 1.1, 0.9, 1.3))))]  # as version 5 kept them
                conn.execute(hist.arms_table.insert(), rows[:len(report["arms"]) - 1])
    finally:
        engine.dispose()
    store = hist.History(db_url, max_entries=None)
    try:
        entries = {e.id: e for e in store.list().entries}
        assert (entries["a" * 16].kind, entries["a" * 16].recommendation) == ("tune", SENTENCE)
        assert (entries["b" * 16].kind, entries["b" * 16].recommendation) == ("comparison", None)
        labels = _labels(store)
        assert sum("org/other" in label for label in labels) == 0 and sum("org/draft" in label for label in labels) == 1
    finally:
        store.close()


def _summarised_tune_report() -> dict:
    """A search saved as the tuner writes it: its pick's one interval (`recommendation.interval`, 0.48–1.76×,
    99.1% at every look) beside the comparison's own (0.54–1.58× at 99.2%), which no view of the pick shows."""
    report = minimal_report(arms=(("org/draft", 0.89, 0.54, 1.58, "order-statistic", 0.9921),
                                  ("org/other", 0.7, 0.5, 0.9)), n=8)
    interval = {"median": 0.89, "ci_low": 0.48, "ci_high": 1.76, "level": 1 - 0.05 / 6, "interval": "time-uniform",
                "n": 8, "assumption": "", "text": "0.48–1.76×, 99.1% at every look"}
    speedup = {"median": 0.89, "ci_low": 0.48, "ci_high": 1.76, "level": 1 - 0.05 / 6, "n": 8}
    report["tune"] = {
        "sentence": "Not settled within the budget; best so far: org/draft as assistant (k=5): 0.89× the speed of "
                    "plain, no clear difference (0.48–1.76×, 99.1% at every look).",
        "settled": False, "outcome": "not settled", "confirmed": None, "confirmed_against": None, "level": 0.95,
        "assumption": "candidates leave on the likely rule", "repetitions": 8, "runs_used": 20,
        "runs_without_elimination": 24, "looks": [4, 5, 6, 8], "comparison_level": 0.9976,
        "recommendation": {"arm": "arm 0", "interval": interval, "speedup": speedup,
                           "bench_command": "python -m assistlab bench --target org/target"},
        "candidates": [{"arm": "arm 0", "left_at": None, "why": None, "runs": 8, "speedup": speedup,
                        "interval": interval, "settings": {}, "looks": []},
                       {"arm": "arm 1", "left_at": 4, "why": "clearly slower than plain after 4 repetitions",
                        "runs": 4, "speedup": {"median": 0.7}, "settings": {}, "looks": [],
                        "interval": {"median": 0.7, "ci_low": None, "ci_high": None, "level": None, "interval": "none",
                                     "n": 4, "assumption": "", "text": ""}}],
        "deploy": {"engine": "transformers", "plain": True, "snippet": "output = target.generate(**inputs)",
                   "sentence": "Deploy plain generation: no setting was clearly faster than plain here (best: "
                               "org/draft as assistant (k=5), 0.89×, 0.48–1.76×, 99.1% at every look)."},
        "budget": {"max_time_s": 600, "timed_s": 580.0, "over": False, "sentence": ""},
    }
    return report


def test_the_pick_s_interval_reads_the_same_on_the_page_the_command_line_and_the_leaderboard(db_url):
    from assistlab.cli.tune import format_summary
    from assistlab.views import tune as tune_views

    report = _summarised_tune_report()
    panel = tune_views.sentence_html(report) + tune_views.candidates_html(report)
    printed = format_summary(report["tune"])
    store = hist.History(db_url, max_entries=None)
    try:
        store.save(report, now=T0)
        sections = store.leaderboard()
        row = next(r for section in sections for r in section.rows if "org/draft" in r.label)
        board = history_html.board_html(sections)
    finally:
        store.close()
    assert (row.latest_low, row.latest_high, row.latest_kind) == (0.48, 1.76, "time-uniform")
    assert row.latest_level == pytest.approx(1 - 0.05 / 6)
    for where, text in (("panel", panel), ("command line", printed), ("leaderboard", board)):
        assert "0.48–1.76×" in text and "99.1% at every look" in text, where
        assert "0.54" not in text and "1.58" not in text and "99.2%" not in text, where  # the comparison's own
