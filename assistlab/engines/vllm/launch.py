"""Starting the vLLM servers AssistLab starts, as the plan (turns.py) says: every arm checked, then all at once
(side by side) when they fit together, or one after another under sleep mode, each put to sleep once ready, or
each afresh for its blocks of runs where there is no sleep mode; and waiting for them, and stopping them.
Endpoints are engine.py's: where each arm is served and why it cannot run."""

from __future__ import annotations

import os
from collections.abc import Callable

from ...errors import AssistLabError, EngineError
from . import answers, memory, methods, server, turns
from . import schedule as schedules

# What the runs through a server cannot give, in every report that has such an arm.
SERVER_UNAVAILABLE = [
    {"figure": "token origins", "why": "vLLM's counters give a request's drafts in total and by position, not "
     "which of its tokens came from a draft"},
    {"figure": "drafting cost (c) and the cost model", "why": "the time a server spends drafting is not visible "
     "from outside it; AssistLab measures it only for transformers arms"},
]


def start_servers(endpoints: list, python: server.VllmPython, folder: str, dtype: str,
                  max_model_len: int | None, draft_folders: dict[str, str], served_name: str,
                  sequences: int = 1) -> turns.Plan:
    """Plan the servers every endpoint without one and without an error needs, then start them all at once (they
    load side by side) when they fit together; under the plan's turns none is started here: with sleep mode
    (turns.SLEEP) start_in_turns starts them one after another, each put to sleep once ready; in blocks
    (turns.BLOCKS) each starts afresh for each block of its runs (start_fresh, from Turns.enter).

    What a method needs (an EAGLE head, the target's MTP layers, arctic-inference) is checked first: an arm
    whose method cannot work gets its sentence and no server. Each server serves `sequences` requests at once
    (the highest load level) with a KV cache sized for that many of the context (memory.kv_cache_bytes). The
    plan (turns.plan) weighs what each will reserve against the free memory where it runs (the first GPU's,
    weights in the server's dtype, on a vLLM with sleep mode and a readable GPU; else the RAM): an arm that
    cannot run even alone (or, under sleep mode, beside the others asleep) says so with the figures.
    """
    planned = []
    gpu = memory.device_free_bytes() if python.sleep_mode else None
    for endpoint in endpoints:
        if endpoint.error or endpoint.url:
            continue
        arm = endpoint.arm
        if arm.schedule is not None and schedules.too_old(python.vllm):
            endpoint.error = (f"vLLM {python.vllm} cannot serve a schedule of draft lengths ({schedules.FIELD} came "
                              f"in vLLM {'.'.join(map(str, schedules.SINCE))}); upgrade the vLLM in "
                              f"{server.PYTHON_VAR}, or time a fixed K.")
            continue
        try:
            needs = methods.prepare(arm, served_name, folder, python)
        except AssistLabError as exc:
            endpoint.error = str(exc)
            continue
        speculative = arm.speculative_config(draft_folders.get(arm.draft_model or ""))
        if speculative is not None:
            speculative.update(needs)
            if endpoint.drafting is not None:
                speculative.update(endpoint.drafting.speculative(python))
        planned.append((endpoint, speculative, _reservation(endpoint.label, folder, speculative, max_model_len,
                                                            dtype, sequences, gpu=bool(gpu))))
    reservations = [r for _, _, r in planned if r is not None]
    ram = memory.available_bytes()
    plan = turns.plan(reservations, gpu[0] if gpu else ram, bool(python.sleep_mode),
                      "GPU memory" if gpu else "memory", force=turns.forced(), host_free=ram if gpu else None,
                      servers=len(planned))
    sleep_mode = plan.design == turns.SLEEP
    for endpoint, speculative, reservation in planned:
        endpoint.vocab_size = answers.vocab_size(folder)
        if endpoint.label in plan.refused:
            endpoint.error = plan.refused[endpoint.label]
            continue
        endpoint.launch = endpoint.starter = lambda e=endpoint, sp=speculative, r=reservation: _launch(
            e, python, folder, served_name, dtype, sp, max_model_len, r, sequences, sleep_mode)
        if plan.design == turns.TOGETHER:
            endpoint.launch()
    return plan


