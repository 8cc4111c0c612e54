"""The store of saved comparisons: where the database is, its engine and errors, saving, retention, deleting."""

from __future__ import annotations

import functools
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from ..errors import InputError
from . import leaderboard as board
from . import queries
from .derive import (
    _report_text,
    _sanitize_json,
    board_rows,
    canonical_report,
    owner_name,
    savable,
    summary_columns,
)
from .diagnose import describe, file_problem, is_busy, is_damaged, reason_of, scrub
from .records import BoardSection, Entry, HistoryError, Page, SaveResult, check_id
from .schema import arms_table, comparisons, upgrade

log = logging.getLogger(__name__)

DATA_DIR_ENV = "ASSISTLAB_DATA_DIR"
DATABASE_URL_ENV = "ASSISTLAB_DATABASE_URL"
HISTORY_MAX_ENV = "ASSISTLAB_HISTORY_MAX"
DB_FILENAME = "history.sqlite3"
DEFAULT_HISTORY_MAX = 10_000
# How long one step may wait: SQLite's busy timeout for the write lock; PostgreSQL's connect, pool and statement
# timeouts. A whole save waits at most SAVE_WAIT_FACTOR times this for its writer (a stalled server, say), then
# gives up with a warning.
BUSY_TIMEOUT_S = 5.0
SAVE_WAIT_FACTOR = 2.0
SAVE_WRITERS = 2  # threads that write saves; a stalled database holds these, never the callers
# Reads (the History tab, the board, /history) run on threads of their own too, and a caller waits for one at
# most `read_wait_s` (busy_timeout_s by default): a paused PostgreSQL server cannot end a statement itself.
READERS = 2
BUSY = "The history is busy; try again in a moment."
WRITE = "assistlab_write"  # the execution option that makes a SQLite transaction take the write lock up front
DAMAGED_HINT = "It is damaged; move the file aside and AssistLab will start a new one."


# ---------------------------------------------------------------------------------------------------------
# Where the database lives.

def data_dir() -> Path:
    """$ASSISTLAB_DATA_DIR, else $XDG_DATA_HOME/assistlab, else ~/.local/share/assistlab."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "assistlab"


def database_url() -> str:
    """$ASSISTLAB_DATABASE_URL, else the SQLite file in the data directory."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if url:
        if url.startswith("postgresql://"):  # psycopg 3, not the psycopg2 SQLAlchemy would pick by default
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
        return url
    return f"sqlite:///{data_dir() / DB_FILENAME}"


def history_max() -> int | None:
    """$ASSISTLAB_HISTORY_MAX as a positive count (0 or 'none' keeps everything); bad values raise InputError."""
    value = os.environ.get(HISTORY_MAX_ENV, "").strip()
    if not value:
        return DEFAULT_HISTORY_MAX
    if value.lower() in ("0", "none", "unlimited"):
        return None
    try:
        count = int(value)
    except ValueError:
        raise InputError(f"{HISTORY_MAX_ENV} must be a whole number of comparisons to keep, got {value!r}.") from None
    if count < 0:
        raise InputError(f"{HISTORY_MAX_ENV} must not be negative, got {count}.")
    return count


