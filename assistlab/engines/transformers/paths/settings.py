"""Drafting knobs: transformers' defaults read at run time, a checkpoint's own values, and where each came from.

An arm's knob left unset takes transformers' default, read from the installed transformers (never copied
here), so a default arm runs what `generate(assistant_model=...)` does by default.
"""

from __future__ import annotations

import inspect

from ..loaded import LoadedModel

# Where each effective drafting value came from, as the report's `settings.source` says it.
SET_BY_YOU = "set by you"
TRANSFORMERS_DEFAULT = "transformers default"
CHECKPOINT = "the model's generation_config"
ASSISTLAB_DEFAULT = "AssistLab default (transformers has none)"

# Knobs transformers reads from the drafting model's generation_config (AssistedCandidateGenerator.__init__).
DRAFTER_KNOBS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
# Read only by universal assisted generation (AssistedCandidateGeneratorDifferentTokenizers).
LOOKBEHIND_KNOBS = ("assistant_lookbehind", "target_lookbehind")
# Read from the target's config by prompt lookup (`max_matching_ngram_size or 2` in _get_candidate_generator).
LOOKUP_KNOBS = ("max_matching_ngram_size",)


def transformers_defaults() -> dict:
    """transformers' defaults for every knob that changes drafting, read from the installed version.

    `_get_default_generation_params()` is what the candidate generator fills unset values from; prompt lookup's
    n-gram size falls back to PromptLookupCandidateGenerator's own default. A knob missing here after a
    transformers upgrade raises KeyError, so tests fail loudly instead of a run guessing.
    """
    from transformers import GenerationConfig
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    params = GenerationConfig._get_default_generation_params()
    defaults = {knob: params[knob] for knob in (*DRAFTER_KNOBS, *LOOKBEHIND_KNOBS)}
    ngram = inspect.signature(PromptLookupCandidateGenerator).parameters["max_matching_ngram_size"].default
    defaults["max_matching_ngram_size"] = ngram
    return defaults


def checkpoint_values(loaded: LoadedModel) -> dict:
    """Drafting knobs the checkpoint's own generation_config.json sets (rarely any): transformers uses those
    before its global defaults. Read from disk because the loaded config is rewritten before every run."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(loaded.folder)
    except (OSError, ValueError, TypeError):
        return {}  # no generation_config.json: transformers derives one with none of these set
    knobs = (*DRAFTER_KNOBS, *LOOKBEHIND_KNOBS, *LOOKUP_KNOBS)
    return {k: getattr(config, k) for k in knobs if getattr(config, k, None) is not None}


def threshold_adaptation_active(strategy: str, threshold: float | None) -> bool:
    """Whether transformers adapts the confidence threshold during a run (its ROC-curve update).

    It does so only with scikit-learn installed, a non-zero threshold, and the plain AssistedCandidateGenerator
    (same tokenizer; not universal, not early exit). In transformers 5.23 it adapts a private copy of the
    assistant's generation_config, so the adaptation starts afresh with every generate() call.
    """
    from transformers.utils import is_sklearn_available

    return bool(strategy == "assistant" and threshold and is_sklearn_available())


def effective(spec, knobs: tuple[str, ...], drafter_values: dict, defaults: dict, *, adapts: bool,
              fixed: dict | None = None) -> dict:
    """`knobs` as they will run, each from you, else the checkpoint, else transformers, with its source.

    `fixed` holds values the path decides itself, as {knob: (value, source)}. `adapts` says whether
    transformers may adapt the confidence threshold on this path (threshold_adaptation_active).
    """
    values: dict = {}
    source: dict = {}
    for knob, (value, where) in (fixed or {}).items():
        values[knob], source[knob] = value, where
    for knob in knobs:
        chosen = getattr(spec, knob, None)
        if chosen is not None:
            values[knob], source[knob] = chosen, SET_BY_YOU
        elif knob in drafter_values:
            values[knob], source[knob] = drafter_values[knob], CHECKPOINT
        else:
            values[knob], source[knob] = defaults[knob], TRANSFORMERS_DEFAULT
    threshold = values.get("assistant_confidence_threshold")
    values["threshold_adaptation"] = adapts and threshold_adaptation_active("assistant", threshold)
    values["source"] = source
    return values


def write(drafter: LoadedModel, values: dict) -> None:
    """Write the effective values where transformers reads them: the drafting model's generation_config.

    Called before every run (warm-up, timed and probe), so what a run leaves behind cannot reach the next:
    the 'heuristic' schedule writes its final draft length back into this config after generate(), and
    another arm may share the model. Unset knobs are written as transformers' defaults, not left alone.
    """
    config = drafter.model.generation_config
    for knob in (*DRAFTER_KNOBS, *LOOKBEHIND_KNOBS):
        if knob in values:
            setattr(config, knob, values[knob])


def draft_length(spec, drafter: LoadedModel) -> int:
    """The draft length an arm starts with: yours, else the checkpoint's, else transformers' default."""
    if spec.num_assistant_tokens is not None:
        return int(spec.num_assistant_tokens)
    value = checkpoint_values(drafter).get("num_assistant_tokens")
    return int(value if value is not None else transformers_defaults()["num_assistant_tokens"])
