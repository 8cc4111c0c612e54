"""The history of comparisons, the same tests against SQLite and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sample_reports import minimal_report

from assistlab import history as hist
from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError
from assistlab.history import derive
from assistlab.measure import runner
from assistlab.views import history_html
from patience import patient

ROOT = Path(__file__).resolve().parents[2]
NASTY_PROMPT = "<script>alert('x')</script> **bold** [link](http://evil) <img src=x onerror=alert(1)> # heading"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


# --- databases --------------------------------------------------------------------------------------------

@pytest.fixture
def db(db_url):
    store = hist.History(db_url, max_entries=None)
    yield store
    store.close()


# --- reports ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_report(models_dir, store):
    """A real comparison on tiny models, with a prompt full of markup."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    try:
        request = BenchRequest(
            target="target", arms=(ArmSpec("assistant", "assistant-same"), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3)),
            prompt=NASTY_PROMPT, max_new_tokens=8, repeats=2, warmup=0,
        )
        return runner.run_to_report(request, store).to_dict()
    finally:
        mp.undo()


# --- saving and reading back ------------------------------------------------------------------------------

def test_real_report_round_trips_with_its_columns(db, real_report):
    result = db.save(real_report, owner="alice")
    assert result.saved and result.warning is None
    entry, report = db.get(result.id)
    assert report == json.loads(json.dumps(real_report))
    assert entry.owner == "alice" and entry.status == "complete"
    assert entry.target == "target" and entry.assistants == "assistant-same"
    assert entry.strategies == "assistant, prompt-lookup"
    assert entry.device == "cpu" and entry.device_name.startswith("cpu: ") and entry.dtype == "float32"
    assert entry.new_tokens == 8 and entry.repetitions == 2
    assert entry.outputs_identical is True
    assert entry.assistlab_version == real_report["environment"]["assistlab"]
    assert entry.transformers_version == real_report["environment"]["transformers"]
    medians = [c["speedup"]["median"] for c in real_report["comparison"]]
    if max(medians) > 1.0:
        assert entry.best_speedup == pytest.approx(max(medians))
    else:  # tiny random models: nothing beat plain, so the best of this comparison is plain
        assert entry.best_arm == "plain" and entry.best_speedup == 1.0
    assert entry.created_at.tzinfo is not None and abs(datetime.now(timezone.utc) - entry.created_at) < timedelta(minutes=5)
    # each arm's speedup and interval is in the leaderboard exactly as measured
    (section,) = db.leaderboard()
    by_strategy = {row.strategy: row for row in section.rows}
    for comp, arm in zip(real_report["comparison"], real_report["arms"][1:]):
        row = by_strategy[arm["strategy"]]
        assert row.speedup == pytest.approx(comp["speedup"]["median"])
        assert row.latest_low == pytest.approx(comp["speedup"]["ci_low"])
        assert row.latest_high == pytest.approx(comp["speedup"]["ci_high"])
        assert row.latest_level == pytest.approx(comp["speedup"]["level"]) and row.latest_n == 2 and row.comparisons == 1
        assert row.latest_kind == comp["speedup"]["interval"] == "range"  # two runs: a range, not an interval
        assert row.faster == 0
    assert by_strategy["assistant"].label == "assistant: assistant-same (transformers defaults)"
    assert by_strategy["prompt-lookup"].label == "prompt-lookup (k=3)"


def test_stored_markup_comes_back_as_data_and_renders_escaped(db, real_report):
    result = db.save(real_report, owner="<b>mallory</b>")
    entry, report = db.get(result.id)
    assert report["request"]["prompt"] == NASTY_PROMPT  # data, unchanged
    assert entry.prompt_preview == NASTY_PROMPT
    page = db.list()
    listing, caption = history_html.entries_html(page), history_html.entry_caption_html(entry)
    for text in (listing, caption):
        assert "<script" not in text and "<img" not in text and "<b>mallory" not in text
        assert "&lt;b&gt;mallory" in text
    assert "&lt;script&gt;" in listing
    md = history_html.escape_markdown(NASTY_PROMPT)
    assert "<" not in md and "\\*\\*bold\\*\\*" in md and "\\[link\\]" in md and "\\#" in md


def test_a_prompt_cell_is_cut_after_a_whole_word_and_keeps_more_as_its_hover():
    text = "write me a long essay\non deep learning and its history, " * 3
    assert history_html.shortened(text, 30) == "write me a long essay on deep…"  # the cut fell between words
    assert history_html.shortened(text, 28) == "write me a long essay on…"  # inside "deep": the word goes
    assert history_html.shortened("a  short\tprompt", 60) == "a short prompt"
    cell = history_html.prompt_cell("<b>" + text, 30)
    assert cell.startswith('<td class="al-prompt-cell" title="&lt;b&gt;write me a long essay on deep learning')
    assert cell.endswith(">&lt;b&gt;write me a long essay on…</td>")


def test_typed_markup_in_a_model_reference_is_stored_as_its_canonical_name(db):
    typed = "./<img src=//host/beacon><a href=//host/phish>Download</a>/../same"
    report = minimal_report(target=typed, arms=(("./<script>x</script>/../draft", 1.2, 1.1, 1.3),))
    report["environment"]["models"] = {"target": {"ref": typed, "kind": "local"}}
    entry, _ = db.get(db.save(report).id)
    assert entry.target == "same"
    assert entry.assistants == "draft"
    assert entry.best_arm == "assistant: draft (k=5)"
    (section,) = db.leaderboard()
    assert section.target == "same" and section.rows[0].assistant == "draft"
    board = history_html.board_html(db.leaderboard())
    assert "<img" not in board and "<script" not in board


