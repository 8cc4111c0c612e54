"""Progress lines and bars: one form for a comparison, a sweep, a workload and the command line.

Pure functions of runner events; no gradio here.
"""

from __future__ import annotations

import html
import re

from ..results import estimate
from ..results.events import Event

# A docs page named in a sentence ('docs/models.md#bringing-a-model'): the server answers it (ui/docs_pages.py).
DOCS_REFERENCE = re.compile(r"\bdocs/[a-z0-9][a-z0-9-]*\.md(?:#[a-z0-9-]+)?")


def with_docs_links(escaped: str) -> str:
    """Escaped text with each docs page it names made a link that opens beside the page."""
    return DOCS_REFERENCE.sub(lambda m: f'<a href="{m.group(0)}" target="_blank" rel="noopener">{m.group(0)}</a>',
                              escaped)


def progress_html(label: str, fraction: float | None = 0.0, state: str = "running") -> str:
    """A progress bar; fraction None draws a moving bar for work of unknown length (loading)."""
    if fraction is None:
        state, width = "busy", 35.0
    else:
        width = max(0.0, min(1.0, fraction)) * 100
    alert = ' role="alert"' if state == "failed" else ""  # read out at once by a screen reader
    said = with_docs_links(html.escape(label))
    return (
        f'<div class="al-progress al-{state}" role="progressbar" aria-valuenow="{width:.0f}" '
        f'aria-valuemin="0" aria-valuemax="100"><div class="al-track"><div class="al-fill" '
        f'style="width:{width:.1f}%"></div></div><div class="al-label"{alert}>{said}</div></div>'
    )


def preparation_html(status) -> str:
    """The bundled models' background conversion (a bundled.PreparationStatus): under way with its estimate,
    ready, or why it failed; nothing when there was nothing to convert."""
    if status.state == "idle":
        return ""
    if status.state == "failed":
        return progress_html(status.message, 1.0, "failed")
    if status.state == "ready":
        return progress_html(status.message, 1.0, "done")
    left = f", about {duration(status.eta_s)} left" if status.eta_s is not None else ""
    so_far = f" · {duration(status.elapsed_s)} so far{left}" if status.elapsed_s is not None else ""
    label = f"{status.message.rstrip('.')}{so_far}. Run waits for it; later starts skip this."
    return progress_html(label, None)


def duration(seconds: float) -> str:
    """Seconds as a person says them: '45 s', '2 min 05 s', '1 h 04 min'."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def timing_text(event: Event) -> str:
    """'1 min 05 s so far, about 2 min 10 s left', or as much of it as the event knows."""
    parts = []
    if event.elapsed_s is not None:
        parts.append(f"{duration(event.elapsed_s)} so far")
    if event.kind != "done":
        # Others' work seen by the busy-machine watch: the figure stands (each arm's pace is the median of its
        # runs, which a burst does not move), and says which way the next burst would move it.
        busy = ", longer while the machine is busy" if event.eta_busy and event.total else ""
        if event.eta_s is not None and event.eta_s < 1 and event.step_s:  # counted down past it between events
            parts.append("a little longer than estimated")
        elif event.eta_s is not None and event.eta_rough:
            parts.append(f"roughly {duration(event.eta_s)} left ({estimate.BASIS}, until a run has been timed)"
                         + busy)
        elif event.eta_s is not None:
            # Before the run count starts (loading) the estimate covers that step only.
            parts.append(f"about {duration(event.eta_s)} left" + ("" if event.total else " for this step") + busy)
        elif event.elapsed_s is not None:
            parts.append("time left known after the first run")
    return ", ".join(parts)


def aged(event, seconds: float):
    """`event` as it reads `seconds` after it came, while its step is still under way: the time so far moved on,
    the time left run down, and how long the step has been running. The page refreshes its progress line with it
    every few seconds between events, so a long step (a model loading, a warm-up run of a large model) never
    looks hung."""
    import dataclasses

    if event.kind == "done" or seconds <= 0:
        return event
    return dataclasses.replace(
        event,
        elapsed_s=None if event.elapsed_s is None else event.elapsed_s + seconds,
        eta_s=None if event.eta_s is None else max(event.eta_s - seconds, 0.0),
        step_s=(event.step_s or 0.0) + seconds,
    )


def progress_text(event) -> str:
    """The one form of every progress line (a comparison, a sweep, a workload, the command line):
    [where ·] the step under way (or the run just done and its time) · runs done · time so far, time left.

    `event` is a runner Event or a workload's SuiteEvent (which adds `where`: the prompt being measured).
    'Repetition 2 of 5: plain · 7 of 18 runs done · 1 min 05 s so far, about 2 min 10 s left';
    'Repetition 3 of at most 30: plain · 10 of about 24 runs done (at most 93) · ...' when the run stops once
    its answer is clear (24 runs: its likely stop; 93: the most it may run);
    'Prompt 2 of 5 (qa_3, qa) · Repetition 1 of 3: plain, took 8.92 s · 12 of 45 runs done · ...'.
    """
    if event.kind == "done":
        took = f" in {duration(event.elapsed_s)}" if event.elapsed_s is not None else ""
        return f"{event.message.rstrip('.')} ({event.done} of {event.total} runs done{took})."
    timing = timing_text(event)
    step = (event.step or event.message).rstrip(".")
    if event.kind == "run":  # a run just finished: its step and time, until the next step's event replaces them
        step = f"{step}, took {event.took_s:.2f} s" if event.took_s is not None else event.message.rstrip(".")
    elif event.step and event.step_s is not None and event.step_s >= 1:  # a step under way, not a closing word
        step = f"{step}, running for {duration(event.step_s)}"
    runs = f"{event.done} of {event.total} runs done" if event.total else ""
    if runs and event.most > event.total:  # a rule that stops once the answer is clear: the likely count first
        runs = f"{event.done} of about {event.total} runs done (at most {event.most})"
    return " · ".join(x for x in (getattr(event, "where", ""), step, runs, timing) if x)


def event_progress(event) -> str:
    """The progress bar for one runner (or workload) event, labelled by `progress_text`.

    Moving while a model loads (no run count yet), filling over warm-up and repetitions.
    """
    label = progress_text(event)
    if event.kind == "done":
        status = getattr(event.report, "status", None) or "done"
        state = {"complete": "done", "stopped": "stopped"}.get(status, "failed")
        return progress_html(label, event.done / event.total if event.total else 1.0, state)
    if not event.total:
        return progress_html(label, None)
    return progress_html(label, event.done / event.total)
