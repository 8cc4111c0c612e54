"""Session plumbing: the runner bound to the app's store, per-session stop flags, report files, and the one
place package errors become messages on the page.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..config import BenchRequest
from ..engines.transformers import models as models_mod
from ..engines.transformers.models import ModelStore
from ..errors import AssistLabError
from ..history import History
from ..measure import contention, suite_runner, sweep, tune
from ..measure.runner import run_benchmark
from ..measure.slots import ABANDONED, Job, Placement, SlotPool, Waiting
from ..results.events import Event
from ..results.report import Report
from ..results.suite_inputs import Selection
from ..views.progress import aged, event_progress, progress_html
from .api_parameters import FORM_FIELDS
from .keeping import SHUT_DOWN, TERMINATED, Kept
from .fields import SweepPlan, in_page_words, request_from_form

log = logging.getLogger(__name__)

QUEUE_SIZE = 16  # people waiting beyond this are told the queue is full instead of waiting for ever
GPU_GROUP = "gpu"  # every event that runs a model shares this group; as many run at once as there are slots
REPORT_FILES_MAX_AGE_S = 3600  # report files older than this go at the next write
# A streaming handler yields at least this often, so gradio can close it promptly when its request is cancelled.
# Each yield is a message the browser handles: at 0.25 s, a browser on the same machine used 0.08 cores doing so
# while the runs were timed.
HEARTBEAT_S = 1.0
# Between events the progress line is drawn again this often, its times moved on (views.progress.aged): a step
# with no event for minutes (a warm-up run of a large model) then still shows its time passing. One small
# update every 2 s is less than the heartbeat's messages above.
TICK_S = 2.0
# A run stops when its person presses Stop, when its page is closed (gradio's unload, or gradio marking the
# client gone, looked at every CLIENT_CHECK_S), or when its request is cancelled (gradio closes the handler).
# Nobody reading it for ABANDON_S is only the last resort for a reader that vanished unseen: on a busy machine
# (load 5-8 on 2 cores) gradio took longer than the 3 s this once was to come back for the next update while a
# model loaded, and the run stopped by itself.
ABANDON_S = 120.0
CLIENT_CHECK_S = 0.5
# Why a run stopped, for its last line: "Stopped: you pressed Stop, after 1 of 5 repetitions."
PRESSED, CLOSED, CANCELLED = "pressed", "closed", "cancelled"
STOPPED_BECAUSE = {
    PRESSED: "you pressed Stop",
    CLOSED: "the page was closed",
    CANCELLED: "the request was cancelled",
    TERMINATED: SHUT_DOWN,
    ABANDONED: f"nothing read its progress for {ABANDON_S:g} s",
}
# Listener options for instant, page-only events.
LIGHT = {"queue": False, "api_visibility": "private"}


@dataclass(frozen=True)
class SuitePlan:
    """A workload instead of one prompt: the selected prompts, each run with the request's settings."""

    selection: Selection


@dataclass(frozen=True)
class TunePlan:
    """A search over candidate settings (measure/tune.py): the request's arms are the candidates."""

    def apply(self, request: BenchRequest) -> BenchRequest:
        return request


Plan = SweepPlan | SuitePlan | TunePlan | None


def gpu_seconds(request: BenchRequest, plan: Plan = None) -> int:
    """A generous guess at how long a request holds the GPU, for ZeroGPU's per-call duration."""
    if isinstance(plan, SuitePlan):
        estimate = suite_runner.estimate_runs(request, plan.selection, "cuda")
        runs = estimate["timed_runs"] + estimate["warmup_runs"]
        return int(min(3600, 60 + runs * estimate["new_tokens"] * 0.1))
    resolved = (plan.apply(request) if plan is not None else request).resolved("cuda")
    runs = (resolved.warmup + resolved.repeats) * (1 + len(resolved.arms))
    # ~0.1 s per token covers a 27B target in bfloat16; loading is the fixed part.
    return int(min(1800, 60 + runs * resolved.max_new_tokens * 0.1))


