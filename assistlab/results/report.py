"""The result of a comparison: raw runs, the numbers derived from them, JSON/CSV forms, the environment."""

from __future__ import annotations

import io
import json
import math
import platform
import sys
from dataclasses import dataclass, field

from ..engines.transformers import paths
from . import cells, explain, stats
from .busy import warnings as busy_warnings

SCHEMA = 1


@dataclass
class RunRecord:
    """One timed generate() call. Times are seconds from the call's start."""

    arm: int
    repetition: int
    latency_s: float
    new_tokens: int
    ttft_s: float | None
    step_times: list[float]
    step_tokens: list[int]
    drafted: list[int]
    accepted: list[int]
    token_ids: list[int]
    text: str
    memory_bytes: int | None = None
    wall_window: tuple[float, float] | None = None
    position: int | None = None  # where in its repetition's order this run came (0 = first)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.latency_s if self.latency_s > 0 else 0.0


@dataclass
class ArmInfo:
    """What an arm is; `error` says why it stopped early, if it did."""

    name: str
    strategy: str
    spec: dict | None = None
    error: str | None = None
    settings: dict | None = None  # paths.drafting_settings: effective drafting values and their sources
    choice: str | None = None  # why the drafters path was picked (paths.resolve), for those paths

    @property
    def assisted(self) -> bool:
        return self.strategy != "plain"


