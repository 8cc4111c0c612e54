"""The load phase's raw rounds and what they say: figures per arm and level, speedups, where assistance stops paying."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..engines.base import ArmInfo, RequestRecord, sum_counts
from . import busy, stats

PERCENTILES = (50, 90, 99)
METRICS_NOTE = ("Counted from the growth of the server's /metrics around each round: another client of the same "
                "server would be counted too.")
NO_COUNTS_NOTE = "The server gave no drafting figures for these requests."


@dataclass
class LoadRound:
    """One timed round of one arm at one level: its requests as the engine timed them (engines/base.LoadResult)."""

    arm: int
    concurrency: int
    round: int
    wall_s: float
    requests: list[RequestRecord]
    counts_source: str | None = None
    counts: dict | None = None
    position: int | None = None  # where in its round's order this arm came (0 = first)

    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    def tokens_per_s(self) -> float:
        return self.tokens() / self.wall_s if self.wall_s > 0 else 0.0

    def round_counts(self) -> dict | None:
        """The round's drafting counters: the engine's round totals, else the sum of its requests' own."""
        if self.counts is not None:
            return self.counts
        own = [r.counts for r in self.requests if r.counts is not None]
        return sum_counts(own) if own else None


@dataclass
class LoadRecord:
    """Everything the load phase measured: levels asked, the arms timed under load, rounds, failures, orders."""

    levels: tuple[int, ...]
    rounds_asked: int
    arms: list[int] = field(default_factory=list)  # indices of the arms that load (Arm.loads), in arm order
    rounds: list[LoadRound] = field(default_factory=list)
    failures: dict[tuple[int, int], str] = field(default_factory=dict)  # (arm, level) -> why it has no result
    done: list[int] = field(default_factory=list)  # the levels measured to the end (a stop discards the one under way)
    orders: list[list[int]] = field(default_factory=list)  # arm indices in run order, per timed round
    # In blocks (servers one at a time, measure/blocks.py): the rounds of each block, every arm's the same; None
    # when the arms' rounds alternated. The rounds of one block share their server's start and moment, so an
    # interval pairs blocks then.
    blocks: list[list[int]] | None = None

    def rounds_of(self, arm: int, level: int) -> list[LoadRound]:
        return sorted((r for r in self.rounds if r.arm == arm and r.concurrency == level), key=lambda r: r.round)


def percentiles(values: list[float]) -> dict:
    """{p50, p90, p99} of the values (numpy's linear interpolation); None in each with no values."""
    if not values:
        return {f"p{q}": None for q in PERCENTILES}
    got = np.percentile(np.asarray(values, dtype=float), PERCENTILES)
    return {f"p{q}": float(v) for q, v in zip(PERCENTILES, got)}


def baseline_of(arms: list[ArmInfo], index: int) -> int | None:
    """The plain arm of `index`'s engine (the report's rule: each assisted arm against its own engine's plain)."""
    engine = arms[index].engine
    return next((i for i, a in enumerate(arms) if a.engine == engine and not a.assisted), None)


def acceptance(rounds: list[LoadRound]) -> dict:
    """Drafted and accepted over the level's rounds, the rate by position, and the spread over requests."""
    sources = {r.counts_source for r in rounds}
    source = None if not rounds or None in sources else "metrics" if "metrics" in sources else "per-request"
    totals = sum_counts([c for r in rounds if (c := r.round_counts()) is not None])
    drafted, accepted, drafts = totals["draft_tokens"], totals["accepted_tokens"], totals["drafts"]
    own = [r.counts for rnd in rounds for r in rnd.requests if r.counts and (r.counts.get("draft_tokens") or 0) > 0]
    spread = percentiles([c["accepted_tokens"] / c["draft_tokens"] for c in own]) if own else None
    note = METRICS_NOTE if source == "metrics" else NO_COUNTS_NOTE if source is None else None
    return {
        "source": source,
        "drafted": drafted,
        "accepted": accepted,
        "rate": accepted / drafted if drafted else None,
        "per_position": [a / drafts for a in totals["accepted_per_position"]] if drafts else [],
        "per_request_rate": spread,
        "note": note,
    }