def test_the_stored_report_holds_canonical_names_not_typed_markup(db):
    typed = "./<img src=//host/beacon>/../same"
    report = minimal_report(target=typed, arms=(("./<a href=//phish>x</a>/../draft", 1.2, 1.1, 1.3),), prompt=NASTY_PROMPT)
    report["arms"][1]["name"] = "assistant: <a href=//phish>x</a> (k=5)"
    report["comparison"][0]["arm"] = report["arms"][1]["name"]
    report["ranking"] = [{"arm": report["arms"][1]["name"]}]
    report["environment"]["models"] = {"target": {"ref": typed, "kind": "local"},
                                       "assistant ./<a href=//phish>x</a>/../draft": {"ref": "./<a href=//phish>x</a>/../draft", "kind": "local"}}
    _, stored = db.get(db.save(report).id)
    text = json.dumps({k: v for k, v in stored.items() if k != "request"}) + json.dumps(stored["request"]["arms"] if "arms" in stored["request"] else [])
    assert "<" not in text and ">" not in text
    assert stored["request"]["target"] == "same" and stored["environment"]["models"]["target"]["ref"] == "same"
    assert stored["arms"][1]["spec"]["assistant"] == "draft"
    assert stored["comparison"][0]["arm"] == stored["arms"][1]["name"] == stored["ranking"][0]["arm"]
    assert stored["request"]["prompt"] == NASTY_PROMPT  # the prompt is data, kept as typed


def test_runs_csv_from_a_saved_report_has_one_row_per_counted_run(real_report):
    rows = hist.runs_csv(real_report).splitlines()
    assert rows[0].startswith("arm,strategy,repetition,latency_s")
    assert len(rows) == 1 + sum(len(a["latencies_s"]) for a in real_report["arms"])


def test_stopped_comparisons_are_saved_marked_stopped(db):
    entry, _ = db.get(db.save(minimal_report(status="stopped", n=1)).id)
    assert entry.status == "stopped"


def test_nothing_measured_is_not_saved(db):
    result = db.save({"status": "stopped", "arms": []})
    assert not result.saved and "no measured comparison" in result.warning
    assert db.count() == 0


def test_a_report_over_the_size_limit_keeps_its_numbers_without_traces(db, monkeypatch):
    monkeypatch.setattr(derive, "MAX_REPORT_BYTES", 20_000)
    report = minimal_report()
    report["arms"][0]["trace"] = [{"t_s": [0.001] * 3000, "tokens": [1] * 3000}]
    result = db.save(report)
    assert result.saved and "traces were left out" in result.note
    _, stored = db.get(result.id)
    assert stored["arms"][0]["trace"] == [] and stored["comparison"] == report["comparison"]
    report["request"]["prompt"] = "x" * 30_000  # too big even without traces
    refused = db.save(report)
    assert not refused.saved and "without its traces" in refused.warning
    assert db.count() == 1


def test_list_filters_pages_newest_first(db):
    ids = []
    for i, (target, assistant, gpu) in enumerate([
        ("org/big", "org/small", None), ("org/big", "org/tiny", "NVIDIA H200"), ("org/bigs", "org/small", None),
        ("org/big_1", "org/small", None),
    ]):
        report = minimal_report(target, ((assistant, 1.1, 1.0, 1.2),), device="cuda" if gpu else "cpu", gpu=gpu)
        ids.append(db.save(report, now=T0 + timedelta(minutes=i)).id)
    assert [e.id for e in db.list().entries] == ids[::-1]
    assert [e.id for e in db.list(target="org/big").entries] == ids[::-1]
    assert [e.id for e in db.list(target="big_").entries] == [ids[3]]  # '_' is literal, not LIKE's wildcard
    assert [e.id for e in db.list(target="%").entries] == []
    assert [e.id for e in db.list(assistant="tiny").entries] == [ids[1]]
    assert [e.id for e in db.list(device="H200").entries] == [ids[1]]
    assert [e.id for e in db.list(target="org/big", assistant="small").entries] == [ids[3], ids[2], ids[0]]
    first, second = db.list(page=1, page_size=3), db.list(page=2, page_size=3)
    assert first.total == 4 and [e.id for e in first.entries + second.entries] == ids[::-1]
    assert db.list(page_size=10_000).page_size == hist.MAX_PAGE_SIZE


def test_retention_keeps_the_newest(db_url):
    store = hist.History(db_url, max_entries=3)
    try:
        ids = [store.save(minimal_report(), now=T0 + timedelta(minutes=i)).id for i in range(5)]
        assert [e.id for e in store.list().entries] == ids[:1:-1]
        engine = store._ready()
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(hist.arms_table)).scalar_one() == 3
    finally:
        store.close()


def test_retention_limit_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(hist.HISTORY_MAX_ENV, "7")
    assert hist.history_max() == 7
    monkeypatch.setenv(hist.HISTORY_MAX_ENV, "0")
    assert hist.history_max() is None
    monkeypatch.setenv(hist.HISTORY_MAX_ENV, "lots")
    with pytest.raises(InputError, match=hist.HISTORY_MAX_ENV):
        hist.history_max()


def test_delete_only_by_the_owner_when_logins_are_on(db):
    alice = db.save(minimal_report(), owner="alice").id
    anonymous = db.save(minimal_report()).id
    with pytest.raises(hist.HistoryError, match="someone else"):
        db.delete(alice, user="bob")
    assert db.count() == 2
    db.delete(alice, user="alice")
    with pytest.raises(hist.HistoryError, match="no saved comparison"):
        db.get(alice)
    db.delete(anonymous, user="bob")  # saved without a login: any signed-in person may remove it
    other = db.save(minimal_report(), owner="carol").id
    db.delete(other, user=None)  # no logins on this server: anyone may
    assert db.count() == 0
    with pytest.raises(hist.HistoryError, match="no saved comparison"):
        db.delete(other)
    with pytest.raises(InputError, match="16 letters"):
        db.delete("1; DROP TABLE comparisons")


