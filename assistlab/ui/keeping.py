"""Runs kept however their request ends: a cancelled request's run saved once it stops, and at the server's
shutdown every run still going stopped and saved as stopped; each run's report saved once, whoever comes first."""

from __future__ import annotations

import threading
import time

from ..history import History, savable
from ..measure.slots import Finished, Job
from ..results.events import Event

TERMINATED = "terminated"  # Job.stop_reason at the server's shutdown
SHUT_DOWN = "the server was shut down"  # its words: "Stopped: the server was shut down, after 2 of 5 repetitions."
WAIT_S = 30.0  # the longest the shutdown waits for its runs to stop and their saves to end
DRAIN_S = 1.0  # how often a cancelled run's drain looks for its next event


class Kept:
    """The jobs a page started, with the login name each is saved under, and who has saved which."""

    def __init__(self, history: History | None) -> None:
        self.history = history
        self.closing = False  # set when the server shuts down
        self._jobs: dict[Job, str | None] = {}
        self._saves: dict[Job, threading.Event] = {}  # job -> set once its save is done
        self._lock = threading.Lock()

    def add(self, job: Job, owner: str | None) -> None:
        with self._lock:
            for old in [j for j in self._jobs if j.finished and (j not in self._saves or self._saves[j].is_set())]:
                self._jobs.pop(old)  # over, and saved by its reader or here
                self._saves.pop(old, None)
            self._jobs[job] = owner

    def claim(self, job: Job) -> threading.Event | None:
        """The right to save `job`'s report, once per job whoever comes first (its request, a cancelled request's
        drain, the shutdown): an Event to set once the save is done (the shutdown waits for it), or None."""
        with self._lock:
            if job in self._saves:
                return None
            done = self._saves[job] = threading.Event()
            return done

    def save_stopped(self, job: Job, final: Event | None, owner: str | None, why: str | None = None) -> bool:
        """Save the report of `final`, a job's last event, if nobody saved it yet (`claim`), by the history's rule
        (`savable`); `why` says in its message why it stopped."""
        if self.history is None or not isinstance(final, Event) or final.kind != "done" or final.report is None:
            return False
        done = self.claim(job)
        if done is None:
            return False
        try:
            report = final.report
            if why and report.status == "stopped" and not report.message.startswith("Stopped:"):
                rest = report.message
                report.message = (f"Stopped: {why}, {rest[len('Stopped '):]}" if rest.startswith("Stopped after")
                                  else f"Stopped: {why}. {rest}")
            data = report.to_dict()
            return savable(data) and bool(self.history.save(data, owner=owner).saved)
        finally:
            done.set()

    def save_unfinished(self, wait_s: float = WAIT_S) -> int:
        """At the server's shutdown (SIGTERM, Ctrl-C): stop every job still running, wait up to `wait_s` for them
        to end as Stop ends them, and save what each measured as stopped; nothing reads them any more. Saves
        already under way (a request's, a cancelled request's) are waited for too. Returns how many it saved."""
        self.closing = True
        with self._lock:
            running = [(job, owner) for job, owner in self._jobs.items() if not job.finished]
        for job, _owner in running:
            job.stop(TERMINATED)
        deadline = time.monotonic() + wait_s
        saved = 0
        for job, owner in running:
            job.wait(max(0.0, deadline - time.monotonic()))
            saved += self.save_stopped(job, job.last, owner, SHUT_DOWN)
        with self._lock:
            under_way = list(self._saves.values())
        for done in under_way:
            done.wait(max(0.0, deadline - time.monotonic()))
        return saved

    def save_when_over(self, job: Job, owner: str | None, final: Event | None = None) -> None:
        """Save a run nobody waits for any more (a cancelled request), as a stopped one is saved: once its work
        has stopped, on a thread of its own. `final` is its last event the request had read, if any."""
        if self.history is None:
            return

        def drain(final: Event | None) -> None:
            while True:
                try:
                    item = job.get(timeout=DRAIN_S)
                except Finished:
                    break
                except Exception:  # noqa: BLE001 - it failed: there is nothing to save
                    return
                if isinstance(item, Event):
                    final = item
            self.save_stopped(job, final, owner)

        threading.Thread(target=drain, args=(final,), name="assistlab-save-cancelled", daemon=True).start()
