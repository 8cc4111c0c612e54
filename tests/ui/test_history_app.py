"""History through the running app: the API saves, /history and /report read back (also after a restart), the
page opens a saved comparison by permalink with its stored markup shown as text."""

from __future__ import annotations

import threading

import pytest
from browsing import ARGS, CHROMIUM

from assistlab.history import History

NASTY = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> **bold** write me an essay"


@pytest.fixture(scope="module")
def history_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('history') / 'history.sqlite3'}"


@pytest.fixture(scope="module")
def saved(models_dir, store, launch_app, history_url):
    """Four people comparing at once through /compare; returns their reports, and the app's URL while it runs."""
    from gradio_client import Client

    with launch_app(models_dir, store, history=History(history_url, max_entries=None)) as url:
        reports, errors = [None] * 4, []  # reports[i] is person i's, whatever order they finish in

        def one(i):
            try:
                client = Client(url, verbose=False)
                report, _ = client.predict(
                    target="target", assistant="assistant-same" if i % 2 else "assistant-other", strategy="auto",
                    prompt=NASTY if i == 0 else f"essay number {i}", max_new_tokens=6, repeats=2, warmup=0,
                    also_prompt_lookup=False, api_name="/compare",
                )
                reports[i] = report
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not errors, errors
        listed = Client(url, verbose=False).predict(api_name="/history")
        yield reports, listed


def test_four_concurrent_api_comparisons_give_four_entries(saved):
    reports, listed = saved
    assert all(r is not None and r["saved"]["id"] and r["saved"]["warning"] is None for r in reports)
    assert listed["total"] == 4
    assert sorted(e["id"] for e in listed["entries"]) == sorted(r["saved"]["id"] for r in reports)
    assert all(e["owner"] is None and e["status"] == "complete" for e in listed["entries"])


def test_saved_comparisons_survive_a_restart(saved, models_dir, store, launch_app, history_url):
    from gradio_client import Client

    reports, _ = saved
    with launch_app(models_dir, store, history=History(history_url)) as url:
        client = Client(url, verbose=False)
        listed = client.predict(api_name="/history")
        assert listed["total"] == 4
        first = reports[0]
        stored = client.predict(run_id=first["saved"]["id"], api_name="/report")
        assert stored == {k: v for k, v in first.items() if k != "saved"}
        assert stored["request"]["prompt"] == NASTY
        assert client.predict(target="target", assistant="assistant-same", api_name="/history")["total"] == 2
        board = client.predict(api_name="/leaderboard")
        # Four prompts: four tables, since a median mixes only comparisons that measured the same thing.
        assert [s["target"] for s in board] == ["target"] * 4
        prompts = {s["prompt_preview"] for s in board}
        assert len(prompts) == 4 and "essay number 1" in prompts
        assert sum(r["comparisons"] for s in board for r in s["rows"]) == 4
        for section in board:
            rows = section["rows"]
            assert [r["speedup"] for r in rows] == sorted((r["speedup"] for r in rows), reverse=True)
        info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
        assert [p["parameter_name"] for p in info["/history"]["parameters"]] == [
            "target", "assistant", "device", "page", "page_size"]
        assert [p["parameter_name"] for p in info["/report"]["parameters"]] == ["run_id"]
        from gradio_client.exceptions import AppError

        with pytest.raises(AppError, match="16 letters"):
            client.predict(run_id="<script>", api_name="/report")


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_a_permalink_opens_the_saved_comparison_with_its_markup_as_text(saved, models_dir, store, launch_app,
                                                                          history_url):
    sync_api = pytest.importorskip("playwright.sync_api")
    reports, _ = saved
    run_id = reports[0]["saved"]["id"]
    with launch_app(models_dir, store, history=History(history_url)) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            dialogs = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{url}?run={run_id}")
            page.wait_for_selector("#al-saved-left-speedup .js-plotly-plot")
            assert page.locator("#al-saved-left").is_visible()
            assert not page.locator("#al-saved-right").is_visible()
            caption = page.locator("#al-saved-left").inner_text()
            assert f"?run={run_id}" in caption
            # the prompt was saved as typed and is shown as text, never run or rendered
            page.get_by_role("button", name="Show saved comparisons").click()
            page.wait_for_selector("#al-history-list table")
            listing = page.locator("#al-history-list")
            assert "<script>window.__pwned = 1</script>" in listing.inner_text()
            assert listing.locator("script, img").count() == 0
            assert page.evaluate("window.__pwned") is None and not dialogs
            # two side by side
            chosen = page.locator("#al-history-chosen input")
            chosen.click()
            chosen.fill(reports[1]["saved"]["id"])
            page.keyboard.press("Enter")
            page.get_by_role("button", name="Open", exact=True).click()
            page.wait_for_selector("#al-saved-right-speedup .js-plotly-plot")
            assert reports[1]["saved"]["id"] in page.locator("#al-saved-right").inner_text()
            # the leaderboard
            page.get_by_role("tab", name="Leaderboard").click()
            page.wait_for_selector("#al-board table")
            assert "target" in page.locator("#al-board").inner_text()
            # delete one (no logins on this server, so anyone may)
            page.get_by_role("tab", name="History").click()
            doomed = reports[3]["saved"]["id"]
            chosen = page.locator("#al-history-chosen input")
            page.locator("#al-history-chosen").get_by_role("button").last.click()  # clear the choice
            chosen.click()
            chosen.fill(doomed)
            page.keyboard.press("Enter")
            page.get_by_role("button", name="Delete", exact=True).click()
            page.get_by_text(f"Deleted {doomed}.").wait_for()
            assert History(history_url).list().total == 3
        finally:
            browser.close()