def _events(request: BenchRequest, store: ModelStore, plan: Plan, should_stop) -> Iterator[Event]:
    if isinstance(plan, SuitePlan):
        return suite_runner.run_suite(request, plan.selection, store, should_stop=should_stop)
    if plan is None:
        return run_benchmark(request, store, should_stop=should_stop)
    if isinstance(plan, TunePlan):
        return tune.tune(request, store, should_stop=should_stop)
    return sweep.sweep(request, store, plan.param, plan.values, plan.schedules, should_stop=should_stop)


Stream = Callable[[BenchRequest, Callable[[], bool], Plan], Iterator[Event]]


def _gpu_runner(store: ModelStore) -> Stream:
    """The runner (or a sweep) bound to the app's store; on a ZeroGPU Space, inside spaces.GPU."""

    def stream(request: BenchRequest, should_stop: Callable[[], bool], plan: Plan = None
               ) -> Iterator[Event]:
        yield from _events(request, store, plan, should_stop)

    try:
        import spaces  # only present on Hugging Face Spaces
    except ImportError:
        return stream

    # ZeroGPU runs the call in another process and pickles its arguments, so the stop flag cannot go along:
    # there a run ends when it is done, when gradio stops reading it, or when its GPU time is up.
    def zero_stream(request: BenchRequest, plan: Plan = None) -> Iterator[Event]:
        yield from _events(request, store, plan, lambda: False)

    on_gpu = spaces.GPU(duration=gpu_seconds)(zero_stream)
    return lambda request, stop, plan=None: on_gpu(request, plan)


# ---------------------------------------------------------------- per-session stop flags and report files


class StopFlag(threading.Event):
    """A session's stop flag, with why it was set (PRESSED, CLOSED): the run's last line says which."""

    reason: str | None = None


class SessionStops:
    """One stop flag per browser session: Stop sets it, a closed tab sets it, Run clears it."""

    def __init__(self) -> None:
        self._flags: dict[str, StopFlag] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, session: str) -> Iterator[threading.Event]:
        """Mark the session's run as in progress while the block runs; yields its stop flag."""
        with self._lock:
            self._running.add(session)
        try:
            yield self.flag(session)
        finally:
            with self._lock:
                self._running.discard(session)

    def is_running(self, session: str) -> bool:
        with self._lock:
            return session in self._running

    def flag(self, session: str) -> StopFlag:
        with self._lock:
            return self._flags.setdefault(session, StopFlag())

    def arm(self, session: str) -> None:
        flag = self.flag(session)
        flag.clear()
        flag.reason = None

    def stop(self, session: str, reason: str = PRESSED) -> None:
        flag = self.flag(session)
        if not flag.is_set():
            flag.reason = reason
        flag.set()

    def forget(self, session: str) -> None:
        with self._lock:
            flag = self._flags.pop(session, None)
        if flag is not None:
            if not flag.is_set():
                flag.reason = CLOSED
            flag.set()


