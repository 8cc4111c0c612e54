"""The server holds when its database, its disk or its users misbehave (issue 20): a stalled or locked database
never freezes serving, a replaced or damaged SQLite file is opened again, the History tab's folder survives
pruning, its sentences reach the page, and a stop saves what measured a whole repetition, from every door."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

import pgcluster
import pytest
from test_browser import ARGS, CHROMIUM
from test_history import minimal_report

from assistlab import history as hist
from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.history import History
from assistlab.measure.slots import SlotPool

pytestmark = pytest.mark.filterwarnings("ignore:.*:Warning:gradio.queueing")

QUICK = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
         "max_new_tokens": 8, "repeats": 1, "warmup": 0}
LONG = {**QUICK, "max_new_tokens": 60, "repeats": 50}


class TwoCpuSlots(SlotPool):
    """Two slots on the CPU: gradio admits two comparisons at once and the second waits in the pool, read by
    its request's handler, as on a two-GPU server (a CPU comparison takes the whole machine)."""

    def __init__(self) -> None:
        super().__init__(0)
        self._all, self._free = (0, 1), {0, 1}


class Pinger:
    """Fetches the page's root URL every 0.2 s on a thread; `slowest(since, until)` is the longest answer."""

    def __init__(self, url: str) -> None:
        self.url, self.times, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with urllib.request.urlopen(self.url, timeout=60) as answer:
                answer.read()
            self.times.append((began, time.monotonic() - began))
            self._stop.wait(0.2)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(70)

    def slowest(self, since: float, until: float) -> tuple[float, int]:
        inside = [took for began, took in self.times if since <= began <= until]
        return max(inside, default=float("inf")), len(inside)


# ---------------------------------------------------------------- 1: a save never blocks serving

def _compare_timed(client, **args) -> tuple[dict, float]:
    """One comparison's report and when it came; a server that never answers fails it within 5 minutes."""
    report = client.submit(**{**QUICK, **args}, api_name="/compare").result(timeout=300)[0]
    return report, time.monotonic()


def test_a_locked_sqlite_file_never_freezes_the_server_nor_abandons_the_next_job(models_dir, store, launch_app,
                                                                                  tmp_path):
    from gradio_client import Client

    path = tmp_path / "h.sqlite3"
    busy = 3.5  # longer than the 3 s after which a job nobody reads stops
    history = History(f"sqlite:///{path}", busy_timeout_s=busy)
    with launch_app(models_dir, store, pool=TwoCpuSlots(), history=history) as url:
        first, _ = _compare_timed(Client(url, verbose=False))  # loads the model, makes the file
        assert first["saved"]["id"]
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # as a backup or `history delete` in another process would
        try:
            with Pinger(url) as pinger:
                results = [None, None]

                def person(i):
                    results[i] = _compare_timed(Client(url, verbose=False), prompt=f"essay {i}", max_new_tokens=60,
                                                repeats=3)

                people = [threading.Thread(target=person, args=(i,)) for i in range(2)]
                for p in people:
                    p.start()
                for p in people:
                    p.join(300)
                time.sleep(0.5)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        for report, done in results:
            # the run reached its result, with the reason it was not saved
            assert report["status"] == "complete", report["message"]
            assert report["saved"]["id"] is None and "locked" in report["saved"]["warning"]
            slowest, pings = pinger.slowest(done - busy, done)
            assert pings >= 5 and slowest < 1.0, f"the root URL took {slowest:.2f} s while a save waited"
        print(f"root URL answered within {max(t for _, t in pinger.times):.3f} s during two {busy} s blocked saves")
        after, _ = _compare_timed(Client(url, verbose=False))
        assert after["saved"]["id"] and history.count() == 2


def _postgres_processes(data: Path) -> list[int]:
    """The postmaster and every process it started."""
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


@pytest.fixture
def pg_url_and_data():
    reason = pgcluster.why_unavailable()
    if reason:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    with pgcluster.cluster() as (socket_dir, user):
        yield pgcluster.fresh_database(socket_dir, user, "held"), Path(socket_dir) / "data"


