"""What else used the machine during the timed runs: other processes' CPU time, and on CUDA the GPU.

Each timed generate() call is one window: CPU times are read just before its clock starts and just after it
stops (two reads of /proc, well under a millisecond, outside the timed span), so the figures cover the timed
runs and nothing between them. Others' CPU time is the machine's busy time minus this process's, plus time
the hypervisor stole. On CUDA, NVML (the `nvidia-ml-py` package) gives the GPU's other processes and their
share of it; without the package or a driver the GPU part is recorded as unavailable, never an error.

Thresholds (a result is flagged `busy-machine` at or above either):
- CPU_BUSY_CORES = 0.25: a quarter of one core used by others, averaged over the timed runs. An idle
  machine's background (daemons, a shell) stays well below it, typically 0.01 to 0.05 cores. torch's CPU
  kernels split work over all its threads and wait for the slowest, so even part of one core taken from
  one thread lengthens every step; and on a 2-core machine a quarter core is already 12% of it.
- GPU_BUSY_PERCENT = 10: other processes kept the GPU's SMs busy a tenth of the time, which kernels from
  this process then waited behind.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ..results.busy import CPU_BUSY_CORES, GPU_BUSY_PERCENT, warnings  # noqa: F401  (judging lives with the results)


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds at one moment: the whole machine's busy and stolen time, and this process's."""

    wall_s: float
    busy_s: float
    steal_s: float
    own_s: float


@dataclass(frozen=True)
class Window:
    """One timed call: how long it lasted and what others used meanwhile."""

    wall_s: float
    others_cpu_s: float
    steal_s: float
    gpu_utilization: float | None = None  # percent of the time the GPU was busy, all processes
    gpu_others_utilization: float | None = None  # percent, other processes only (None: not measurable)
    gpu_other_processes: int | None = None

    def __post_init__(self):
        if self.wall_s < 0:
            raise ValueError(f"wall_s must not be negative, got {self.wall_s}.")


def read_cpu(companions: Sequence[int] = ()) -> CpuReading:
    """psutil's view now: busy = user + nice + system + irq + softirq over all cores.

    `companions` are processes whose CPU time is this run's own: the server an engine's arm is timed through.
    """
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    own = psutil.Process().cpu_times()
    own_s = own.user + own.system
    for pid in companions:
        with contextlib.suppress(psutil.Error):
            theirs = psutil.Process(pid).cpu_times()
            own_s += theirs.user + theirs.system
    return CpuReading(time.monotonic(), busy, getattr(t, "steal", 0.0), own_s)


def cpu_window(before: CpuReading, after: CpuReading) -> tuple[float, float, float]:
    """(wall seconds, others' CPU seconds, stolen seconds) between two readings; negatives (tick rounding) are 0."""
    own = after.own_s - before.own_s
    steal = max(0.0, after.steal_s - before.steal_s)
    others = max(0.0, after.busy_s - before.busy_s - own) + steal
    return max(0.0, after.wall_s - before.wall_s), others, steal


def summarize(windows: Sequence[Window], cpu_count: int, gpu_status: dict | None = None) -> dict:
    """environment.contention: others' average share over all windows (time-weighted), the busiest window."""
    wall = sum(w.wall_s for w in windows)
    others = sum(w.others_cpu_s for w in windows)
    cores = others / wall if wall > 0 else None
    per_window = [w.others_cpu_s / w.wall_s for w in windows if w.wall_s > 0]
    result = {
        "windows": len(windows),
        "timed_seconds": wall,
        "cpu_count": cpu_count,
        "other_cpu_cores": cores,
        "other_cpu_percent": None if cores is None else 100.0 * cores / cpu_count,
        "other_cpu_cores_busiest_window": max(per_window) if per_window else None,
        "steal_cores": sum(w.steal_s for w in windows) / wall if wall > 0 else None,
        "gpu": dict(gpu_status or {"available": False, "reason": "the runs were not on a GPU"}),
        "thresholds": {"other_cpu_cores": CPU_BUSY_CORES, "gpu_others_percent": GPU_BUSY_PERCENT},
    }
    if result["gpu"].get("available"):
        util = [w.gpu_utilization for w in windows if w.gpu_utilization is not None]
        theirs = [(w.gpu_others_utilization, w.wall_s) for w in windows if w.gpu_others_utilization is not None]
        counts = [w.gpu_other_processes for w in windows if w.gpu_other_processes is not None]
        result["gpu"].update(
            utilization_percent=sum(util) / len(util) if util else None,
            others_utilization_percent=(
                sum(u * s for u, s in theirs) / sum(s for _, s in theirs)
                if theirs and sum(s for _, s in theirs) > 0 else None
            ),
            other_processes=max(counts) if counts else None,
        )
    return result