def write_private(path: Path, text: str) -> None:
    """Write a file only this server's user can read (mode 600): gradio's copy of it, made when it is offered for
    download, keeps that mode in the shared temporary folder."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file written again keeps its old mode otherwise
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)


REPORTS_PREFIX = "assistlab-reports-"  # + the owning process's id + "-" + random: assistlab-reports-4242-x1y2


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: running
        return True
    return True


def prune_left_reports(parent: Path | None = None) -> list[Path]:
    """Remove the report folders that processes no longer running left in `parent` (the temporary folder).

    A folder's name holds the id of the process that made it; a running process's folder is never touched
    (a reused id only keeps a folder longer). Folders without an id (from before ids were written) are kept.
    """
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{REPORTS_PREFIX}*"):
        pid = folder.name[len(REPORTS_PREFIX):].partition("-")[0]
        if folder.is_dir() and not folder.is_symlink() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class ReportFiles:
    """The app's own folder of downloadable reports, one subfolder per finished run, and the named folders
    parts of the app keep (`folder`), which pruning never removes (only their old files)."""

    def __init__(self, root: Path | None = None) -> None:
        if not root:
            prune_left_reports()  # what a killed server left behind, before this one adds its own
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix=f"{REPORTS_PREFIX}{os.getpid()}-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._kept: set[str] = set()
        # A folder the app made for itself goes with the server: at close(), or when the process exits.
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.root), True) if not root else None

    def close(self) -> None:
        if self._remove is not None:
            self._remove()

    def folder(self, name: str) -> Path:
        """A folder the app keeps under the root (made again if someone removed it); call it at each use."""
        self._kept.add(name)
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, report: Report) -> tuple[str, str]:
        self._prune()
        folder = self.root / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        json_path, csv_path = folder / "assistlab-report.json", folder / "assistlab-runs.csv"
        write_private(json_path, report.to_json())
        write_private(csv_path, report.to_csv())
        return str(json_path), str(csv_path)

    def _prune(self, now: float | None = None) -> None:
        cutoff = (time.time() if now is None else now) - REPORT_FILES_MAX_AGE_S
        for old in self.root.iterdir():
            with contextlib.suppress(OSError):  # another request may be pruning the same folder
                if old.name in self._kept:  # a folder the app needs stays; its old files go
                    for item in old.iterdir():
                        if item.is_file() and item.stat().st_mtime < cutoff:
                            item.unlink(missing_ok=True)
                elif old.is_dir() and old.stat().st_mtime < cutoff:
                    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def user_errors(words: Callable[[str], str] = str) -> Iterator[None]:
    """The one place package errors become messages on the page; nothing else shows a traceback.

    `words` rewrites a message for its reader: the page passes `in_page_words`, so a field is named by the label
    a person sees; the API keeps the parameter names its callers write.
    """
    try:
        yield
    except gr.Error:
        raise
    except AssistLabError as exc:
        raise gr.Error(words(str(exc)), title="Could not run the comparison", print_exception=False) from None
    except Exception as exc:  # a bug, not the user's doing: log it, keep serving, say so plainly
        log.exception("unexpected error in a comparison")
        raise gr.Error(
            f"Something unexpected went wrong ({type(exc).__name__}). The server log has the details; "
            f"the app is still running, so you can try again.",
            title="Unexpected error",
            print_exception=False,
        ) from None



def _why(stop: StopFlag, job: Job | None) -> str | None:
    """Why a run stopped, in words, when this page stopped it (None when the runner stopped by its own rule)."""
    if stop.is_set():
        return STOPPED_BECAUSE.get(stop.reason or PRESSED)
    if job is not None and job.stopped:
        return STOPPED_BECAUSE.get(job.stop_reason or "")
    return None


def _not_started(stop: StopFlag, job: Job | None) -> str:
    why = _why(stop, job)
    return f"Stopped before it started: {why}." if why else "Stopped before it started."


def _say_why(event: Event, stop: StopFlag, job: Job) -> Event:
    """A stopped comparison's last event, its message (and its report's) saying why: 'Stopped: you pressed
    Stop, after 1 of 5 repetitions.'"""
    report = event.report
    why = _why(stop, job) if event.kind == "done" and report is not None and report.status == "stopped" else None
    if why is None or event.message.startswith("Stopped:"):
        return event
    rest = event.message
    message = f"Stopped: {why}, {rest[len('Stopped '):]}" if rest.startswith("Stopped after") else f"Stopped: {why}. {rest}"
    if report.message == event.message:
        report.message = message
    return dataclasses.replace(event, message=message)


def repetition_end(event: Event) -> bool:
    """Whether the page redraws its results on this event: a counted repetition has ended, or the comparison."""
    return event.kind == "done" or event.round_done and not event.warmup


