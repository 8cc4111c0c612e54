"""Pure derivations from a report dict: clean text, canonical names, the stored columns and arm rows, CSV."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import posixpath
import re
import unicodedata

from ..config import PROMPT_LOOKUP_DEFAULT
from ..engines.vllm.schedule import Schedule
from ..errors import InputError
from ..results import cells, load
from ..results.explain import NOTHING_DRAFTED
from ..results.report import unsettled
from ..results.tune_interval import LIKELY, SURE
from .records import MAX_NAME_CHARS, MAX_OWNER_CHARS, MAX_PREVIEW_CHARS, MAX_RECOMMENDATION_CHARS

# The largest report one comparison may store (issue 10, as the limits in records); only _report_text reads it.
MAX_REPORT_BYTES = 8_000_000
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._@:/+-]")
PLAIN = "plain"  # best_arm when no assistant beat plain generation
DEFAULT_ENGINE = "transformers"  # the engine of every arm saved before arms said theirs
MAX_ENGINES_CHARS = 64


def clean_text(value: object, limit: int) -> str:
    """Text safe to store and index: one line, no control or format characters, NUL or lone surrogates."""
    text = re.sub(r"\s+", " ", str(value))
    return "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")[:limit].strip()


def owner_name(name: object) -> str | None:
    """The one rule a login name is stored under and compared by (saving, deleting, retention): cleaned text."""
    return (clean_text(name, MAX_OWNER_CHARS) or None) if name else None


def canonical_model(text: object, kind: str | None = None) -> str:
    """The name a model is stored and searched under: a hub id, a bundled name or a local folder's path.

    A local folder is named by its path inside ASSISTLAB_MODELS_DIR, as the app resolves it ('team1/tiny'), so
    two folders with the same last name stay two models. Never the raw text someone typed: a path that is not
    such a clean relative path (like './x/../same' or an absolute one) is reduced to its last name, 'same', and
    anything outside the characters hub ids and folder names use is dropped.
    """
    raw = str(text or "").strip()
    if kind is None:
        kind = "bundled" if raw.startswith("bundled:") else "local" if raw.startswith(("/", ".", "~")) or ".." in raw else "hub"
    if kind == "local":
        raw = raw.replace("\\", "/").rstrip("/")
        if raw.startswith(("/", "~")) or any(part in ("", ".", "..") for part in raw.split("/")):
            raw = posixpath.basename(posixpath.normpath(raw).rstrip("/"))
    name = _SAFE_NAME.sub("", raw)[:MAX_NAME_CHARS]
    return name or "unknown"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _model_kinds(report: dict) -> dict[str, str]:
    """Raw reference text -> kind ('hub', 'bundled', 'local'), from the environment the run recorded."""
    kinds = {}
    for info in ((report.get("environment") or {}).get("models") or {}).values():
        if isinstance(info, dict) and isinstance(info.get("ref"), str):
            kinds[info["ref"]] = str(info.get("kind") or "")
    return kinds


def _setting(strategy: str, spec: dict, settings: dict | None = None) -> str:
    """The drafting settings someone chose, as ArmSpec.label says them; none chosen reads 'transformers defaults'."""
    settings = settings or {}
    if strategy == "prompt-lookup":
        # As ArmSpec.lookup_tokens: none given runs AssistLab's default, and the page names the arm by it ('k=10').
        lookup = (spec.get("prompt_lookup_num_tokens") or settings.get("prompt_lookup_num_tokens")
                  or PROMPT_LOOKUP_DEFAULT)
        return f"k={lookup}"
    parts = []
    if spec.get("num_assistant_tokens") is not None:
        parts.append(f"k={spec['num_assistant_tokens']}")
    if spec.get("num_assistant_tokens_schedule") not in (None, "constant"):
        parts.append(str(spec["num_assistant_tokens_schedule"]))
    if spec.get("assistant_confidence_threshold") is not None:
        parts.append(f"threshold {spec['assistant_confidence_threshold']:g}")
    if strategy == "early-exit":
        parts.insert(0, f"layer {spec.get('early_exit_layer')}")
    return clean_text(", ".join(parts) or "transformers defaults", MAX_NAME_CHARS)


def engine_of(arm: object) -> str:
    """The engine an arm (or its spec) ran on; one saved before arms said theirs ran on transformers."""
    engine = arm.get("engine") if isinstance(arm, dict) else None
    return (clean_text(engine, 16) if isinstance(engine, str) else "") or DEFAULT_ENGINE


def _vllm_pairing(strategy: str, spec: dict, settings: dict | None = None) -> tuple[str | None, str, str]:
    """(assistant, setting, label) of a vLLM arm as VllmArm.named says it (the draft model's canonical name, the kind
    of drafting when saved); an operator's server is known by its name only (its flags are the operator's)."""
    if strategy == "server":
        name = clean_text(_MARKUP.sub("", str(spec.get("name") or "server")), MAX_NAME_CHARS - 20) or "server"
        return None, name, f"vllm server {name}"
    draft = spec.get("draft_model")
    assistant = canonical_model(draft) if isinstance(draft, str) and draft else None
    parts = [f"k={spec['num_speculative_tokens']}"] if spec.get("num_speculative_tokens") is not None else []
    if spec.get("schedule") is not None:  # a draft length per batch size; one that does not read back is dropped
        try:
            parts = [Schedule.checked(spec["schedule"]).words()]
        except InputError:
            pass
    if strategy == "ngram":
        parts.append(f"lookup {spec.get('prompt_lookup_min')}-{spec.get('prompt_lookup_max')}")
    drafting = (settings or {}).get("drafting")
    if isinstance(drafting, dict) and isinstance(drafting.get("words"), str) and drafting["words"]:
        parts.append(drafting["words"])
    setting = clean_text(", ".join(parts) or "vLLM defaults", MAX_NAME_CHARS)
    label = f"vllm {strategy}: {assistant} ({setting})" if assistant else f"vllm {strategy} ({setting})"
    return assistant, setting, label


def _pairing(strategy: str, spec: dict, kinds: dict[str, str], settings: dict | None = None) -> tuple[str | None, str, str]:
    """(assistant, setting, label) of an assisted arm of either engine, by one rule for every caller."""
    if engine_of(spec) == "vllm":
        return _vllm_pairing(strategy, spec, settings)
    assistant = spec.get("assistant")
    assistant = canonical_model(assistant, kinds.get(assistant) or None) if assistant else None
    setting = _setting(strategy, spec, settings)
    label = f"{strategy}: {assistant} ({setting})" if assistant else f"{strategy} ({setting})"
    return assistant, setting, label


def is_workload(report: dict) -> bool:
    """A workload (results.suite): many prompts, with figures per category and overall under report['suite']."""
    return report.get("kind") == "suite" and isinstance(report.get("suite"), dict)


def workload_label(report: dict) -> str | None:
    """What a workload measured, so like is ranked with like: its name, categories and prompt count; None for a
    single-prompt comparison."""
    if not is_workload(report):
        return None
    suite = report["suite"]
    categories = [c.get("category") for c in suite.get("categories") or [] if isinstance(c, dict)]
    overall = suite.get("overall") if isinstance(suite.get("overall"), dict) else {}
    count = overall.get("selected") if isinstance(overall.get("selected"), int) else len(suite.get("prompts") or [])
    text = f"{suite.get('name') or 'workload'} ({', '.join(str(c) for c in categories)}; {count} prompts)"
    return clean_text(text, MAX_NAME_CHARS)


def _workload_arm_rows(report: dict) -> list[dict]:
    """A workload's rows: each assisted arm's geometric-mean speedup over its prompts, with its t-interval."""
    kinds = _model_kinds(report)
    suite = report["suite"]
    overall = suite.get("overall") if isinstance(suite.get("overall"), dict) else {}
    by_name = {a.get("arm"): a for a in overall.get("arms") or [] if isinstance(a, dict)}
    specs = [a for a in ((report.get("request") or {}).get("arms") or []) if isinstance(a, dict)]
    resolved = {}  # the path each arm took, from the prompts' own reports ('auto' resolves there)
    for row in suite.get("prompts") or []:
        for run in (row.get("runs") or []) if isinstance(row, dict) else []:
            if isinstance(run, dict) and run.get("name") and run.get("strategy"):
                resolved.setdefault(run["name"], run["strategy"])
    rows = []
    for index, name in enumerate(report.get("arms") or [], start=1):
        spec = specs[index - 1] if index - 1 < len(specs) else {}
        strategy = clean_text(resolved.get(name) or spec.get("strategy") or spec.get("method") or "unknown", 32)
        if strategy == "prompt-lookup":  # a workload's prompt-lookup arm drafts from the prompt, whatever its spec says
            spec = {**spec, "assistant": None}
        assistant, setting, label = _pairing(strategy, spec, kinds)
        entry = by_name.get(name) or {}
        speed = entry.get("speedup") if isinstance(entry.get("speedup"), dict) else {}
        n = speed.get("n") if isinstance(speed.get("n"), int) else 0
        low, high = _number(speed.get("ci_low")), _number(speed.get("ci_high"))
        interval = low is not None and high is not None
        rows.append({
            "arm_index": index, "label": label, "strategy": strategy, "assistant": assistant, "setting": setting,
            "engine": engine_of(spec), "speedup": _number(speed.get("geomean")),
            "ci_low": low if interval else None, "ci_high": high if interval else None,
            "ci_level": _number(speed.get("level")) if interval else None,
            "ci_kind": "t-interval" if interval else "none", "n": n,
            "acceptance_rate": _number(entry.get("acceptance_rate")),
            "outputs_identical": (entry.get("identical") == entry.get("prompts")) if isinstance(
                entry.get("identical"), int) and entry.get("prompts") else None,
        })
    return rows


def is_tune(report: dict) -> bool:
    """A tuner's search (measure/tune.py): its candidates and its pick under report['tune']."""
    return isinstance(report.get("tune"), dict)


