"""Why an assisted arm is as fast as it is: token origins, the speculative-decoding cost model, a ranking.

Everything here is pure (numbers, lists, a tokenizer's decode) except `probe_arm`, the one extra untimed
generate() that times drafting and verification; it imports torch when called, so the report can use the
rest without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import stats
from .config import LIMITS

if TYPE_CHECKING:
    from .models import LoadedModel

Clock = Callable[[], float]

DRAFT, TARGET = "draft", "target"
LIMIT_KINDS = ("acceptance", "assistant", "overhead")
# The comparison keys that carry the cost model, flattened for tables next to the speedup.
ANALYSIS_KEYS = ("c", "alpha", "k", "predicted_speedup", "limit")


# ---------------------------------------------------------------- where each token came from


def token_origins(run) -> list[str]:
    """'draft' or 'target' for every new token of one run, from its per-step record.

    `run` is a RunRecord (step_tokens, accepted) or a report trace entry (tokens, accepted). At step i the
    first accepted[i] of the step_tokens[i] new tokens were drafted and accepted; the rest (the correction or
    bonus token) the target chose itself. A plain run has no accepted counts: every token is the target's.
    """
    if isinstance(run, dict):
        steps, accepted = run.get("tokens", run.get("step_tokens", [])), run.get("accepted") or []
    else:
        steps, accepted = run.step_tokens, run.accepted or []
    if not accepted:
        return [TARGET] * int(sum(steps))
    if len(accepted) != len(steps):
        raise ValueError(f"{len(steps)} steps but {len(accepted)} accepted counts; the trace is inconsistent.")
    origins: list[str] = []
    for added, taken in zip(steps, accepted):
        if not 0 <= taken <= added:
            raise ValueError(f"a step added {added} tokens but reports {taken} accepted.")
        origins += [DRAFT] * taken + [TARGET] * (added - taken)
    return origins


def origin_segments(
    tokenizer, token_ids: Sequence[int], origins: Sequence[str], **decode_kwargs
) -> list[tuple[str, str]]:
    """The decoded text as [(text, origin)] runs, decoding incrementally so multi-byte characters stay whole.

    A character split over several tokens goes to the token that completes it. `decode_kwargs` default to
    the runner's (skip special tokens, no clean-up), so the pieces join to the run's `text`.
    """
    if len(token_ids) != len(origins):
        raise ValueError(f"{len(token_ids)} tokens but {len(origins)} origins.")
    options = {"skip_special_tokens": True, "clean_up_tokenization_spaces": False, **decode_kwargs}
    ids = [int(t) for t in token_ids]
    segments: list[tuple[str, str]] = []

    def add(text: str, origin: str) -> None:
        if not text:
            return
        if segments and segments[-1][1] == origin:
            segments[-1] = (segments[-1][0] + text, origin)
        else:
            segments.append((text, origin))

    # As TGI's incremental detokenizer: decode a small window with one token of left context (some
    # tokenizers drop a leading space at the start of a decode), and hold back text ending in U+FFFD,
    # the mark of a character whose remaining bytes are still to come.
    prefix, read = 0, 0
    for i in range(len(ids)):
        before = tokenizer.decode(ids[prefix:read], **options)
        after = tokenizer.decode(ids[prefix : i + 1], **options)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            add(after[len(before) :], origins[i])
            prefix, read = read, i + 1
    if read < len(ids):  # bytes that never completed a character: show them as the decoder does
        before = tokenizer.decode(ids[prefix:read], **options)
        add(tokenizer.decode(ids[prefix:], **options)[len(before) :], origins[-1])
    return segments


def text_segments(tokenizer, run) -> list[list[str]]:
    """A run's text as JSON-ready [[text, origin], ...]."""
    return [list(s) for s in origin_segments(tokenizer, run.token_ids, token_origins(run))]


# ---------------------------------------------------------------- the cost model (Leviathan et al. 2023)


def estimate_alpha(draft_steps: Sequence[tuple[int, int]]) -> float | None:
    """Per-token acceptance probability alpha from (drafted, accepted) per verification step.

    The paper's model accepts each drafted token independently with probability alpha and stops at the
    first rejection. Each position the target actually judged is one trial: a step with a accepted out of
    d drafted judged a positions that passed, plus one that failed when a < d. The maximum-likelihood
    estimate is passes / trials. The plain acceptance rate (accepted / drafted) is lower, because it counts
    tokens after the first rejection, which were never judged, as failures. None when nothing was drafted.
    """
    passes = trials = 0
    for drafted, accepted in draft_steps:
        if not 0 <= accepted <= drafted:
            raise ValueError(f"a step drafted {drafted} tokens but reports {accepted} accepted.")
        passes += accepted
        trials += accepted + (1 if accepted < drafted else 0)
    return passes / trials if trials else None