@dataclass
class Page:
    """What every part of the page shares: the runner, the slots, stop flags, report files and the form's inputs."""

    stream: Stream
    stops: SessionStops
    files: ReportFiles
    inputs: list  # the form's components, in FORM_FIELDS order
    pool: SlotPool
    history: History | None = None  # where finished comparisons are saved; None saves nothing
    # Every button that starts a run on this page (Run, the sweep buttons, the workload's Run): all are off
    # while one of this page's runs is under way, so a second press can neither hide nor drop the first.
    run_buttons: tuple = ()
    # Whether gradio has seen this session's client go (gradio_private.client_gone, bound to the page's Blocks).
    client_gone: Callable[[str], bool] = lambda session: False
    # The jobs started, so that what is still running at the server's shutdown is saved (ui/keeping.py).
    kept: Kept = dataclasses.field(default=None)

    def __post_init__(self) -> None:
        if self.kept is None:
            self.kept = Kept(self.history)

    @property
    def closing(self) -> bool:
        """Whether the server is shutting down: the page's own readers then leave saving to the shutdown."""
        return self.kept.closing

    @property
    def heavy(self) -> dict:
        """Listener options for every event that runs a model: gradio admits one per slot; the pool places it.

        Not gradio's progress overlay: its timer and spinner animate for the whole run, and a browser on the
        same machine drawing them took 0.2 cores from the timed runs. The page's own bar says more.
        """
        return {"concurrency_id": GPU_GROUP, "concurrency_limit": self.pool.size, "api_visibility": "private",
                "show_progress": "hidden"}

    def start_job(self, request: BenchRequest, should_stop: Callable[[], bool], plan: Plan = None,
                  redraws: Callable[[Event], bool] | None = None, owner: str | None = None) -> Job:
        """Run one comparison on its own thread, on a free GPU (every GPU for a spread target or the CPU).

        Its slot is held until the runner has returned, whatever happens to the request that started it.
        With `redraws` (for a page that draws what it reads), the job is in lockstep with its reader (see
        `Job`), and after each event `redraws` names, the next run waits for the machine to settle
        (`contention.settle`): a browser on this machine draws the charts it was just sent.
        """
        whole = not self.pool.cuda or request.device == "cpu" or request.device_map_auto

        def work(placement: Placement, job_should_stop: Callable[[], bool]) -> Iterator[Event]:
            with models_mod.placed_on(placement.slots if placement.cuda else ()):
                def stopping() -> bool:
                    return job_should_stop() or should_stop()

                for event in self.stream(request, stopping, plan):
                    yield event
                    if redraws is not None and event.kind != "done" and redraws(event):
                        contention.settle(should_stop=stopping)

        job = Job(self.pool, work, whole=whole, abandon_after_s=ABANDON_S, lockstep=redraws is not None)
        self.kept.add(job, owner)
        return job.start()

    def claim(self, job: Job) -> threading.Event | None:
        return self.kept.claim(job)

    def save_unfinished(self, wait_s: float = 30.0) -> int:
        return self.kept.save_unfinished(wait_s)

    def form_request(self, data: dict) -> BenchRequest:
        """The request a {component: value} dict from the form describes."""
        names = {component: name for name, component in zip(FORM_FIELDS, self.inputs)}
        return request_from_form(**{names[c]: value for c, value in data.items() if c in names})

    def streamed(self, session: str, progress: gr.HTML, prepare: Callable, render: Callable,
                 redraws: Callable = repetition_end, owner: str | None = None):
        """Run the comparison `prepare()` describes ((request, plan or None)) for one session, yielding
        `render(event)`; a failure ends in the progress bar. `render` draws results only on events `redraws`
        names; each timed run starts after the page has drawn (see `start_job`).

        The work runs in a Job. This handler yields at least every HEARTBEAT_S, so a cancel closes it promptly;
        closing it (or gradio ceasing to read it) stops the work, which frees its slot when it has stopped.
        """
        event, job = None, None
        try:
            with user_errors(in_page_words), self.stops.running(session) as stop:
                if stop.is_set():  # Stop was pressed while this run waited in the queue
                    yield {progress: progress_html(_not_started(stop, None), 0.0, "stopped")}
                    return
                request, plan = prepare()
                job = self.start_job(request, self._watching(session, stop), plan, redraws=redraws, owner=owner)
                came = drawn = time.monotonic()  # when the last event came, and when its line was last drawn
                for item in job.items(heartbeat_s=HEARTBEAT_S):
                    now = time.monotonic()
                    if item is None and event is not None and event.kind != "done" and now - drawn >= TICK_S:
                        drawn = now  # its step goes on: the same line with its times moved on
                        yield {progress: event_progress(aged(event, now - came))}
                    elif item is None:
                        yield gr.skip()  # nothing new; lets gradio see a cancel or a departed client
                    elif isinstance(item, Waiting):
                        yield {progress: progress_html(item.message(), None)}
                    else:
                        event = _say_why(item, stop, job)
                        came = drawn = now
                        yield render(event)
                if event is None:  # stopped while it waited for a slot
                    yield {progress: progress_html(_not_started(stop, job), 0.0, "stopped")}
        except gr.Error as exc:
            # The message goes under Run and Stop, in red, rather than into a toast: a toast covers the buttons
            # (at the top right on a wide screen, across the whole width on a phone).
            done, total = (event.done, event.total) if event is not None else (0, 0)
            yield {progress: progress_html(f"Failed: {exc.message}", done / total if total else 0.0, "failed")}
        finally:
            if job is not None:
                job.stop(CANCELLED)  # a no-op when it has finished; else gradio closed this handler

    def _watching(self, session: str, stop: StopFlag) -> Callable[[], bool]:
        """The run's stop check: its flag, which a departed client sets too (looked at every CLIENT_CHECK_S)."""
        last = [float("-inf")]

        def should_stop() -> bool:
            now = time.monotonic()
            if not stop.is_set() and now - last[0] >= CLIENT_CHECK_S:
                last[0] = now
                if self.client_gone(session):
                    self.stops.stop(session, CLOSED)
            return stop.is_set()

        return should_stop

    def save_when_over(self, job: Job, owner: str | None, final: Event | None = None) -> None:
        """Save a comparison nobody waits for any more (a cancelled request), as a stopped one is saved: once its
        work has stopped, on a thread of its own (ui/keeping.py)."""
        self.kept.save_when_over(job, owner, final)

    def waiting_for_slot(self, session: str, progress: gr.HTML, hidden: tuple) -> dict:
        """Clear the session's stop flag and say it is queued, hiding what the previous run offered; every run
        button is switched off until `buttons_back` (listen with `run_listeners`)."""
        self.stops.arm(session)
        return {
            progress: progress_html("Waiting for a free slot...", None),
            **{component: gr.update(visible=False) for component in hidden},
            **{button: gr.update(interactive=False) for button in self.run_buttons},
        }

    def buttons_back(self) -> dict:
        """Every run button on again: the run has ended, failed or been stopped."""
        return {button: gr.update(interactive=True) for button in self.run_buttons}

    def run_listeners(self, button: gr.Button, arm: Callable, arm_outputs: list, stream: Callable, inputs,
                      outputs: list, progress: gr.HTML) -> None:
        """Press `button`: `arm` (page only: buttons off, old result hidden), then `stream` on a slot, then the
        run buttons on again, whether the stream ended, failed or was stopped."""
        button.click(arm, None, [*arm_outputs, *self.run_buttons], **LIGHT).then(
            stream, inputs, outputs, show_progress_on=[progress], **self.heavy,
        ).then(self.buttons_back, None, list(self.run_buttons), **LIGHT)

    def request_stop(self, request: gr.Request):
        running = self.stops.is_running(request.session_hash)
        self.stops.stop(request.session_hash)  # also when queued: the run then ends before it starts
        if running:
            return progress_html("Stopping after the current run...", None)
        return gr.update()