def kind_of(report: dict) -> str:
    """What a saved report is: 'workload', 'tune' (a tuner's search) or 'comparison'."""
    return "workload" if is_workload(report) else "tune" if is_tune(report) else "comparison"


def recommendation(report: dict) -> str | None:
    """A tuner's answer in its own sentence ('Use prompt lookup with 3 tokens: ...'); None for anything else."""
    if not is_tune(report):
        return None
    return clean_text(report["tune"].get("sentence") or "", MAX_RECOMMENDATION_CHARS) or None


def _tune_pick(report: dict) -> str | None:
    rec = report["tune"].get("recommendation")
    return rec.get("arm") if isinstance(rec, dict) else None


TUNE_INTERVAL_KINDS = (SURE, LIKELY)  # a tuner's pick's interval kinds: the leaderboard shows them as its page does


def arm_rows(report: dict) -> list[dict]:
    """One row per assisted arm: canonical label, its speedup over plain with the interval and its level. Of a
    tuner's search only its pick: the candidates it dropped early were timed only until they were clearly behind."""
    if is_workload(report):
        return _workload_arm_rows(report)
    pick = _tune_pick(report) if is_tune(report) else None
    kinds = _model_kinds(report)
    by_name = {c.get("arm"): c for c in report.get("comparison") or [] if isinstance(c, dict)}
    rows = []
    for index, arm in enumerate(report.get("arms") or []):
        if not isinstance(arm, dict) or arm.get("strategy") in (None, "plain"):
            continue
        if is_tune(report) and arm.get("name") != pick:
            continue
        strategy = clean_text(arm.get("strategy"), 32)
        spec = arm.get("spec") if isinstance(arm.get("spec"), dict) else {}
        spec = {**spec, "engine": engine_of(arm)}  # the arm says its engine; older specs said nothing
        settings = arm.get("settings") if isinstance(arm.get("settings"), dict) else None
        assistant, setting, label = _pairing(strategy, spec, kinds, settings)
        entry = by_name.get(arm.get("name")) or {}
        identical = entry.get("outputs_identical")
        # An arm that drafted nothing has no speedup from drafting: its ratio is kept in the report, never ranked
        # nor named best.
        speed = None if entry.get("limit_kind") == NOTHING_DRAFTED else entry.get("speedup")
        if speed is not None and is_tune(report):  # a tuner's pick: the one interval its page shows, if saved
            speed = (report["tune"].get("recommendation") or {}).get("interval") or speed
        rows.append({
            "arm_index": index,
            "label": label,
            "strategy": strategy,
            "assistant": assistant,
            "setting": setting,
            "engine": engine_of(arm),
            **_speed_columns(speed),
            "acceptance_rate": _number(entry.get("acceptance_rate")),
            "outputs_identical": identical if isinstance(identical, bool) else None,
        })
    return rows