def identical(reference: list[LoadRound], rounds: list[LoadRound]) -> bool | None:
    """Whether every request of `rounds` got the tokens of the first request of `reference` (greedy decoding
    keeps the target's tokens whatever the batch); None when either has no token ids (a report read back)."""
    first = next((q.token_ids for r in reference for q in r.requests if q.token_ids), None)
    mine = [q.token_ids for r in rounds for q in r.requests]
    if first is None or not mine or not all(mine):
        return None
    return all(ids == first for ids in mine)


def _paired(plain: list[LoadRound], mine: list[LoadRound], figure) -> tuple[list[float], list[float]]:
    by_round = {r.round: r for r in plain}
    pairs = [(figure(by_round[r.round]), figure(r)) for r in mine if r.round in by_round]
    return [p for p, _ in pairs], [m for _, m in pairs]


def _merged(rounds: list[LoadRound], blocks: list[list[int]]) -> list[LoadRound]:
    """Each block's rounds as one round (`round` is the block's number): its tokens over its summed wall time,
    every request of the block."""
    by_round = {r.round: r for r in rounds}
    out = []
    for number, members in enumerate(blocks):
        got = [by_round[i] for i in members if i in by_round]
        if got:
            out.append(LoadRound(got[0].arm, got[0].concurrency, number, sum(g.wall_s for g in got),
                                 [q for g in got for q in g.requests]))
    return out


def _median_e2e(rnd: LoadRound) -> float:
    return float(np.median([r.latency for r in rnd.requests])) if rnd.requests else 0.0


def entry(record: LoadRecord, arms: list[ArmInfo], index: int, level: int) -> dict:
    """One (arm, level) of the report's `load` list, every figure derived from its raw rounds."""
    info, base = arms[index], baseline_of(arms, index)
    failed = record.failures.get((index, level))
    rounds = [] if failed else record.rounds_of(index, level)
    requests = [q for r in rounds for q in r.requests]
    walls = sum(r.wall_s for r in rounds)
    cpu = [q.client_cpu_s for q in requests]
    data = {
        "arm": info.name,
        "arm_index": index,
        "engine": info.engine,
        "baseline": None if not info.assisted or base is None else arms[base].name,
        "concurrency": level,
        "rounds": len(rounds),
        "requests": len(requests),
        "failed": failed,
        "output_tokens_per_s": float(np.median([r.tokens_per_s() for r in rounds])) if rounds else None,
        "output_tokens_per_s_rounds": [r.tokens_per_s() for r in rounds],
        "wall_s_rounds": [r.wall_s for r in rounds],
        "per_user_tokens_per_s": float(np.median([q.tokens / q.latency for q in requests if q.latency > 0]))
        if any(q.latency > 0 for q in requests) else None,
        "ttft_s": percentiles([q.ttft for q in requests if q.ttft is not None]),
        "itl_s": percentiles([gap for q in requests for gap in q.itl]),
        "e2e_s": percentiles([q.latency for q in requests]),
        "outputs_identical": identical(rounds, rounds),  # a plain arm: all its requests alike
        "paired_by": "rounds" if record.blocks is None else "blocks",
        "speedup": None,
        "latency_speedup": None,
        "acceptance": None,
        "client_cpu_s": {"per_request": float(np.median(cpu)) if cpu else None, "total": float(sum(cpu)),
                         "share": sum(cpu) / walls if walls > 0 else None},
    }
    blocks = None if record.blocks is None else _merged(rounds, record.blocks)
    if blocks is not None:
        data["output_tokens_per_s_blocks"] = [b.tokens_per_s() for b in blocks]
    if info.assisted:
        plain = [] if base is None or (base, level) in record.failures else record.rounds_of(base, level)
        if blocks is not None:  # one server at a time: a round pairs only with its own block's moment
            plain, rounds = _merged(plain, record.blocks), blocks
        # The throughput ratio assisted/plain of each round pair: with equal tokens, plain wall / assisted wall.
        ours, theirs = _paired(plain, rounds, LoadRound.tokens_per_s)
        data["speedup"] = stats.speedup(theirs, ours)
        slow, fast = _paired(plain, rounds, _median_e2e)
        data["latency_speedup"] = stats.speedup(slow, fast)
        data["acceptance"] = acceptance(rounds)
        data["outputs_identical"] = identical(plain, rounds)
    return data


