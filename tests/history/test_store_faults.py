"""The history's store when its database misbehaves: a locked or paused database gives up in time and rolls back, a
moved or damaged SQLite file is replaced, a failure names the setting to fix."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from sample_reports import minimal_report

from assistlab import history as hist
from assistlab.history import History


def test_postgresql_gets_statement_and_pool_timeouts(pg_url_and_data):
    url_db, _data = pg_url_and_data
    store = History(url_db, busy_timeout_s=2.0)
    assert store.save(minimal_report()).saved
    with store._reading() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "2s"
    assert store._ready().pool.timeout() == 2.0
    assert store.save_wait_s == 4.0
    store.close()
    own = History(url_db + "&options=-c%20statement_timeout%3D9000")  # the operator's own setting is kept
    with own._reading() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "9s"
    own.close()


def test_a_save_that_gives_up_is_rolled_back_when_the_database_answers(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = History(f"sqlite:///{path}", busy_timeout_s=30.0, save_wait_s=1.0)
    assert store.save(minimal_report()).saved
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    began = time.monotonic()
    result = store.save(minimal_report())
    waited = time.monotonic() - began
    holder.execute("ROLLBACK")
    holder.close()
    assert not result.saved and "did not answer within 1 s" in result.warning and waited < 3
    time.sleep(1.0)  # the writer gets the lock now, and rolls back what nobody was told was saved
    assert store.count() == 1
    assert store.save(minimal_report()).saved and store.count() == 2
    store.close()


def _damage(path: Path) -> None:
    with open(path, "r+b") as f:  # in place: the same file, as a failing disk or a stray write would leave it
        f.write(b"this is no longer a database " * 40)


def test_a_moved_file_is_replaced_by_a_new_one_and_saves_land_at_the_path(tmp_path):
    path = tmp_path / "data" / hist.DB_FILENAME
    store = History(f"sqlite:///{path}", max_entries=None)
    first = store.save(minimal_report()).id
    aside = tmp_path / "aside.sqlite3"
    os.rename(path, aside)  # moved aside while the app runs
    second = store.save(minimal_report()).id
    assert second and [e.id for e in store.list().entries] == [second]
    store.close()
    assert [e.id for e in History(f"sqlite:///{path}").list().entries] == [second]  # after a restart too
    assert [e.id for e in History(f"sqlite:///{aside}").list().entries] == [first]
    # another file put at the path: the next use reads that one
    store = History(f"sqlite:///{path}", max_entries=None)
    assert store.count() == 1
    shutil.copy(aside, tmp_path / "copy.sqlite3")
    os.replace(tmp_path / "copy.sqlite3", path)
    assert [e.id for e in store.list().entries] == [first]
    store.close()


def test_a_file_found_damaged_gives_the_sentence_and_a_new_one_once_moved_aside(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    store = History(f"sqlite:///{path}", max_entries=None)
    assert store.save(minimal_report()).saved
    store.close()  # as the app does between uses: what it opens next is read from the disk
    _damage(path)
    result = store.save(minimal_report())
    assert not result.saved and "damaged" in result.warning and "move the file aside" in result.warning
    with pytest.raises(hist.HistoryError, match="damaged"):
        store.list()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.rename(f"{path}{suffix}", f"{path}{suffix}.damaged")
    saved = store.save(minimal_report())
    assert saved.saved, saved.warning
    assert [e.id for e in store.list().entries] == [saved.id]
    store.close()


def test_a_file_damaged_under_an_open_engine_is_noticed_and_replaced(tmp_path):
    path = tmp_path / hist.DB_FILENAME
    store = History(f"sqlite:///{path}", max_entries=None)
    assert store.save(minimal_report()).saved
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not sqlite " * 500)
    os.replace(garbage, path)  # a damaged file put where the good one was
    result = store.save(minimal_report())
    assert not result.saved and "damaged" in result.warning
    os.rename(path, tmp_path / "damaged.sqlite3")
    assert store.save(minimal_report()).saved and store.count() == 1
    store.close()


def _minimal_report() -> dict:
    from sample_reports import minimal_report

    return minimal_report()


def test_a_postgresql_failure_names_the_database_url_not_the_data_folder():
    store = hist.History("postgresql+psycopg://nobody:pw@127.0.0.1:1/none", max_entries=None)
    warning = store.save(_minimal_report()).warning
    assert "ASSISTLAB_DATABASE_URL" in warning and "ASSISTLAB_DATA_DIR" not in warning


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://nobody@127.0.0.1:1/none?password=hunter2-query",
    "postgresql+psycopg://nobody:hunter2-user@127.0.0.1:1/none?sslpassword=hunter2-ssl&password=hunter2-query",
])
def test_a_password_in_the_url_s_query_is_masked_like_user_pw(url):
    store = hist.History(url, max_entries=None)
    warning = store.save(_minimal_report()).warning
    assert warning and "127.0.0.1:1/none" in warning and "***" in warning, warning
    assert "hunter2" not in warning and "hunter2" not in store.where, (warning, store.where)
    assert "hunter2" not in hist.store.scrub("the driver said password=hunter2-query", url)