def _speed_columns(speed: object) -> dict:
    """A speedup dict (stats.speedup's) as the arm row's columns: median, interval with its level and kind, n."""
    speed = speed if isinstance(speed, dict) else {}
    n = speed.get("n") if isinstance(speed.get("n"), int) else 0
    low, high, level = _number(speed.get("ci_low")), _number(speed.get("ci_high")), _number(speed.get("level"))
    if _number(speed.get("family_level")) is not None:  # a time-uniform interval: its family's level, as the page
        level = _number(speed.get("family_level"))
    kind = speed.get("interval")
    if kind is None:  # reports from before exact intervals: a 95% bootstrap interval when n > 1
        kind, level = ("bootstrap", 0.95) if n > 1 and low is not None else ("none", None)
    return {"speedup": _number(speed.get("median")), "ci_low": low if n > 1 else None,
            "ci_high": high if n > 1 else None, "ci_level": level if n > 1 else None,
            "ci_kind": clean_text(kind, 16), "n": n}


# A load row's arm_index: LOAD_ROW_BASE × its level + the arm's index, unique beside the arms' own (issue 27).
LOAD_ROW_BASE = 1000
MAX_LOAD_LEVEL = 256  # config.MAX_CONCURRENCY; a level past it is not a level AssistLab measured