def entries(record: LoadRecord | None, arms: list[ArmInfo], single: dict[int, float] | None = None) -> list[dict]:
    """The report's `load` list: one entry per (arm timed under load, level measured), level order then arm order.

    `single` is each arm's median latency of the single-request runs: at level 1 an entry gives its median
    end-to-end time over that (`single_request_ratio`), which should be 1 within noise."""
    if record is None:
        return []
    out = [entry(record, arms, index, level) for level in record.done for index in record.arms]
    for e in out:
        alone = (single or {}).get(e["arm_index"])
        if e["concurrency"] == 1 and alone and e["e2e_s"]["p50"] is not None:
            e["single_request_ratio"] = e["e2e_s"]["p50"] / alone
    return out


def agreement(load: list[dict]) -> str | None:
    """At one request at once, how the load rounds' end-to-end time compares with the single-request runs'."""
    ratios = [(e["arm"], e["single_request_ratio"]) for e in load if e.get("single_request_ratio")]
    if not ratios:
        return None
    worst = max(abs(r - 1) for _, r in ratios)
    each = ", ".join(f"{name} {r:.2f}×" for name, r in ratios)
    return (f"At 1 request at once the load rounds' median end-to-end time was within {worst:.0%} of the "
            f"single-request runs' median ({each}).")


def _x(speedup: dict | None) -> str:
    return "no figure" if not speedup or speedup.get("median") is None else f"{speedup['median']:.2f}×"


def _plural(level: int) -> str:
    return f"{level} concurrent request" + ("" if level == 1 else "s")


def _too_few(pairs: int, unit: str = "rounds") -> str:
    """Why a level has no interval: `pairs` paired rounds (or, in blocks, paired blocks) are too few."""
    need, one = stats.fewest_runs(), unit.rstrip("s")
    if pairs <= 1:
        return f"one {one} gives no interval ({need} {unit} give a {_pct(stats.order_statistic_level(need, 1))} one)"
    return (f"{pairs} {unit} give only a {_pct(stats.order_statistic_level(pairs, 1))} range, too few to be sure "
            f"({need} {unit} give a {_pct(stats.order_statistic_level(need, 1))} interval)")


def _pct(level: float) -> str:
    return f"{level * 100:.4g}%"