@dataclass
class Report:
    """Everything one comparison measured; every number in `to_dict` is derived from `runs`."""

    request: dict
    environment: dict
    arms: list[ArmInfo]
    runs: list[RunRecord] = field(default_factory=list)
    status: str = "running"
    message: str = ""
    planned_repeats: int = 0
    probes: dict[int, dict] = field(default_factory=dict)  # arm index -> explain.probe_arm(...)
    segments: dict[int, list] = field(default_factory=dict)  # arm index -> explain.text_segments(...) of its last run
    sweep: dict | None = None  # a sweep's summary, set by sweep.sweep()
    stopping: dict | None = None  # how the number of repetitions was decided (runner._stopping_record)
    orders: list[list[int]] = field(default_factory=list)  # arm indices in run order, per counted repetition
    warmup_orders: list[list[int]] = field(default_factory=list)  # the same for warm-up rounds

    def runs_of(self, arm: int) -> list[RunRecord]:
        return sorted((r for r in self.runs if r.arm == arm), key=lambda r: r.repetition)

    @property
    def plain(self) -> list[RunRecord]:
        return self.runs_of(0)

    def _arm_dict(self, index: int) -> dict:
        info, runs = self.arms[index], self.runs_of(index)
        last = runs[-1] if runs else None
        data = {
            "name": info.name,
            "strategy": info.strategy,
            "spec": info.spec,
            "settings": info.settings,
            "error": info.error,
            "latencies_s": [r.latency_s for r in runs],
            "new_tokens": [r.new_tokens for r in runs],
            "tokens_per_s": [r.tokens_per_s for r in runs],
            "ttft_s": [r.ttft_s for r in runs],
            "memory_bytes": [r.memory_bytes for r in runs],
            "wall_windows": [r.wall_window for r in runs],
            "positions": [r.position for r in runs],
            "latency_summary": stats.summarize([r.latency_s for r in runs]),
            "tokens_per_s_summary": stats.summarize([r.tokens_per_s for r in runs]),
            "text": last.text if last else "",
            "token_ids": last.token_ids if last else [],
            "trace": [{"t_s": r.step_times, "tokens": r.step_tokens} for r in runs],
            "token_origins": explain.token_origins(last) if last else [],
            "text_segments": self.segments.get(index, []),
        }
        if info.assisted:
            data["drafted_tokens"] = [sum(r.drafted) for r in runs]
            data["accepted_tokens"] = [sum(r.accepted) for r in runs]
            for entry, r in zip(data["trace"], runs):
                entry.update(drafted=r.drafted, accepted=r.accepted)
            data["probe"] = self.probes.get(index)
            data["choice"] = info.choice
            data.update(paths.arm_flags(info.strategy, info.spec, bool(self.request.get("do_sample"))))
        return data

    def comparison(self) -> list[dict]:
        """Each assisted arm against plain: speedup with interval, acceptance, output identity."""
        plain = self.plain
        # Verifying n tokens costs the target the same whichever arm drafted them: one line for all arms.
        verify_fit = explain.pooled_verify_fit(
            [self.probes.get(i) for i, a in enumerate(self.arms) if a.assisted], [r.step_times for r in plain]
        )
        out = []
        for index, info in enumerate(self.arms):
            if not info.assisted:
                continue
            runs = self.runs_of(index)
            # Pair runs by repetition so each ratio compares runs made side by side.
            by_rep = {r.repetition: r for r in plain}
            paired = [(by_rep[r.repetition].latency_s, r.latency_s) for r in runs if r.repetition in by_rep]
            drafted = [d for r in runs for d in r.drafted]
            accepted = [a for r in runs for a in r.accepted]
            forwards = sum(len(r.step_tokens) for r in runs)
            tokens = sum(r.new_tokens for r in runs)
            entry = {
                "arm": info.name,
                "speedup": stats.speedup([p for p, _ in paired], [c for _, c in paired]),
                "acceptance_rate": stats.acceptance_rate(drafted, accepted),
                "tokens_per_forward": tokens / forwards if forwards else None,
                "acceptance_by_position": stats.acceptance_by_position(
                    [(d, a) for r in runs for d, a in zip(r.drafted, r.accepted)]
                ),
                "outputs_identical": None,
                "first_difference": None,
            }
            analysis = explain.explain_arm(
                self.probes.get(index),
                [(d, a) for r in runs for d, a in zip(r.drafted, r.accepted)],
                [r.step_times for r in plain],
                entry["speedup"]["median"],
                info.strategy,
                verify_fit,
            )
            entry["analysis"] = paths.restrict_analysis(analysis, info.strategy)
            entry.update(paths.arm_flags(info.strategy, info.spec, bool(self.request.get("do_sample"))))
            entry.update({key: analysis[key] for key in explain.ANALYSIS_KEYS})
            if runs and plain:
                first = stats.first_difference(plain[-1].token_ids, runs[-1].token_ids)
                entry["first_difference"] = first
                entry["outputs_identical"] = first is None
            out.append(entry)
        return out

    def to_dict(self) -> dict:
        data = {
            "schema": SCHEMA,
            "status": self.status,
            "message": self.message,
            "request": self.request,
            "environment": self.environment,
            "counted_repetitions": len(self.plain),
            "planned_repetitions": self.planned_repeats,
            "stopping": self.stopping,
            "orders": self.orders,
            "warmup_orders": self.warmup_orders,
            "arms": [self._arm_dict(i) for i in range(len(self.arms))],
            "comparison": self.comparison(),
        }
        data["ranking"] = explain.rank_arms(data)
        data["warnings"] = busy_warnings(self.environment.get("contention"))
        if self.sweep is not None:
            data["sweep"] = self.sweep
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_csv(self) -> str:
        """One row per counted run."""
        buf = io.StringIO()
        writer = cells.Writer(buf)
        writer.writerow(
            ["arm", "strategy", "repetition", "latency_s", "new_tokens", "tokens_per_s", "ttft_s",
             "drafted_tokens", "accepted_tokens", "target_forwards", "memory_bytes", "position"]
        )
        for run in sorted(self.runs, key=lambda r: (r.repetition, r.arm)):
            info = self.arms[run.arm]
            writer.writerow([
                info.name, info.strategy, run.repetition, f"{run.latency_s:.6f}", run.new_tokens,
                f"{run.tokens_per_s:.3f}", "" if run.ttft_s is None else f"{run.ttft_s:.6f}",
                sum(run.drafted) if info.assisted else "", sum(run.accepted) if info.assisted else "",
                len(run.step_tokens), "" if run.memory_bytes is None else run.memory_bytes,
                "" if run.position is None else run.position,
            ])
        return buf.getvalue()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device, dtype: str, models: dict) -> dict:
    """Versions and hardware a result depends on."""
    import torch
    import transformers

    from .. import __version__

    env = {
        "device": device.type,
        "dtype": dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "assistlab": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "memory_measure": "peak CUDA memory allocated" if device.type == "cuda" else "process RSS after the run",
        "models": models,
    }
    if device.type == "cuda":
        env["gpu_name"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def level_words(level: float) -> str:
    """A true level as a person reads it, rounded down so it never claims more: 0.9375 -> '93.7%'."""
    tenths = math.floor(level * 1000 + 1e-9)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths / 10:.1f}%"