def load_rows(report: dict) -> list[dict]:
    """One row per assisted arm and load level above 1, its throughput speedup over its engine's plain at that
    level, with `concurrency`: the leaderboard ranks each level apart. Level 1 is the comparison's own result
    (arm_rows: one request at a time), so a load run at 1 adds no second row for the same pairing."""
    if is_workload(report) or not isinstance(report.get("load"), list):
        return []
    kinds = _model_kinds(report)
    arms = [a if isinstance(a, dict) else {} for a in report.get("arms") or []]
    index_of = {a.get("name"): i for i, a in enumerate(arms) if a.get("name")}
    rows = []
    for entry in report["load"]:
        if not isinstance(entry, dict) or entry.get("baseline") is None or entry.get("failed"):
            continue
        level, index = entry.get("concurrency"), index_of.get(entry.get("arm"))
        if index is None or not isinstance(level, int) or isinstance(level, bool) or not 1 < level <= MAX_LOAD_LEVEL:
            continue
        arm = arms[index]
        if arm.get("strategy") in (None, "plain"):
            continue
        strategy = clean_text(arm.get("strategy"), 32)
        spec = {**(arm.get("spec") if isinstance(arm.get("spec"), dict) else {}), "engine": engine_of(arm)}
        settings = arm.get("settings") if isinstance(arm.get("settings"), dict) else None
        assistant, setting, label = _pairing(strategy, spec, kinds, settings)
        acceptance = entry.get("acceptance") if isinstance(entry.get("acceptance"), dict) else {}
        rows.append({
            "arm_index": LOAD_ROW_BASE * level + index, "label": label, "strategy": strategy,
            "assistant": assistant, "setting": setting, "engine": engine_of(arm),
            **_speed_columns(entry.get("speedup")),
            "acceptance_rate": _number(acceptance.get("rate")), "outputs_identical": None, "concurrency": level,
        })
    return rows


def board_rows(report: dict) -> list[dict]:
    """Every row the leaderboard keeps for a report: its arms one request at a time, then its load levels."""
    return [{**row, "concurrency": 1} for row in arm_rows(report)] + load_rows(report)


def device_label(environment: dict) -> str:
    """'cuda: NVIDIA H200' or 'cpu: <cpu model>': the machine a speedup belongs to."""
    device = clean_text(environment.get("device") or "unknown", 16)
    detail = environment.get("gpu_name") if device == "cuda" else environment.get("cpu_model")
    return clean_text(f"{device}: {detail}" if detail else device, MAX_NAME_CHARS)


