"""The one place that reads Gradio's private state; a Gradio upgrade that moves it fails tests/test_shared_app.py."""

from __future__ import annotations

import gradio as gr


def client_gone(blocks: gr.Blocks, session_hash: str) -> bool:
    """Whether Gradio has marked this session's running event as abandoned (its client disconnected).

    Gradio notices a departed client on the event stream and sets `alive = False` on its events, but a
    function that is not a generator is never told; it can only look.
    """
    queue = getattr(blocks, "_queue", None)
    for job_set in getattr(queue, "active_jobs", None) or []:
        for event in job_set or []:
            if getattr(event, "session_hash", None) == session_hash and not getattr(event, "alive", True):
                return True
    return False


# Gradio's queue looks for new work every millisecond while it has none, and for progress to send every 10 ms:
# on a CPU each wake-up takes the GIL from the timed generate() running on another thread of this process. An
# idle server used 4% of a core that way, and plain runs took 9-13% longer than with no server in the process
# (tests/bench_page_vs_cli.py). Admitting a request or sending progress 50 and 100 ms later costs nothing here.
QUEUE_POLL_S = 0.05
PROGRESS_POLL_S = 0.1


def quiet_queue(blocks: gr.Blocks) -> None:
    """Make Gradio's queue poll at QUEUE_POLL_S and PROGRESS_POLL_S instead of every 1 and 10 ms."""
    queue = blocks._queue
    for name, value in (("sleep_when_free", QUEUE_POLL_S), ("progress_update_sleep_when_free", PROGRESS_POLL_S)):
        if not hasattr(queue, name):
            raise RuntimeError(f"gradio's queue has no {name!r}: check gradio_private against this gradio version")
        setattr(queue, name, value)