def test_with_logins_on_the_login_name_is_saved(models_dir, store, tmp_path, monkeypatch):
    from ports import free_port
    from gradio_client import Client

    from assistlab import ui

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}")
    demo = ui.build_app(store, reports_dir=tmp_path / "reports", history=history)
    options = ui.launch_options({"ASSISTLAB_AUTH": "alice:secret-a"})
    _app, url, _ = demo.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True, **options)
    try:
        client = Client(url, auth=("alice", "secret-a"), verbose=False)
        report, _ = client.predict(target="target", assistant="assistant-same", prompt="hi there", max_new_tokens=4,
                                   repeats=1, warmup=0, also_prompt_lookup=False, api_name="/compare")
        entry, _ = history.get(report["saved"]["id"])
        assert entry.owner == "alice"
        with pytest.raises(Exception, match="someone else"):
            history.delete(entry.id, user="bob")
    finally:
        demo.close()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium")
def test_the_page_saves_finished_and_stopped_comparisons(models_dir, store, launch_app, tmp_path):
    import re

    sync_api = pytest.importorskip("playwright.sync_api")
    from browsing import choose

    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}")
    with launch_app(models_dir, store, history=history) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            page.wait_for_selector("#al-run")
            choose(page, "target", "assistant-same", tokens=4, repeats=2)
            page.click("#al-run")
            page.wait_for_selector("#al-progress #al-saved", timeout=90_000)
            run_id = re.search(r"as ([0-9a-f]{16})", page.inner_text("#al-saved")).group(1)
            assert history.get(run_id)[0].status == "complete"
            # stopped after some repetitions: saved, marked stopped
            page.goto(url)  # a fresh page, so the headline waited for below is this run's
            page.wait_for_selector("#al-run")
            choose(page, "target", "assistant-same", tokens=48, repeats=40)
            page.click("#al-run")
            page.wait_for_selector("#al-headline", timeout=60_000)
            page.click("#al-stop")
            page.wait_for_selector("#al-progress .al-stopped", timeout=60_000)
            page.wait_for_selector("#al-progress #al-saved", timeout=30_000)
            stopped_id = re.search(r"as ([0-9a-f]{16})", page.inner_text("#al-saved")).group(1)
            assert history.get(stopped_id)[0].status == "stopped"
            assert [e.id for e in history.list().entries] == [stopped_id, run_id]
        finally:
            browser.close()