def summary_columns(report: dict) -> dict:
    """The searchable columns of one comparison, all derived from its report."""
    request, env = report.get("request") or {}, report.get("environment") or {}
    kinds = _model_kinds(report)
    arms = arm_rows(report)
    measured = [a for a in arms if a["speedup"] is not None]
    best = max(measured, key=lambda a: a["speedup"], default=None)
    if best is not None and best["speedup"] <= 1.0:  # nothing beat plain: the best of this comparison is plain
        best = {"label": PLAIN, "speedup": 1.0}
    identical = [a["outputs_identical"] for a in arms if a["outputs_identical"] is not None]
    target_text = request.get("target") or ""
    strategies = sorted({a["strategy"] for a in arms})
    assistants = sorted({a["assistant"] for a in arms if a["assistant"]})
    plain = (report.get("arms") or [{}])[0] if report.get("arms") else {}
    new_tokens = request.get("max_new_tokens")
    if isinstance(plain, dict) and plain.get("new_tokens"):
        new_tokens = plain["new_tokens"][-1]
    # 'unsettled': ran until clear but ended (time budget, most repetitions) first: shown as no answer, never ranked
    status = "stopped" if report.get("status") == "stopped" else "unsettled" if unsettled(report) else "complete"
    workload = workload_label(report)
    preview = request.get("prompt") or ""
    if workload:  # a workload's request has no prompt of its own; its first prompt says what it is about
        new_tokens = request.get("max_new_tokens")
        prompts = report["suite"].get("prompts") or []
        preview = f"Workload {workload}: " + (str(prompts[0].get("prompt") or "") if prompts else "")
    return {
        "status": status,
        "target": canonical_model(target_text, kinds.get(target_text) or None),
        "assistants": ", ".join(assistants)[:4000],
        "strategies": ", ".join(strategies)[:1000],
        "device": clean_text(env.get("device") or "unknown", 16),
        "device_name": device_label(env),
        "gpu_name": clean_text(env["gpu_name"], MAX_NAME_CHARS) if env.get("gpu_name") else None,
        "dtype": clean_text(env.get("dtype") or "unknown", 16),
        "new_tokens": new_tokens if isinstance(new_tokens, int) else None,
        "repetitions": report.get("counted_repetitions") if isinstance(report.get("counted_repetitions"), int) else None,
        "best_arm": best["label"] if best else None,
        "best_speedup": best["speedup"] if best else None,
        "outputs_identical": all(identical) if identical else None,
        "assistlab_version": clean_text(env.get("assistlab") or "", 32) or None,
        "transformers_version": clean_text(env.get("transformers") or "", 32) or None,
        "prompt_preview": clean_text(preview, MAX_PREVIEW_CHARS),
        "prompt_hash": prompt_hash(request.get("prompt")),
        "do_sample": bool(request.get("do_sample")),
        "workload": workload,
        "engines": engines_timed(report),
        "kind": kind_of(report),
        "recommendation": recommendation(report),
    }


def engines_timed(report: dict) -> str:
    """The engines a comparison timed, in the report's order ('transformers, vllm'): those with a measured run,
    else those it asked for; a report from before engines were recorded timed transformers."""
    arms = [a for a in report.get("arms") or [] if isinstance(a, dict)]
    measured = [engine_of(a) for a in arms if a.get("latencies_s")]
    asked = [engine_of({"engine": e}) for e in (report.get("request") or {}).get("engines") or [] if isinstance(e, str)]
    engines = list(dict.fromkeys(measured or [engine_of(a) for a in arms] or asked or [DEFAULT_ENGINE]))
    return ", ".join(engines)[:MAX_ENGINES_CHARS]


def prompt_hash(prompt: object) -> str:
    """Which prompt was measured, as 16 hex digits of its SHA-256: the leaderboard ranks like with like."""
    return hashlib.sha256(str(prompt or "").encode("utf-8", "surrogatepass")).hexdigest()[:16]


def savable(report: object) -> bool:
    """The one rule for what the history keeps, whoever saves (the page, the API, the command line): a
    comparison, finished or stopped, that measured at least one whole repetition (every arm once in a counted
    round; a stopped report counts only those). Anything else is not a measurement worth keeping."""
    if not isinstance(report, dict):
        return False
    if report.get("kind") == "suite":  # a workload: at least one prompt measured
        measured = ((report.get("suite") or {}).get("overall") or {}).get("prompts")
        return isinstance(measured, int) and not isinstance(measured, bool) and measured >= 1
    if not report.get("arms"):
        return False
    count = report.get("counted_repetitions")
    return isinstance(count, int) and not isinstance(count, bool) and count >= 1


def _report_text(report: dict) -> tuple[str, str | None]:
    """The report as JSON within the size limit; per-step traces are dropped first when it is too large."""
    text = json.dumps(report, ensure_ascii=True, allow_nan=False, default=str)
    if len(text) <= MAX_REPORT_BYTES:
        return text, None
    slim = dict(report)
    slim["arms"] = [{**a, "trace": []} if isinstance(a, dict) else a for a in report.get("arms") or []]
    slim["history_note"] = "Per-step traces were left out to keep this saved report under the size limit."
    text = json.dumps(slim, ensure_ascii=True, allow_nan=False, default=str)
    if len(text) <= MAX_REPORT_BYTES:
        return text, slim["history_note"]
    raise InputError(
        f"The report is {len(text):,} bytes even without its traces; the history keeps reports up to "
        f"{MAX_REPORT_BYTES:,} bytes. Use fewer repetitions or new tokens to save it."
    )


_MARKUP = re.compile(r"[<>&\"'`\\]|[\x00-\x1f\x7f]")


