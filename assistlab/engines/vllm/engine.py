"""The vLLM arms of one comparison: where each one's server is (started here or the operator's), the checks a
person reads when one cannot run, and one timed request with the counters read around it."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ...errors import AssistLabError, EngineError
from . import answers, client, memory, methods, server
from .arms import VllmArm

# What the runs through a server cannot give, in every report that has such an arm.
SERVER_UNAVAILABLE = [
    {"figure": "token origins", "why": "vLLM's counters give a request's drafts in total and by position, not "
     "which of its tokens came from a draft"},
    {"figure": "drafting cost (c) and the cost model", "why": "the time a server spends drafting is not visible "
     "from outside it; AssistLab measures it only for transformers arms"},
]
NO_METRICS = {"figure": "acceptance", "why": "the server has no vllm:spec_decode counters on /metrics"}
NO_MEMORY = {"figure": "memory", "why": "the server is not on this machine (or not started by AssistLab)"}
SHARED_COUNTERS = {"figure": "exclusive counters", "why": "an operator's server counts every client's requests: "
                   "another client's request during a run would be counted in that run's acceptance"}
REMOTE_WATCH = {"figure": "busy-machine watch of the server", "why": "the watch reads this machine only; the "
                "operator's server runs elsewhere"}


@dataclass
class Endpoint:
    """Where one vLLM arm is served, and what it says about it; `error` is why it cannot run, if it cannot."""

    arm: VllmArm
    label: str
    url: str | None = None
    model: str | None = None
    server: server.Server | None = None
    settings: dict = field(default_factory=dict)
    unavailable: list[dict] = field(default_factory=list)
    error: str | None = None
    vocab_size: int | None = None  # the target's, to check the ids of every answer against

    @property
    def api_key(self) -> str | None:
        return self.arm.api_key

    @property
    def pids(self) -> tuple[int, ...]:
        """The server's processes (itself and its workers), whose CPU time is this arm's, not others'."""
        if self.server is None:
            return ()
        return self.server.process_ids()


def operator_endpoint(arm: VllmArm, target_names: tuple[str, ...],
                      should_stop: Callable[[], bool] = lambda: False) -> Endpoint:
    """An operator's server, checked: it answers, and it serves the target (by name, path or folder name;
    the folder, when it is the second name, also gives the vocabulary every answer is checked against)."""
    endpoint = Endpoint(arm, arm.label, url=arm.url, settings={"url": arm.url, "started_by": "operator"},
                        unavailable=[SHARED_COUNTERS, REMOTE_WATCH, NO_MEMORY, *SERVER_UNAVAILABLE],
                        vocab_size=answers.vocab_size(target_names[1] if len(target_names) > 1 else None))
    try:
        entries = client.served_models(arm.url, arm.api_key, should_stop=should_stop)
    except AssistLabError as exc:
        endpoint.error = str(exc)
        return endpoint
    wanted = {n for n in target_names if n} | {os.path.basename(n.rstrip("/")) for n in target_names if n}

    def names(entry: dict) -> set[str]:
        found = {entry["id"], str(entry.get("root") or "")}
        return found | {os.path.basename(n.rstrip("/")) for n in found}

    found = [e["id"] for e in entries if names(e) & wanted]
    models = [e["id"] for e in entries]
    if not found:
        shown = ", ".join(models[:5]) + (f" and {len(models) - 5} more" if len(models) > 5 else "")
        endpoint.error = (f"The server {arm.name} at {arm.url} serves {shown or 'no model'}, not the "
                          f"target {target_names[0]}; point --target at the model it serves, or the server at the target.")
        return endpoint
    endpoint.model = found[0]
    endpoint.settings["served_model"] = found[0]
    return endpoint


def start_servers(endpoints: list[Endpoint], python: server.VllmPython, folder: str, dtype: str,
                  max_model_len: int | None, draft_folders: dict[str, str], served_name: str) -> None:
    """Start a server for every endpoint that has none and no error yet (all at once: they load side by side).

    What a method needs (an EAGLE head, the target's MTP layers, arctic-inference) is checked first: an arm
    whose method cannot work gets its sentence and no server. Each server's KV cache is sized for the context
    (memory.kv_cache_bytes); when all of them together do not fit in the free memory none starts, and each
    arm says so with the figures.
    """
    planned = []
    for endpoint in endpoints:
        if endpoint.error or endpoint.url:
            continue
        arm = endpoint.arm
        try:
            needs = methods.prepare(arm, served_name, folder, python)
        except AssistLabError as exc:
            endpoint.error = str(exc)
            continue
        speculative = arm.speculative_config(draft_folders.get(arm.draft_model or ""))
        if speculative is not None:
            speculative.update(needs)
        planned.append((endpoint, speculative, _reservation(endpoint.label, folder, speculative, max_model_len,
                                                            dtype)))
    reservations = [r for _, _, r in planned if r is not None]
    refused = memory.refusal(reservations, memory.available_bytes())
    for endpoint, speculative, reservation in planned:
        endpoint.vocab_size = answers.vocab_size(folder)
        if refused:
            endpoint.error = refused
            continue
        try:
            endpoint.server = server.start(python, endpoint.label, folder, served_name, dtype, speculative,
                                           max_model_len, reservation=reservation)
        except (OSError, AssistLabError) as exc:
            endpoint.error = f"The vLLM server for {endpoint.label} could not be started: {exc}"
            continue
        endpoint.url, endpoint.model = endpoint.server.url, served_name
        endpoint.settings = {**endpoint.server.settings, "started_by": "assistlab", "vllm": python.vllm}
        endpoint.unavailable = list(SERVER_UNAVAILABLE)


