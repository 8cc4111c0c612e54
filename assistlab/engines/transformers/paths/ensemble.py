"""Ensemble verification, the option any path whose drafts carry probabilities can take; and what is lossy.

With `assistant_ensemble_weight` w in (0, 1), transformers accepts drafts against w * p_target +
(1 - w) * q_draft, so more pass, but the text is no longer exactly the target's own. A sampled run is lossy
too: each run draws its text at random.
"""

from __future__ import annotations

from ...base import LOSSY_MARK, LOSSY_TRADE  # noqa: F401 - the words every engine's lossy arms share


def kwargs(spec) -> dict:
    """The ensemble-verification argument, for any path, when the arm sets a weight."""
    weight = spec.assistant_ensemble_weight
    return {} if weight is None else {"assistant_ensemble_weight": weight}


def lossless(spec: dict | None, do_sample: bool) -> tuple[bool, str | None]:
    """(lossless by construction, why not) for an assisted arm's spec dict."""
    weight = (spec or {}).get("assistant_ensemble_weight")
    if weight is not None:
        return False, (
            f"ensemble verification (weight {weight:g}) accepts drafts against a mix of the target's and the "
            f"draft's probabilities, not the target's alone"
        )
    if do_sample:
        return False, "sampled: each run draws its text at random, so it is not the target's greedy text"
    return True, None


def marked_name(name: str, spec: dict | None, do_sample: bool) -> str:
    """The arm's name with the lossy mark when it is not lossless, so every place its speedup appears shows it."""
    ok, _ = lossless(spec, do_sample)
    return name if ok or LOSSY_MARK in name else f"{name} {LOSSY_MARK}"


def label(plain: str, weight: float) -> str:
    """An arm's name with its ensemble weight inside the parentheses that close it."""
    head, _, tail = plain.rpartition(")")
    return f"{head}, ensemble w={weight:g}){tail}" if head else f"{plain} (ensemble w={weight:g})"


def figures_unavailable(spec: dict) -> list[dict]:
    if spec.get("assistant_ensemble_weight") is None:
        return []
    return [{"figure": "alpha", "why": "with ensemble verification alpha is the acceptance against the mixed "
             "distribution, not the target's, so the prediction holds only for this weight"}]
