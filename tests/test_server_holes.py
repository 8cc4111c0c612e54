"""Issue 20, items 5, 6 and 8-12: the smaller holes a probe of the shared server found, each closed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from assistlab import history as hist
from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner

ROOT = Path(__file__).resolve().parents[1]


# --- item 5: a local folder is named by its path inside the models folder ----------------------------------

def test_two_local_folders_with_the_same_name_stay_two_models(models_dir, store, tmp_path, monkeypatch):
    root = tmp_path / "models"
    shutil.copytree(models_dir / "target", root / "target")
    for team in ("team1", "team2"):
        shutil.copytree(models_dir / "assistant-same", root / team / "tiny")
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "team1/tiny"), ArmSpec("assistant", "team2/tiny")),
                           prompt="hello there", max_new_tokens=4, repeats=1, warmup=0)
    report = runner.run_to_report(request, store).to_dict()
    names = [arm["name"] for arm in report["arms"][1:]]
    assert any("team1/tiny" in n for n in names) and any("team2/tiny" in n for n in names), names
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        entry, _ = db.get(db.save(report).id)
        assert entry.assistants == "team1/tiny, team2/tiny"
        (section,) = db.leaderboard()
        assert sorted(row.assistant for row in section.rows) == ["team1/tiny", "team2/tiny"]
        assert [e.id for e in db.list(assistant="team2/tiny").entries] == [entry.id]
    finally:
        db.close()


# --- item 6: SIGTERM closes the server as Ctrl-C does; a start-up prunes what dead servers left ----------

def _serve(tmp_path, models_dir, extra_env=None):
    """python app.py on loopback, its temporary folder inside tmp_path; returns (process, url)."""
    import os
    import subprocess
    import sys
    import time

    import httpx
    from conftest import free_port

    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "GRADIO_SERVER_PORT": str(port),
           "GRADIO_SERVER_NAME": "127.0.0.1", "ASSISTLAB_MODELS_DIR": str(models_dir),
           "ASSISTLAB_DATA_DIR": str(tmp_path / "data"), **(extra_env or {})}
    env.pop("GRADIO_TEMP_DIR", None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"app.py ended early: {proc.stdout.read()}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("app.py did not answer within 180 s")


def test_sigterm_leaves_no_reports_or_copies_and_a_start_prunes_dead_servers_folders(tmp_path, models_dir):
    import os
    import signal
    import subprocess
    import sys

    import httpx

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp / f"assistlab-reports-{int(dead.stdout)}-abc123"  # a SIGKILLed server's folder
    (left / "20260101-000000-1234abcd").mkdir(parents=True)
    (left / "20260101-000000-1234abcd" / "assistlab-report.json").write_text("{}")
    alive = tmp / f"assistlab-reports-{os.getpid()}-def456"  # a running process's folder
    alive.mkdir()
    proc, url = _serve(tmp_path, models_dir)
    try:
        assert not left.exists() and alive.exists()
        ours = [p for p in tmp.glob("assistlab-reports-*") if p != alive]
        assert len(ours) == 1 and ours[0].name.startswith(f"assistlab-reports-{proc.pid}-")
        upload = httpx.post(f"{url}gradio_api/upload", files={"files": ("prompts.txt", b"a prompt\n")}, timeout=30)
        assert upload.status_code == 200, upload.text
        copies = [p for p in (tmp / "gradio").rglob("*") if p.is_file()]
        assert copies, "gradio kept no copy of the upload"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not ours[0].exists()
    assert not [p for p in (tmp / "gradio").rglob("*") if p.is_file()]
    assert alive.exists()


# --- item 8: hostile inputs get one sentence naming the field ----------------------------------------------

@pytest.fixture(scope="module")
def client(models_dir, store, launch_app):
    from gradio_client import Client

    with launch_app(models_dir, store) as url:
        yield Client(url, verbose=False)


DEEP = '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_deeply_nested_json_in_a_prompts_file_is_one_sentence():
    from assistlab.errors import InputError
    from assistlab.results.suite_inputs import parse_prompts

    for name in ("deep.jsonl", "deep"):
        with pytest.raises(InputError, match="Line 1 of the prompts file nests lists or objects too deeply"):
            parse_prompts(DEEP.encode(), name)


@pytest.mark.parametrize("arguments, words", [
    ({"prompts_text": DEEP, "prompts_filename": "deep.jsonl"}, "Line 1 of the prompts file nests"),
    ({"prompts_text": "a prompt \ud800 with half an emoji"}, "The prompts_text contains a character that is not valid text"),
    ({"prompts_text": "fine", "prompts_filename": "p\udc00.txt"}, "The prompts_filename contains a character"),
])
def test_compare_suite_refuses_hostile_prompts_naming_the_field(client, arguments, words):
    outcome = call_api(client.src, "compare_suite", target="target", suite="file", **arguments)
    assert outcome[0] == "error" and words in outcome[1] and "unexpected" not in outcome[1], outcome


def call_api(url: str, api_name: str, **arguments) -> tuple[str, str]:
    """(event, data) of the last message of one /gradio_api/call request, its JSON written with \\u escapes.

    gradio_client cannot send a lone surrogate (it encodes its body as UTF-8); JSON can, as an escape.
    """
    import json

    import httpx

    url = url.rstrip("/") + "/"
    info = httpx.get(f"{url}gradio_api/info", timeout=30).json()["named_endpoints"][f"/{api_name}"]
    data = [arguments.get(p["parameter_name"], p.get("parameter_default")) for p in info["parameters"]]
    body = json.dumps({"data": data}, ensure_ascii=True)
    posted = httpx.post(f"{url}gradio_api/call/{api_name}", content=body,
                        headers={"content-type": "application/json"}, timeout=60)
    assert posted.status_code == 200, posted.text
    event_id = posted.json()["event_id"]
    event, payload = "", ""
    with httpx.stream("GET", f"{url}gradio_api/call/{api_name}/{event_id}", timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                payload = line[5:].strip()
    return event, payload


@pytest.mark.parametrize("page, words", [(10**19, "page must be a page number from 1 to 1,000,000,000"),
                                         (2**63, "page must be a page number from 1")])
def test_history_refuses_a_page_past_any_history(client, page, words):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        client.predict(page=page, api_name="/history")
    assert words in str(caught.value) and "unexpected" not in str(caught.value)
    assert client.predict(page=3, api_name="/history")["page"] == 3


# --- item 9: no CSV the app writes holds a formula ---------------------------------------------------------

HOSTILE_CELLS = ['=HYPERLINK("http://evil","x")', "@SUM(A1:A9)", '+cmd|" /C calc"!A0', "-2+3", "\tTAB", "\rCR"]


def _formula_cells(text: str) -> list[str]:
    import csv
    import io

    from assistlab.results.cells import _NUMBER, FORMULA_STARTS

    return [c for row in csv.reader(io.StringIO(text)) for c in row
            if c.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(c)]


def test_cells_quote_formulas_and_keep_numbers():
    from assistlab.results.cells import cell

    assert [cell(c) for c in HOSTILE_CELLS] == ["'" + c for c in HOSTILE_CELLS]
    assert [cell(v) for v in (-1.5, -3, "-1.5", "+2", "-1e-3", "plain", "", None)] == \
        [-1.5, -3, "-1.5", "+2", "-1e-3", "plain", "", None]


def test_every_csv_the_app_writes_neutralises_formulas(models_dir, store, monkeypatch):
    from assistlab.history import runs_csv
    from assistlab.measure import suite_runner
    from assistlab.results.suite_inputs import SuiteRequest, parse_prompts, select

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    prompts = "\n".join('{"category": %s, "prompt": "the quick brown fox"}' % json_text(c) for c in HOSTILE_CELLS[:4])
    selection = select(SuiteRequest(suite="file", file="p.jsonl"), parse_prompts(prompts.encode(), "p.jsonl"))
    bench = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=3,
                         repeats=1, warmup=0)
    text = suite_runner.run_suite_to_report(bench, selection, store).to_csv()
    assert "'=HYPERLINK" in text and "'@SUM" in text and "'+cmd" in text and "'-2+3" in text
    assert _formula_cells(text) == []
    live = runner.run_to_report(bench, store)
    live.arms[1].name = HOSTILE_CELLS[0]
    report = live.to_dict()
    for text in (live.to_csv(), runs_csv(report)):  # the page's and CLI's download, the history's
        assert _formula_cells(text) == [] and "'=HYPERLINK" in text


def json_text(value: str) -> str:
    import json

    return json.dumps(value)


# --- item 10: one rule for owners; retention per owner ----------------------------------------------------

def _minimal_report() -> dict:
    from test_history import minimal_report

    return minimal_report()


@pytest.mark.parametrize("login", ["ann  lee", "  ann lee ", "x" * 200, "tab\there"])
def test_an_odd_login_name_can_delete_its_own_comparison(tmp_path, login):
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        mine, other = db.save(_minimal_report(), owner=login).id, db.save(_minimal_report(), owner="bob").id
        with pytest.raises(hist.HistoryError, match="someone else"):
            db.delete(other, user=login)
        db.delete(mine, user=login)
        assert [e.id for e in db.list().entries] == [other]
    finally:
        db.close()


def test_one_user_saving_many_does_not_push_out_anyone_elses(tmp_path):
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=3)
    try:
        alice = [db.save(_minimal_report(), owner="alice").id for _ in range(2)]
        anonymous = db.save(_minimal_report()).id
        mallory = [db.save(_minimal_report(), owner="mallory").id for _ in range(10)]
        kept = {e.id for e in db.list(page_size=100).entries}
        assert kept == {*alice, anonymous, *mallory[-3:]}
    finally:
        db.close()


# --- item 11: with ASSISTLAB_AUTH, only the login page answers without a login -----------------------------

def test_with_a_login_on_only_the_login_page_answers_without_one(models_dir, store, monkeypatch):
    import httpx
    from conftest import free_port

    from assistlab import ui
    from assistlab.measure.slots import SlotPool

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    demo = ui.build_app(store, pool=SlotPool(0))
    options = ui.launch_options({"ASSISTLAB_AUTH": "ann:secret"})
    _app, url, _share = demo.launch(prevent_thread_lock=True, quiet=True, server_port=free_port(), **options)
    closed = [("POST", "gradio_api/cancel", {"json": {"session_hash": "x", "fn_index": 0, "event_id": "y"}}),
              ("POST", "gradio_api/reset", {"json": {"event_id": "y"}}),
              ("GET", "gradio_api/heartbeat/abc123", {}), ("GET", "gradio_api/info", {}), ("GET", "config", {}),
              ("GET", "gradio_api/queue/data?session_hash=abc", {}), ("GET", "gradio_api/app_id", {}),
              ("GET", "gradio_api/startup-events/../token", {}), ("GET", "monitoring", {}),
              ("POST", "gradio_api/upload", {"files": {"files": ("a.txt", b"x")}})]
    try:
        with httpx.Client(base_url=url, timeout=30) as anonymous:
            for method, path, kwargs in closed:
                assert anonymous.request(method, path, **kwargs).status_code == 401, path
            page = anonymous.get("")
            assert page.status_code == 200
            asset = next(part.split('"')[0] for part in page.text.split('src="')[1:] if "assets/" in part)
            assert anonymous.get(asset.replace(url, "")).status_code == 200
        with httpx.Client(base_url=url, timeout=30) as ann:
            assert ann.post("login", data={"username": "ann", "password": "secret"}).status_code == 200
            for method, path, kwargs in closed[:5]:
                with ann.stream(method, path, **kwargs) as answer:  # a heartbeat is a stream that stays open
                    assert answer.status_code != 401, path
    finally:
        demo.close()


# --- item 12: the operator's time cap, the PostgreSQL hint, the size check first, the warning's colour --------

def test_the_operators_time_cap_stops_a_comparison(models_dir, store, monkeypatch):
    import time

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), max_new_tokens=8,
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


def test_a_postgresql_failure_names_the_database_url_not_the_data_folder():
    store = hist.History("postgresql+psycopg://nobody:pw@127.0.0.1:1/none", max_entries=None)
    warning = store.save(_minimal_report()).warning
    assert "ASSISTLAB_DATABASE_URL" in warning and "ASSISTLAB_DATA_DIR" not in warning


def test_a_huge_prompts_text_is_refused_by_its_size_before_it_is_read(monkeypatch):
    from assistlab.errors import InputError
    from assistlab.ui import suite_tab

    monkeypatch.setattr(suite_tab, "bench_from_form", lambda values: pytest.fail("read before the size check"))
    with pytest.raises(InputError, match="prompts_text is 50,000,001 characters"):
        suite_tab.suite_plan_from_api({}, {"source": "file"}, "x" * 50_000_001, "p.txt")


def test_a_not_saved_note_is_coloured_as_a_warning():
    from assistlab.ui.style import CSS

    assert "p.al-note.al-failed" in CSS and "#b91c1c" in CSS.split("p.al-note.al-failed {")[1].split("}")[0]