def test_a_paused_postgresql_never_freezes_the_server(models_dir, store, launch_app, pg_url_and_data):
    from gradio_client import Client

    url_db, data = pg_url_and_data
    history = History(url_db, busy_timeout_s=1.5)  # gives up after 3 s
    with launch_app(models_dir, store, pool=SlotPool(0), history=history) as url:
        client = Client(url, verbose=False)
        assert _compare_timed(client)[0]["saved"]["id"]
        paused = _postgres_processes(data)
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        try:
            with Pinger(url) as pinger:
                began = time.monotonic()
                report, done = _compare_timed(client, prompt="while it sleeps")
                time.sleep(0.5)
        finally:
            for pid in paused:
                os.kill(pid, signal.SIGCONT)
        assert report["status"] == "complete"
        assert report["saved"]["id"] is None and "did not answer within 3 s" in report["saved"]["warning"]
        assert done - began < 60
        slowest, pings = pinger.slowest(done - 3.0, done)
        assert pings >= 5 and slowest < 1.0, f"the root URL took {slowest:.2f} s while the save waited"
        print(f"paused PostgreSQL: the run ended {done - began:.1f} s after it began, the root URL answered "
              f"within {slowest:.3f} s meanwhile")
        # Once the server wakes up, the save that was given up is rolled back, and saving resumes.
        time.sleep(2.0)
        assert _compare_timed(client, prompt="awake again")[0]["saved"]["id"]
        assert history.count() == 2


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


# ---------------------------------------------------------------- 3: a replaced or damaged file is opened again

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


def test_a_file_moved_while_the_app_runs_gets_the_next_saves(models_dir, store, launch_app, tmp_path):
    from gradio_client import Client

    path = tmp_path / "h.sqlite3"
    with launch_app(models_dir, store, history=History(f"sqlite:///{path}", max_entries=None)) as url:
        client = Client(url, verbose=False)
        first = _compare_timed(client)[0]["saved"]["id"]
        os.rename(path, tmp_path / "aside.sqlite3")
        second = _compare_timed(client)[0]["saved"]["id"]
        assert second and [e["id"] for e in client.predict(api_name="/history")["entries"]] == [second]
    assert [e.id for e in History(f"sqlite:///{path}").list().entries] == [second]
    assert [e.id for e in History(f"sqlite:///{tmp_path / 'aside.sqlite3'}").list().entries] == [first]


# ---------------------------------------------------------------- 4: the folders the app needs survive pruning

def test_pruning_keeps_the_folders_the_app_needs(tmp_path):
    from assistlab.ui.session import REPORT_FILES_MAX_AGE_S, ReportFiles

    files = ReportFiles(tmp_path)
    saved = files.folder("saved")
    (saved / "assistlab-report-old.json").write_text("{}")
    (saved / "assistlab-report-new.json").write_text("{}")
    run = tmp_path / "20260101-000000-abcdef12"
    run.mkdir()
    long_ago = time.time() - 2 * REPORT_FILES_MAX_AGE_S
    for old in (saved, saved / "assistlab-report-old.json", run):
        os.utime(old, (long_ago, long_ago))
    files._prune()
    assert saved.is_dir() and not run.exists()
    assert [p.name for p in saved.iterdir()] == ["assistlab-report-new.json"]
    files._prune(now=time.time() + 2 * REPORT_FILES_MAX_AGE_S)  # hours later, nothing opened since
    assert saved.is_dir() and not any(saved.iterdir())
    shutil.rmtree(saved)  # whoever removed it, the next use makes it again
    assert files.folder("saved").is_dir()


# ---------------------------------------------------------------- 7: what a stop saves

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