class _Writers:
    """A few daemon threads that run saves. Not a ThreadPoolExecutor: its threads are joined when the process
    exits, and one stuck on a stalled database server would then keep the process from ever exiting."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name="assistlab-save", daemon=True) for _ in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():  # given up before it started
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller waiting on the future
                future.set_exception(exc)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)  # each ends after what it holds; one stuck on a stalled server stays stuck


class _GaveUp(Exception):
    """The caller stopped waiting for this save: roll it back rather than keep what was not acknowledged."""


class _Replaced(Exception):
    """The SQLite file was replaced during the save: write it again into the file now at the path."""


# ---------------------------------------------------------------------------------------------------------
# A SQLite file by default, PostgreSQL for a shared board: SQLAlchemy Core speaks both. Saving never raises:
# a database that cannot be written gives a warning and the comparison goes on being shown. Saving never
# waits long either: the writing happens on the store's own threads, and the caller waits at most `save_wait_s`.

class History:
    """One database of saved comparisons. Connects on first use; every method is safe from several threads.

    A SQLite file is checked before each use: when it was moved, replaced or removed, or was found damaged, the
    database at the configured path is opened again (a new, empty one when nothing is there).
    """

    def __init__(self, url: str | None = None, *, max_entries: int | None | str = "env",
                 busy_timeout_s: float = BUSY_TIMEOUT_S, save_wait_s: float | None = None):
        self.url = url or database_url()
        self.max_entries = history_max() if max_entries == "env" else max_entries
        self.busy_timeout_s = busy_timeout_s
        self.save_wait_s = save_wait_s if save_wait_s is not None else SAVE_WAIT_FACTOR * busy_timeout_s
        self._engine: sa.Engine | None = None
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the SQLite file the engine opened
        self._held_data = False  # the SQLite file was seen holding a database: empty now means emptied
        self._lock = threading.RLock()  # _error may forget the engine while _ready holds it
        self._writers: _Writers | None = None
        self._readers: _Writers | None = None
        self.read_wait_s = busy_timeout_s

    @property
    def where(self) -> str:
        return describe(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    # --- connection -------------------------------------------------------------------------------------
    def _make_engine(self) -> sa.Engine:
        if self.is_sqlite:
            path = sa.engine.make_url(self.url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # No pool for a file: a connection lives for one use, and when the last one closes SQLite folds the -wal
            # into the file and removes it. Pooled connections kept the -wal and its index open, and a healthy
            # copy put over the file (the same inode) was then read through the old file's -wal: "malformed".
            pool = {"poolclass": NullPool} if self._path is not None else {}
            engine = sa.create_engine(self.url, connect_args={"timeout": self.busy_timeout_s}, **pool)
            busy_ms = int(self.busy_timeout_s * 1000)

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn, _record):
                dbapi_conn.isolation_level = None  # we say BEGIN ourselves, below
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
                cur.execute("PRAGMA journal_mode = WAL")  # readers never block the one writer
                cur.execute("PRAGMA synchronous = NORMAL")
                # Each commit is copied into the file itself at once, not left in the -wal beside it: a file moved
                # aside (or copied) alone then holds every acknowledged save. Saves are rare; this costs little.
                cur.execute("PRAGMA wal_autocheckpoint = 1")
                cur.execute("PRAGMA foreign_keys = ON")
                cur.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn):
                # A write takes the write lock up front, so two savers queue on busy_timeout instead of
                # deadlocking; a read never asks for it (in WAL mode it reads beside a writer at once).
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

            return engine
        connect_args: dict = {"connect_timeout": max(1, round(self.busy_timeout_s))}
        if "options" not in sa.engine.make_url(self.url).query:  # the operator's own options win
            # A statement the server cannot finish (a lock held elsewhere, an overloaded server) ends with an error.
            connect_args["options"] = f"-c statement_timeout={max(1, int(self.busy_timeout_s * 1000))}"
        return sa.create_engine(
            self.url, pool_pre_ping=True, pool_size=4, max_overflow=4, pool_timeout=self.busy_timeout_s,
            connect_args=connect_args,
        )

    @property
    def _path(self) -> Path | None:
        """The SQLite file, or None (PostgreSQL, or an in-memory database)."""
        if not self.is_sqlite:
            return None
        path = sa.engine.make_url(self.url).database
        return Path(path) if path and path != ":memory:" else None

    def _identity(self) -> tuple[int, int] | None:
        path = self._path
        try:
            info = path.stat() if path is not None else None
        except OSError:
            return None
        return (info.st_dev, info.st_ino) if info is not None else None

    def _replaced(self) -> bool:
        """Whether the SQLite file at the path is no longer the one the engine opened (moved, replaced, removed)."""
        return self._path is not None and self._identity() != self._file_id

    def _ready(self) -> sa.Engine:
        """The engine, created and upgraded to the current schema on first use; HistoryError if it cannot be.

        A SQLite file that was replaced since is opened again: the engine on the old one is disposed.
        """
        with self._lock:
            self._check_file()
            if self._engine is not None and not self._replaced():
                return self._engine
            if self._engine is not None:
                log.warning("%s was moved, replaced or removed; opening the one at that path now.", self.where)
                self._forget()
            engine = None
            try:
                engine = self._make_engine()
                upgrade(engine)
                self._file_id = self._identity()
            except HistoryError:
                if engine is not None:
                    engine.dispose()
                raise
            except (SQLAlchemyError, OSError, ValueError) as exc:
                if engine is not None:
                    engine.dispose()
                raise self._error(exc) from None
            self._engine = engine
            return engine

    def _check_file(self) -> None:
        """HistoryError when the SQLite file is damaged as its header and size show (looked at twice, 0.1 s
        apart, so a checkpoint under way elsewhere is not taken for damage); the engine on it is forgotten."""
        path = self._path
        if path is None:
            return
        try:
            size = path.stat().st_size
        except FileNotFoundError:  # moved aside or never made: the new file SQLite makes starts empty
            self._held_data = False
            return
        except OSError:
            return
        problem = file_problem(path, self._held_data)
        if problem is not None:
            time.sleep(0.1)
            problem = file_problem(path, self._held_data)
        if problem is not None:
            self._forget()
            raise HistoryError(f"Cannot use {self.where} ({problem}). {DAMAGED_HINT}")
        self._held_data = self._held_data or size > 0

    def _error(self, exc: BaseException) -> HistoryError:
        reason = scrub(reason_of(exc), self.url)
        lower = reason.lower()
        if is_damaged(reason):
            self._forget()  # the next use opens the file again: repaired, or moved aside for a new one
            hint = DAMAGED_HINT
        elif "locked" in lower or "busy" in lower:
            hint = "Another process is holding it; try again in a moment."
        elif "full" in lower or "no space" in lower:
            hint = "The disk is full; free some space."
        elif not self.url.startswith("sqlite"):  # PostgreSQL: the data folder plays no part
            hint = (f"Check that the PostgreSQL server {DATABASE_URL_ENV} names is running and reachable, and "
                    f"that its user and password are right.")
        elif any(word in lower for word in ("readonly", "read-only", "permission", "not permitted", "unable to open",
                                            "not a directory", "no such file")):
            hint = f"Check that its folder can be created and is writable, or set {DATA_DIR_ENV} to one that is."
        else:
            hint = f"Check {DATA_DIR_ENV} (the folder of {DB_FILENAME}) or set {DATABASE_URL_ENV}."
        return HistoryError(f"Cannot use {self.where} ({reason}). {hint}")

    def _forget(self) -> None:
        """Dispose of the engine (if any); the next use opens the database again."""
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    def close(self) -> None:
        with self._lock:
            pools, self._writers, self._readers = (self._writers, self._readers), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown()
        self._forget()

    # --- writing ----------------------------------------------------------------------------------------
    def save(self, report: dict, owner: str | None = None, *, now: datetime | None = None,
             log_warning: bool = True) -> SaveResult:
        """Keep one comparison. Never raises: a problem becomes `SaveResult.warning` and one log line.

        Only a comparison that measured at least one whole repetition is kept (`savable`). The writing happens
        on one of the store's threads; this waits at most `save_wait_s` for it (a stalled database server, a
        lock held elsewhere), then gives up with a warning, and the writer rolls back when it gets that far.
        The command line passes `log_warning=False` because it prints the warning itself on stderr.
        """
        try:
            if not savable(report):
                raise InputError("There is no measured comparison to save (no whole repetition finished).")
            report = canonical_report(_sanitize_json(report))
            text, note = _report_text(report)
            row = dict(report=text, **summary_columns(report))
            arms = board_rows(report)  # the arms one request at a time, and each load level's apart
            row["id"] = run_id = secrets.token_hex(8)
            row["created_at"] = now or datetime.now(timezone.utc)
            row["owner"] = owner_name(owner)
            gave_up = threading.Event()
            future = self._writer().submit(self._write, row, arms, gave_up)
            try:
                future.result(timeout=self.save_wait_s)
            except FutureTimeout:
                gave_up.set()
                future.cancel()  # still queued behind a stuck writer: it never starts
                raise HistoryError(
                    f"{self.where[0].upper()}{self.where[1:]} did not answer within {self.save_wait_s:g} s; "
                    f"check that it is running and reachable."
                ) from None
            return SaveResult(id=run_id, note=note)
        except (HistoryError, InputError) as exc:
            warning = scrub(f"This comparison was not saved to the history: {exc}", self.url)
        except (SQLAlchemyError, OSError, ValueError, TypeError) as exc:
            warning = f"This comparison was not saved to the history: {self._error(exc)}"
        except Exception as exc:  # noqa: BLE001 - saving must never break the run that was measured
            warning = f"This comparison was not saved to the history: something unexpected went wrong ({type(exc).__name__})."
            if log_warning:
                log.exception("%s", warning)
            return SaveResult(warning=warning)
        if log_warning:
            log.warning("%s", warning)
        return SaveResult(warning=warning)

    def _writer(self) -> _Writers:
        with self._lock:
            if self._writers is None:
                self._writers = _Writers(SAVE_WRITERS)
            return self._writers

    def _write(self, row: dict, arms: list[dict], gave_up: threading.Event) -> None:
        """One save's transaction, on a writer thread; once more when the SQLite file was replaced meanwhile."""
        for attempt in (1, 2):
            if gave_up.is_set():
                return
            engine = self._ready()
            try:
                with self._writing(engine) as conn:
                    seq = conn.execute(comparisons.insert().values(**row).returning(comparisons.c.seq)).scalar_one()
                    if arms:
                        conn.execute(arms_table.insert(), [{**a, "comparison_seq": seq} for a in arms])
                    self._prune(conn, row["owner"])
                    if gave_up.is_set():  # the caller was told it was not saved: keep it so
                        raise _GaveUp
                    if attempt == 1 and self._replaced():  # moved while we wrote: into the file at the path
                        raise _Replaced
                return
            except _GaveUp:
                return
            except _Replaced:
                continue

    def _prune(self, conn: sa.Connection, owner: str | None) -> None:
        """Keep the newest max_entries of this owner's comparisons: one person saving many drops only their own."""
        if not self.max_entries:
            return
        mine = comparisons.c.owner.is_(None) if owner is None else comparisons.c.owner == owner
        old = sa.select(comparisons.c.seq).where(mine).order_by(comparisons.c.seq.desc()).offset(self.max_entries)
        doomed = [row[0] for row in conn.execute(old)]
        if doomed:
            conn.execute(arms_table.delete().where(arms_table.c.comparison_seq.in_(doomed)))
            conn.execute(comparisons.delete().where(comparisons.c.seq.in_(doomed)))

    def delete(self, run_id: str, user: str | None = None) -> None:
        """Remove one comparison. With logins on (`user` given) only its owner may; without, anyone may."""
        run_id = check_id(run_id)
        try:
            with self._writing(self._ready()) as conn:
                row = conn.execute(
                    sa.select(comparisons.c.seq, comparisons.c.owner).where(comparisons.c.id == run_id)
                ).first()
                if row is None:
                    raise HistoryError(f"There is no saved comparison {run_id}; it may have been deleted already.")
                if user is not None and row.owner is not None and row.owner != owner_name(user):
                    raise HistoryError(
                        f"Comparison {run_id} was saved by someone else; only the person who saved it can delete it."
                    )
                conn.execute(arms_table.delete().where(arms_table.c.comparison_seq == row.seq))
                conn.execute(comparisons.delete().where(comparisons.c.seq == row.seq))
        except (SQLAlchemyError, OSError) as exc:
            raise self._error(exc) from None

    @staticmethod
    @contextmanager
    def _writing(engine: sa.Engine) -> Iterator[sa.Connection]:
        """A transaction that takes SQLite's write lock as it begins (see _on_begin)."""
        with engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                yield conn

    # --- reading: the queries live in queries.py and leaderboard.py; this gives them a connection --------
    @contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        """A connection, opening the database on first use; a database failure becomes one HistoryError."""
        try:
            with self._ready().connect() as conn:
                yield conn
        except (SQLAlchemyError, OSError) as exc:
            if is_busy(reason_of(exc)):
                raise HistoryError(BUSY) from None
            raise self._error(exc) from None

    def _read(self, query, *args, **kwargs):
        """`query(self._reading, ...)` on a reader thread; HistoryError(BUSY) when it takes over read_wait_s."""
        with self._lock:
            if self._readers is None:
                self._readers = _Writers(READERS)
            readers = self._readers
        future = readers.submit(functools.partial(query, self._reading, *args, **kwargs))
        try:
            return future.result(timeout=self.read_wait_s)
        except FutureTimeout:
            future.cancel()  # still queued behind stuck readers: it never starts
            raise HistoryError(BUSY) from None

    def list(self, *, target: str = "", assistant: str = "", device: str = "", page: int = 1,
             page_size: int = 20) -> Page:
        """Saved comparisons, newest first, filtered by parts of the target, an assistant and the device."""
        return self._read(queries.list_entries, target=target, assistant=assistant, device=device, page=page,
                          page_size=page_size)

    def get(self, run_id: str) -> tuple[Entry, dict]:
        """One saved comparison: its list entry and its whole report, as data (never markup)."""
        return self._read(queries.get_entry, run_id)

    def leaderboard(self, *, target: str = "", device: str = "") -> tuple[BoardSection, ...]:
        """For each target and device, the pairings tried, fastest first, from every saved comparison."""
        return self._read(board.leaderboard, target=target, device=device)

    def count(self) -> int:
        return self._read(queries.count_entries)