def verdict(speedup: dict) -> str:
    """'faster', 'slower', 'unclear' (the interval contains 1×) or 'too few' (no interval of 90% or more).

    Only a real interval (stats.has_interval) can make a result faster or slower; a range of a few runs,
    or a single run, never does, however far from 1× its median is.
    """
    if speedup.get("median") is None:
        return "unclear"
    if not stats.has_interval(speedup):
        return "too few"
    low, high = speedup["ci_low"], speedup["ci_high"]
    return "faster" if low > 1.0 else "slower" if high < 1.0 else "unclear"


def interval_phrase(speedup: dict) -> str:
    """The interval in words with its true level: '95.8% sure the speedup lies between 1.12× and 1.21×',
    'range of 3 runs 0.90–1.30×: too few to be sure', or 'one repetition, so no interval'."""
    low, high, n, level = speedup.get("ci_low"), speedup.get("ci_high"), speedup.get("n", 0), speedup.get("level")
    if n <= 1 or low is None or high is None:
        return "one repetition, so no interval" if n == 1 else "no repetition, so no interval"
    if stats.has_interval(speedup):
        return f"{level_words(level)} sure the speedup lies between {low:.2f}× and {high:.2f}×"
    if level is None:  # a report from before levels were recorded
        return f"{low:.2f}–{high:.2f}× over {n} runs, at a level not recorded"
    return f"range of {n} runs {low:.2f}–{high:.2f}×: too few to be sure"


def interval_cell(speedup: dict) -> str:
    """The interval for a table cell: '1.12–1.21×, 95.8%', 'range of 3 runs 0.90–1.30×', or '' for none."""
    low, high, n = speedup.get("ci_low"), speedup.get("ci_high"), speedup.get("n", 0)
    if n <= 1 or low is None or high is None:
        return ""
    if stats.has_interval(speedup):
        return f"{low:.2f}–{high:.2f}×, {level_words(speedup['level'])}"
    if speedup.get("level") is None:  # a report from before levels were recorded
        return f"{low:.2f}–{high:.2f}× over {n} runs, level not recorded"
    return f"range of {n} runs {low:.2f}–{high:.2f}×"


BUSY_MACHINE = "busy-machine"


def is_busy(report: dict) -> bool:
    """Whether a report dict carries the busy-machine warning."""
    return any(w.get("code") == BUSY_MACHINE for w in report.get("warnings") or [])


def busy_clause(busy: bool) -> str:
    """What a verdict adds when others used the machine during the timed runs ('' when they did not)."""
    return " Measured on a busy machine, so this may not hold on an idle one." if busy else ""


def speedup_sentence(entry: dict, sampling: bool = False, busy: bool = False) -> str:
    """One comparison entry in words; the CLI and the page both say a result this way.

    e.g. 'assistant: x (k=5) was 1.17× faster (95.8% sure the speedup lies between 1.12× and 1.21×); 83% of
    drafted tokens accepted; outputs identical.' A result whose interval contains 1× is called no clear
    difference, and one with too few runs for a 90% interval is neither faster nor slower.
    """
    name, s = entry["arm"], entry.get("speedup") or {}
    median = s.get("median")
    if median is None:
        return f"{name} finished no repetition, so there is no speedup to report."
    interval = interval_phrase(s)
    kind = verdict(s)
    if kind == "faster":
        parts = [f"{name} was {median:.2f}× faster ({interval})"]
    elif kind == "slower":
        parts = [f"{name} was slower, {median:.2f}× as fast as plain ({interval})"]
    elif kind == "unclear":
        parts = [f"{name} was {median:.2f}×, no clear difference from plain ({interval}, which contains 1×)"]
    else:
        parts = [f"{name} ran at {median:.2f}× the speed of plain ({interval})"]
    if entry.get("acceptance_rate") is not None:
        parts.append(f"{entry['acceptance_rate']:.0%} of drafted tokens accepted")
    if entry.get("outputs_identical") is True:
        parts.append("outputs identical")
    elif entry.get("outputs_identical") is False:
        first = entry.get("first_difference")
        differ = "outputs differ" + (f" from token {first + 1}" if first is not None else "")
        parts.append(differ + (" (expected when sampling)" if sampling else ""))
    if entry.get("lossless") is False and not sampling:
        parts.append(f"lossy: {entry.get('lossy_reason') or 'not lossless by construction'}")
    return "; ".join(parts) + "." + busy_clause(busy)
