"""The result of a comparison: raw runs, the numbers derived from them, JSON/CSV forms, the environment."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field

from ..engines.base import ArmInfo, sampling_flags
from . import cells, explain, likely, ranking, sequential, stats
from . import load as load_mod
from .busy import probe_warning
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
    # A server's speculative-decoding counters for this run (engines/vllm/client.counts_between): drafts,
    # draft_tokens, accepted_tokens, accepted_per_position. Set instead of per-step drafted/accepted.
    engine_counts: dict | None = None

    @property
    def draft_steps(self) -> list[tuple[int, int]]:
        """(drafted, accepted) per draft: the per-step record, or rebuilt from a server's counters.

        Acceptance is a prefix (a position is accepted only when every one before it was), so the number of
        drafts that kept exactly j tokens is per_position[j-1] - per_position[j]: the multiset of drafts is
        exact when every draft had the same length (draft_tokens = drafts * positions); only their order is lost.
        """
        counts = self.engine_counts
        if counts is None:
            return list(zip(self.drafted, self.accepted))
        drafts, per_pos = counts.get("drafts") or 0, counts.get("accepted_per_position") or []
        if drafts <= 0:
            return []
        k = len(per_pos) or max(1, round((counts.get("draft_tokens") or 0) / drafts))
        steps = []
        for kept in range(k + 1):
            at_least = drafts if kept == 0 else per_pos[kept - 1] if kept - 1 < len(per_pos) else 0
            more = per_pos[kept] if kept < len(per_pos) else 0
            steps += [(k, kept)] * max(0, at_least - more)
        return steps

    @property
    def drafted_total(self) -> int:
        return int(self.engine_counts.get("draft_tokens") or 0) if self.engine_counts else sum(self.drafted)

    @property
    def accepted_total(self) -> int:
        return int(self.engine_counts.get("accepted_tokens") or 0) if self.engine_counts else sum(self.accepted)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.latency_s if self.latency_s > 0 else 0.0


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
    probes: dict[int, dict] = field(default_factory=dict)  # arm index -> its engine's drafting-cost probe (Arm.probe)
    segments: dict[int, list] = field(default_factory=dict)  # arm index -> explain.text_segments(...) of its last run
    sweep: dict | None = None  # a sweep's summary, set by sweep.sweep()
    tune: dict | None = None  # a search's summary, set by measure/tune.py
    stopping: dict | None = None  # how the number of repetitions was decided (runner._stopping_record)
    orders: list[list[int]] = field(default_factory=list)  # arm indices in run order, per counted repetition
    warmup_orders: list[list[int]] = field(default_factory=list)  # the same for warm-up rounds
    # Seconds from the command's start: load_s (engines ready), warmup_s (the warm-up rounds' own length),
    # first_repetition_s, likely_s (every arm's likely answer in) and answer_s (the timed repetitions over).
    timing: dict = field(default_factory=dict)
    load: load_mod.LoadRecord | None = None  # the load phase's raw rounds (measure.load), when levels were asked

    def runs_of(self, arm: int) -> list[RunRecord]:
        return sorted((r for r in self.runs if r.arm == arm), key=lambda r: r.repetition)

    @property
    def plain(self) -> list[RunRecord]:
        return self.runs_of(0)

    def baseline(self, index: int) -> int | None:
        """The plain arm of `index`'s engine: each engine's assisted arms are timed against its own plain."""
        engine = self.arms[index].engine
        return next((i for i, a in enumerate(self.arms) if a.engine == engine and not a.assisted), None)

    def baseline_runs(self, index: int) -> list[RunRecord]:
        base = self.baseline(index)
        return [] if base is None else self.runs_of(base)

    def sequence(self, index: int) -> dict | None:
        """The time-uniform interval on arm `index`'s speedup, paired by repetition with its engine's plain, when
        the stopping rule looks after every repetition ('clear' or 'precision'); None for a fixed count.

        The assisted arms share stats.TARGET_LEVEL: each gets an equal part of the error (Bonferroni), so the
        verdicts hold together. `settled` is what the interval says so far (results.sequential.settled)."""
        if (self.stopping or {}).get("rule") not in ("clear", "precision"):
            return None
        return self._paired_sequence(index, sequential.speedup_sequence)

    def likely_sequence(self, index: int) -> dict:
        """The likely interval on arm `index`'s speedup (results.likely: Student-t at planned looks, assuming
        roughly normal noise), paired and shared among the assisted arms as `sequence`'s; computed whatever the
        stopping rule, so every run says when the likely answer settled."""
        seq = self._paired_sequence(index, likely.speedup_sequence)
        return {**seq, "settled_at": likely.settled_at(seq, seq["band"]) if seq["settled"] else None}

    def _paired_sequence(self, index: int, method) -> dict:
        arms = sum(1 for a in self.arms if a.assisted)
        by_rep = {r.repetition: r.latency_s for r in self.baseline_runs(index)}
        paired = [(by_rep[r.repetition], r.latency_s) for r in self.runs_of(index) if r.repetition in by_rep]
        seq = method([p for p, _ in paired], [c for _, c in paired], sequential.arm_alpha(stats.TARGET_LEVEL, arms))
        band = self.request.get("band") or sequential.DEFAULT_BAND
        return {**seq, "family_level": stats.TARGET_LEVEL, "arms_sharing": arms, "band": band,
                "settled": sequential.settled(seq, band)}

    def _flags(self, info: ArmInfo) -> dict:
        # Decided when the arm's plan was made; an engine that sets none verifies greedily, keeping the target's
        # tokens, and is lossy only when it samples, as any engine is.
        flags = dict(info.flags) if info.flags is not None else sampling_flags(bool(self.request.get("do_sample")))
        flags["figures_unavailable"] = [*flags["figures_unavailable"], *(info.unavailable or [])]
        return flags

    def _arm_dict(self, index: int) -> dict:
        info, runs = self.arms[index], self.runs_of(index)
        last = runs[-1] if runs else None
        data = {
            "name": info.name,
            "engine": info.engine,
            "strategy": info.strategy,
            "spec": info.spec,
            "settings": info.settings,
            "error": info.error,
            **({"left": info.left} if info.left else {}),
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
            "token_origins": explain.token_origins(last) if last and last.engine_counts is None and not (
                info.assisted and info.engine != "transformers") else [],
            "text_segments": self.segments.get(index, []),
        }
        if info.assisted:
            data["drafted_tokens"] = [r.drafted_total for r in runs]
            data["accepted_tokens"] = [r.accepted_total for r in runs]
            for entry, r in zip(data["trace"], runs):
                entry.update(drafted=r.drafted, accepted=r.accepted)
                if r.engine_counts is not None:
                    entry["counts"] = r.engine_counts
            data["probe"] = self.probes.get(index)
            data["choice"] = info.choice
            data.update(self._flags(info))
        elif info.unavailable:
            data["figures_unavailable"] = list(info.unavailable)
        return data

    def comparison(self) -> list[dict]:
        """Each assisted arm against its engine's plain arm: speedup with interval, acceptance, output identity."""
        # Verifying n tokens costs the target the same whichever arm drafted them: one line for all arms.
        fits = {}
        out = []
        for index, info in enumerate(self.arms):
            if not info.assisted:
                continue
            plain = self.baseline_runs(index)
            if info.engine not in fits:
                fits[info.engine] = explain.pooled_verify_fit(
                    [self.probes.get(i) for i, a in enumerate(self.arms) if a.assisted and a.engine == info.engine],
                    [r.step_times for r in plain],
                )
            verify_fit = fits[info.engine]
            runs = self.runs_of(index)
            # Pair runs by repetition so each ratio compares runs made side by side.
            by_rep = {r.repetition: r for r in plain}
            paired = [(by_rep[r.repetition].latency_s, r.latency_s) for r in runs if r.repetition in by_rep]
            steps = [step for r in runs for step in r.draft_steps]
            counted = [r for r in runs if r.engine_counts is not None]
            if counted:  # a server's totals: exact, whatever the drafts' lengths
                drafted_n, accepted_n = sum(r.drafted_total for r in counted), sum(r.accepted_total for r in counted)
                acceptance = accepted_n / drafted_n if drafted_n else None
            else:
                acceptance = stats.acceptance_rate([d for d, _ in steps], [a for _, a in steps])
            forwards = sum(len(r.step_tokens) for r in runs)
            tokens = sum(r.new_tokens for r in runs)
            entry = {
                "arm": info.name,
                "engine": info.engine,
                "baseline": None if self.baseline(index) is None else self.arms[self.baseline(index)].name,
                "speedup": stats.speedup([p for p, _ in paired], [c for _, c in paired]),
                "sequence": self.sequence(index),
                "acceptance_rate": acceptance,
                "tokens_per_forward": tokens / forwards if forwards else None,
                "acceptance_by_position": stats.acceptance_by_position(steps),
                "outputs_identical": None,
                "first_difference": None,
            }
            analysis = explain.explain_arm(
                self.probes.get(index),
                steps,
                [r.step_times for r in plain],
                entry["speedup"]["median"],
                info.strategy,
                verify_fit,
            )
            for key in info.analysis_drops:  # figures this arm's path cannot give
                analysis[key] = None
            entry["analysis"] = analysis
            entry.update(self._flags(info))
            entry.update({key: analysis[key] for key in explain.ANALYSIS_KEYS})
            entry["probe_busy"] = analysis["probe_busy"]
            if runs and plain:
                first = stats.first_difference(plain[-1].token_ids, runs[-1].token_ids)
                entry["first_difference"] = first
                entry["outputs_identical"] = first is None
            reference = self._transformers_plain()
            if info.engine != "transformers" and runs and reference:
                # The same tokenizer and the same prompt ids: the other engine's tokens compare one by one.
                entry["first_difference_from_transformers_plain"] = stats.first_difference(
                    reference[-1].token_ids, runs[-1].token_ids)
            out.append(entry)
        return out

    def _transformers_plain(self) -> list[RunRecord]:
        base = next((i for i, a in enumerate(self.arms) if a.engine == "transformers" and not a.assisted), None)
        return [] if base is None else self.runs_of(base)

    def engines(self) -> list[dict]:
        """One line per engine: its plain arm and its fastest assisted arm, by median latency and tokens/s.

        Across engines compare plain with plain and best with best; a speedup is only ever against the
        engine's own plain arm.
        """
        out = []
        reference = self._transformers_plain()
        for engine in dict.fromkeys(a.engine for a in self.arms):
            members = [i for i, a in enumerate(self.arms) if a.engine == engine]
            base = next((i for i in members if not self.arms[i].assisted), None)

            def figures(index):
                runs = self.runs_of(index)
                if index is None or not runs:
                    return None
                lat = stats.summarize([r.latency_s for r in runs]).get("median")
                tps = stats.summarize([r.tokens_per_s for r in runs]).get("median")
                return {"arm": self.arms[index].name, "median_latency_s": lat, "median_tokens_per_s": tps}

            assisted = [f for i in members if self.arms[i].assisted and (f := figures(i)) is not None]
            best = min(assisted, key=lambda f: f["median_latency_s"], default=None)
            line = {"engine": engine, "plain": figures(base), "best": best}
            if engine != "transformers" and base is not None and self.runs_of(base) and reference:
                first = stats.first_difference(reference[-1].token_ids, self.runs_of(base)[-1].token_ids)
                line["plain_first_difference_from_transformers"] = first
                line["plain_identical_to_transformers"] = first is None
            out.append(line)
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
            "timing": self.timing,
            "orders": self.orders,
            "warmup_orders": self.warmup_orders,
            "arms": [self._arm_dict(i) for i in range(len(self.arms))],
            "comparison": self.comparison(),
            "engines": self.engines(),
        }
        data["ranking"] = ranking.rank_arms(data)
        data["warnings"] = busy_warnings(self.environment.get("contention")) + [
            probe_warning(entry["arm"], entry["probe_busy"]) for entry in data["comparison"] if entry.get("probe_busy")
        ]
        if self.sweep is not None:
            data["sweep"] = self.sweep
        data.update({"tune": self.tune} if self.tune is not None else {})  # a search's summary (measure/tune.py)
        if self.request.get("concurrency"):  # only a request with load levels has a load phase
            alone = {i: arm["latency_summary"]["median"] for i, arm in enumerate(data["arms"])
                     if arm["latency_summary"]["median"]}  # each arm's single-request median, to compare with C=1
            data.update(load_mod.report_parts(self.load, self.arms, self.environment.get("load_contention"), alone))
            data["load_raw"] = load_mod.raw(self.load)
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_csv(self) -> str:
        """One row per counted run, then one per request of the load phase (`concurrency` 1 and `request` 0 for
        a single-request run)."""
        buf = io.StringIO()
        writer = cells.Writer(buf)
        writer.writerow(
            ["arm", "strategy", "repetition", "latency_s", "new_tokens", "tokens_per_s", "ttft_s",
             "drafted_tokens", "accepted_tokens", "target_forwards", "memory_bytes", "engine", "position", "concurrency", "request"]
        )
        for run in sorted(self.runs, key=lambda r: (r.repetition, r.arm)):
            info = self.arms[run.arm]
            writer.writerow([
                info.name, info.strategy, run.repetition, f"{run.latency_s:.6f}", run.new_tokens,
                f"{run.tokens_per_s:.3f}", "" if run.ttft_s is None else f"{run.ttft_s:.6f}",
                run.drafted_total if info.assisted else "", run.accepted_total if info.assisted else "",
                len(run.step_tokens), "" if run.memory_bytes is None else run.memory_bytes,
                info.engine, "" if run.position is None else run.position, 1, 0,
            ])
        for row in load_mod.csv_rows(load_mod.raw(self.load), [(a.name, a.strategy, a.engine) for a in self.arms]):
            writer.writerow(row)
        return buf.getvalue()