def test_leaderboard_ranks_pairings_per_target_and_device(db):
    def save(target, arms, minutes, **kw):
        return db.save(minimal_report(target, arms, **kw), now=T0 + timedelta(minutes=minutes)).id

    save("org/big", (("org/a", 1.5, 1.3, 1.7), ("org/b", 1.1, 0.9, 1.3)), 0)
    save("org/big", (("org/a", 1.3, 1.2, 1.4),), 1)
    last_a = save("org/big", (("org/a", 1.4, 1.2, 1.6), ("org/c", 1.6, 0.8, 2.0)), 2)
    save("org/big", (("org/a", 0.9, 0.8, 1.0),), 3, device="cuda", gpu="NVIDIA H200")
    save("org/slow", (("org/a", 0.8, 0.7, 0.9), (None, 1.05, 0.95, 1.1)), 4)
    # a range of two runs wholly above 1x is too few to say it beat plain; a 96.1% interval above 1x is enough
    save("org/new", (("org/a", 1.5, 1.4, 1.6, "range", 0.5),), 5, n=2)
    save("org/sure", (("org/a", 1.3, 1.1, 1.4, "order-statistic", 0.961),), 6, n=9)
    sections = {(s.target, s.device_name): s for s in db.leaderboard()}
    assert set(sections) == {("org/big", "cpu: Test CPU"), ("org/big", "cuda: NVIDIA H200"), ("org/slow", "cpu: Test CPU"),
                             ("org/new", "cpu: Test CPU"), ("org/sure", "cpu: Test CPU")}
    assert not sections[("org/new", "cpu: Test CPU")].beaten
    assert sections[("org/sure", "cpu: Test CPU")].beaten
    assert sections[("org/sure", "cpu: Test CPU")].rows[0].latest_level == 0.961
    words = history_html.board_html(db.leaderboard(target="org/new")) + history_html.board_html(db.leaderboard(target="sure"))
    assert "range of 2 runs 1.40–1.60×" in words and "96.1% interval 1.10–1.40× (n=9)" in words
    cpu = sections[("org/big", "cpu: Test CPU")]
    assert [(r.assistant, r.speedup, r.comparisons) for r in cpu.rows] == [
        ("org/c", 1.6, 1), ("org/a", 1.4, 3), ("org/b", 1.1, 1)
    ]
    a = cpu.rows[1]
    assert (a.latest_low, a.latest_high, a.latest_id, a.faster) == (1.2, 1.6, last_a, 3)
    assert a.latest_at == T0 + timedelta(minutes=2)
    assert cpu.beaten and "org/c" in cpu.note
    # no interval wholly above 1x anywhere on these two: nobody has beaten plain there yet
    for key in (("org/big", "cuda: NVIDIA H200"), ("org/slow", "cpu: Test CPU")):
        assert not sections[key].beaten
        assert sections[key].note == "No assistant has beaten plain here yet."
    assert [r.strategy for r in sections[("org/slow", "cpu: Test CPU")].rows] == ["prompt-lookup", "assistant"]
    html = history_html.board_html(db.leaderboard(target="slow"))
    assert "No assistant has beaten plain here yet." in html and "org/big" not in html



def measured_as(report: dict, *, new_tokens: int = 16, do_sample: bool = False) -> dict:
    """`report` as if it had generated `new_tokens` tokens per run, greedy or sampling."""
    report["request"].update(max_new_tokens=new_tokens, do_sample=do_sample)
    for arm in report["arms"]:
        arm["new_tokens"] = [new_tokens] * len(arm["new_tokens"])
    return report


def test_the_leaderboard_ranks_like_with_like_and_plain_is_the_line_to_beat(db):
    def save(arms, minutes, **kw):
        measured = {k: kw.pop(k) for k in ("new_tokens", "do_sample") if k in kw}
        return db.save(measured_as(minimal_report("org/big", arms, **kw), **measured),
                       now=T0 + timedelta(minutes=minutes)).id

    sure = ("order-statistic", 0.9375)
    # The board: one pairing measured at 64 and at 16 tokens, on another prompt, and once stopped.
    save((("org/a", 0.48, 0.45, 0.5, *sure),), 0, new_tokens=64, n=5)
    save((("org/a", 0.5, 0.46, 0.52, *sure),), 1, new_tokens=64, n=5)
    last16 = save((("org/a", 1.2, 1.14, 1.25, *sure),), 2, n=5)
    save((("org/a", 0.27, 0.26, 0.29, *sure),), 3, prompt="x" * 32_000, n=5)
    save((("org/a", 0.9, 0.8, 1.0),), 4, status="stopped", n=1)
    save((("org/a", 1.1, 0.9, 1.3),), 5, do_sample=True, n=3)
    sections = db.leaderboard()
    assert len(sections) == 5  # 64 tokens; 16 tokens; the long prompt; the stopped run; sampling
    for section in sections:  # one pairing per table: no median mixes what was measured differently
        assert [r.assistant for r in section.rows] == ["org/a"]
    by = {s.measured: s for s in sections}
    assert set(by) == {'64 new tokens · prompt “hello” · greedy', '16 new tokens · prompt “hello” · greedy',
                       f'16 new tokens · prompt “{"x" * 59}…” · greedy',
                       '16 new tokens · prompt “hello” · greedy · stopped before every repetition ran',
                       '16 new tokens · prompt “hello” · sampling'}
    slow = by['64 new tokens · prompt “hello” · greedy']
    assert slow.rows[0].speedup == pytest.approx(0.49) and slow.rows[0].comparisons == 2
    assert slow.note == "No assistant has beaten plain here yet." and not slow.beaten
    # Plain stands on the board at 1×, above a pairing slower than it; the latest's own speedup is beside its interval.
    html = history_html.board_html((slow,))
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html.split("<tbody>")[1])
    cells = [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)] for row in rows]
    assert [c[:3] for c in cells] == [["1", "plain (no assistant)", "1.00×"], ["2", "assistant: org/a (k=5)", "0.49×"]]
    assert cells[1][4] == "0.50×, 93.7% interval 0.46–0.52× (n=5)"
    assert "fastest pairing" not in html
    fast = by['16 new tokens · prompt “hello” · greedy']
    assert fast.beaten and fast.note == (
        "assistant: org/a (k=5) is the fastest pairing measured here (1.20×, its one comparison).")
    assert fast.rows[0].latest_id == last16
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", history_html.board_html((fast,)).split("<tbody>")[1])
    assert [re.sub(r"<[^>]+>", "", re.findall(r"<td>(.*?)</td>", row)[1]) for row in rows] == [
        "assistant: org/a (k=5)", "plain (no assistant)"]


def test_a_pairing_whose_median_is_below_plain_is_never_called_fastest(db):
    sure = ("order-statistic", 0.9375)
    for minutes, (median, low, high) in enumerate(((1.2, 1.14, 1.25), (0.8, 0.7, 0.9), (0.85, 0.8, 0.9))):
        db.save(minimal_report("org/t", (("org/a", median, low, high, *sure),), n=5),
                now=T0 + timedelta(minutes=minutes))
    (section,) = db.leaderboard()
    assert section.rows[0].speedup == pytest.approx(0.85) and section.rows[0].faster == 1
    assert not section.beaten and "fastest" not in section.note
    assert section.note == "No assistant has beaten plain here: 1 comparison did, but no pairing's median is above 1×."
    # The median (0.85×) stands apart from the latest comparison's own 0.85× and its interval, each named.
    assert section.rows[0].latest_speedup == 0.85