def arm_summary(name: str, baseline: str | None, mine: list[dict]) -> dict:
    """An assisted arm's verdict over its levels: where it helps, where it costs, where it stops paying, in words."""
    helps = [e["concurrency"] for e in mine if not e["failed"] and stats.has_interval(e["speedup"] or {})
             and e["speedup"]["ci_low"] > 1.0]
    costs = [e["concurrency"] for e in mine if not e["failed"] and stats.has_interval(e["speedup"] or {})
             and e["speedup"]["ci_high"] < 1.0]
    stops = next((e for e in mine if e["concurrency"] not in helps), None)
    levels = [e["concurrency"] for e in mine]
    if not mine:
        sentence = f"{name} has no level measured under load."
    elif stops is None:
        figures = ", ".join(f"{_x(e['speedup'])} at {e['concurrency']}" for e in mine)
        sentence = f"{name} helps at every level measured ({', '.join(map(str, levels))}: {figures})."
    else:
        parts = []
        before = [e for e in mine if e["concurrency"] < stops["concurrency"]]
        if before:
            last = before[-1]
            parts.append(f"helps up to {_plural(last['concurrency'])} ({_x(last['speedup'])} at {last['concurrency']})")
        level, s = stops["concurrency"], stops["speedup"] or {}
        later = [e["concurrency"] for e in mine if e["concurrency"] >= level]
        from_on = level in costs and len(later) > 1 and all(c in costs for c in later)
        if stops["failed"]:
            parts.append(f"has no result at {level}: {stops['failed'].rstrip('.')}")
        elif level in costs:
            parts.append(f"costs throughput {f'from {level} on' if from_on else f'at {level}'} ({_x(s)} at {level})")
        elif not stats.has_interval(s):
            unit = "blocks" if stops.get("paired_by") == "blocks" else "rounds"
            parts.append(f"is not clearly faster at {level} ({_x(s)}: {_too_few(s.get('n') or 0, unit)})")
        else:
            parts.append(f"is not clearly faster at {level} ({_x(s)}, interval {s['ci_low']:.2f}–{s['ci_high']:.2f}× "
                         f"at {_pct(s['level'])}, which contains 1×)")
        more = [] if from_on else [c for c in costs if c > level]
        if more:
            by_level = {e["concurrency"]: e["speedup"] for e in mine}
            parts.append("costs throughput at " + ", ".join(f"{c} ({_x(by_level[c])})" for c in more))
        sentence = f"{name} " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + "."
    return {"arm": name, "baseline": baseline, "stops_paying_at": None if stops is None else stops["concurrency"],
            "helps_at": helps, "costs_at": costs, "sentence": sentence}


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def summary(record: LoadRecord | None, arms: list[ArmInfo], load: list[dict], contention: dict | None = None) -> dict:
    """The report's `load_summary`: each assisted arm's verdict, the sentence, notes, and the client's CPU share.

    `contention` is what the busy-machine watch saw during the timed load rounds (environment.load_contention)."""
    done = [] if record is None else list(record.done)
    out_arms = []
    for index in [] if record is None else record.arms:
        if not arms[index].assisted:
            continue
        mine = [e for e in load if e["arm_index"] == index]
        base = baseline_of(arms, index)
        out_arms.append(arm_summary(arms[index].name, None if base is None else arms[base].name, mine))
    notes = [] if record is not None else ["The load phase did not run."]
    loading = set() if record is None else set(record.arms)
    left_out = [(i, a) for i, a in enumerate(arms) if i not in loading and record is not None]
    failed = [a.name for _i, a in left_out if a.error]
    if failed:  # an arm that failed is left out for that, whatever its engine can do
        notes.append(f"{_listed(failed)} failed before the load phase, so {'it was' if len(failed) == 1 else 'they were'}"
                     f" not timed under load (see {'its' if len(failed) == 1 else 'their'} error).")
    for engine in dict.fromkeys(a.engine for _i, a in left_out if not a.error):
        names = [a.name for _i, a in left_out if a.engine == engine and not a.error]
        notes.append(f"The {engine} arms ({', '.join(names)}) stay at one request at a time: their generation "
                     f"does not batch requests, so they are not timed under load.")
    if record is not None and not done:
        notes.append("No load level was measured to the end.")
    differ = [f"{e['arm']} at {e['concurrency']}" for e in load if e.get("outputs_identical") is False]
    if differ:
        notes.append(f"Not every request got the same tokens as its engine's plain arm ({', '.join(differ)}): "
                     f"greedy decoding should keep them, so compare the texts before trusting those speedups.")
    if record is not None and record.blocks is not None and done:
        size = max(len(b) for b in record.blocks)
        notes.append(f"The servers ran one at a time, in blocks of {size} round{'s' if size > 1 else ''} "
                     f"({len(record.blocks)} blocks an arm at each level): rounds of one block share their server's "
                     f"start and moment, so each speedup's interval pairs an arm's blocks with its baseline's, "
                     f"assuming independent blocks; more blocks (load_block_rounds) narrow it, each costing "
                     f"server starts.")
    if agreement(load):
        notes.append(agreement(load))
    during = busy.reasons(contention, "while the load rounds were timed")
    if during:
        notes.append(f"The machine was busy: {'; '.join(during)}, so the figures under load may not hold on an "
                     f"idle one.")
    cpu = sum(e["client_cpu_s"]["total"] for e in load)
    walls = sum(sum(e["wall_s_rounds"]) for e in load)
    per = [e["client_cpu_s"]["per_request"] for e in load if e["client_cpu_s"]["per_request"] is not None]
    client = None
    if walls > 0:
        client = (f"The client's own CPU time was {cpu / walls:.1%} of the load rounds' wall time (median "
                  f"{float(np.median(per)) * 1000:.1f} ms per request); where the client and the server share the "
                  f"machine's cores, that time was taken from the server.")
    return {"levels": done, "rounds": 0 if record is None else record.rounds_asked, "arms": out_arms,
            "sentence": " ".join(a["sentence"] for a in out_arms), "notes": notes, "client": client}


