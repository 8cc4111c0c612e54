"""A run stops only when its person pressed Stop or its page is really gone, and says which (issue 29, item 10).

On a busy machine gradio came back for a run's next update more than 3 s later while a model loaded, and the
run stopped by itself ("Stopped after 0 of 5 repetitions", nobody had pressed Stop). Here the reader is slowed
the same way: each update takes 3.5 s to come back for.
"""

from __future__ import annotations

import threading
import time

import gradio as gr
import pytest

from assistlab.measure.slots import SlotPool
from assistlab.results.events import Event
from assistlab.results.report import Report
from assistlab.ui.session import Page, ReportFiles, SessionStops

BUSY_READER_S = 3.5  # gradio sending one update (and coming back for the next) on a loaded machine


def loading_stream(steps: int = 2, step_s: float = 0.2):
    """A comparison that loads for `steps` steps, then ends; stopped, it ends as the runner does."""
    checks: list[bool] = []

    def stream(request, should_stop, plan=None):
        report = Report(request={}, environment={}, arms=[])
        for i in range(steps):
            time.sleep(step_s)
            checks.append(should_stop())
            if checks[-1]:
                report.status, report.message = "stopped", "Stopped after 0 of 5 repetitions."
                yield Event("done", report.message, 0, 18, report)
                return
            yield Event("status", f"Loading the assistant ({i})", 0, 0)
        report.status, report.message = "complete", "Done."
        yield Event("done", "Done.", 18, 18, report)

    return stream, checks


def page_for(stream, tmp_path, **kwargs) -> Page:
    return Page(stream, SessionStops(), ReportFiles(tmp_path), [], SlotPool(0), None, **kwargs)


def run(page: Page, session: str, between=lambda events: None, pause_s: float = 0.0) -> list[Event]:
    """Read the run as gradio does, pausing `pause_s` after each update; `between(events)` after each one."""
    progress = gr.HTML()
    events: list[Event] = []

    def render(event):
        events.append(event)
        return {}

    for _update in page.streamed(session, progress, lambda: (None, None), render):
        between(events)
        time.sleep(pause_s)
    return events


def test_a_busy_reader_does_not_stop_the_run(tmp_path):
    stream, checks = loading_stream()
    page = page_for(stream, tmp_path)
    events = run(page, "busy", pause_s=BUSY_READER_S)
    assert events[-1].kind == "done" and events[-1].report.status == "complete", events[-1].message
    assert checks and not any(checks)


@pytest.mark.parametrize(("how", "said"), [
    ("pressed", "Stopped: you pressed Stop, after 0 of 5 repetitions."),
    ("closed", "Stopped: the page was closed, after 0 of 5 repetitions."),
    ("gone", "Stopped: the page was closed, after 0 of 5 repetitions."),
])
def test_a_stop_says_who_stopped_it(tmp_path, how, said):
    stream, _checks = loading_stream(steps=30, step_s=0.1)
    gone = threading.Event()
    page = page_for(stream, tmp_path, client_gone=lambda session: gone.is_set())

    def between(events):
        if events and events[-1].kind == "status":
            {"pressed": lambda: page.stops.stop("s"), "closed": lambda: page.stops.forget("s"),
             "gone": gone.set}[how]()

    events = run(page, "s", between)
    assert events[-1].report.status == "stopped"
    assert events[-1].message == said and events[-1].report.message == said


def test_stop_pressed_while_queued_says_so(tmp_path):
    stream, checks = loading_stream()
    page = page_for(stream, tmp_path)
    page.stops.stop("q")
    updates = list(page.streamed("q", gr.HTML(), lambda: (None, None), lambda event: {}))
    assert "Stopped before it started: you pressed Stop." in str(updates[-1])
    assert not checks
