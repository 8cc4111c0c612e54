"""The login throttle (issue 29, item 8): per name and per client address, an overall lock only far higher and
forgetting over time, never keeping a person out because of wrong passwords sent from elsewhere."""

from __future__ import annotations

import re

import pytest

from assistlab.access import FIRST_LOCK_S, FREE_FAILURES, FREE_FAILURES_ALL, FREE_FAILURES_NAME, LoginThrottle

ACCOUNTS = {"alice": "right-a", "bob": "right-b"}


def throttle_at(now: list[float]) -> LoginThrottle:
    return LoginThrottle(ACCOUNTS, clock=lambda: now[0])


def test_wrong_logins_spread_over_time_lock_nobody():
    now = [0.0]
    throttle = throttle_at(now)
    for i in range(40):  # one a minute, from one address and from many, unknown names and real ones
        throttle.check(f"nobody{i}" if i % 2 else "bob", "guess", f"10.0.1.{i % 3}")
        now[0] += 60.0
    assert throttle.check("someone-new", "guess", "10.0.9.9") is False  # the wrong login that locked everyone
    assert throttle.refusal("alice", "10.0.0.1") is None
    assert throttle.check("alice", "right-a", "10.0.0.1")
    assert throttle.check("bob", "right-b", "10.0.0.2")


def test_a_burst_from_one_address_locks_that_address_only():
    now = [0.0]
    throttle = throttle_at(now)
    for i in range(30):
        throttle.check(f"nobody{i}", "guess", "10.6.6.6")
        now[0] += 0.5
    assert throttle.locked_for("nobody", "10.6.6.6") > 0
    assert throttle.check("alice", "right-a", "10.0.0.1")  # first login from her address
    assert throttle.check("bob", "right-b", "10.0.0.2")


def test_alice_logs_in_after_wrong_passwords_for_her_from_other_addresses():
    now = [0.0]
    throttle = throttle_at(now)
    for address in ("10.0.0.7", "10.0.0.8", "10.0.0.9"):
        assert not throttle.check("alice", "wrong", address)
    assert not throttle.check("alice", "wrong", "10.0.0.7")
    assert not throttle.check("alice", "wrong", "10.0.0.7")  # that address has now had its three
    assert throttle.locked_for("alice", "10.0.0.7") > 0
    assert throttle.check("alice", "right-a", "10.0.0.1")  # her own address: never met a lock

    # Many addresses guessing her password lock the name for new places, but not where she logged in before.
    for i in range(2 * FREE_FAILURES_NAME):
        throttle.check("alice", "wrong", f"10.0.2.{i}")
    assert throttle.refusal("alice", "10.0.3.1").kind == "name"
    assert throttle.check("alice", "right-a", "10.0.0.1")


def test_the_overall_lock_is_a_last_resort_that_spares_known_places():
    now = [0.0]
    accounts = {**ACCOUNTS, **{f"u{i}": "pw" for i in range(FREE_FAILURES_ALL)}}
    throttle = LoginThrottle(accounts, clock=lambda: now[0])
    assert throttle.check("bob", "right-b", "10.0.0.2")
    for i in range(FREE_FAILURES_ALL - 1):  # one guess for each of many names, each from its own address
        throttle.check(f"u{i}", "guess", f"10.1.{i // 250}.{i % 250}")
    assert throttle.refusal("alice", "10.0.0.1") is None
    throttle.check("u-last", "guess", "10.9.9.9")
    assert throttle.refusal("alice", "10.0.0.1").kind == "all"
    assert throttle.check("bob", "right-b", "10.0.0.2")  # where bob logged in before
    now[0] += 60.0 * 3  # three failures forgotten: under the limit again
    assert throttle.check("alice", "right-a", "10.0.0.1")


def test_the_message_says_the_true_wait():
    now = [100.0]
    throttle = throttle_at(now)
    for _ in range(FREE_FAILURES):
        assert not throttle.check("alice", "wrong", "10.0.0.7")
    refusal = throttle.refusal("alice", "10.0.0.7")
    assert (refusal.kind, refusal.wait_s) == ("pair", FIRST_LOCK_S)
    assert refusal.message() == "Too many failed logins for this name from your address; try again in 1 s."
    assert not throttle.check("alice", "right-a", "10.0.0.7")  # locked: not counted, still refused
    now[0] += FIRST_LOCK_S
    assert not throttle.check("alice", "wrong", "10.0.0.7")  # the fourth: 2 s
    now[0] += 0.4
    assert throttle.refusal("alice", "10.0.0.7").message().endswith("try again in 2 s.")  # 1.6 s left
    now[0] += 1.6
    assert not throttle.check("alice", "wrong", "10.0.0.7")  # the fifth: 4 s
    assert throttle.locked_for("alice", "10.0.0.7") == pytest.approx(4 * FIRST_LOCK_S)
    now[0] += 3.5
    assert throttle.refusal("alice", "10.0.0.7").message().endswith("try again in 1 s.")
    now[0] += 0.5
    assert throttle.check("alice", "right-a", "10.0.0.7")


def test_through_the_server_the_answer_says_when_and_other_addresses_are_not_locked(models_dir, store, monkeypatch):
    """Clients told apart by X-Forwarded-For, which uvicorn honours from a proxy on loopback (as this test is)."""
    import httpx

    from assistlab import access, ui
    from assistlab.measure.slots import SlotPool

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    monkeypatch.setattr(access, "FIRST_LOCK_S", 30.0)  # long enough that a busy machine cannot outlast it
    demo = ui.build_app(store, pool=SlotPool(0))
    options = ui.launch_options({"ASSISTLAB_AUTH": "alice:right-a"})
    _app, url, _share = demo.launch(prevent_thread_lock=True, quiet=True, **options)

    def login(password: str, address: str) -> httpx.Response:
        return httpx.post(f"{url}login", data={"username": "alice", "password": password},
                          headers={"X-Forwarded-For": address})

    try:
        answers = [login("wrong", "10.0.0.7") for _ in range(FREE_FAILURES)] + [login("right-a", "10.0.0.7")]
        assert [a.status_code for a in answers] == [400] * len(answers)
        assert answers[0].json()["detail"] == "Incorrect credentials."
        waits = []
        for locked in answers[-2:]:  # the failure that locked it (30 s), then the right password during the lock
            found = re.fullmatch(r"Too many failed logins for this name from your address; try again in (\d+) s\.",
                                 locked.json()["detail"])
            assert found and locked.headers["Retry-After"] == found[1]
            waits.append(int(found[1]))
        assert 28 <= waits[1] <= waits[0] <= 30  # each answer waited its 0.5 s: the wait said is what is left
        assert login("right-a", "10.0.0.1").status_code == 200  # her address, right after
    finally:
        demo.close()