def report_parts(record: LoadRecord | None, arms: list[ArmInfo], contention: dict | None = None,
                 single: dict[int, float] | None = None) -> dict:
    """{"load": [...], "load_summary": {...}} for Report.to_dict (`single`: as `entries` takes it)."""
    load = entries(record, arms, single)
    return {"load": load, "load_summary": summary(record, arms, load, contention)}


def raw(record: LoadRecord | None) -> dict | None:
    """The raw rounds and failures (every figure above is derived from these); the requests' token ids are left
    out, as they would make a report of many levels megabytes long."""
    if record is None:
        return None
    return {
        "levels": list(record.levels), "rounds_asked": record.rounds_asked, "arms": record.arms, "done": record.done,
        "orders": record.orders, "blocks": record.blocks,
        "rounds": [{**{k: v for k, v in asdict(r).items() if k != "requests"},
                    "requests": [{k: v for k, v in asdict(q).items() if k != "token_ids"} for q in r.requests]}
                   for r in record.rounds],
        "failures": [{"arm": a, "concurrency": c, "reason": why} for (a, c), why in sorted(record.failures.items())],
    }


def csv_rows(raw_rounds: dict | None, arms: list[tuple[str, str, str]]) -> list[list]:
    """One CSV row per load request, in the runs' columns (report.to_csv), concurrency and request index last.

    From the raw rounds (`raw`, or a saved report's `load_raw`, read defensively) and each arm's (name, strategy,
    engine), so the live CSV and the history's are written by this one function."""
    raw_rounds = raw_rounds if isinstance(raw_rounds, dict) else {}
    failed = {(f.get("arm"), f.get("concurrency")) for f in raw_rounds.get("failures") or [] if isinstance(f, dict)}
    rounds = [r for r in raw_rounds.get("rounds") or [] if isinstance(r, dict) and isinstance(r.get("arm"), int)
              and 0 <= r["arm"] < len(arms) and (r["arm"], r.get("concurrency")) not in failed]
    rows = []
    for rnd in sorted(rounds, key=lambda r: (r.get("concurrency") or 0, r.get("round") or 0, r["arm"])):
        name, strategy, engine = arms[rnd["arm"]]
        assisted = strategy != "plain"
        for q in [q for q in rnd.get("requests") or [] if isinstance(q, dict)]:
            latency, tokens, ttft = q.get("latency") or 0.0, q.get("tokens") or 0, q.get("ttft")
            counts = q.get("counts") if isinstance(q.get("counts"), dict) else {}
            rows.append([
                name, strategy, rnd.get("round"), f"{latency:.6f}", tokens,
                f"{tokens / latency:.3f}" if latency > 0 else "0.000", "" if ttft is None else f"{ttft:.6f}",
                counts.get("draft_tokens", "") if assisted else "",
                counts.get("accepted_tokens", "") if assisted else "", "", "", engine, "" if rnd.get("position") is None else rnd["position"], rnd.get("concurrency"),
                q.get("index"),
            ])
    return rows
