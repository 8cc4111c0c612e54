"""Logins: with ASSISTLAB_AUTH only the login page answers without one, and failed logins back off, by name and
through the server."""

from __future__ import annotations

import time

from assistlab.measure.slots import SlotPool
from patience import patient


def test_with_a_login_on_only_the_login_page_answers_without_one(models_dir, store, monkeypatch):
    import httpx
    from ports import free_port

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
        with httpx.Client(base_url=url, timeout=patient(30)) as anonymous:
            for method, path, kwargs in closed:
                assert anonymous.request(method, path, **kwargs).status_code == 401, path
            page = anonymous.get("")
            assert page.status_code == 200
            asset = next(part.split('"')[0] for part in page.text.split('src="')[1:] if "assets/" in part)
            assert anonymous.get(asset.replace(url, "")).status_code == 200
        with httpx.Client(base_url=url, timeout=patient(30)) as ann:
            assert ann.post("login", data={"username": "ann", "password": "secret"}).status_code == 200
            for method, path, kwargs in closed[:5]:
                with ann.stream(method, path, **kwargs) as answer:  # a heartbeat is a stream that stays open
                    assert answer.status_code != 401, path
    finally:
        demo.close()


def test_failed_logins_back_off_and_the_right_password_works_after():
    from assistlab.access import FIRST_LOCK_S, LoginThrottle

    now = [0.0]
    # The record of one name from one address; the address's own (any names) is set out of the way here.
    throttle = LoginThrottle({"ann": "secret"}, clock=lambda: now[0], free_client=100)
    results = [throttle.check("ann", f"guess{i}") for i in range(10)]
    assert results == [False] * 10
    assert throttle.locked_for("ann") == FIRST_LOCK_S
    assert not throttle.check("ann", "secret")  # locked: even the right password waits
    now[0] += FIRST_LOCK_S
    assert throttle.check("ann", "secret") and throttle.locked_for("ann") == 0
    for i in range(5):  # three free failures, then locks of 1 s and 2 s as time passes
        throttle.check("ann", "wrong")
        now[0] += throttle.locked_for("ann")
    assert throttle.locked_for("ann") == 0 and not throttle.check("ann", "wrong")
    assert throttle.locked_for("ann") == 8 * FIRST_LOCK_S  # the sixth failure in a row: 1, 2, 4, then 8 s


def test_guessing_many_names_locks_logins_without_growing_memory():
    from assistlab.access import FREE_FAILURES, LoginThrottle

    now = [0.0]
    throttle = LoginThrottle({"ann": "secret"}, clock=lambda: now[0])
    for i in range(1000):
        throttle.check(f"user{i}", "pw")
        now[0] += 0.01
    # Every unknown name shares one record (and one from this address), plus the address's and the overall one.
    assert len(throttle._records) == 4
    assert throttle.locked_for("someone-new") > 0  # guessing names is throttled as one
    assert throttle._records[("name", "\x00unknown")].failures < 1000 / 2  # most guesses were refused unheard
    assert throttle.check("ann", "secret")  # a known name is not locked by others' guesses

    accounts = {f"u{i}": "pw" for i in range(30)}
    spray = LoginThrottle(accounts, clock=lambda: 0.0, free=FREE_FAILURES)
    for name in accounts:
        spray.check(name, "wrong")
    assert not spray.check("u29", "pw")  # one wrong guess for each of many real names locks logins a while


def test_ten_wrong_passwords_through_the_server_are_slowed(models_dir, store, monkeypatch):
    import httpx

    from assistlab import ui
    from assistlab.ui.app import FAILED_LOGIN_DELAY_S

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    demo = ui.build_app(store, pool=SlotPool(0))
    options = ui.launch_options({"ASSISTLAB_AUTH": "ann:secret"})
    _app, url, _share = demo.launch(prevent_thread_lock=True, quiet=True, **options)
    try:
        started = time.monotonic()
        codes = [httpx.post(f"{url}login", data={"username": "ann", "password": f"guess{i}"}).status_code
                 for i in range(10)]
        took = time.monotonic() - started
        assert codes == [400] * 10 and took >= 10 * FAILED_LOGIN_DELAY_S
        wait = options["auth"].throttle.locked_for("ann", "127.0.0.1")
        assert wait > 0
        assert httpx.post(f"{url}login", data={"username": "ann", "password": "secret"}).status_code == 400
        time.sleep(wait + 0.1)
        assert httpx.post(f"{url}login", data={"username": "ann", "password": "secret"}).status_code == 200
    finally:
        demo.close()
