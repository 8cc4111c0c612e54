"""The history store when its database misbehaves (issue 29, item 9): reads never take SQLite's write lock and
answer "busy" within their wait, a healthy copy put over the file reads fine, a file cut short is caught before
a save, and a paused PostgreSQL server gives the same "busy" sentence."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pgcluster  # noqa: E402

from assistlab import history as hist  # noqa: E402
from assistlab.history.store import BUSY  # noqa: E402
from patience import patient


def report(prompt: str = "hello") -> dict:
    """The fields the history reads: one arm against plain, three counted repetitions."""
    spec = {"assistant": "org/draft", "num_assistant_tokens": 5, "prompt_lookup_num_tokens": 10,
            "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": None,
            "early_exit_layer": None}
    return {
        "schema": 1, "status": "complete", "message": "", "counted_repetitions": 3,
        "request": {"target": "org/target", "prompt": prompt, "max_new_tokens": 16},
        "environment": {"device": "cpu", "dtype": "float32", "cpu_model": "Test CPU", "assistlab": "0.1",
                        "transformers": "5.23.0", "models": {}},
        "arms": [{"name": "plain", "strategy": "plain", "spec": None, "new_tokens": [16] * 3},
                 {"name": "arm 0", "strategy": "assistant", "spec": spec, "new_tokens": [16] * 3}],
        "comparison": [{"arm": "arm 0", "speedup": {"median": 1.5, "ci_low": 1.2, "ci_high": 1.7, "n": 3},
                        "acceptance_rate": 0.5, "outputs_identical": True}],
    }


# ---------------------------------------------------------------- SQLite

def test_a_read_answers_at_once_while_another_process_writes(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    store = hist.History(f"sqlite:///{path}", max_entries=None, busy_timeout_s=2.0)
    assert store.save(report()).saved
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process in the middle of a save
    writer.execute("DELETE FROM comparison_arms")
    try:
        for read in (store.count, store.list, store.leaderboard):
            started = time.monotonic()
            read()
            assert time.monotonic() - started < 1.0, read.__name__
        assert store.count() == 1
        result = store.save(report())  # a write still waits its turn, then says so
        assert not result.saved and "locked" in result.warning
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert store.save(report()).saved and store.count() == 2
    store.close()


def _saved_once(url: str) -> None:
    """One comparison saved through a store with the default waits: the setting up is not what is tested, and a
    save under a short wait can time out on a busy machine (issue 36 item 11)."""
    setup = hist.History(url, max_entries=None)
    try:
        assert setup.save(report()).saved
    finally:
        setup.close()


def test_a_read_that_takes_too_long_says_the_history_is_busy(tmp_path, monkeypatch):
    from assistlab.history import queries

    url = f"sqlite:///{tmp_path / hist.DB_FILENAME}"
    _saved_once(url)
    store = hist.History(url, max_entries=None, busy_timeout_s=0.5)
    real = queries.count_entries
    monkeypatch.setattr(queries, "count_entries", lambda connect: (time.sleep(6), real(connect))[1])
    started = time.monotonic()
    with pytest.raises(hist.HistoryError) as caught:
        store.count()
    # Given up at its wait (0.5 s), not after the 6 s read; room under that for a busy machine.
    assert time.monotonic() - started < 5.0 and str(caught.value) == BUSY
    store.close()


def test_a_healthy_copy_put_over_the_file_reads_fine(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    store = hist.History(f"sqlite:///{path}", max_entries=None)
    first = store.save(report("first")).id
    backup = tmp_path / "backup.sqlite3"
    with sqlite3.connect(path) as source, sqlite3.connect(backup) as copy:
        source.backup(copy)
    for i in range(20):
        assert store.save(report(f"later {i} " + "x" * 2000)).saved
    assert store.count() == 21
    shutil.copyfile(backup, path)  # in place: the same inode, as `cp backup history.sqlite3` does
    assert [e.id for e in store.list().entries] == [first]
    second = store.save(report("after")).id
    assert second and store.count() == 2
    store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [e.id for e in hist.History(f"sqlite:///{path}").list().entries] == [second, first]  # after a restart


def test_a_file_cut_short_in_place_is_caught_before_a_save(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    store = hist.History(f"sqlite:///{path}", max_entries=None)
    for i in range(20):
        assert store.save(report(f"run {i} " + "x" * 2000)).saved
    page = int.from_bytes(path.read_bytes()[16:18], "big")
    inode = path.stat().st_ino
    os.truncate(path, (path.stat().st_size // page // 2) * page)  # half its pages, the same inode
    assert path.stat().st_ino == inode
    result = store.save(report("after the cut"))
    assert not result.saved and "cut short" in result.warning and "move the file aside" in result.warning
    with pytest.raises(hist.HistoryError, match="cut short"):
        store.list()
    os.truncate(path, 0)  # emptied: not taken for a new file either
    assert "emptied" in store.save(report()).warning
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.rename(f"{path}{suffix}", f"{path}{suffix}.damaged")
    assert store.save(report()).saved and store.count() == 1  # moved aside: a new file
    store.close()


# ---------------------------------------------------------------- PostgreSQL paused

def _server_processes(socket_dir: str) -> list[int]:
    """The postmaster and every process it started (its backends among them)."""
    postmaster = int((Path(socket_dir) / "data" / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def test_reads_from_a_paused_postgresql_say_the_history_is_busy(own_pg_server):
    socket_dir, user = own_pg_server
    url = pgcluster.fresh_database(socket_dir, user, "t_paused")
    _saved_once(url)
    store = hist.History(url, max_entries=None, busy_timeout_s=1.0)
    assert store.count() == 1
    paused = _server_processes(socket_dir)
    for pid in paused:
        os.kill(pid, signal.SIGSTOP)
    try:
        for read in (store.count, store.list, store.leaderboard):
            started = time.monotonic()
            with pytest.raises(hist.HistoryError) as caught:
                read()
            # A paused server never answers: the read gives up at its wait, however busy the machine.
            assert time.monotonic() - started < patient(3.0) and str(caught.value) == BUSY, read.__name__
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + patient(30)
    while True:  # once the server runs again, reads answer again
        try:
            assert store.count() == 1
            break
        except hist.HistoryError:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    store.close()


# ---------------------------------------------------------------- what a filter may hold

@pytest.mark.parametrize("field", ["target", "assistant", "device"])
def test_a_lone_surrogate_in_a_filter_gets_a_sentence(tmp_path, field):
    from assistlab.errors import InputError
    from assistlab.ui.session import user_errors

    store = hist.History(f"sqlite:///{tmp_path / hist.DB_FILENAME}", max_entries=None)
    assert store.save(report()).saved
    with pytest.raises(InputError, match=f"The {field} filter contains a character that is not valid text"):
        store.list(**{field: "org/\ud800target"})
    import gradio as gr

    with pytest.raises(gr.Error) as caught, user_errors():  # as /history answers it
        store.list(**{field: "\udfff"})
    assert "lone surrogate" in caught.value.message and "unexpected" not in caught.value.message
    if field != "assistant":
        with pytest.raises(InputError, match="lone surrogate"):
            store.leaderboard(**{field: "\ud83d"})
    store.close()