def test_a_comparison_where_nothing_beat_plain_has_plain_as_its_best(db):
    run_id = db.save(minimal_report("org/t", (("org/a", 0.72, 0.7, 0.75), (None, 0.9, 0.85, 0.95)))).id
    entry = db.get(run_id)[0]
    assert (entry.best_arm, entry.best_speedup) == ("plain", 1.0)
    assert "plain (no assistant helped)" in history_html.entries_html(db.list()) and "0.72×" not in (
        history_html.entries_html(db.list()))
    helped = db.get(db.save(minimal_report("org/t", (("org/a", 1.3, 1.2, 1.4),))).id)[0]
    assert (helped.best_arm, helped.best_speedup) == ("assistant: org/a (k=5)", 1.3)


def _unsettled(report: dict, ended_by: str = "time budget") -> dict:
    """`report` as a run until clear that its time budget (or its most repetitions) ended before it was clear."""
    arms = {c["arm"]: {"repetitions": 2, "settled": None, "looks": []} for c in report["comparison"]}
    report["stopping"] = {"rule": "clear", "ended_by": ended_by, "reached": False, "repetitions": 2,
                          "max_time_s": 600.0, "max_repetitions": 30, "arms": arms}
    return report


def test_a_comparison_with_no_clear_answer_is_said_so_and_never_ranked(db):
    """Issue 36 item 2: a run until clear that its budget ended is 'no clear answer' in History, its caption, the
    chooser and the Leaderboard, never 'plain (no assistant helped)' and never ranked."""
    run_id = db.save(_unsettled(minimal_report("org/t", (("org/a", 0.72, 0.05, 3.1),), n=2))).id
    entry = db.get(run_id)[0]
    assert entry.status == "unsettled"
    listing = history_html.entries_html(db.list())
    assert history_html.best_words(entry) == "no clear answer: the runs ended before it was clear"
    assert "no clear answer" in listing and "plain (no assistant helped)" not in listing
    assert "(stopped)" not in listing  # it ended by its own rule, not by a stop
    assert "No clear answer: it ended before its answer was clear." in history_html.entry_caption_html(entry)
    assert "no clear answer" in history_html.chooser_label(entry) and "plain 1.00" not in history_html.chooser_label(entry)
    # A settled comparison of the same pairing stays on a ranked board of its own.
    db.save(minimal_report("org/t", (("org/a", 1.3, 1.2, 1.4, "order-statistic", 0.9375),), n=5))
    sections = db.leaderboard()
    (open_board,) = [s for s in sections if s.unsettled]
    (ranked,) = [s for s in sections if not s.unsettled]
    assert all(rank is None for rank, _row in history_html.board_lines(open_board))
    assert [rank for rank, _row in history_html.board_lines(ranked)] == [1, 2]
    assert open_board.note.startswith("No clear answer: ") and "fastest" not in open_board.note
    assert "no clear answer" in open_board.measured
    board = history_html.board_html(tuple(sections))
    table = board[board.index(open_board.note):]
    first_cells = re.findall(r"<tr[^>]*><td>([^<]*)</td>", table.split("</table>")[0])
    assert first_cells == ["–", "–"]  # the pairing and plain, neither ranked
    assert open_board.to_dict()["unsettled"] is True


def test_only_a_run_until_clear_that_ended_first_is_unsettled():
    base = minimal_report("org/t", (("org/a", 0.72, 0.05, 3.1),), n=2)
    assert derive.summary_columns(_unsettled(json.loads(json.dumps(base))))["status"] == "unsettled"
    assert derive.summary_columns(_unsettled(json.loads(json.dumps(base)), "repetitions"))["status"] == "unsettled"
    cleared = _unsettled(json.loads(json.dumps(base)))
    cleared["stopping"].update(ended_by="clear", reached=True)
    assert derive.summary_columns(cleared)["status"] == "complete"
    stopped = _unsettled(json.loads(json.dumps(base)))
    stopped["status"] = "stopped"
    assert derive.summary_columns(stopped)["status"] == "stopped"
    fixed = _unsettled(json.loads(json.dumps(base)))
    fixed["stopping"]["rule"] = "fixed"
    assert derive.summary_columns(fixed)["status"] == "complete"


def test_schema_upgrade_from_version_2_records_what_was_measured_and_plain_as_best(db_url):
    engine = hist.History(db_url)._make_engine()
    try:
        assert hist.upgrade(engine, to_version=2) == 2
        report = minimal_report("org/old", (("org/a", 0.7, 0.6, 0.8),), prompt="an old prompt")
        with engine.begin() as conn:
            columns = {k: v for k, v in hist.summary_columns(report).items() if k not in VERSION_3_COLUMNS + VERSION_4_COLUMNS + VERSION_6_COLUMNS}
            columns.update(best_arm="assistant: org/a (k=5)", best_speedup=0.7)  # what version 2 kept
            seq = conn.execute(hist.comparisons.insert().values(
                id="b" * 16, created_at=T0, report=json.dumps(report), **columns).returning(hist.comparisons.c.seq)
            ).scalar_one()
            conn.execute(hist.arms_table.insert(), [
                {**{k: v for k, v in a.items() if k not in VERSION_4_ARM_COLUMNS}, "comparison_seq": seq}
                for a in hist.arm_rows(report)])
    finally:
        engine.dispose()
    store = hist.History(db_url, max_entries=None)
    try:
        entry = store.get("b" * 16)[0]
        assert (entry.best_arm, entry.best_speedup) == ("plain", 1.0)
        (section,) = store.leaderboard()
        assert section.measured == "16 new tokens · prompt “an old prompt” · greedy"
    finally:
        store.close()

# --- under load and after crashes ------------------------------------------------------------------------

def test_four_concurrent_saves_from_threads_give_four_rows(db, real_report):
    barrier = threading.Barrier(4)
    results = []

    def save(i):
        barrier.wait()
        results.append(db.save(real_report, owner=f"user{i}"))

    threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(patient(60))
    assert all(r.saved for r in results), [r.warning for r in results]
    assert len({r.id for r in results}) == 4
    assert {e.owner for e in db.list().entries} == {"user0", "user1", "user2", "user3"}


SAVER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from assistlab import history
store = history.History({url!r})
store._ready()
go = Path({go!r})
while not go.exists():
    time.sleep(0.005)
