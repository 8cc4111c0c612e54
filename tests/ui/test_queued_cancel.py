"""A comparison cancelled while it still waits its turn never runs and is never saved (issue 29, item 11).

gradio_client cancels a job whose event id it has not heard yet (2 s after submit, on a busy machine) with
event_id null; Gradio refused that cancel, and the queued comparison later ran and was saved as complete.
"""

from __future__ import annotations

import time


from assistlab.history import History
from assistlab.measure.slots import SlotPool


QUICK = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
         "max_new_tokens": 16, "repeats": 2, "warmup": 0}
# Long enough to hold the slot well past the 2 s the queued one waits: 20 runs of 200 tokens (about 0.3 s each
# on the idle 2-core machine, plus the work between runs).
LONGER = {**QUICK, "max_new_tokens": 200, "repeats": 10}


def test_a_comparison_cancelled_while_queued_never_runs(models_dir, launch_app, tmp_path):
    import httpx
    from gradio_client import Client

    from assistlab.engines.transformers.models import ModelStore

    pool = SlotPool(0)
    history = History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    with launch_app(models_dir, ModelStore(max_models=4), pool=pool, history=history) as url:
        first = Client(url, verbose=False).submit(**LONGER, api_name="/compare")
        deadline = time.monotonic() + 120
        while not pool.busy():
            assert time.monotonic() < deadline, "the first comparison never started"
            time.sleep(0.05)
        client = Client(url, verbose=False)
        client.submit(**{**QUICK, "prompt": "queued then cancelled"}, api_name="/compare")
        time.sleep(2.0)
        assert pool.busy()  # still behind the first one
        cancel = httpx.post(f"{url}gradio_api/cancel", json={  # as gradio_client sends it without the id
            "session_hash": client.session_hash, "fn_index": client._infer_fn_index("/compare", None),
            "event_id": None})
        assert cancel.status_code == 200, cancel.text
        report = first.result(timeout=600)[0]
        assert report["status"] == "complete" and report["saved"]["id"]
        time.sleep(5.0)  # had the cancelled one started, it would hold the slot now
        assert not pool.busy()
        prompts = [e.prompt_preview for e in history.list().entries]
        assert history.count() == 1 and "queued then cancelled" not in " ".join(prompts), prompts
