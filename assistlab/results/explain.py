"""Why an assisted arm is as fast as it is: token origins and the speculative-decoding cost model.

Everything here is pure (numbers, lists, a tokenizer's decode); the untimed drafting-cost run it reads
(`probe`) is the engine's (engines/transformers/timing.probe_arm).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..config import LIMITS
from .busy import probe_disturbed

DRAFT, TARGET = "draft", "target"
LIMIT_KINDS = ("acceptance", "assistant", "overhead")
# The comparison keys that carry the cost model, flattened for tables next to the speedup.
ANALYSIS_KEYS = ("c", "alpha", "k", "predicted_speedup", "predicted_speedup_ideal", "prediction_error",
                 "break_even_alpha", "limit")


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


IDEAL = (1.0, 0.0)  # Leviathan et al.: verifying any number of tokens costs one plain step


def verify_steps(fit: tuple[float, float], tokens):
    """A verification step's cost in plain decode steps for `tokens` verified: a + b * tokens."""
    a, b = fit
    return a + b * tokens


def cost_model(alpha: float, c: float, k: float, verify: tuple[float, float] = IDEAL) -> dict:
    """The speedup speculative decoding predicts for draft length k.

    Time is counted in plain decode steps: a step drafts k tokens at c each, then verifies k+1 tokens at
    `verify_steps(verify, k + 1)` (one step in the ideal model), and yields `expected_tokens(alpha, k)`.
    `best_k` is the whole draft length (1 to the config limit) that this alpha, c and verification favour.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}.")
    if c < 0 or k < 0:
        raise ValueError(f"c and k must not be negative, got c={c}, k={k}.")
    tokens = expected_tokens(alpha, k)
    step_cost = k * c + verify_steps(verify, k + 1.0)
    ks = np.arange(1, LIMITS["num_assistant_tokens"] + 1, dtype=float)
    curve = expected_tokens(alpha, ks) / (ks * c + verify_steps(verify, ks + 1.0))
    best = int(np.argmax(curve))  # first maximum: the shortest draft among equals
    return {
        "tokens_per_step": tokens,
        "step_cost": step_cost,
        "predicted_speedup": tokens / step_cost,
        "best_k": int(ks[best]),
        "best_k_speedup": float(curve[best]),
    }


def predict_speedup(alpha: float, c: float, ks: Sequence[float], verify: tuple[float, float] = IDEAL) -> float:
    """Tokens over time for the steps actually drafted: sum E[tokens | k_i] / sum (k_i*c + verify(k_i+1)).

    With one k for every step this is `cost_model`'s speedup; when k varies (prompt lookup drafts nothing
    where it finds no match) each step is costed at its own length.
    """
    ks = np.asarray(ks, dtype=float)
    return float(np.sum(expected_tokens(alpha, ks)) / np.sum(ks * c + verify_steps(verify, ks + 1.0)))


def break_even_alpha(c: float, ks: Sequence[float], verify: tuple[float, float] = IDEAL) -> float | None:
    """The acceptance alpha at which `predict_speedup` is 1: 0.0 if it is never below 1, None if never 1.

    The predicted speedup grows with alpha, so bisection finds the one crossing (to 1e-6).
    """
    if predict_speedup(1.0, c, ks, verify) < 1.0:
        return None
    if predict_speedup(0.0, c, ks, verify) >= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if predict_speedup(mid, c, ks, verify) < 1.0 else (low, mid)
    return (low + high) / 2


def fit_verify_cost(points: Sequence[tuple[float, float]]) -> dict | None:
    """Least squares a + b * tokens through (tokens verified, cost in plain steps) points.

    With a single token count the line is flat at the mean cost. None without points.
    """
    if not points:
        return None
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    if np.ptp(x) == 0:
        a, b = float(np.mean(y)), 0.0
    else:
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    return {"a": a, "b": b, "points": len(points), "tokens_min": int(x.min()), "tokens_max": int(x.max())}


def verify_points(probe: dict | None, target_step_s: float | None) -> list[tuple[int, float]]:
    """(tokens verified, plain steps) for each step of a probe after the first (which includes the prefill).

    A step's verification cost is everything but drafting: its length minus its drafting time, so the
    loop's own work per step counts too, as it does in a plain step. Probes without step lengths fall back
    to the verification forward alone.
    """
    if not probe or not target_step_s:
        return []
    tokens = probe.get("verify_tokens") or []
    steps, drafts = probe.get("step_s") or [], probe.get("draft_s") or []
    if len(steps) == len(drafts) == len(tokens):
        costs = [s - d for s, d in zip(steps, drafts)]
    else:
        costs = list(probe.get("verify_s") or [])
        tokens = tokens or [d + 1 for d in probe.get("drafted", [])]
    return [(int(n), float(t) / target_step_s) for n, t in list(zip(tokens, costs))[1:]]


def plain_points(plain_step_times: Sequence[Sequence[float]], target_step_s: float | None) -> list[tuple[int, float]]:
    """(1, plain steps) for each decode step of the plain runs after the first token: one token verified."""
    if not target_step_s:
        return []
    return [(1, (b - a) / target_step_s) for t in plain_step_times for a, b in zip(t, t[1:])]


def pooled_verify_fit(probes: Sequence[dict | None], plain_step_times: Sequence[Sequence[float]]) -> dict | None:
    """One verification line for a target, from every probe's steps and the plain runs' steps.

    The cost of verifying n tokens is the target's, whatever drafted them, so all arms share the fit.
    """
    step = plain_step_seconds(plain_step_times)
    points = plain_points(plain_step_times, step)
    for probe in probes:
        points += verify_points(probe, step)
    return fit_verify_cost(points)


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


NOTHING_DRAFTED = "nothing drafted"  # limit_kind of an arm that drafted nothing: its figure is not a speedup


def nothing_drafted_words(measured: float | None) -> str:
    """What an arm that drafted nothing measured, in words: every step was a plain target step, so the ratio to
    plain is not a speedup from drafting but noise or other work around generation."""
    said = ("Nothing was drafted, so every step was a plain target step: drafting cannot have made this arm "
            "faster or slower.")
    if measured is None:
        return said
    return (f"{said} Its {measured:.2f}× against plain is not a speedup: it is run-to-run noise or other work "
            "around generation (set-up, the cache), not drafting.")


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
            "Nothing limits this pair much: nearly every guessed token is kept, guessing is nearly free, "
            "and the measured speedup matches the prediction."
        )
    kind = limit_kind(predicted, measured, alpha, c, k)
    if kind == "acceptance":
        return (
            f"Low acceptance limits this pair: the target keeps each guessed token with a chance of "
            f"{alpha:.2f} (α), so a step that guesses {k:.3g} tokens on average yields {expected_tokens(alpha, k):.2f} "
            f"of a possible {k + 1:.3g}."
        )
    if kind == "assistant":
        retok = ", re-tokenisation included," if universal else ""
        return (
            f"A slow assistant limits this pair: guessing one token{retok} takes {c:.2f} of the time the target "
            f"takes to write one (c), so guessing {k:.3g} tokens makes each step {k * c + 1:.2f}× as long as a "
            f"plain one."
        )
    why = (
        f"; the gap is mostly checking: checking {k + 1:.3g} tokens costs {verify_cost:.2f} plain decode "
        f"steps, where the model assumes one"
        if verify_cost is not None and verify_cost > 1.1
        else "; the gap is time the model does not count (cache handling, work between steps)"
    )
    return (
        f"Overhead limits this pair: it measures {measured:.2f}× against the {predicted:.2f}× the ideal cost "
        f"model (checking a draft as cheap as writing one token) predicts{why}."
    )


# ---------------------------------------------------------------- measuring c


def plain_step_seconds(step_times: Sequence[Sequence[float]]) -> float | None:
    """Seconds per plain decode step: per run (last - first arrival) / (steps - 1), median over runs.

    The first arrival comes after the prompt's prefill, so measuring from it leaves the prefill out.
    """
    per_run = [(t[-1] - t[0]) / (len(t) - 1) for t in step_times if len(t) >= 2]
    return float(np.median(per_run)) if per_run else None


def explain_arm(
    probe: dict | None,
    draft_steps: Sequence[tuple[int, int]],
    plain_step_times: Sequence[Sequence[float]],
    measured_speedup: float | None,
    strategy: str | None = None,
    verify_fit: dict | None = None,
) -> dict:
    """The cost model for one arm, from its raw measurements.

    alpha and k come from the timed runs' (drafted, accepted) steps (the probe's if there are none); k is
    the mean number drafted per step. c is the probe's drafting seconds per drafted token over the plain
    arm's seconds per decode step. `verify_fit` is the target's verification line (`pooled_verify_fit`);
    without one it is fitted from this arm's probe and the plain runs. Two predictions stand side by side:
    `predicted_speedup` with the fitted verification cost, `predicted_speedup_ideal` with Leviathan et al.'s
    one step. Numbers that cannot be had are None, with `limit` saying why.
    """
    probe = probe or {}
    steps = list(draft_steps) or list(zip(probe.get("drafted", []), probe.get("accepted", [])))
    target_step_s = plain_step_seconds(plain_step_times)
    alpha = estimate_alpha(steps)
    ks = [d for d, _ in steps]
    k = float(np.mean(ks)) if steps else None
    if verify_fit is None:
        verify_fit = fit_verify_cost(plain_points(plain_step_times, target_step_s) + verify_points(probe, target_step_s))

    drafting_s_per_token = None
    drafted, draft_s = probe.get("drafted", []), probe.get("draft_s", [])
    # The first step's drafting includes the prompt's prefill, so leave it out, unless it is the only step
    # that drafted (prompt lookup may find a match only there, with no prefill to pay).
    skip = 1 if sum(drafted[1:]) else 0
    if sum(drafted[skip:]):
        drafting_s_per_token = float(sum(draft_s[skip:]) / sum(drafted[skip:]))
    c = drafting_s_per_token / target_step_s if drafting_s_per_token is not None and target_step_s else None
    line = (verify_fit["a"], verify_fit["b"]) if verify_fit else None
    verify_cost = verify_steps(line, k + 1.0) if line and k is not None else None

    result = {
        "alpha": alpha,
        "k": k,
        "c": c,
        "drafting_s_per_token": drafting_s_per_token,
        "target_step_s": target_step_s,
        "verify_cost": verify_cost,
        "verify_fit": verify_fit,
        "tokens_per_step_measured": float(np.mean([a + 1 for _, a in steps])) if steps else None,
        "tokens_per_step_predicted": None,
        "predicted_speedup": None,
        "predicted_speedup_ideal": None,
        "prediction_error": None,
        "break_even_alpha": None,
        "measured_speedup": measured_speedup,
        "best_k": None,
        "best_k_speedup": None,
        "shares": None,
        "limit_kind": None,
        "limit": None,
        "probe_error": probe.get("error"),
        # Others' use of the machine during the probe: c is a time, so a busy machine makes it, and the
        # prediction, wrong while the timed runs (watched apart) may be fine.
        "probe_busy": probe_disturbed(probe.get("contention")),
    }
    if not steps:  # no finished run to explain yet
        return result
    if not k:
        result["limit_kind"] = NOTHING_DRAFTED
        result["limit"] = nothing_drafted_words(measured_speedup)
        return result
    if c is None:
        result["limit"] = (
            f"The drafting cost could not be measured ({probe['error']})." if probe.get("error")
            else "The drafting cost was not measured for this arm."
        )
        return result
    verify = line or IDEAL
    ideal = predict_speedup(alpha, c, ks)
    predicted = predict_speedup(alpha, c, ks, verify)
    model = cost_model(alpha, c, k, verify)
    result.update(
        tokens_per_step_predicted=model["tokens_per_step"],
        predicted_speedup=predicted,
        predicted_speedup_ideal=ideal,
        prediction_error=predicted / measured_speedup - 1.0 if measured_speedup else None,
        break_even_alpha=break_even_alpha(c, ks, verify),
        best_k=model["best_k"],
        best_k_speedup=model["best_k_speedup"],
        shares=limit_shares(ideal, measured_speedup, alpha, c, k),
        limit_kind=limit_kind(ideal, measured_speedup, alpha, c, k),
        limit=limiting_factor(ideal, measured_speedup, alpha, c, k, verify_cost, strategy == "universal"),
    )
    return result
