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