def level_words(level: float) -> str:
    """A true level as a person reads it, rounded down so it never claims more: 0.9375 -> '93.7%'."""
    tenths = math.floor(level * 1000 + 1e-9)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths / 10:.1f}%"


def comparisons_words(count: int) -> str:
    """'the one run-by-run comparison' or 'all 3 run-by-run comparisons together', after 'n% sure of'."""
    return "the one run-by-run comparison" if count == 1 else f"all {count} run-by-run comparisons together"


def judged(entry: dict) -> dict:
    """The interval a comparison entry's verdict rests on: its time-uniform sequence when the stopping rule
    looked after every repetition, else its fixed-n interval; the median is always the speedup's own."""
    speedup, seq = entry.get("speedup") or {}, entry.get("sequence")
    return {**seq, "median": speedup.get("median")} if seq else speedup


def _sure(speedup: dict) -> str:
    """'95.8% sure', or for a time-uniform interval '95% sure at every look' (with the arms sharing it)."""
    if speedup.get("family_level") is None:
        return f"{level_words(speedup['level'])} sure"
    shared = speedup.get("arms_sharing") or 1
    return f"{level_words(speedup['family_level'])} sure at every look" + (
        f" (shared by the {shared} assisted arms)" if shared > 1 else "")


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
    if speedup.get("family_level") is not None and not stats.has_interval(speedup):
        return f"{n} repetition{'' if n == 1 else 's'}, too few yet for an interval that holds at every look"
    if n <= 1 or low is None or high is None:
        return "one repetition, so no interval" if n == 1 else "no repetition, so no interval"
    if stats.has_interval(speedup):
        return f"{_sure(speedup)} the speedup lies between {low:.2f}× and {high:.2f}×"
    if level is None:  # a report from before levels were recorded
        return f"{low:.2f}–{high:.2f}× over {n} runs, at a level not recorded"
    return f"range of {n} runs {low:.2f}–{high:.2f}×: too few to be sure"