def _launch(endpoint, python: server.VllmPython, folder: str, served_name: str, dtype: str,
            speculative: dict | None, max_model_len: int | None, reservation: memory.Reservation | None,
            sequences: int, sleep_mode: bool) -> None:
    """Start one endpoint's server (not waiting for it); a failure to start becomes its sentence."""
    endpoint.launch = None
    try:
        endpoint.server = server.start(python, endpoint.label, folder, served_name, dtype, speculative,
                                       max_model_len, reservation=reservation, max_num_seqs=sequences,
                                       sleep_mode=sleep_mode)
    except (OSError, AssistLabError) as exc:
        endpoint.error = f"The vLLM server for {endpoint.label} could not be started: {exc}"
        return
    endpoint.url, endpoint.model, endpoint.max_num_seqs = endpoint.server.url, served_name, sequences
    endpoint.settings = endpoint.with_drafting({**endpoint.server.settings, "started_by": "assistlab",
                                                "vllm": python.vllm})
    endpoint.unavailable = list(SERVER_UNAVAILABLE)


def start_in_turns(endpoints: list, held: turns.Turns, should_stop: Callable[[], bool],
                   on_wait: Callable[[str, float], None]) -> None:
    """Under sleep mode: start the planned servers one after another, each put to sleep once it answers, so no
    two are ever awake (nor two sets of weights on the device); one that fails to start or to fall asleep is
    stopped and keeps its sentence, the others go on."""
    for endpoint in endpoints:
        if endpoint.launch is None or endpoint.error:
            continue
        if should_stop():
            return
        endpoint.launch()
        wait_all([endpoint], should_stop, on_wait)
        if endpoint.server is not None and not endpoint.error and not should_stop():
            held.awake = endpoint
            held.sleep(endpoint, should_stop)


def start_fresh(endpoint, should_stop: Callable[[], bool], on_wait: Callable[[str, float], None]) -> None:
    """In blocks (turns.BLOCKS): start `endpoint`'s server afresh and wait for it; a failure is its sentence."""
    if endpoint.starter is None:
        endpoint.error = endpoint.error or f"The vLLM server for {endpoint.label} was not planned, so it cannot start."
        return
    endpoint.starter()
    wait_all([endpoint], should_stop, on_wait)


def _reservation(label: str, folder: str, speculative: dict | None, context: int | None,
                 dtype: str, sequences: int = 1, gpu: bool = False) -> memory.Reservation | None:
    """What one server will reserve for `sequences` requests at once (on a GPU: weights in the server's dtype,
    its CUDA context and activations); None under the operator's ASSISTLAB_VLLM_MEMORY (vLLM sizes it then)."""
    draft = (speculative or {}).get("model")
    folders = [folder] + ([draft] if isinstance(draft, str) and os.path.isdir(draft) else [])
    kv = memory.kv_cache_bytes(folders, context or 2048, dtype, sequences)
    if server.memory_override() or kv is None:
        return None
    weights = sum(memory.weights_bytes(f, dtype) for f in folders)
    if gpu:  # the device holds exactly the KV cache asked; the CPU backend's whole GiB is RAM only
        return memory.Reservation(label, kv, kv, weights, memory.GPU_OVERHEAD_BYTES, sequences=sequences)
    return memory.Reservation(label, kv, memory.cpu_space_gib(kv) * memory.GIB, weights, sequences=sequences)


def wait_all(endpoints: list, should_stop: Callable[[], bool], on_wait: Callable[[str, float], None]) -> None:
    """Wait for every started server; one that fails gets its error (and is stopped), the others go on."""
    timeout = server.start_timeout()
    for endpoint in endpoints:
        if endpoint.server is None or endpoint.error:
            continue
        try:
            endpoint.server.wait_ready(timeout, should_stop, lambda s, e=endpoint: on_wait(e.label, s))
            endpoint.confirm_drafting()
        except EngineError as exc:
            schedule = endpoint.arm.schedule
            endpoint.error = (schedule is not None and schedules.refusal(endpoint.arm.method, schedule, str(exc))
                              or str(exc))
            endpoint.server.stop()
        if should_stop():
            return


def stop_all(endpoints: list) -> None:
    for endpoint in endpoints:
        if endpoint.server is not None:
            endpoint.server.stop()