result = store.save(json.loads(Path({report!r}).read_text()), owner=sys.argv[1])
print(json.dumps({{"id": result.id, "warning": result.warning}}))
"""


def test_four_servers_saving_at_once_give_four_rows(db_url, tmp_path):
    """Four processes, each with its own connection, save at the same instant."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(minimal_report()))
    go = tmp_path / "go"
    script = SAVER.format(root=str(ROOT), url=db_url, go=str(go), report=str(report))
    procs = [subprocess.Popen([sys.executable, "-c", script, f"p{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    time.sleep(3)  # let each connect and migrate before they all write at once
    go.touch()
    outputs = [p.communicate(timeout=patient(120)) for p in procs]
    results = [json.loads(out) for out, err in outputs]
    assert all(r["id"] and r["warning"] is None for r in results), outputs
    store = hist.History(db_url, max_entries=None)
    try:
        assert sorted(e.owner for e in store.list().entries) == ["p0", "p1", "p2", "p3"]
    finally:
        store.close()


CRASHER = """
import sys, time
from datetime import datetime, timezone
sys.path.insert(0, {root!r})
import sqlalchemy as sa
from assistlab import history
store = history.History({url!r})
with store._ready().begin() as conn:
    conn.execute(history.comparisons.insert().values(
        id="0" * 16, created_at=datetime.now(timezone.utc), status="complete", target="half", assistants="",
        strategies="", device="cpu", device_name="cpu", dtype="float32", report="{{}}"))
    print("inside", flush=True)
    time.sleep(120)
"""


def test_a_crash_mid_save_leaves_the_database_readable(db_url, db):
    kept = db.save(minimal_report()).id
    proc = subprocess.Popen([sys.executable, "-c", CRASHER.format(root=str(ROOT), url=db_url)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "inside", proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(patient(30))
    fresh = hist.History(db_url, max_entries=None)
    try:
        assert [e.id for e in fresh.list().entries] == [kept]
        assert fresh.save(minimal_report()).saved
        assert fresh.count() == 2
    finally:
        fresh.close()


def test_an_error_inside_the_save_rolls_back_and_warns(db, monkeypatch, caplog):
    def boom(self, *_args):  # _prune(conn, owner)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(hist.History, "_prune", boom)
    result = db.save(minimal_report())
    assert not result.saved and "not saved" in result.warning and "RuntimeError" in result.warning
    monkeypatch.undo()
    assert db.count() == 0
    with db._ready().connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(hist.arms_table)).scalar_one() == 0


# --- schema ----------------------------------------------------------------------------------------------

VERSION_3_COLUMNS = ("prompt_hash", "do_sample", "workload")  # what schema version 3 added
VERSION_4_COLUMNS = ("engines",)  # what schema version 4 added to comparisons
VERSION_6_COLUMNS = ("kind", "recommendation")  # what schema version 6 added to comparisons
VERSION_4_ARM_COLUMNS = ("engine",)  # and to comparison_arms


def test_schema_upgrade_from_version_1_backfills_the_leaderboard(db_url):
    engine = hist.History(db_url)._make_engine()
    try:
        assert hist.upgrade(engine, to_version=1) == 1
        with engine.begin() as conn:
            assert hist.current_version(conn) == 1
            assert not sa.inspect(conn).has_table("comparison_arms")
            report = minimal_report("org/old", (("org/a", 1.3, 1.1, 1.5),))
            conn.execute(hist.comparisons.insert().values(
                id="a" * 16, created_at=T0, report=json.dumps(report),
                **{k: v for k, v in hist.summary_columns(report).items() if k not in VERSION_3_COLUMNS + VERSION_4_COLUMNS + VERSION_6_COLUMNS}))
    finally:
        engine.dispose()
    store = hist.History(db_url, max_entries=None)
    try:
        assert [e.id for e in store.list(assistant="org/a").entries] == ["a" * 16]
        (section,) = store.leaderboard()
        assert section.target == "org/old" and section.rows[0].speedup == 1.3
        with store._ready().connect() as conn:
            assert hist.current_version(conn) == hist.SCHEMA_VERSION
            inspector = sa.inspect(conn)
            for table in (hist.comparisons, hist.arms_table):  # the migrations build what the queries expect
                assert {c["name"] for c in inspector.get_columns(table.name)} == {c.name for c in table.columns}
    finally:
        store.close()


def test_a_newer_schema_is_refused_with_a_sentence(db_url):
    store = hist.History(db_url)
    with store._ready().begin() as conn:
        conn.execute(hist.schema_table.update().values(version=hist.SCHEMA_VERSION + 1))
    store.close()
    fresh = hist.History(db_url)
    result = fresh.save(minimal_report())
    assert not result.saved and "newer than this AssistLab knows" in result.warning
    fresh.close()


# --- where it lives, and when it cannot be used (SQLite) -------------------------------------------------

def test_default_location_is_created_on_first_use(tmp_path, monkeypatch):
    monkeypatch.delenv(hist.DATA_DIR_ENV, raising=False)
    monkeypatch.delenv(hist.DATABASE_URL_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert hist.database_url() == f"sqlite:///{tmp_path / 'xdg' / 'assistlab' / hist.DB_FILENAME}"
    monkeypatch.setenv(hist.DATA_DIR_ENV, str(tmp_path / "data"))
    store = hist.History()
    assert store.save(minimal_report()).saved
    store.close()
    path = tmp_path / "data" / hist.DB_FILENAME
    assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    monkeypatch.setenv(hist.DATABASE_URL_ENV, "postgresql://u:secret@db.example/lab")
    assert hist.database_url() == "postgresql+psycopg://u:secret@db.example/lab"
    assert "secret" not in hist.History().where


def test_a_bad_location_gives_one_warning(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = hist.History(f"sqlite:///{blocker / 'sub' / hist.DB_FILENAME}")
    with caplog.at_level("WARNING", logger="assistlab.history"):
        result = store.save(minimal_report())
    assert not result.saved and str(blocker) in result.warning and "writable" in result.warning
    assert [r.getMessage() for r in caplog.records] == [result.warning]
    with pytest.raises(hist.HistoryError, match="Cannot use the history file"):
        store.list()


def test_an_unwritable_location_gives_a_warning(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    undo = None
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
            undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o500)
    try:
        try:
            (folder / "probe").touch()
            (folder / "probe").unlink()
            pytest.skip("cannot make a folder unwritable here (root without chattr)")
        except OSError:
            pass
        result = hist.History(f"sqlite:///{folder / hist.DB_FILENAME}").save(minimal_report())
        assert not result.saved and "writable" in result.warning
    finally:
        if undo:
            subprocess.run(undo, check=False)
        folder.chmod(0o700)


def test_a_corrupt_database_file_gives_a_warning_and_a_sentence(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    path.write_bytes(b"this is not sqlite at all, " * 200)
    store = hist.History(f"sqlite:///{path}")
    result = store.save(minimal_report())
    assert not result.saved and "damaged" in result.warning and "move the file aside" in result.warning
    with pytest.raises(hist.HistoryError, match="damaged"):
        store.list()


def test_a_locked_database_warns_quickly_instead_of_waiting(tmp_path):
    url = f"sqlite:///{tmp_path / hist.DB_FILENAME}"
    store = hist.History(url, busy_timeout_s=0.3)
    assert store.save(minimal_report()).saved
    holder = sqlite3.connect(tmp_path / hist.DB_FILENAME, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        result = store.save(minimal_report())
        assert time.monotonic() - start < 5
        assert not result.saved and "locked" in result.warning
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.save(minimal_report()).saved and store.count() == 2


def test_a_full_disk_gives_a_warning(tmp_path):
    store = hist.History(f"sqlite:///{tmp_path / hist.DB_FILENAME}")
    assert store.save(minimal_report()).saved
    engine = store._ready()
    sa.event.listen(engine, "connect", lambda dbapi, _rec: dbapi.execute("PRAGMA max_page_count = 1"))
    engine.dispose()  # new connections get the cap: the file cannot grow
    report = minimal_report(prompt="x")
    report["arms"][0]["trace"] = [{"t_s": [0.5] * 20_000}]
    result = store.save(report)
    assert not result.saved and "full" in result.warning
    assert store.count() == 1


def test_the_command_line_says_the_best_and_the_board_as_the_page_does(tmp_path, capsys):
    import argparse

    from assistlab.cli import history as cli_history

    store = hist.History(f"sqlite:///{tmp_path / hist.DB_FILENAME}", max_entries=None)
    try:
        store.save(minimal_report("org/t", (("org/a", 0.72, 0.7, 0.75, "order-statistic", 0.9375),), n=5))
        listing = argparse.Namespace(history_command=None, json=False, target="", assistant="", device="", page=1,
                                     limit=20)
        assert cli_history.run(listing, store) == 0
        out = capsys.readouterr().out
        assert "plain (no assistant helped)" in out and "0.72" not in out
        board = argparse.Namespace(history_command="leaderboard", json=False, target="", device="")
        assert cli_history.run(board, store) == 0
        out = capsys.readouterr().out
        assert "16 new tokens · prompt “hello” · greedy): No assistant has beaten plain here yet." in out
        lines = [line for line in out.splitlines() if line[:1].isdigit()]
        assert lines[0].split()[:4] == ["1", "plain", "(no", "assistant)"] and lines[1].startswith("2 ")
        assert "0.72×, 93.7% interval 0.70–0.75× (n=5)" in lines[1]
    finally:
        store.close()


def test_a_level_reads_the_same_on_the_leaderboard_as_on_compare():
    from assistlab.results.report import interval_phrase

    five = {"median": 1.2, "ci_low": 1.14, "ci_high": 1.25, "n": 5, "level": 0.9375, "interval": "order-statistic"}
    assert "93.7% sure" in interval_phrase(five)
    assert history_html.interval_words("order-statistic", 1.14, 1.25, 0.9375, 5) == "93.7% interval 1.14–1.25× (n=5)"


def test_an_interval_that_holds_at_every_look_reads_with_its_familys_level_everywhere():
    """Issue 43: a run until clear showed '95% sure at every look' in its verdict and '98.4%' in Why this speed
    and on the Leaderboard for the same interval. Now every view shows the family's level."""
    from assistlab.results.report import interval_cell, shown_speedup, speedup_sentence

    sequence = {"median": 0.19, "ci_low": 0.18, "ci_high": 0.32, "level": 0.975, "family_level": 0.95,
                "arms_sharing": 2, "n": 7, "interval": "time-uniform", "settled": "slower", "band": 0.03}
    speed = shown_speedup([0.19, 0.18, 0.2, 0.19, 0.21, 0.32, 0.185], sequence)
    assert (speed["ci_low"], speed["ci_high"], speed["level"], speed["interval"]) == (0.18, 0.32, 0.975,
                                                                                      "time-uniform")
    assert interval_cell(speed) == "0.18–0.32×, 95% at every look"  # Why this speed, All the numbers, the charts
    said = speedup_sentence({"arm": "universal", "speedup": speed, "sequence": sequence})
    assert "95% sure at every look (shared by the 2 assisted arms) between 0.18× and 0.32×" in said
    report = {"arms": [{"name": "plain", "strategy": "plain"}, {"name": "universal", "strategy": "universal",
                                                                "spec": {"assistant": "org/draft"}}],
              "request": {"target": "org/target"}, "comparison": [{"arm": "universal", "speedup": speed}]}
    (row,) = derive.arm_rows(report)
    assert (row["ci_level"], row["ci_kind"]) == (0.95, "time-uniform")
    assert history_html.interval_words(row["ci_kind"], row["ci_low"], row["ci_high"], row["ci_level"], row["n"]) == (
        "95% at every look interval 0.18–0.32× (n=7)")
    # Until the time-uniform interval is bounded, only the runs' range, with no level claimed.
    open_sequence = {**sequence, "ci_low": None, "ci_high": None, "interval": "none"}
    assert interval_cell(shown_speedup([0.19, 0.18, 0.2, 0.32], open_sequence)) == "range of 4 runs 0.18–0.32×"


# --- engines: arms of transformers and vLLM in one comparison (issue 21) ------------------------------------

def two_engine_report(transformers_speedup=1.3, vllm_speedup=1.6, *, prompt="hello", n=5, server=False) -> dict:
    """minimal_report with vLLM's plain arm and one vLLM arm (ngram, or an operator's server) timed against it,
    as engines/vllm arms write them: each arm says its engine, each vLLM comparison entry its baseline."""
    report = minimal_report("org/t", (("org/a", transformers_speedup, transformers_speedup - 0.1,
                                       transformers_speedup + 0.1, "order-statistic", 0.9375),), prompt=prompt, n=n)
    for arm in report["arms"]:
        arm.update(engine="transformers", latencies_s=[1.0] * n)
    spec = {"method": "server", "name": "ngram", "url": "http://10.0.0.2:8000", "engine": "vllm"} if server else {
        "method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
        "draft_model": None, "url": None, "name": None, "api_key": None, "engine": "vllm"}
    name = "vllm ngram" if server else "vllm ngram (k=5, lookup 2-4)"
    report["arms"] += [
        {"name": "vllm plain", "engine": "vllm", "strategy": "plain", "spec": {"method": "plain", "engine": "vllm"},
         "new_tokens": [16] * n, "latencies_s": [0.5] * n},
        {"name": name, "engine": "vllm", "strategy": spec["method"], "spec": spec, "new_tokens": [16] * n,
         "latencies_s": [0.5 / vllm_speedup] * n, "settings": {"speculative_config": None if server else {"method": "ngram"}}},
    ]
    report["comparison"][0].update(engine="transformers", baseline="plain")
    report["comparison"].append({
        "arm": name, "engine": "vllm", "baseline": "vllm plain", "acceptance_rate": 0.25, "outputs_identical": True,
        "speedup": {"median": vllm_speedup, "ci_low": vllm_speedup - 0.1, "ci_high": vllm_speedup + 0.1, "n": n,
                    "interval": "order-statistic", "level": 0.9375}})
    report["request"]["engines"] = ["transformers", "vllm"]
    return report


@pytest.fixture
def sqlite_db(tmp_path):
    store = hist.History(f"sqlite:///{tmp_path / hist.DB_FILENAME}", max_entries=None)
    yield store
    store.close()


def test_vllm_arms_are_saved_listed_and_ranked_only_against_vllm_plain(sqlite_db):
    db = sqlite_db
    both = db.save(two_engine_report(1.3, 1.6), now=T0).id
    db.save(two_engine_report(1.1, 1.2), now=T0 + timedelta(minutes=1))
    db.save(two_engine_report(1.2, 1.4, server=True), now=T0 + timedelta(minutes=2))
    old = db.save(minimal_report("org/t", (("org/a", 1.25, 1.15, 1.35, "order-statistic", 0.9375),), n=5),
                  now=T0 + timedelta(minutes=3)).id  # a report from before arms said their engine
    entry = db.get(both)[0]
    assert entry.engines == "transformers, vllm" and db.get(old)[0].engines == "transformers"
    assert entry.best_arm == "vllm ngram (k=5, lookup 2-4)" and entry.best_speedup == 1.6  # its own plain's
    assert entry.strategies == "assistant, ngram"
    sections = db.leaderboard()
    assert [(s.target, s.engine) for s in sections] == [("org/t", "transformers"), ("org/t", "vllm")]
    transformers, vllm = sections
    assert transformers.measured == vllm.measured == "16 new tokens · prompt “hello” · greedy"
    # transformers' board: its one pairing over its own plain, the old report among them; no vLLM arm there
    assert [(r.label, r.speedup, r.comparisons) for r in transformers.rows] == [
        ("assistant: org/a (k=5)", pytest.approx(1.225), 4)]  # the median of 1.1, 1.2, 1.25 and 1.3
    # vLLM's board: each vLLM pairing's speedup over vLLM's plain, exactly as the reports measured it
    assert [(r.label, r.strategy, r.setting, r.speedup, r.comparisons) for r in vllm.rows] == [
        ("vllm ngram (k=5, lookup 2-4)", "ngram", "k=5, lookup 2-4", pytest.approx(1.4), 2),
        ("vllm server ngram", "server", "ngram", 1.4, 1)]
    assert vllm.plain == "vllm plain" and vllm.note.startswith("vllm ngram (k=5, lookup 2-4) is the fastest")
    assert transformers.to_dict()["engine"] == "transformers" and vllm.to_dict()["engine"] == "vllm"
    board = history_html.board_html(sections)
    assert 'with <span class="al-engine">vllm</span>' in board and "vllm plain (no assistant)" in board
    vllm_table = board.split('<span class="al-engine">vllm</span>')[1]
    lines = [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)][:3]
             for row in re.findall(r"<tr[^>]*>(.*?)</tr>", vllm_table.split("<tbody>")[1].split("</tbody>")[0])]
    assert lines == [["1", "vllm ngram (k=5, lookup 2-4)", "1.40×"], ["2", "vllm server ngram", "1.40×"],
                     ["3", "vllm plain (no assistant)", "1.00×"]]
    # History's listing has an Engine column, each row saying what it timed
    listing = history_html.entries_html(db.list())
    head = re.findall(r"<th>(.*?)</th>", listing)
    assert head[4] == "Engine"
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr class=\"al-history-row\"[^>]*>(.*?)</tr>", listing)]
    assert [c[4] for c in cells] == ["transformers", "transformers, vllm", "transformers, vllm", "transformers, vllm"]
    assert "engines transformers, vllm" in history_html.entry_caption_html(entry)
    assert db.list().entries[-1].to_dict()["engines"] == "transformers, vllm"
    # the saved report's runs CSV says each run's engine
    rows = hist.runs_csv(db.get(both)[1]).splitlines()
    assert rows[0].split(",")[-4:] == ["engine", "position", "concurrency", "request"] and rows[-1].split(",")[-4] == "vllm"


def test_schema_upgrade_from_version_3_keeps_old_rows_and_gives_vllm_arms_their_engine(db_url):
    engine = hist.History(db_url)._make_engine()
    old = minimal_report("org/t", (("org/a", 1.25, 1.15, 1.35, "order-statistic", 0.9375),), n=5)
    mixed = two_engine_report(1.3, 1.6)
    try:
        assert hist.upgrade(engine, to_version=3) == 3
        with engine.begin() as conn:
            for run_id, report in (("c" * 16, old), ("d" * 16, mixed)):
                columns = {k: v for k, v in hist.summary_columns(report).items() if k not in VERSION_4_COLUMNS + VERSION_6_COLUMNS}
                if report is mixed:  # what version 3 stored for it: the vLLM arm named as if transformers ran it
                    columns.update(best_arm="ngram (transformers defaults)", strategies="assistant, ngram")
                seq = conn.execute(hist.comparisons.insert().values(
                    id=run_id, created_at=T0, report=json.dumps(report), **columns).returning(hist.comparisons.c.seq)
                ).scalar_one()
                rows = [{k: v for k, v in a.items() if k not in VERSION_4_ARM_COLUMNS} for a in hist.arm_rows(report)]
                for row in rows:
                    if row["strategy"] == "ngram":
                        row.update(label="ngram (transformers defaults)", setting="transformers defaults")
                conn.execute(hist.arms_table.insert(), [{**a, "comparison_seq": seq} for a in rows])
    finally:
        engine.dispose()
    store = hist.History(db_url, max_entries=None)
    try:
        assert store.get("c" * 16)[0].engines == "transformers"
        assert store.get("d" * 16)[0].engines == "transformers, vllm"
        assert store.get("d" * 16)[0].best_arm == "vllm ngram (k=5, lookup 2-4)"
        transformers, vllm = store.leaderboard()
        assert (transformers.engine, vllm.engine) == ("transformers", "vllm")
        assert [(r.label, r.comparisons) for r in transformers.rows] == [("assistant: org/a (k=5)", 2)]
        assert [(r.label, r.speedup) for r in vllm.rows] == [("vllm ngram (k=5, lookup 2-4)", 1.6)]
        with store._ready().connect() as conn:
            assert hist.current_version(conn) == hist.SCHEMA_VERSION == 6
            inspector = sa.inspect(conn)
            for table in (hist.comparisons, hist.arms_table):
                assert {c["name"] for c in inspector.get_columns(table.name)} == {c.name for c in table.columns}
            engines = conn.execute(sa.select(hist.arms_table.c.label, hist.arms_table.c.engine)).all()
        assert sorted(engines) == [("assistant: org/a (k=5)", "transformers"), ("assistant: org/a (k=5)", "transformers"),
                                   ("vllm ngram (k=5, lookup 2-4)", "vllm")]
        # a comparison saved now, beside the upgraded ones, lands on the same boards
        store.save(two_engine_report(1.1, 1.2))
        assert [s.rows[0].comparisons for s in store.leaderboard()] == [3, 2]
    finally:
        store.close()


def test_the_command_line_lists_engines_and_ranks_each_engine_against_its_own_plain(sqlite_db, capsys):
    import argparse

    from assistlab.cli import history as cli_history

    sqlite_db.save(two_engine_report(0.8, 1.6))
    listing = argparse.Namespace(history_command=None, json=False, target="", assistant="", device="", page=1, limit=20)
    assert cli_history.run(listing, sqlite_db) == 0
    out = capsys.readouterr().out
    header, _rule, row = out.splitlines()[:3]
    assert re.split(r"\s{2,}", header)[6] == "engines" and re.split(r"\s{2,}", row)[6] == "transformers, vllm"
    board = argparse.Namespace(history_command="leaderboard", json=False, target="", device="")
    assert cli_history.run(board, sqlite_db) == 0
    out = capsys.readouterr().out
    assert ("org/t on cpu: Test CPU with transformers (16 new tokens · prompt “hello” · greedy): "
            "No assistant has beaten plain here yet.") in out
    assert "org/t on cpu: Test CPU with vllm (16 new tokens · prompt “hello” · greedy): vllm ngram (k=5, lookup 2-4)" in out
    vllm_part = out.split(" with vllm ")[1]
    ranked = [line for line in vllm_part.splitlines() if line[:1].isdigit()]
    assert [re.split(r"\s{2,}", line)[:3] for line in ranked] == [
        ["1", "vllm ngram (k=5, lookup 2-4)", "1.60×"], ["2", "vllm plain (no assistant)", "1.00×"]]
    board.json = True
    assert cli_history.run(board, sqlite_db) == 0
    assert [s["engine"] for s in json.loads(capsys.readouterr().out)] == ["transformers", "vllm"]


def test_a_workloads_prompt_lookup_arm_is_named_as_the_page_names_it():
    """Issue 36 item 6: History and the Leaderboard said 'prompt-lookup (k=None)' where the page says 'k=10'."""
    from assistlab.config import PROMPT_LOOKUP_DEFAULT

    name = ArmSpec("prompt-lookup").label
    speed = {"geomean": 1.2, "ci_low": 1.1, "ci_high": 1.3, "level": 0.95, "n": 2}
    report = {"kind": "suite", "arms": [name],
              "request": {"arms": [{"strategy": "prompt-lookup", "prompt_lookup_num_tokens": None}]},
              "suite": {"name": "spec-bench", "categories": [], "prompts": [],
                        "overall": {"arms": [{"arm": name, "speedup": speed}], "selected": 2, "prompts": 2}}}
    (row,) = derive.arm_rows(report)
    assert row["label"] == f"prompt-lookup (k={PROMPT_LOOKUP_DEFAULT})" and "None" not in row["label"]
    assert row["label"] == name  # one name for an arm: the page's


def test_a_vllm_draft_models_kind_of_drafting_is_in_its_history_label():
    """Issue 45: vLLM's draft_model with another tokenizer drafts in the vocabulary intersection, and its arm's name
    says so; History and the Leaderboard rebuild labels from the saved arm, so they say it too."""
    drafting = {"kind": "vocabulary intersection", "words": "vocabulary intersection of 288 tokens"}
    arm = {"name": "vllm draft_model: org/draft (k=5, vocabulary intersection of 288 tokens)",
           "strategy": "draft_model", "engine": "vllm", "settings": {"drafting": drafting},
           "spec": {"engine": "vllm", "method": "draft_model", "draft_model": "org/draft",
                    "num_speculative_tokens": 5}}
    report = {"arms": [{"name": "vllm plain", "strategy": "plain", "engine": "vllm"}, arm],
              "request": {"target": "org/target"},
              "comparison": [{"arm": arm["name"], "speedup": {"median": 1.2, "n": 1, "interval": "range"}}]}
    (row,) = derive.arm_rows(report)
    assert row["label"] == "vllm draft_model: org/draft (k=5, vocabulary intersection of 288 tokens)"
    saved_before = {**arm, "settings": {}}  # a report from before says nothing of it, and keeps its old label
    (row,) = derive.arm_rows({**report, "arms": [report["arms"][0], saved_before]})
    assert row["label"] == "vllm draft_model: org/draft (k=5)"