def _reservation(label: str, folder: str, speculative: dict | None, context: int | None,
                 dtype: str) -> memory.Reservation | None:
    """What one server will reserve; None under the operator's ASSISTLAB_VLLM_MEMORY (vLLM sizes it then)."""
    draft = (speculative or {}).get("model")
    folders = [folder] + ([draft] if isinstance(draft, str) and os.path.isdir(draft) else [])
    kv = memory.kv_cache_bytes(folders, context or 2048, dtype)
    if server.memory_override() or kv is None:
        return None
    weights = sum(memory.weights_bytes(f) for f in folders)
    return memory.Reservation(label, kv, memory.cpu_space_gib(kv) * memory.GIB, weights)


def wait_all(endpoints: list[Endpoint], should_stop: Callable[[], bool], on_wait: Callable[[str, float], None]) -> None:
    """Wait for every started server; one that fails gets its error (and is stopped), the others go on."""
    timeout = server.start_timeout()
    for endpoint in endpoints:
        if endpoint.server is None or endpoint.error:
            continue
        try:
            endpoint.server.wait_ready(timeout, should_stop, lambda s, e=endpoint: on_wait(e.label, s))
        except EngineError as exc:
            endpoint.error = str(exc)
            endpoint.server.stop()
        if should_stop():
            return


def stop_all(endpoints: list[Endpoint]) -> None:
    for endpoint in endpoints:
        if endpoint.server is not None:
            endpoint.server.stop()


@dataclass
class Outcome:
    """One timed request: the stream, the counters' growth around it, the servers' memory after it."""

    streamed: client.Streamed
    counts: dict | None
    memory: int | None
    metrics: bool  # whether the server had the speculative-decoding counters


def _settled_metrics(endpoint: Endpoint, tries: int = 10, pause_s: float = 0.05,
                     should_stop: Callable[[], bool] = lambda: False) -> dict | None:
    """/metrics once the counters stop moving: vLLM records a step's counts just after sending its tokens."""
    last = client.read_metrics(endpoint.url, endpoint.api_key, should_stop=should_stop)
    for _ in range(tries):
        time.sleep(pause_s)
        now = client.read_metrics(endpoint.url, endpoint.api_key, should_stop=should_stop)
        if now == last:
            return now
        last = now
    return last


def _memory(endpoint: Endpoint) -> int | None:
    if endpoint.server is None:
        return None
    try:
        import psutil

        return sum(psutil.Process(pid).memory_info().rss for pid in endpoint.pids)
    except Exception:  # noqa: BLE001
        return None


def run_once(endpoint: Endpoint, prompt_ids: list[int], max_tokens: int, clock: Callable[[], float],
             should_stop: Callable[[], bool], window: Callable[[], contextlib.AbstractContextManager],
             fixed_length: bool = True, seed: int = 0) -> Outcome:
    """One streamed request between two clock readings, /metrics read before and after (outside the timing).

    An answer that is not the work asked (answers.problem) raises EngineError with its sentence: a failed run,
    never a measurement.
    """
    assisted = endpoint.arm.assisted
    try:
        before = _settled_metrics(endpoint, tries=0, should_stop=should_stop) if assisted else None
        body = client.completion_body(endpoint.model, prompt_ids, max_tokens, seed=seed, fixed_length=fixed_length)
        with window():
            streamed = client.stream_completion(endpoint.url, endpoint.api_key, body, clock, should_stop)
        if not streamed.stopped:
            wrong = answers.problem(streamed, endpoint.url, max_tokens, fixed_length, endpoint.vocab_size)
            if wrong:
                raise EngineError(wrong)
        after = _settled_metrics(endpoint, should_stop=should_stop) if assisted and not streamed.stopped else None
    except client.Stopped:
        return Outcome(client.Streamed(stopped=True), None, None, metrics=False)
    counts = client.counts_between(before, after)
    return Outcome(streamed, counts, _memory(endpoint), metrics=before is not None and before.get("drafts") is not None)


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield
