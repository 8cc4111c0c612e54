"""The command line's text output: the comparison and suite tables and the sentences under them."""

from __future__ import annotations

from ..engines.transformers.paths import LOSSY_TRADE
from ..results.likely import answer_words

# The table's abbreviations in plain words, printed under it.
TABLE_KEY = (
    "IQR: the spread of the middle half of the runs. TTFT: time to the first new token. accepted: share of all "
    "drafted tokens the target kept (alpha, below, counts only the drafted tokens it checked, so it is higher). "
    "tok/fwd: new tokens per target forward pass (one step of the target; plain "
    "writes 1)."
)


def _cell(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def stopping_sentence(stopping: dict) -> str:
    """How the number of repetitions was decided, in one sentence."""
    n, elapsed = stopping["repetitions"], stopping["elapsed_s"]
    budget = f" of a {stopping['max_time_s']:g} s budget" if stopping.get("max_time_s") else ""
    used = f"{n} in {elapsed:.1f} s{budget}"
    if stopping["rule"] == "fixed":
        return f"a fixed {stopping['max_repetitions']} asked for; {used}."
    if stopping["rule"] == "clear":
        ended = {"clear": "the answer was clear", "time budget": "the time budget ran out first",
                 "repetitions": f"the most allowed ({stopping['max_repetitions']}) ran first", "stopped": "stopped",
                 "no assisted arm": "no assisted arm was left"}
        return (f"until the answer was clear, {stopping['level']:.0%} sure at every look ("
                f"{ended.get(stopping['ended_by'], 'not ended')}); {used}.")
    if stopping["rule"] == "likely":
        ended = {"likely": "every arm had its answer", "time budget": "the time budget ran out first",
                 "repetitions": f"the most allowed ({stopping['max_repetitions']}) ran first", "stopped": "stopped",
                 "no assisted arm": "no assisted arm was left"}
        return (f"until the likely answer, assuming roughly normal noise ("
                f"{ended.get(stopping['ended_by'], 'not ended')}); {used}.")
    target = f"±{stopping['target']:.0%}"
    state = "reached" if stopping["reached"] else "not reached"
    ended = {"precision": "", "time budget": ", the time budget ran out",
             "repetitions": f", the most allowed ({stopping['max_repetitions']}) ran", "stopped": ", stopped"}
    return f"until every speedup was known to {target} ({state}{ended.get(stopping['ended_by'], '')}); {used}."


def settings_phrase(settings: dict) -> str:
    """'num_assistant_tokens 20 (transformers default), ...' for one arm's drafting settings."""
    source = settings.get("source", {})
    parts = [f"{knob} {value} ({source[knob]})" for knob, value in settings.items() if knob in source]
    if settings.get("threshold_adaptation"):
        parts.append("the threshold adapted during each run (scikit-learn installed)")
    return ", ".join(parts)


def ranking_lines(data: dict) -> list[str]:
    """With two or more assisted arms, the page's ranking: every arm, plain among them, and the same note."""
    from ..views.panels import ranked_rows, ranking_words

    rows = ranked_rows(data)
    if sum(1 for row in rows if not row.get("plain")) < 2:
        return []
    from ..results.report import unsettled

    no_answer = unsettled(data)  # no clear answer: listed by median, never ranked

    def said(row: dict) -> str:
        if row.get("rank") is None:
            return f"{row['arm']} ({'failed' if row.get('error') else 'no run'})"
        speed = "1×, no assistant" if row.get("plain") else f"{row['speedup']:.2f}×"
        return f"{row['arm']} ({speed})" if no_answer else f"{row['rank']}. {row['arm']} ({speed})"

    order = ", ".join(said(row) for row in rows)
    head = "By median, not ranked" if no_answer else "Ranking, fastest first"
    return [f"{head}: {order}.", f"  {ranking_words(data, rows)}"]


def server_phrase(settings: dict) -> str:
    """How a vLLM arm's server ran: who started it, its speculative config and limits."""
    if settings.get("started_by") == "operator":
        return f"the operator's server at {settings.get('url')}, serving {settings.get('served_model')}"
    parts = [f"vLLM {settings.get('vllm')} server started by AssistLab"]
    drafting = settings.get("drafting") or {}
    if drafting.get("intersection_tokens") is not None:  # a draft model with another tokenizer (vllm/draft_model.py)
        parts.append(f"drafting in the {drafting['intersection_tokens']} tokens both vocabularies share "
                     f"({drafting.get('kind')}, {drafting.get('source')})")
    elif drafting.get("kind"):
        parts.append(f"drafting in the target's vocabulary ({drafting['kind']})")
    if settings.get("speculative_config"):
        parts.append("speculative_config " + ", ".join(f"{k}={v}" for k, v in settings["speculative_config"].items()))
    parts += [f"{knob} {settings[knob]}" for knob in ("max_num_seqs", "gpu_memory_utilization", "dtype", "max_model_len")
              if settings.get(knob) is not None]
    if settings.get("extra_args"):
        parts.append("with " + " ".join(settings["extra_args"]))
    return "; ".join(parts)


def engine_lines(data: dict) -> list[str]:
    """Across engines: plain against plain, best against best; never one engine's speedup over another's plain."""
    lines = data.get("engines") or []
    if len(lines) < 2:
        return []
    out = ["Engines (plain with plain, best with best):"]
    for line in lines:
        parts = []
        for role in ("plain", "best"):
            f = line.get(role)
            if f and f.get("median_latency_s") is not None:
                parts.append(f"{role} {f['arm']} {f['median_latency_s']:.3f} s, {f['median_tokens_per_s']:.1f} tokens/s")
        if line.get("plain_identical_to_transformers") is True:
            parts.append("plain output identical to transformers' plain")
        elif line.get("plain_identical_to_transformers") is False:
            parts.append(f"plain output differs from transformers' plain from token "
                         f"{line['plain_first_difference_from_transformers'] + 1}")
        out.append(f"  {line['engine']}: " + ("; ".join(parts) or "no run finished"))
    return out


def load_lines(data: dict) -> list[str]:
    """The load levels, one row per arm and level, then the summary sentence and its notes; [] without levels."""
    from ..results.report import interval_cell

    entries, summary = data.get("load"), data.get("load_summary")
    if summary is None:
        return []
    header = ["arm", "level", "server tok/s", "per-user tok/s", "TTFT p50 s", "E2E p50 s", "speedup"]
    rows = []
    for e in entries or []:
        if e["failed"]:
            rows.append([e["arm"], str(e["concurrency"]), "-", "-", "-", "-", "failed"])
            continue
        s = e["speedup"]
        speed = "-" if s is None or s.get("median") is None else f"{s['median']:.2f}×"
        if s is not None and interval_cell(s):
            speed += f" ({interval_cell(s)})"
        rows.append([e["arm"], str(e["concurrency"]), _cell(e["output_tokens_per_s"], "{:.1f}"),
                     _cell(e["per_user_tokens_per_s"], "{:.1f}"), _cell(e["ttft_s"]["p50"]), _cell(e["e2e_s"]["p50"]),
                     speed])
    out = []
    if rows:
        widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
        line = lambda r: "  " + " | ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))  # noqa: E731
        width = len(line(header))
        rounds = summary["rounds"]
        title = f" Under load: {rounds} round{'' if rounds == 1 else 's'} per level after one warm-up "
        out += [f"[{title:-^{width - 2}}]", line(header), "  " + "-" * (width - 2), *(line(r) for r in rows)]
        out.append("Speedup under load = median over rounds of assisted/plain server tokens per second, paired by "
                   "round, with the order-statistic interval at the level it has.")
    if summary.get("sentence"):
        out.append("  " + summary["sentence"])
    for e in entries or []:  # the failures the sentence does not already give
        if e["failed"] and e["failed"].rstrip(".") not in (summary.get("sentence") or ""):
            out.append(f"  {e['arm']} at {e['concurrency']}: {e['failed']}")
    out += [f"  {note}" for note in summary.get("notes") or []]
    if summary.get("client"):
        out.append(f"  {summary['client']}")
    return out


def format_table(data: dict) -> str:
    """A comparison table in the manner of torch.utils.benchmark.Compare: arms as rows, medians with spread."""
    # Imported here: the report brings numpy, which --help, presets and history do not need.
    from ..results.report import (UNSETTLED_ADVICE, counted, first_answer_words, is_busy, speedup_sentence, unsettled,
                                  unsettled_sentence)

    request, env = data["request"], data["environment"]
    title = (
        f" Generation: {request['max_new_tokens']} new tokens, {counted(data['counted_repetitions'], 'repetition')} "
        f"(+{request['warmup']} warm-up), {env['device']} {env['dtype']}, {env['cpu_threads']} threads "
    )
    comp = {c["arm"]: c for c in data["comparison"]}
    header = ["arm", "median s", "IQR s", "min-max s", "tokens/s", "TTFT s", "accepted", "tok/fwd"]
    rows = []
    for arm in data["arms"]:
        lat, tps = arm["latency_summary"], arm["tokens_per_s_summary"]
        c = comp.get(arm["name"], {})
        ttft = sorted(t for t in arm["ttft_s"] if t is not None)
        rows.append([
            arm["name"] + (" (FAILED)" if arm["error"] else ""),
            _cell(lat["median"]),
            _cell(lat["iqr"]),
            "-" if lat["min"] is None else f"{lat['min']:.3f}-{lat['max']:.3f}",
            _cell(tps["median"], "{:.1f}"),
            _cell(ttft[len(ttft) // 2] if ttft else None),
            _cell(c.get("acceptance_rate"), "{:.0%}"),
            _cell(c.get("tokens_per_forward", 1.0 if arm["strategy"] == "plain" else None), "{:.2f}"),
        ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  " + " | ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
    width = len(line(header))
    out = [f"[{title:-^{width - 2}}]", line(header), "  " + "-" * (width - 2)]
    out += [line(r) for r in rows]
    out.append("Times are in seconds; speedup = median of per-repetition plain/assisted ratios, with its interval: "
               "the one that holds at every look when the runs stop once the answer is clear, else the "
               "order-statistic interval of that median at the level it has.")
    out.append(TABLE_KEY)
    if env.get("prompt_note"):
        out.append(env["prompt_note"])
    if unsettled(data):  # said before the sentences under it, in the page's words
        out.append(f"{unsettled_sentence(data['stopping'])} {UNSETTLED_ADVICE}")
    for entry in data["comparison"]:
        against = f" (against {entry['baseline']})" if entry.get("engine", "transformers") != "transformers" else ""
        out.append("  " + speedup_sentence(entry, data["request"]["do_sample"], busy=is_busy(data)) + against)
        if entry.get("predicted_speedup") is not None:
            out.append(
                f"    why: alpha {entry['alpha']:.2f} (chance the target keeps a drafted token it checks), "
                f"c {entry['c']:.2f} (drafting "
                f"cost per token in target steps), drafted per step {entry['k']:.3g} -> predicted {entry['predicted_speedup']:.2f}×. "
                f"{entry['limit']}"
            )
            if entry.get("probe_busy"):
                out.append(f"    the drafting cost was measured while the machine was busy, so this prediction may be "
                           f"far off: {entry['probe_busy']}.")
        for missing in entry.get("figures_unavailable") or []:
            out.append(f"    {missing['figure']}: {missing['why']}.")
    if any(entry.get("lossless") is False for entry in data["comparison"]):
        out.append(LOSSY_TRADE)
    out += ranking_lines(data)
    for arm in data["arms"]:
        if arm.get("choice"):
            out.append(f"  {arm['name']}: {arm['choice']}")
    stopping = data.get("stopping")
    if stopping:
        out.append("Repetitions: " + stopping_sentence(stopping))
        said = answer_words(stopping)
        if said:
            out.append(f"  {said}.")
        if first_answer_words(data):
            out.append(f"  {first_answer_words(data)}")
    for arm in data["arms"]:
        if arm.get("engine", "transformers") != "transformers":
            out.append(f"  {arm['name']}: {server_phrase(arm.get('settings') or {})}.")
        elif arm.get("settings") and settings_phrase(arm["settings"]):
            out.append(f"  {arm['name']} drafts with {settings_phrase(arm['settings'])}.")
    from ..views.panels import servers_words

    held = servers_words(data)
    if held:
        out.append(f"  {held}")
    out += engine_lines(data)
    out += [f"Warning ({w['code']}): {w['message']}" for w in data.get("warnings") or []]
    if data.get("sweep"):
        out.append(f"Sweep of {data['sweep']['param']}: {data['sweep']['best_text']}")
    out += load_lines(data)
    for arm in data["arms"]:
        if arm["error"]:
            out.append(f"  {arm['name']}: {arm['error']}")
    if data["status"] != "complete":
        out.append(data["message"])
    return "\n".join(out)



def format_suite_table(data: dict) -> str:
    """Per category and overall, per assisted arm: speedup with interval, acceptance, accepted tokens per step."""
    suite, request, env = data["suite"], data["request"], data["environment"]
    header = ["category", "prompts", "arm", "speedup", "95% interval", "accepted", "tok/step", "identical"]
    rows = []
    for entry in [*suite["categories"], {**suite["overall"], "category": "overall"}]:
        for arm in entry["arms"]:
            s = arm["speedup"]
            rows.append([
                entry["category"], str(arm["prompts"]), arm["arm"],
                _cell(s["geomean"], "{:.2f}×"),
                "-" if s["ci_low"] is None else f"{s['ci_low']:.2f}–{s['ci_high']:.2f}×",
                _cell(arm["acceptance_rate"], "{:.0%}"),
                _cell(arm["mean_accepted_tokens"], "{:.2f}"),
                f"{arm['identical']}/{arm['prompts']}",
            ])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  " + " | ".join(str(v).ljust(w) if i < 3 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
    width = len(line(header))
    title = (
        f" {suite['name']}: {request['max_new_tokens']} new tokens, {request['repeats']} repetitions, "
        f"{env['device']} {env['dtype']}, {env['cpu_threads']} threads "
    )
    out = [f"[{title:-^{width - 2}}]", line(header), "  " + "-" * (width - 2), *(line(r) for r in rows)]
    out.append(f"Selection: {suite['rule']}.")
    out.append(f"Speedup: {suite['interval']}; accepted = accepted/drafted tokens; tok/step = 1 + accepted/drafts.")
    for entry in suite["categories"]:
        out.append("  " + entry["best"])
    out.append("  " + suite["overall"]["best"])
    for skipped in suite["skipped"]:
        out.append(f"  skipped {skipped['id']} ({skipped['category']}): {skipped['reason']}")
    for row in suite["prompts"]:
        if row["status"] == "failed":
            out.append(f"  failed {row['id']} ({row['category']}): {row['reason']}")
    out += load_lines(data)
    out += [f"Warning ({w['code']}): {w['message']}" for w in data.get("warnings") or []]
    out.append(f"{data['message']} ({data['elapsed_s']:.0f} s)")
    return "\n".join(out)
