"""The page's own work falls between timed runs (issue 9, item 6): it draws while the runner waits, and the
next run starts once the machine has settled from the drawing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from assistlab.measure.runner import Event
from assistlab.measure.slots import SlotPool
from assistlab.ui import session
from assistlab.ui.session import Page, ReportFiles, SessionStops, repetition_end


def events():
    yield Event("status", "warm-up", 0, 6, warmup=True)
    yield Event("run", "warm-up done", 2, 6, warmup=True, round_done=True)
    yield Event("status", "repetition 1", 2, 6)
    yield Event("run", "plain", 3, 6)
    yield Event("run", "assisted", 4, 6, round_done=True)
    yield Event("done", "complete", 6, 6)


def test_the_page_redraws_at_the_end_of_a_counted_repetition_and_at_the_end_only():
    assert [repetition_end(e) for e in events()] == [False, False, False, False, True, True]


def test_the_next_run_waits_for_the_page_to_draw_and_for_the_machine_to_settle(monkeypatch, tmp_path):
    log: list[str] = []
    lock = threading.Lock()

    def note(text: str) -> None:
        with lock:
            log.append(text)

    def stream(request, should_stop, plan=None):
        for event in events():
            note(f"runner: {event.message}")
            yield event

    monkeypatch.setattr(session.contention, "settle", lambda should_stop: note("settle") or 0.0)
    page = Page(stream, SessionStops(), ReportFiles(tmp_path), [], SlotPool(0))
    job = page.start_job(None, lambda: False, redraws=repetition_end)
    seen = []
    for item in job.items(heartbeat_s=5.0):
        if isinstance(item, Event):
            seen.append(item.message)
            note(f"page: {item.message}")
            time.sleep(0.05)  # drawing: the runner must not move on meanwhile
    assert seen == [e.message for e in events()]
    assert log == [
        "runner: warm-up", "page: warm-up",
        "runner: warm-up done", "page: warm-up done",
        "runner: repetition 1", "page: repetition 1",
        "runner: plain", "page: plain",
        "runner: assisted", "page: assisted", "settle",  # the repetition's charts were drawn
        "runner: complete", "page: complete",  # nothing follows the end: no wait for it
    ]


def _threads_cpu_s(tids: set[str]) -> float:
    """CPU seconds (user + system) the given threads of this process have used, from /proc (threads gone: 0)."""
    import os

    ticks = 0
    for tid in tids:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of the whole line
    return ticks / os.sysconf("SC_CLK_TCK")


def test_an_idle_server_does_not_poll_the_cpu(tmp_path):
    """Gradio's queue polls every millisecond unless told otherwise: 4% of a core taken, in wake-ups, from the
    timed generate() on another thread of the same process. Only the server's own threads are counted, so what
    earlier tests left running in this process does not count against it."""
    import os
    import socket

    from assistlab import ui
    from assistlab.engines.transformers.models import ModelStore
    from assistlab.ui import gradio_private

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    before_launch = set(os.listdir("/proc/self/task"))
    demo = ui.build_app(ModelStore(), reports_dir=tmp_path)
    demo.launch(prevent_thread_lock=True, server_port=port, quiet=True, **ui.launch_options({}))
    try:
        assert demo._queue.sleep_when_free == gradio_private.QUEUE_POLL_S
        time.sleep(1.0)
        server = set(os.listdir("/proc/self/task")) - before_launch
        assert server, "the server started no thread of its own"
        before = _threads_cpu_s(server)
        time.sleep(4.0)
        used = _threads_cpu_s(server) - before
        assert used < 0.08, f"the idle server's threads used {used:.2f} CPU seconds in 4 s"
    finally:
        demo.close()
