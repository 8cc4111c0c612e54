"""When the vLLM servers AssistLab starts cannot all be held at once: the plan, made before any server starts
(all at once, or in turns), and the turns themselves with vLLM's sleep mode (CUDA, ROCm): one server awake at
a time, woken before an arm's run and put to sleep after it, outside every timed span.

A 27B target in bfloat16 is 54 GB: one 80 GB GPU cannot hold it twice, so plain against assisted cannot run
side by side there. With sleep mode every server starts (one after another, each put to sleep once ready), and
each run wakes its arm's server (`POST /wake_up`: the weights back from CPU memory in seconds, not a reload's
minutes), times it, and puts it back to sleep (`POST /sleep?level=1`: the weights to CPU memory, the KV cache
dropped). The rotated order of the runs stays, so the interval keeps its meaning. vLLM's CPU build has no sleep
mode: there the servers take turns in blocks (measure/blocks.py orders the runs): one server at a time, started
afresh for each block of its arm's runs and stopped when another arm's block begins; the starts are untimed.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ...errors import AssistLabError, EngineError, InputError
from . import client
from .memory import Reservation, gb

TOGETHER, SLEEP, BLOCKS = "together", "sleep", "blocks"
TURNS_VAR = "ASSISTLAB_VLLM_TURNS"  # "auto" (default): turns only when they do not fit; "always": turns anyway
WAKE_VAR = "ASSISTLAB_VLLM_WAKE_S"  # the longest wait for a server to wake up or fall asleep
DEFAULT_WAKE_S = 300.0


def forced() -> bool:
    """Whether the operator asked for turns even where the servers fit together (ASSISTLAB_VLLM_TURNS=always)."""
    text = os.environ.get(TURNS_VAR, "").strip().lower()
    if text not in ("", "auto", "always"):
        raise InputError(f"{TURNS_VAR} must be auto or always, got {text[:40]!r}.")
    return text == "always"


def wake_timeout() -> float:
    text = os.environ.get(WAKE_VAR, "").strip()
    try:
        value = float(text) if text else DEFAULT_WAKE_S
    except ValueError:
        raise InputError(f"{WAKE_VAR} must be a number of seconds, got {text[:40]!r}.") from None
    if not 0 < value <= 3600:
        raise InputError(f"{WAKE_VAR} must be a number of seconds from 0 to 3600, got {text[:40]!r}.")
    return value


@dataclass(frozen=True)
class Plan:
    """How the servers are held: `design` TOGETHER or SLEEP; `refused` the arms that cannot run (label -> its
    sentence); `words` the design in a few plain words for the page, the command line and the report."""

    design: str
    words: str
    where: str = "memory"  # "memory" (RAM) or "GPU memory": where the reservations were counted
    need_bytes: int | None = None  # all the servers together
    free_bytes: int | None = None
    refused: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict:
        return {"design": self.design, "words": self.words, "where": self.where, "need_bytes": self.need_bytes,
                "free_bytes": self.free_bytes, "refused": sorted(self.refused)}


def _each(reservations: list[Reservation]) -> str:
    return "; ".join(f"{r.label} {gb(r.total)} (KV cache {gb(r.reserved_kv_bytes)}"
                     f"{f' for {r.sequences} requests at once' if r.sequences > 1 else ''}, weights "
                     f"{gb(r.weights_bytes)}, processes about {gb(r.overhead_bytes)})" for r in reservations)


def plan(reservations: list[Reservation], free: int | None, sleep_mode: bool, where: str = "memory",
         force: bool = False, host_free: int | None = None, servers: int | None = None) -> Plan:
    """All at once when every server fits in `free` (bytes; None: unknown, all at once), else in turns with
    sleep mode where the platform has it (one awake: the largest, with the others asleep, must fit; and the
    weights of those asleep, which level 1 moves to CPU memory, must fit in `host_free` when it is known). Only
    a server that cannot fit even alone (or, in turns, beside the others asleep) is refused with its sentence.
    Without sleep mode, servers that do not fit together take turns in blocks (BLOCKS): one at a time, each
    started afresh for its block of runs, so each needs only to fit alone."""
    need = sum(r.total for r in reservations)
    if force and not reservations and (servers or 0) > 1:  # vLLM sizes them (ASSISTLAB_VLLM_MEMORY): as asked
        return _asked(sleep_mode, where, None, free)
    if not reservations or free is None or (need <= free and not (force and len(reservations) > 1)):
        return Plan(TOGETHER, "all at once", where, need or None, free)
    if need <= free:  # forced: the operator asked for turns
        return _asked(sleep_mode, where, need, free)
    alone = {r.label: (f"The vLLM server for {r.label} alone needs about {gb(r.total)} and this machine has "
                       f"{gb(free)} of {where} free, so it was not started: {_each([r])}. Free {where}, lower "
                       f"load levels, a shorter context, or a smaller dtype.") for r in reservations if r.total > free}
    rest = [r for r in reservations if r.label not in alone]
    if sum(r.total for r in rest) <= free:
        return Plan(TOGETHER, "all at once", where, need, free, alone)
    why = "the target did not fit twice" if len(rest) == 2 else f"the {len(rest)} servers did not fit together"
    if not sleep_mode:  # one at a time, each started afresh for its arm's block of runs
        return Plan(BLOCKS, f"servers took turns in blocks (one at a time, each started afresh for its block; this "
                    f"vLLM has no sleep mode): {why} in {where} ({gb(need)} needed, {gb(free)} free)", where, need,
                    free, alone)
    # One awake (the largest), the others asleep: each keeps its processes (a CUDA context) on the device.
    largest = max(rest, key=lambda r: r.total)
    asleep = sum(r.overhead_bytes for r in rest if r is not largest)
    if largest.total + asleep > free:
        words = (f"The vLLM servers AssistLab would start cannot take turns either: one awake ({largest.label}, "
                 f"{gb(largest.total)}) beside the others asleep ({gb(asleep)} of processes) needs "
                 f"{gb(largest.total + asleep)} and this machine has {gb(free)} of {where} free, so none was started: "
                 f"{_each(rest)}. Run fewer vLLM arms at once, or free {where}.")
        return Plan(TOGETHER, "all at once", where, need, free, {**alone, **{r.label: words for r in rest}})
    parked = sum(r.weights_bytes for r in rest if r is not largest)
    if host_free is not None and parked > host_free:
        words = (f"The vLLM servers AssistLab would start cannot take turns: asleep, their weights ({gb(parked)}) "
                 f"move to CPU memory, and this machine has {gb(host_free)} of it free, so none was started: "
                 f"{_each(rest)}. Run fewer vLLM arms at once, or free memory.")
        return Plan(TOGETHER, "all at once", where, need, free, {**alone, **{r.label: words for r in rest}})
    return Plan(SLEEP, f"servers took turns (vLLM's sleep mode, one awake at a time): {why} in {where} "
                f"({gb(need)} needed, {gb(free)} free)", where, need, free, alone)


def _asked(sleep_mode: bool, where: str, need: int | None, free: int | None) -> Plan:
    """Turns because the operator asked for them (ASSISTLAB_VLLM_TURNS=always): sleep mode where vLLM has it,
    else blocks."""
    if not sleep_mode:
        return Plan(BLOCKS, f"servers took turns in blocks (one at a time, each started afresh for its block), "
                    f"as asked ({TURNS_VAR}=always)", where, need, free)
    return Plan(SLEEP, "servers took turns (vLLM's sleep mode, one awake at a time), as asked "
                f"({TURNS_VAR}=always)", where, need, free)


class Turns:
    """The servers' turns under sleep mode: which one is awake, and how long each wake and sleep took (the report's
    `vllm.turns.arms`). Nothing here is inside a timed span: `turn` wakes before the arm's run starts its clock
    and puts the server to sleep after the run's last reading."""

    def __init__(self, plan: Plan, timeout_s: float | None = None,
                 start: Callable[[object, Callable[[], bool], Callable[[str, float], None]], None] | None = None):
        self.plan = plan
        self.start = start  # in blocks: starts an endpoint's server afresh and waits for it (launch.start_fresh)
        self.timeout_s = wake_timeout() if timeout_s is None else timeout_s
        self.awake: object | None = None  # the endpoint awake now, if any
        self.arms: dict[str, dict] = {}  # label -> {"wakes", "wake_s", "sleeps", "sleep_s"}: raw seconds
        self._record = {**plan.record(), "arms": self.arms}

    @property
    def sleeping(self) -> bool:
        return self.plan.design == SLEEP

    @property
    def in_blocks(self) -> bool:
        return self.plan.design == BLOCKS

    def enter(self, endpoint, should_stop: Callable[[], bool], on_wait: Callable[[str, float], None]) -> bool:
        """In blocks: make `endpoint`'s server the one running (the one before is stopped first, so two never
        hold memory at once), started afresh and waited for; True when it was started here. A start that fails
        leaves its sentence in `endpoint.error` (launch.start_fresh)."""
        if self.awake is endpoint and endpoint.server is not None and not endpoint.error:
            return False
        if self.awake is not None:
            self.awake.server.stop()
            self.awake = None
        if self.start is None:
            endpoint.error = f"The vLLM server for {endpoint.label} has no way to start here, so it was not timed."
            return False
        began = time.perf_counter()
        self.start(endpoint, should_stop, on_wait)
        if endpoint.error or endpoint.server is None:
            return False
        self.awake = endpoint
        figures = self.arms.setdefault(endpoint.label, {"starts": 0, "start_s": [], "median_start_s": None})
        figures["starts"] += 1
        figures["start_s"].append(round(time.perf_counter() - began, 3))
        figures["median_start_s"] = statistics.median(figures["start_s"])
        return True

    def record(self) -> dict:
        """The report's `vllm.turns`: the plan, and per arm its wakes and sleeps (live: it grows as the run goes)."""
        for figures in self.arms.values():
            for kind in ("wake", "sleep") if self.sleeping else ():
                seconds = figures[f"{kind}_s"]
                figures[f"median_{kind}_s"] = statistics.median(seconds) if seconds else None
        return self._record

    def _figures(self, label: str) -> dict:
        return self.arms.setdefault(label, {"wakes": 0, "wake_s": [], "sleeps": 0, "sleep_s": [],
                                            "median_wake_s": None, "median_sleep_s": None})

    def _post(self, endpoint, path: str, what: str, should_stop: Callable[[], bool]) -> float:
        began = time.perf_counter()
        status, body = client.post(endpoint.url, path, endpoint.api_key, should_stop=should_stop,
                                   deadline_s=self.timeout_s)
        if status != 200:
            raise EngineError(f"The vLLM server for {endpoint.label} answered {path} with HTTP {status} "
                              f"({client.clip(body, endpoint.api_key, 200)}) while {what}.")
        return time.perf_counter() - began

    def sleep(self, endpoint, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Put `endpoint`'s server to sleep (level 1); on failure it is stopped and keeps the sentence in `error`."""
        try:
            seconds = self._post(endpoint, "/sleep?level=1", "falling asleep", should_stop)
        except client.Stopped:
            return  # a stop: the comparison ends and close() stops every server
        except AssistLabError as exc:
            self._fail(endpoint, "fall asleep", exc)
            return
        figures = self._figures(endpoint.label)
        figures["sleeps"] += 1
        figures["sleep_s"].append(round(seconds, 4))
        if self.awake is endpoint:
            self.awake = None
        self.record()

    def wake(self, endpoint, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Wake `endpoint`'s server (the one awake, if another, is put to sleep first); EngineError with the arm's
        sentence when it does not wake within the bounded wait (it is stopped then)."""
        if self.awake is not None and self.awake is not endpoint:
            self.sleep(self.awake, should_stop)
        if self.awake is endpoint:
            return
        try:
            seconds = self._post(endpoint, "/wake_up", "waking up", should_stop)
        except client.Stopped:
            raise
        except AssistLabError as exc:
            self._fail(endpoint, "wake up", exc)
            raise EngineError(endpoint.error) from None
        self.awake = endpoint
        figures = self._figures(endpoint.label)
        figures["wakes"] += 1
        figures["wake_s"].append(round(seconds, 4))
        self.record()

    def _fail(self, endpoint, what: str, exc: Exception) -> None:
        process = getattr(endpoint.server, "process", None)
        if process is not None and process.poll() is not None:  # gone: killed (out of memory) or crashed
            why = f"could not {what}: its process had ended (killed, e.g. for memory, or crashed)"
        else:
            why = f"did not {what} within {self.timeout_s:g} s ({WAKE_VAR})"
        endpoint.error = (f"The vLLM server for {endpoint.label} {why}, so it was stopped and this arm was not "
                          f"timed further: {str(exc).rstrip('.')}.")
        if endpoint.server is not None:
            endpoint.server.stop()
        if self.awake is endpoint:
            self.awake = None

    @contextlib.contextmanager
    def turn(self, endpoint, should_stop: Callable[[], bool]) -> Iterator[None]:
        """Around one untimed-edged run of an arm: wake its server, run, put it to sleep. In blocks, its server
        started when it is not the one running (the runner enters each block first: measure/blocks.py). Without
        turns, or for an operator's server, nothing. A server that failed to wake or sleep before raises its
        sentence."""
        if self.in_blocks and endpoint.arm.url is None:
            if endpoint.error is None:
                self.enter(endpoint, should_stop, lambda _label, _s: None)
            if endpoint.error:
                raise EngineError(endpoint.error)
            yield
            return
        if not self.sleeping or endpoint.server is None:
            yield
            return
        if endpoint.error:
            raise EngineError(endpoint.error)
        self.wake(endpoint, should_stop)
        try:
            yield
        finally:
            if not should_stop():  # on a stop the comparison ends and close() stops every server
                self.sleep(endpoint, should_stop)