def settle(
    max_s: float = 3.0,
    step_s: float = 0.2,
    read: Callable[[], CpuReading] = read_cpu,
    sleep: Callable[[float], None] = time.sleep,
    should_stop: Callable[[], bool] = lambda: False,
) -> float:
    """Wait until others use less than CPU_BUSY_CORES over one `step_s`, at most `max_s` or until
    `should_stop()`; the seconds waited.

    For work this process set off elsewhere that would otherwise overlap the next timed run: a browser on the
    same machine drawing the charts it was just sent. A machine that stays busy costs `max_s` and is then
    named by the timed runs' own windows. Without psutil it returns at once.
    """
    try:
        before = read()
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: nothing to wait for
        return 0.0
    waited = 0.0
    while waited < max_s and not should_stop():
        sleep(step_s)
        after = read()
        wall, others, _steal = cpu_window(before, after)
        waited += wall
        if wall > 0 and others / wall < CPU_BUSY_CORES:
            break
        before = after
    return waited


# A process using less than this share of one core over one step is idle. vLLM's CPU server keeps a core busy for
# about a second after each request (measured here: 0.9-1.1 cores for 1.0 s, then 0.0); the next timed run, on
# another server on the same cores, would share that core with it.
QUIET_SHARE = 0.15
QUIET_STEP_S = 0.1
QUIET_MOST_S = 3.0


