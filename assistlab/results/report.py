"""The result of a comparison: raw runs, the numbers derived from them, JSON/CSV forms, the environment."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

from ..engines.base import ArmInfo, sampling_flags
from . import cells, explain, likely, ranking, sequential, stats
from . import load as load_mod
from .busy import probe_warning
from .busy import warnings as busy_warnings
from .tune_record import TuneSummary
from .verdicts import (  # noqa: F401 - the words every view imports from here
    BUSY_MACHINE, LEVEL_KEYS, NONE_CLEARLY_FASTER, NOTHING_HELPED, NO_CLEAR_ANSWER, NO_CLEAR_ANSWER_SHORT,
    TOO_FEW_FOR_EVERY_LOOK, TOO_FEW_TO_TELL, UNSETTLED_ADVICE, UNSETTLED_ENDS, answer_sentence, busy_clause,
    comparisons_words, counted, first_answer_words, interval_cell, interval_phrase, is_busy, judged, level_words, open_arms, provisional,
    provisional_sentence, slower_phrase, speedup_sentence, time_hover, time_ratio, unsettled, unsettled_sentence,
    verdict, with_level_words
)

SCHEMA = 1


def shown_speedup(ratios: list[float], sequence: dict | None) -> dict:
    """The median of the run-by-run speedups with the one interval every view shows for it.

    Under a rule that looks after every repetition the number of repetitions was chosen by looking, so a fixed-n
    interval's level does not hold: the interval shown is the time-uniform one, at its family level, the one the
    verdict rests on; until that is bounded, the range of the runs (no level claimed). A fixed count keeps its
    fixed-n interval (stats.speedup)."""
    speedup = stats.median_interval(ratios)
    if sequence is None or not ratios:
        return speedup
    if sequence.get("interval") == sequential.TIME_UNIFORM:
        return {**speedup, "ci_low": sequence["ci_low"], "ci_high": sequence["ci_high"], "level": sequence["level"],
                "family_level": sequence["family_level"], "arms_sharing": sequence["arms_sharing"],
                "interval": sequential.TIME_UNIFORM}
    return {**speedup, "ci_low": min(ratios), "ci_high": max(ratios), "interval": stats.RANGE}


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
    # A server's speculative-decoding counters for this run (engines/vllm/stream.counts_between): drafts,
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
    tune: TuneSummary | None = None  # a search's summary (results/tune_record.py), set by measure/tune.py
    stopping: dict | None = None  # how the number of repetitions was decided (runner._stopping_record)
    orders: list[list[int]] = field(default_factory=list)  # arm indices in run order, per counted repetition
    warmup_orders: list[list[int]] = field(default_factory=list)  # the same for warm-up rounds
    # Seconds from the command's start: load_s (engines ready), warmup_s (the warm-up rounds' own length),
    # first_repetition_s, likely_s (every arm's likely answer in), first_answer_s (every assisted arm answered,
    # likely or sure: the first answer a person reads) and answer_s (the timed repetitions over).
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

    def paired(self, a: int, b: int) -> tuple[list[float], list[float]]:
        """Latencies of arms a and b over the repetitions both ran, in repetition order."""
        la = {r.repetition: r.latency_s for r in self.runs_of(a)}
        lb = {r.repetition: r.latency_s for r in self.runs_of(b)}
        reps = sorted(set(la) & set(lb))
        return [la[r] for r in reps], [lb[r] for r in reps]

    def baseline_runs(self, index: int) -> list[RunRecord]:
        base = self.baseline(index)
        return [] if base is None else self.runs_of(base)

    def sequence(self, index: int) -> dict | None:
        """The time-uniform interval on arm `index`'s speedup, paired by repetition with its engine's plain, when
        the stopping rule looks after every repetition ('clear', 'likely' or 'precision'); None for a fixed count.

        The assisted arms share stats.TARGET_LEVEL: each gets an equal part of the error (Bonferroni), so the
        verdicts hold together. `settled` is what the interval says so far (results.sequential.settled)."""
        if (self.stopping or {}).get("rule") not in ("clear", "likely", "precision"):
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
                "speedup": shown_speedup(stats.ratios([p for p, _ in paired], [c for _, c in paired]),
                                         sequence := self.sequence(index)),
                "sequence": sequence,
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
        data.update({"tune": self.tune.to_dict()} if self.tune is not None else {})  # a search's summary
        if self.request.get("concurrency"):  # only a request with load levels has a load phase
            alone = {i: arm["latency_summary"]["median"] for i, arm in enumerate(data["arms"])
                     if arm["latency_summary"]["median"]}  # each arm's single-request median, to compare with C=1
            data.update(load_mod.report_parts(self.load, self.arms, self.environment.get("load_contention"), alone))
            data["load_raw"] = load_mod.raw(self.load)
        data["answer"] = answer_sentence(data)  # the page's first line, in words
        return with_level_words(data)

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