def expected_tokens(alpha: float, k):
    """Tokens one verification step yields: (1 - alpha^(k+1)) / (1 - alpha), or k+1 at alpha = 1.

    `k` may be a number or a numpy array of draft lengths.
    """
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1.0)) / (1.0 - alpha)


def cost_model(alpha: float, c: float, k: float) -> dict:
    """The speedup speculative decoding predicts for draft length k.

    Time is counted in target forward passes: a step drafts k tokens at c each, then verifies once, so it
    costs k*c + 1 and yields `expected_tokens(alpha, k)`. `best_k` is the whole draft length (1 to the
    config limit) that this alpha and c would favour.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}.")
    if c < 0 or k < 0:
        raise ValueError(f"c and k must not be negative, got c={c}, k={k}.")
    tokens = expected_tokens(alpha, k)
    step_cost = k * c + 1.0
    ks = np.arange(1, LIMITS["num_assistant_tokens"] + 1, dtype=float)
    curve = expected_tokens(alpha, ks) / (ks * c + 1.0)
    best = int(np.argmax(curve))  # first maximum: the shortest draft among equals
    return {
        "tokens_per_step": tokens,
        "step_cost": step_cost,
        "predicted_speedup": tokens / step_cost,
        "best_k": int(ks[best]),
        "best_k_speedup": float(curve[best]),
    }


def limit_shares(predicted: float, measured: float | None, alpha: float, c: float, k: float) -> dict:
    """Split a speedup into shares of the ideal k+1: measured = (k+1) * the product of the three shares.

    acceptance = expected tokens per step / (k+1); assistant = 1 / (k*c + 1); overhead = measured /
    predicted (capped at 1, so the product holds when measured is below predicted; 1 with no measurement).
    Each share is 1 when its cause costs nothing; the smallest is the limit.
    """
    overhead = 1.0 if not measured or not predicted else min(1.0, measured / predicted)
    return {
        "acceptance": expected_tokens(alpha, k) / (k + 1.0),
        "assistant": 1.0 / (k * c + 1.0),
        "overhead": overhead,
    }


def limit_kind(predicted: float, measured: float | None, alpha: float, c: float, k: float) -> str:
    """'acceptance', 'assistant' or 'overhead': whichever share of `limit_shares` is smallest."""
    shares = limit_shares(predicted, measured, alpha, c, k)
    return min(LIMIT_KINDS, key=lambda kind: shares[kind])  # ties go to the earlier kind


def limiting_factor(
    predicted: float,
    measured: float | None,
    alpha: float,
    c: float,
    k: float,
    verify_cost: float | None = None,
    universal: bool = False,
) -> str:
    """One sentence naming what limits this pair: low acceptance, a slow assistant, or overhead.

    `verify_cost` (a verification forward in plain decode steps) explains an overhead gap when it is
    clearly above the 1 the model assumes; `universal` says drafting includes re-tokenisation.
    """
    shares = limit_shares(predicted, measured, alpha, c, k)
    if min(shares.values()) >= 0.99:
        return (
            "Nothing limits this pair much: nearly every drafted token is accepted, drafting is nearly free, "
            "and the measured speedup matches the prediction."
        )
    kind = limit_kind(predicted, measured, alpha, c, k)
    if kind == "acceptance":
        return (
            f"Low acceptance limits this pair: the target accepts each drafted token with probability "
            f"{alpha:.2f}, so a step that drafts {k:.3g} tokens on average yields {expected_tokens(alpha, k):.2f} "
            f"of a possible {k + 1:.3g}."
        )
    if kind == "assistant":
        retok = ", re-tokenisation included," if universal else ""
        return (
            f"A slow assistant limits this pair: drafting one token{retok} costs {c:.2f} of a target forward "
            f"pass, so drafting {k:.3g} tokens makes each step {k * c + 1:.2f}x as long as a plain one."
        )
    why = (
        f"; the gap is mostly verification: checking {k + 1:.3g} tokens costs {verify_cost:.2f} plain decode "
        f"steps, where the model assumes one"
        if verify_cost is not None and verify_cost > 1.1
        else "; the gap is time the model does not count (cache handling, work between steps)"
    )
    return (
        f"Overhead limits this pair: it measures {measured:.2f}x against the {predicted:.2f}x the cost "
        f"model predicts{why}."
    )


# ---------------------------------------------------------------- measuring c


def plain_step_seconds(step_times: Sequence[Sequence[float]]) -> float | None:
    """Seconds per plain decode step: per run (last - first arrival) / (steps - 1), median over runs.

    The first arrival comes after the prompt's prefill, so measuring from it leaves the prefill out.
    """
    per_run = [(t[-1] - t[0]) / (len(t) - 1) for t in step_times if len(t) >= 2]
    return float(np.median(per_run)) if per_run else None


class _Probe:
    """Per-step timings of one assisted generate(): drafting (get_candidates) and verification forwards."""

    def __init__(self, clock: Clock, sync: Callable[[], None]):
        self.clock, self.sync = clock, sync
        self.draft_s: list[float] = []
        self.verify_s: list[float] = []
        self.drafted: list[int] = []
        self.accepted: list[int] = []
        self.generator = ""
        self.drafting = False  # early exit drafts with the target itself: its forwards are not verification
        self._forward_start = 0.0

    def wrap_factory(self, original):
        def factory(*args, **kwargs):
            generator = original(*args, **kwargs)
            self.generator = type(generator).__name__
            get, update = generator.get_candidates, generator.update_candidate_strategy

            def timed_get(*a, **kw):
                self.sync()
                start = self.clock()
                self.drafting = True
                try:
                    result = get(*a, **kw)
                finally:
                    self.drafting = False
                self.sync()
                self.draft_s.append(self.clock() - start)
                return result

            def counting_update(input_ids, scores, num_matches):
                self.drafted.append(int(scores.shape[1]) - 1)
                self.accepted.append(int(num_matches))
                return update(input_ids, scores, num_matches)

            generator.get_candidates = timed_get
            generator.update_candidate_strategy = counting_update
            return generator

        return factory

    def before_forward(self, module, args):
        if not self.drafting:
            self.sync()
            self._forward_start = self.clock()

    def after_forward(self, module, args, output):
        if not self.drafting:
            self.sync()
            self.verify_s.append(self.clock() - self._forward_start)


def probe_arm(
    target: LoadedModel,
    inputs: dict,
    kwargs: dict,
    configure: Callable[[], None] = lambda: None,
    clock: Clock = time.perf_counter,
) -> dict:
    """One extra, untimed generate() of an assisted arm, timing each drafting call and verification forward.

    Run it after the timed runs: its hooks and clock readings slow generation a little, which is why its
    latency is never compared. Drafting is timed around the candidate generator's get_candidates, so for
    universal assisted generation it includes re-tokenisation. Returns raw per-step lists, or
    {"error": ...}: a failed diagnostic must not cost the benchmark its results.
    """
    import torch

    from .models import synchronize_all  # imported here: the rest of this module needs no torch

    model = target.model
    probe = _Probe(clock, synchronize_all)
    name = "_get_candidate_generator"
    had_own = name in model.__dict__  # restore exactly what was there (accelerate may wrap instances too)
    own = model.__dict__.get(name)
    handles = []
    try:
        configure()
        model._get_candidate_generator = probe.wrap_factory(model._get_candidate_generator)
        handles.append(model.register_forward_pre_hook(probe.before_forward))
        handles.append(model.register_forward_hook(probe.after_forward))
        with torch.inference_mode():
            probe.sync()
            start = clock()
            output = model.generate(**inputs, **kwargs)
            probe.sync()
            latency = clock() - start
    except Exception as exc:  # noqa: BLE001 - reported in the result instead
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return {"error": f"the cost-model run failed: {type(exc).__name__}: {first}"}
    finally:
        for handle in handles:
            handle.remove()
        if had_own:
            model.__dict__[name] = own
        else:
            model.__dict__.pop(name, None)
    return {
        "generator": probe.generator,
        "latency_s": latency,
        "new_tokens": int(output.shape[1] - inputs["input_ids"].shape[1]),
        "draft_s": probe.draft_s,
        "verify_s": probe.verify_s,
        "drafted": probe.drafted,
        "accepted": probe.accepted,
    }


def explain_arm(
    probe: dict | None,
    draft_steps: Sequence[tuple[int, int]],
    plain_step_times: Sequence[Sequence[float]],
    measured_speedup: float | None,
    strategy: str | None = None,
) -> dict:
    """The cost model for one arm, from its raw measurements.

    alpha and k come from the timed runs' (drafted, accepted) steps (the probe's if there are none); k is
    the mean number drafted per step. c is the probe's drafting seconds per drafted token over the plain
    arm's seconds per decode step. Numbers that cannot be had are None, with `limit` saying why.
    """
    probe = probe or {}
    steps = list(draft_steps) or list(zip(probe.get("drafted", []), probe.get("accepted", [])))
    target_step_s = plain_step_seconds(plain_step_times)
    alpha = estimate_alpha(steps)
    k = float(np.mean([d for d, _ in steps])) if steps else None

    drafting_s_per_token = verify_cost = None
    drafted, draft_s, verify_s = (probe.get(key, []) for key in ("drafted", "draft_s", "verify_s"))
    # The first step's drafting and verification include the prompt's prefill, so leave it out, unless it
    # is the only step that drafted (prompt lookup may find a match only there, with no prefill to pay).
    skip = 1 if sum(drafted[1:]) else 0
    if sum(drafted[skip:]):
        drafting_s_per_token = float(sum(draft_s[skip:]) / sum(drafted[skip:]))
    if verify_s and target_step_s:
        verify_cost = float(np.mean(verify_s[1:] if len(verify_s) > 1 else verify_s)) / target_step_s
    c = drafting_s_per_token / target_step_s if drafting_s_per_token is not None and target_step_s else None

    result = {
        "alpha": alpha,
        "k": k,
        "c": c,
        "drafting_s_per_token": drafting_s_per_token,
        "target_step_s": target_step_s,
        "verify_cost": verify_cost,
        "tokens_per_step_measured": float(np.mean([a + 1 for _, a in steps])) if steps else None,
        "tokens_per_step_predicted": None,
        "predicted_speedup": None,
        "measured_speedup": measured_speedup,
        "best_k": None,
        "best_k_speedup": None,
        "shares": None,
        "limit_kind": None,
        "limit": None,
        "probe_error": probe.get("error"),
    }
    if not steps:  # no finished run to explain yet
        return result
    if not k:
        result["limit"] = "Nothing was drafted, so every step was a plain target step and no speedup was possible."
        return result
    if c is None:
        result["limit"] = (
            f"The drafting cost could not be measured ({probe['error']})." if probe.get("error")
            else "The drafting cost was not measured for this arm."
        )
        return result
    model = cost_model(alpha, c, k)
    result.update(
        tokens_per_step_predicted=model["tokens_per_step"],
        predicted_speedup=model["predicted_speedup"],
        best_k=model["best_k"],
        best_k_speedup=model["best_k_speedup"],
        shares=limit_shares(model["predicted_speedup"], measured_speedup, alpha, c, k),
        limit_kind=limit_kind(model["predicted_speedup"], measured_speedup, alpha, c, k),
        limit=limiting_factor(
            model["predicted_speedup"], measured_speedup, alpha, c, k, verify_cost, strategy == "universal"
        ),
    )
    return result


# ---------------------------------------------------------------- several arms side by side


def paired_arms(report: dict) -> list[tuple[dict, dict]]:
    """(comparison entry, its arm) from a report dict, paired by position: arm names may repeat.

    The comparison lists the assisted arms in order, and the plain arm is always first.
    """
    assisted = [a for a in report.get("arms", []) if a.get("strategy") != "plain"]
    return list(zip(report.get("comparison", []), assisted, strict=True))


def rank_arms(report: dict) -> list[dict]:
    """Assisted arms from a report dict, fastest first (by median speedup), with acceptance and cost beside.

    Arms with no speedup (failed, or no runs yet) come last, in their original order. The order of the
    medians is not a claim; whether the first is really ahead is: the first row's `clearly_first` is
    stats.compare_with_best of its runs against every other ranked arm's, paired by repetition (position in
    `latencies_s`), Bonferroni over the rivals, with the joint level in `family_level`; each other ranked
    row's `behind_first` is its run-by-run comparison (ratio of its latency to the first's).
    """
    rows = []
    for entry, arm in paired_arms(report):
        speed = entry.get("speedup") or {}
        rows.append(
            {
                "arm": entry["arm"],
                "strategy": arm.get("strategy"),
                "speedup": speed.get("median"),
                "ci_low": speed.get("ci_low"),
                "ci_high": speed.get("ci_high"),
                "level": speed.get("level"),
                "n": speed.get("n", 0),
                "interval": speed.get("interval"),
                "acceptance_rate": entry.get("acceptance_rate"),
                "tokens_per_forward": entry.get("tokens_per_forward"),
                **{key: entry.get(key) for key in ANALYSIS_KEYS},
                "outputs_identical": entry.get("outputs_identical"),
                "error": arm.get("error"),
                "clearly_first": None,
                "family_level": None,
                "behind_first": None,
                "_latencies": arm.get("latencies_s") or [],
            }
        )
    ordered = sorted(rows, key=lambda r: (r["speedup"] is None, -(r["speedup"] or 0.0)))
    for rank, row in enumerate(ordered, start=1):
        row["rank"] = rank if row["speedup"] is not None else None
    ranked = [row for row in ordered if row["rank"] is not None]
    if len(ranked) > 1:
        first, rest = ranked[0], ranked[1:]
        versus = stats.compare_with_best(first["_latencies"], [row["_latencies"] for row in rest])
        first["clearly_first"], first["family_level"] = versus["clear"], versus["family_level"]
        for row, comparison in zip(rest, versus["comparisons"]):
            row["behind_first"] = comparison
    for row in ordered:
        del row["_latencies"]
    return ordered