def canonical_report(report: dict) -> dict:
    """The report with every model reference and arm name that holds markup replaced by its canonical form.

    A name someone typed (e.g. './<img src=...>/../same') is stored as 'same'; the prompt and the generated
    texts are kept as they are (they are data, escaped wherever they are shown).
    """
    report = copy.deepcopy(report)
    kinds = _model_kinds(report)
    request = report.get("request") if isinstance(report.get("request"), dict) else {}
    if isinstance(request.get("target"), str) and _MARKUP.search(request["target"]):
        request["target"] = canonical_model(request["target"], kinds.get(request["target"]) or None)
    for spec in [a.get("spec") for a in report.get("arms") or [] if isinstance(a, dict)] + list(request.get("arms") or []):
        if isinstance(spec, dict) and isinstance(spec.get("assistant"), str) and _MARKUP.search(spec["assistant"]):
            spec["assistant"] = canonical_model(spec["assistant"], kinds.get(spec["assistant"]) or None)
        if isinstance(spec, dict) and isinstance(spec.get("draft_model"), str) and _MARKUP.search(spec["draft_model"]):
            spec["draft_model"] = canonical_model(spec["draft_model"])
    env = report.get("environment") if isinstance(report.get("environment"), dict) else {}
    models = env.get("models") if isinstance(env.get("models"), dict) else {}
    for role in list(models):
        info = models[role]
        if isinstance(info, dict) and isinstance(info.get("ref"), str) and _MARKUP.search(info["ref"]):
            info["ref"] = canonical_model(info["ref"], info.get("kind") or None)
        if _MARKUP.search(role):
            models[canonical_model(role.removeprefix("assistant "), kinds.get(role.removeprefix("assistant ")))
                   if role.startswith("assistant ") else "model"] = models.pop(role)
    renamed = {}
    for arm in report.get("arms") or []:
        if isinstance(arm, dict) and isinstance(arm.get("name"), str) and _MARKUP.search(arm["name"]):
            new = clean_text(_MARKUP.sub("", arm["name"]), MAX_NAME_CHARS * 2)
            renamed[arm["name"]] = new
            arm["name"] = new
    for key in ("comparison", "ranking", "load"):
        for entry in report.get(key) or []:
            if isinstance(entry, dict) and entry.get("arm") in renamed:
                entry["arm"] = renamed[entry["arm"]]
    summary = report.get("load_summary") if isinstance(report.get("load_summary"), dict) else {}
    for entry in summary.get("arms") or []:
        for key in ("arm", "baseline"):
            if isinstance(entry, dict) and entry.get(key) in renamed:
                entry[key] = renamed[entry[key]]
    return report


def runs_csv(report: dict) -> str:
    """One row per counted run, from a report dict (as Report.to_csv writes it from the live report)."""
    buf = io.StringIO()
    writer = cells.Writer(buf)
    writer.writerow(["arm", "strategy", "repetition", "latency_s", "new_tokens", "tokens_per_s", "ttft_s",
                     "drafted_tokens", "accepted_tokens", "target_forwards", "memory_bytes", "engine", "position",
                     "concurrency", "request"])
    for arm in report.get("arms") or []:
        assisted = arm.get("strategy") != "plain"
        for i, latency in enumerate(arm.get("latencies_s") or []):
            pick = lambda key: (arm.get(key) or [])[i] if i < len(arm.get(key) or []) else None  # noqa: E731
            trace = pick("trace") or {}
            writer.writerow([
                arm.get("name"), arm.get("strategy"), i, f"{latency:.6f}", pick("new_tokens"),
                "" if pick("tokens_per_s") is None else f"{pick('tokens_per_s'):.3f}",
                "" if pick("ttft_s") is None else f"{pick('ttft_s'):.6f}",
                pick("drafted_tokens") if assisted else "", pick("accepted_tokens") if assisted else "",
                len(trace.get("tokens") or []), "" if pick("memory_bytes") is None else pick("memory_bytes"),
                engine_of(arm), "" if pick("positions") is None else pick("positions"), 1, 0,
            ])
    arms = [a for a in report.get("arms") or [] if isinstance(a, dict)]
    for row in load.csv_rows(report.get("load_raw"), [(a.get("name"), a.get("strategy"), engine_of(a)) for a in arms]):
        writer.writerow(row)
    return buf.getvalue()


def _sanitize_json(value):
    """Replace NaN/inf (which JSON cannot hold) by None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _sanitize_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize_json(v) for v in value]
    return value