def _wait_busy(pool: SlotPool, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not pool.busy():
        assert time.monotonic() < deadline, "the comparison never started"
        time.sleep(0.02)


def _wait_saved(history: History, count: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while history.count() < count:
        assert time.monotonic() < deadline, f"{history.count()} saved, {count} expected"
        time.sleep(0.1)


def test_an_api_cancel_saves_what_measured_a_whole_repetition_and_nothing_else(models_dir, store, launch_app,
                                                                               tmp_path):
    from gradio_client import Client

    pool = SlotPool(0)
    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, pool=pool, history=history) as url:
        client = Client(url, verbose=False)
        quick = client.predict(**{**QUICK, "max_new_tokens": 60, "repeats": 2}, api_name="/compare")[0]
        per_round = sum(a["latency_summary"]["median"] for a in quick["arms"])
        # cancelled in its first repetition (two runs of 400 tokens): nothing saved
        job = client.submit(**{**LONG, "max_new_tokens": 400}, api_name="/compare")
        _wait_busy(pool)
        job.cancel()
        deadline = time.monotonic() + 30
        while pool.busy():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)
        assert history.count() == 1
        # cancelled after some repetitions: saved, stopped, with the whole ones only
        job = client.submit(**LONG, api_name="/compare")
        _wait_busy(pool)
        time.sleep(max(1.0, 4 * per_round))
        job.cancel()
        _wait_saved(history, 2)
        entry, report = history.get(history.list().entries[0].id)
        assert entry.status == "stopped" and report["counted_repetitions"] >= 1
        assert all(len(a["latencies_s"]) == report["counted_repetitions"] for a in report["arms"])
        print(f"cancelled after {report['counted_repetitions']} whole repetitions: saved as {entry.id}")


# ---------------------------------------------------------------- 2 and 7 in the page

def _browser(p):
    return p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_history_sentences_reach_the_page_and_open_survives_a_pruned_folder(models_dir, store, launch_app,
                                                                             tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from gradio_client import Client

    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    reports = tmp_path / "reports"
    with launch_app(models_dir, store, history=history, reports_dir=reports) as url, \
            sync_api.sync_playwright() as p:
        run_id = Client(url, verbose=False).predict(**QUICK, api_name="/compare")[0]["saved"]["id"]
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            page.get_by_role("tab", name="History").click()
            page.wait_for_selector("#al-history-list table")
            page.get_by_role("button", name="Open", exact=True).click()
            page.locator("#al-history-status").get_by_text("Choose one or two saved comparisons to open.").wait_for()
            page.get_by_role("button", name="Delete", exact=True).click()
            page.locator("#al-history-status").get_by_text("Choose the saved comparisons to delete.").wait_for()
            assert page.get_by_text("Error", exact=True).count() == 0
            # a damaged file: the listing and the board say so
            shutil.rmtree(reports / "saved", ignore_errors=True)  # as the hourly pruning did
            page.goto(f"{url}?run={run_id}")
            page.wait_for_selector("#al-saved-left-speedup .js-plotly-plot")
            history.close()
            _damage(tmp_path / "h.sqlite3")
            page.get_by_role("button", name="Show saved comparisons").click()
            page.locator("#al-history-list").get_by_text("damaged").wait_for()
            page.get_by_role("tab", name="Leaderboard").click()
            page.get_by_role("button", name="Show the leaderboard").click()
            page.locator("#al-board").get_by_text("move the file aside").wait_for()
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_a_page_stop_inside_the_first_repetition_saves_nothing(models_dir, store, launch_app, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_browser import choose

    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    with launch_app(models_dir, store, history=history) as url, sync_api.sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            page.wait_for_selector("#al-run")
            choose(page, "target", "assistant-same", tokens=32, repeats=40)
            page.click("#al-run")
            # plain has run in the first counted repetition; an assisted arm is timing now
            seen, deadline = [], time.monotonic() + 240
            while not re.search(r"Repetition 1 of \d+: (?!plain)", seen[-1] if seen else ""):
                assert time.monotonic() < deadline, seen[-20:]
                text = page.inner_text("#al-progress")
                if not seen or text != seen[-1]:
                    seen.append(text)
                page.wait_for_timeout(100)
            page.click("#al-stop")
            page.wait_for_selector("#al-progress .al-stopped", timeout=60_000)
            page.wait_for_timeout(1500)
            assert page.locator("#al-saved").count() == 0
            assert history.count() == 0
            text = page.inner_text("#al-progress")
            assert re.search(r"Stopped: you pressed Stop, after 0 of", text), text
        finally:
            browser.close()