def processes_cpu_s(pids: Sequence[int]) -> float:
    """The CPU seconds the processes have used so far (those that ended count 0)."""
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def wait_quiet(
    pids: Sequence[int],
    should_stop: Callable[[], bool] = lambda: False,
    most_s: float = QUIET_MOST_S,
    step_s: float = QUIET_STEP_S,
    share: float = QUIET_SHARE,
    read: Callable[[Sequence[int]], float] = processes_cpu_s,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[float, bool]:
    """Wait until the processes together use less than `share` of a core over one `step_s`, at most `most_s` or
    until `should_stop()`; (seconds waited, whether they went quiet). Nothing to wait for without pids or psutil."""
    if not pids:
        return 0.0, True
    try:
        before = read(pids)
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: nothing to wait for
        return 0.0, True
    began = last = clock()
    while not should_stop():
        sleep(step_s)
        now, after = clock(), read(pids)
        if now - last > 0 and (after - before) / (now - last) < share:
            return now - began, True
        if now - began >= most_s:
            return now - began, False
        before, last = after, now
    return clock() - began, False


class Quiet:
    """Before each timed run, the wait for the engines' own busy processes (a server's poll after its last
    request) to go quiet; `record` counts the waits for the report."""

    def __init__(self, pids: Callable[[], Sequence[int]], wait: Callable[..., tuple[float, bool]] = wait_quiet):
        self.pids, self.wait = pids, wait
        self.record = {"rule": f"before each run, until the servers on this machine use under {QUIET_SHARE:.0%} of "
                               f"a core over {QUIET_STEP_S:g} s, at most {QUIET_MOST_S:g} s",
                       "waits": 0, "waited_s": 0.0, "longest_s": 0.0, "not_quiet": 0}

    def __call__(self, should_stop: Callable[[], bool]) -> None:
        waited, quiet = self.wait(tuple(self.pids()), should_stop)
        record = self.record
        record["waits"] += 1
        record["waited_s"] = round(record["waited_s"] + waited, 3)
        record["longest_s"] = round(max(record["longest_s"], waited), 3)
        record["not_quiet"] += 0 if quiet else 1


class _Nvml:
    """The GPU a device index names, through NVML; `status` says why not when it cannot be read."""

    def __init__(self, index: int):
        self.status: dict = {"available": False}
        self.handle = None
        try:
            import pynvml
        except ImportError:
            self.status["reason"] = "the nvidia-ml-py package is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - no driver or library: recorded, never raised
            self.status["reason"] = f"NVML could not start ({type(exc).__name__})"
            return
        self.nvml = pynvml
        self._closer = weakref.finalize(self, _shutdown, pynvml)
        try:
            self.handle = self._handle(index)
        except Exception as exc:  # noqa: BLE001
            self.status["reason"] = f"NVML could not find the GPU ({type(exc).__name__})"
            return
        self.status = {"available": True}

    def _handle(self, index: int):
        import torch

        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
        if uuid:
            with contextlib.suppress(Exception):
                return self.nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        return self.nvml.nvmlDeviceGetHandleByIndex(index)

    def mark(self) -> int:
        """NVML's timestamp (microseconds) for 'samples from now on'."""
        return int(time.time() * 1e6)

    def read(self, since: int) -> tuple[float | None, float | None, int | None]:
        """(GPU utilisation %, other processes' SM %, other process count) since `since`; None where unreadable."""
        nv, own = self.nvml, os.getpid()
        util = theirs = count = None
        with contextlib.suppress(Exception):
            util = float(nv.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        pids: set[int] = set()
        with contextlib.suppress(Exception):
            pids |= {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(self.handle)}
        with contextlib.suppress(Exception):
            pids |= {p.pid for p in nv.nvmlDeviceGetGraphicsRunningProcesses(self.handle)}
        # In a container NVML reports host process ids: then this process is not among them by its own id.
        visible = own in pids
        count = len(pids - {own}) if visible else max(0, len(pids) - 1)
        if visible:
            try:
                samples = nv.nvmlDeviceGetProcessUtilization(self.handle, since)
                theirs = others_share([(s.pid, s.timeStamp, s.smUtil) for s in samples], own)
            except Exception as exc:  # noqa: BLE001 - "not found" means no samples: nobody used it
                theirs = 0.0 if type(exc).__name__ == "NVMLError_NotFound" else None
        return util, theirs, count

    def close(self) -> None:
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()


def _shutdown(pynvml) -> None:
    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()


def others_share(samples: Sequence[tuple[int, int, float]], own_pid: int) -> float:
    """Other processes' SM utilisation (%) from NVML's per-process (pid, timestamp, sm%) samples.

    NVML samples every process at the same moments; the share is others' summed sm% per sampling moment.
    """
    moments = {t for _, t, _ in samples}
    if not moments:
        return 0.0
    return sum(sm for pid, _, sm in samples if pid != own_pid) / len(moments)


class Monitor:
    """Collects one Window per timed call; `record` is the live environment.contention dict."""

    def __init__(
        self,
        device=None,
        read_cpu: Callable[[], CpuReading] = read_cpu,
        cpu_count: int | None = None,
    ):
        self._read_cpu = read_cpu
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.windows: list[Window] = []
        self.gpu = _Nvml(device.index or 0) if device is not None and device.type == "cuda" else None
        self.record: dict = {}
        self._update()

    @contextlib.contextmanager
    def window(self, companions: Sequence[int] = ()) -> Iterator[None]:
        """Around one timed call: read before, read after, add the window to the record.

        `companions` (process ids) count as this process: the server that does an engine arm's work.
        """
        read = (lambda: self._read_cpu(companions)) if companions else self._read_cpu
        try:
            before = read()
        except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: no figures, never a failure
            yield
            return
        since = self.gpu.mark() if self.gpu and self.gpu.handle is not None else None
        yield
        wall, others, steal = cpu_window(before, read())
        gpu = self.gpu.read(since) if since is not None else (None, None, None)
        self.windows.append(Window(wall, others, steal, *gpu))
        self._update()

    def window_record(self, window: Window) -> dict:
        """One window summarised as environment.contention is: what others used during that call alone."""
        return summarize([window], self.cpu_count, self.gpu.status if self.gpu else None)

    def _update(self) -> None:
        self.record.clear()
        self.record.update(summarize(self.windows, self.cpu_count, self.gpu.status if self.gpu else None))

    def close(self) -> None:
        if self.gpu is not None:
            self.gpu.close()
