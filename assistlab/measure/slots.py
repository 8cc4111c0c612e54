"""Where a comparison runs: one slot per visible GPU (or one for the CPU), taken first come, first served.

A comparison takes one free GPU and runs entirely on it; one that spreads its target over every GPU
(device_map="auto"), or runs on the CPU, takes every slot. A `Job` runs a comparison on its own thread and
holds its slot until that thread's work has stopped, whoever stops reading it, so a cancelled request
never frees a device that is still busy. No gradio and no torch here: the device count is passed in.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
Clock = Callable[[], float]


@dataclass(frozen=True)
class Placement:
    """The slots a comparison holds: GPU indices on a GPU machine, slot 0 standing for the CPU otherwise."""

    slots: tuple[int, ...]
    cuda: bool

    @property
    def device(self) -> str:
        """The device its models load onto: 'cuda:N' (the first slot's GPU) or 'cpu'."""
        return f"cuda:{self.slots[0]}" if self.cuda else "cpu"


@dataclass(frozen=True)
class Waiting:
    """A job is queued: `place` is 1 for the next to run; `slots` is how many the machine has."""

    place: int
    slots: int

    def message(self) -> str:
        if self.place <= 1:
            return "Waiting for a free slot: you are next."
        plural = "s" if self.slots != 1 else ""
        return f"Waiting for a free slot: {self.place - 1} ahead of you ({self.slots} slot{plural} on this server)."


class SlotPool:
    """Every slot of one machine, handed out in strict arrival order.

    Strict order means a comparison that needs every GPU is not overtaken for ever by single-GPU ones: while
    it waits at the head of the queue, the others queue behind it.
    """

    def __init__(self, gpu_count: int) -> None:
        if gpu_count < 0:
            raise ValueError("gpu_count must be 0 or more")
        self.cuda = gpu_count > 0
        self._all = tuple(range(max(1, gpu_count)))
        self._free = set(self._all)
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        self._cond = threading.Condition()

    @property
    def size(self) -> int:
        return len(self._all)

    def busy(self) -> set[int]:
        with self._cond:
            return set(self._all) - self._free

    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    def _want(self, whole: bool) -> tuple[int, ...] | None:
        """The slots to take now, or None when they are not free."""
        if whole:
            return self._all if self._free == set(self._all) else None
        return (min(self._free),) if self._free else None

    def acquire(
        self,
        whole: bool = False,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        on_wait: Callable[[Waiting], None] | None = None,
        poll_s: float = 0.2,
    ) -> Placement | None:
        """Block until this caller's turn and its slots are free; None when `should_stop` says to give up.

        `whole` takes every slot (a spread target, or the CPU). `on_wait` hears the caller's place whenever
        it changes, before the wait starts too.
        """
        ticket = next(self._tickets)
        last: int | None = None
        with self._cond:
            self._queue.append(ticket)
            try:
                while True:
                    if self._queue[0] == ticket:
                        taken = self._want(whole)
                        if taken is not None:
                            self._free.difference_update(taken)
                            return Placement(taken, self.cuda)
                    if should_stop():
                        return None
                    place = self._queue.index(ticket) + 1
                    if on_wait is not None and place != last:
                        last = place
                        on_wait(Waiting(place, self.size))
                    self._cond.wait(poll_s)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next in line may now be at the head

    def release(self, placement: Placement) -> None:
        with self._cond:
            self._free.update(placement.slots)
            self._cond.notify_all()


def visible_gpus() -> int:
    """How many CUDA devices this process sees (0 without CUDA); the one CUDA call this module makes."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


_DONE = object()
ABANDONED = "abandoned"  # Job.stop_reason when nobody pulled for abandon_after_s


class Finished(Exception):
    """Raised by `Job.get()` once the job's work is over and every item has been read."""


class Job(Generic[T]):
    """One comparison on its own thread: wait for a placement, run `work(placement, should_stop)`, free it.

    The reader pulls items with `get()`: `Waiting` while queued, then whatever `work` yields; an exception
    in `work` is raised from `get()`. The work is told to stop when `stop()` is called or when nobody has
    pulled for `abandon_after_s`, a last resort for a reader that vanished unseen; `stop_reason` says which.
    The slots are released only after `work` has returned, on its own thread.

    With `lockstep`, the work waits after each item until the reader comes back for the next one: whatever the
    reader does with an item (building a report, drawing charts) is done before the next timed run starts.
    """

    def __init__(
        self,
        pool: SlotPool,
        work: Callable[[Placement, Callable[[], bool]], Iterator[T]],
        *,
        whole: bool = False,
        abandon_after_s: float = 5.0,
        lockstep: bool = False,
        clock: Clock = time.monotonic,
    ) -> None:
        self.pool, self.work, self.whole, self.lockstep = pool, work, whole, lockstep
        self.abandon_after_s, self.clock = abandon_after_s, clock
        self._stop = threading.Event()
        self.stop_reason: str | None = None  # what stop() was told, or ABANDONED
        self._items: queue.Queue = queue.Queue()
        self._last_pull = clock()
        self._given = 0  # items the work has handed over
        self._handled = 0  # items the reader is done with: all it had taken when it last came back
        self._taken = 0
        self._back = threading.Condition()
        self._finished = threading.Event()
        self.placement: Placement | None = None
        self.last: T | None = None  # the last item the work handed over (not a Waiting), read or not
        self._thread = threading.Thread(target=self._run, name="assistlab-job", daemon=True)

    def start(self) -> Job[T]:
        self._thread.start()
        return self

    def should_stop(self) -> bool:
        if not self._stop.is_set() and self.clock() - self._last_pull > self.abandon_after_s:
            self.stop(ABANDONED)  # nobody reads this job any more
        return self._stop.is_set()

    def stop(self, reason: str = "stopped") -> None:
        """Tell the work to stop; the first reason given is kept in `stop_reason`."""
        if not self._stop.is_set():
            self.stop_reason = reason
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def finished(self) -> bool:
        """True once the work has stopped and its slots are free again."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    def touch(self) -> None:
        """Say that someone still wants the result without pulling an item."""
        self._last_pull = self.clock()

    def _run(self) -> None:
        try:
            placement = self.pool.acquire(self.whole, should_stop=self.should_stop, on_wait=self._give)
            if placement is None:
                return
            self.placement = placement
            try:
                for item in self.work(placement, self.should_stop):
                    self._give(item)
                    if self.lockstep:
                        self._wait_for_reader()
            finally:
                self.pool.release(placement)
        except BaseException as exc:  # handed to the reader, who turns it into a message
            self._items.put(exc)
        finally:
            self._finished.set()
            self._items.put(_DONE)

    def _give(self, item: T | Waiting) -> None:
        with self._back:
            self._given += 1
            if not isinstance(item, Waiting):
                self.last = item
        self._items.put(item)

    def _wait_for_reader(self) -> None:
        """Until the reader is done with every item handed over so far, or the job is told to stop."""
        with self._back:
            while self._handled < self._given and not self.should_stop():
                self._back.wait(0.1)

    def get(self, timeout: float | None = None) -> T | Waiting | None:
        """The next item, None when none came within `timeout`; raises Finished when the job is over.

        Calling it says the reader is done with every item it took before.
        """
        self.touch()
        with self._back:
            self._handled = self._taken
            self._back.notify_all()
        try:
            item = self._items.get(timeout=timeout)
        except queue.Empty:
            return None
        finally:
            self.touch()
        if item is _DONE:
            self._items.put(_DONE)  # every later get() says so too
            raise Finished
        if isinstance(item, BaseException):
            raise item
        with self._back:
            self._taken += 1
        return item

    def items(self, heartbeat_s: float | None = None) -> Iterator[T | Waiting | None]:
        """Every item in order; with `heartbeat_s`, also None after each quiet `heartbeat_s` seconds."""
        while True:
            try:
                item = self.get(timeout=heartbeat_s)
            except Finished:
                return
            if item is not None or heartbeat_s is not None:
                yield item
