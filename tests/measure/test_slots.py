"""One slot per GPU (issue 13), proven on a fake list of devices: no two runs share one, a spread run waits for
all, a failed or abandoned run frees its device, and the queue is first come, first served."""

from __future__ import annotations

import threading
import time

import pytest

from assistlab.measure.slots import Finished, Job, Placement, SlotPool, Waiting
from patience import patient

WAIT = patient(10.0)  # generous: the machine is shared while the tests run


class Log:
    """What each fake comparison did: (name, slots, start, end)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, tuple[int, ...], float, float]] = []
        self.started: list[str] = []
        self.lock = threading.Lock()

    def work(self, name: str, seconds: float = 0.05, gate: threading.Event | None = None, fail: bool = False):
        def run(placement: Placement, should_stop):
            start = time.monotonic()
            with self.lock:
                self.started.append(name)
            yield f"{name} started on {placement.device}"
            if gate is not None:
                while not gate.wait(0.01):
                    if should_stop():
                        break
            time.sleep(seconds)
            if fail:
                raise ValueError(f"{name} failed")
            with self.lock:
                self.rows.append((name, placement.slots, start, time.monotonic()))
            yield f"{name} done"

        return run


def drain(job: Job) -> list:
    items = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            item = job.get(timeout=0.05)
        except Finished:
            return items
        if item is not None:
            items.append(item)
    raise AssertionError("the job did not finish")


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def test_no_two_runs_share_a_gpu_and_all_gpus_are_used():
    pool, log = SlotPool(4), Log()
    gate = threading.Event()
    jobs = [Job(pool, log.work(f"run{i}", 0.02, gate)).start() for i in range(12)]
    readers = [threading.Thread(target=drain, args=(job,)) for job in jobs]
    for reader in readers:
        reader.start()
    wait_until(lambda: pool.busy() == {0, 1, 2, 3} and pool.waiting() == 8, "four run and eight wait")
    gate.set()
    for reader in readers:
        reader.join(WAIT)
    assert len(log.rows) == 12
    for gpu in range(4):
        spans = sorted((start, end) for _name, slots, start, end in log.rows if gpu in slots)
        assert all(end <= next_start for (_s, end), (next_start, _e) in zip(spans, spans[1:])), f"GPU {gpu} shared"
    assert {r[1] for r in log.rows} == {(0,), (1,), (2,), (3,)}
    assert pool.busy() == set()


def test_a_spread_run_waits_for_every_gpu_and_is_not_overtaken():
    pool, log = SlotPool(2), Log()
    gate = threading.Event()
    first = Job(pool, log.work("single", 0.0, gate)).start()
    assert first.get(timeout=WAIT) == "single started on cuda:0"
    spread = Job(pool, log.work("spread", 0.0), whole=True).start()
    wait_until(lambda: pool.waiting() == 1, "the spread run queues")
    later = Job(pool, log.work("later", 0.0)).start()
    wait_until(lambda: pool.waiting() == 2, "the later run queues")
    time.sleep(0.3)  # GPU 1 is free all this time, yet neither may start: the spread run is at the head
    assert log.started == ["single"]
    gate.set()
    for job in (first, spread, later):
        drain(job)
    assert log.started == ["single", "spread", "later"]
    spread_row = next(r for r in log.rows if r[0] == "spread")
    assert spread_row[1] == (0, 1)
    single_end = next(r[3] for r in log.rows if r[0] == "single")
    later_start = next(r[2] for r in log.rows if r[0] == "later")
    assert spread_row[2] >= single_end and later_start >= spread_row[3]


def test_a_failed_run_frees_its_gpu():
    pool, log = SlotPool(1), Log()
    failing = Job(pool, log.work("bad", 0.0, fail=True)).start()
    assert failing.get(timeout=WAIT) == "bad started on cuda:0"
    with pytest.raises(ValueError, match="bad failed"):
        failing.get(timeout=WAIT)
    assert failing.wait(WAIT) and pool.busy() == set()
    assert drain(Job(pool, log.work("next", 0.0)).start())[-1] == "next done"


def test_the_queue_is_first_come_first_served_and_tells_each_waiter_its_place():
    pool, log = SlotPool(1), Log()
    gate = threading.Event()
    holder = Job(pool, log.work("holder", 0.0, gate)).start()
    assert holder.get(timeout=WAIT) is not None
    waiters = []
    for i in range(4):
        waiters.append(Job(pool, log.work(f"w{i}", 0.0)).start())
        wait_until(lambda n=i + 1: pool.waiting() == n, f"{i + 1} wait")
    places = [w.get(timeout=WAIT) for w in waiters]
    assert places == [Waiting(1, 1), Waiting(2, 1), Waiting(3, 1), Waiting(4, 1)]
    assert places[2].message() == "Waiting for a free slot: 2 ahead of you (1 slot on this server)."
    gate.set()
    for job in [holder, *waiters]:
        items = drain(job)
    assert log.started == ["holder", "w0", "w1", "w2", "w3"]
    # The last waiter heard its place fall as the others ran (moves between its wake-ups are not all heard, and
    # a turn that comes as it wakes is taken at once, without a "you are next").
    heard = [i.place for i in [places[3], *items] if isinstance(i, Waiting)]
    assert heard[0] == 4 and heard == sorted(set(heard), reverse=True)


def test_an_unread_job_stops_and_frees_its_gpu():
    """A closed tab, a killed client or a cancelled handler: nobody pulls, so the work is told to stop."""
    now = [0.0]
    pool, log = SlotPool(1), Log()
    job = Job(pool, log.work("abandoned", 0.0, gate=threading.Event()), abandon_after_s=5.0,
              clock=lambda: now[0]).start()
    assert job.get(timeout=WAIT) == "abandoned started on cuda:0"
    time.sleep(0.2)
    assert not job.finished  # still read recently (by the fake clock): keeps running
    now[0] = 6.0  # nobody has pulled for six seconds
    assert job.wait(WAIT) and job.stopped
    assert pool.busy() == set()


def test_stop_while_queued_leaves_the_queue_without_running():
    pool, log = SlotPool(1), Log()
    gate = threading.Event()
    holder = Job(pool, log.work("holder", 0.0, gate)).start()
    holder.get(timeout=WAIT)
    queued = Job(pool, log.work("queued", 0.0)).start()
    wait_until(lambda: pool.waiting() == 1, "the second job queues")
    queued.stop()
    assert queued.wait(WAIT) and pool.waiting() == 0
    gate.set()
    drain(holder)
    assert log.started == ["holder"]


def test_a_cpu_only_machine_has_one_slot():
    pool, log = SlotPool(0), Log()
    assert pool.size == 1 and not pool.cuda
    jobs = [Job(pool, log.work(f"cpu{i}", 0.05)).start() for i in range(3)]
    for job in jobs:
        assert [i for i in drain(job) if isinstance(i, str)][0].endswith("on cpu")
    spans = sorted((r[2], r[3]) for r in log.rows)
    assert all(end <= start for (_s, end), (start, _e) in zip(spans, spans[1:]))
    assert Placement((0,), False).device == "cpu" and Placement((3,), True).device == "cuda:3"


def test_a_lockstep_job_waits_until_the_reader_is_done_with_each_item():
    """The page draws between timed runs only: the work does not go on while the reader handles an item."""
    produced: list[int] = []

    def work(placement: Placement, should_stop):
        for i in range(3):
            produced.append(i)
            yield i

    job = Job(SlotPool(0), work, lockstep=True).start()
    assert job.get(timeout=WAIT) == 0
    time.sleep(0.3)  # the reader is busy with item 0 (drawing charts): nothing new is produced meanwhile
    assert produced == [0]
    assert job.get(timeout=WAIT) == 1  # coming back for the next item releases the work
    time.sleep(0.3)
    assert produced == [0, 1]
    assert drain(job) == [2]


def test_a_job_that_is_not_lockstep_runs_ahead_of_its_reader():
    produced: list[int] = []

    def work(placement: Placement, should_stop):
        for i in range(3):
            produced.append(i)
            yield i

    job = Job(SlotPool(0), work).start()
    assert job.wait(WAIT)
    assert produced == [0, 1, 2] and drain(job) == [0, 1, 2]


def test_a_lockstep_job_whose_reader_left_stops_instead_of_waiting_for_ever():
    now = [0.0]

    def work(placement: Placement, should_stop):
        for i in range(100):
            yield i

    job = Job(SlotPool(0), work, lockstep=True, abandon_after_s=5.0, clock=lambda: now[0]).start()
    assert job.get(timeout=WAIT) == 0
    time.sleep(0.2)
    assert not job.finished
    now[0] = 6.0  # the reader never came back
    assert job.wait(WAIT) and job.stopped