def time_ratio(speedup: float) -> str:
    """A speedup below 1× as the time it costs: 0.54 -> '1.85×' (plain time × this is the assisted time)."""
    return f"{1.0 / speedup:.2f}×"


def slower_phrase(speedup: dict) -> str:
    """A slower verdict's interval in times as long as plain: '94.5% sure it takes between 1.72× and 1.89× as
    long', so a slowdown is never worded as a speedup below 1×."""
    low, high = speedup["ci_low"], speedup["ci_high"]
    return f"{_sure(speedup)} it takes between {time_ratio(high)} and {time_ratio(low)} as long"


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
    drafted tokens accepted; outputs identical.' A slower one is said in time: 'was slower: it took 1.85× as
    long as plain (94.5% sure it takes between 1.72× and 1.89× as long)'. A result whose interval contains 1×
    is called no clear difference, and one with too few runs for a 90% interval is neither faster nor slower.
    """
    name, s = entry["arm"], judged(entry)
    median = s.get("median")
    if median is None:
        return f"{name} finished no repetition, so there is no speedup to report."
    interval = interval_phrase(s)
    kind = verdict(s)
    if s.get("settled") == sequential.SAME:
        parts = [f"{name} was {median:.2f}×, no practical difference from plain ({interval}, within "
                 f"±{s['band']:.0%} of 1×)"]
    elif kind == "faster":
        parts = [f"{name} was {median:.2f}× faster ({interval})"]
    elif kind == "slower":
        parts = [f"{name} was slower: it took {time_ratio(median)} as long as plain ({slower_phrase(s)})"]
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


def provisional_sentence(entry: dict) -> str:
    """A comparison entry in words while its repetitions go on: what its time-uniform interval says so far,
    which later looks can only sharpen ('So far prompt lookup is slower than plain, 95% sure at every look...')."""
    name, s = entry["arm"], judged(entry)
    if s.get("median") is None:
        return f"{name} has finished no repetition yet."
    sharpen = "; more repetitions can only sharpen this."
    if s.get("settled") == sequential.SAME:
        return (f"So far {name} is within ±{s['band']:.0%} of plain, {_sure(s)}: no practical difference"
                f"{sharpen}")
    kind = verdict(s)
    if kind == "faster":
        return (f"So far {name} is faster than plain, {_sure(s)}: between {s['ci_low']:.2f}× and "
                f"{s['ci_high']:.2f}×{sharpen}")
    if kind == "slower":
        return (f"So far {name} is slower than plain, {_sure(s)}: it takes between {time_ratio(s['ci_high'])} "
                f"and {time_ratio(s['ci_low'])} as long{sharpen}")
    return (f"So far {name} runs at {s['median']:.2f}× the speed of plain, not yet clearly faster or slower "
            f"({interval_phrase(s)}).")


def provisional(report: dict) -> bool:
    """Whether a report dict's verdicts are still provisional: repetitions go on and the rule has not ended them."""
    return report.get("status") == "running" and not (report.get("stopping") or {}).get("ended_by")
