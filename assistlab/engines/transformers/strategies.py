"""Which assisted method an arm gets, the generate() keyword arguments for it, and its drafting settings.

An arm's drafting knobs left unset take transformers' own defaults, read from the installed transformers at
run time (never copied here), so a default arm runs what `generate(assistant_model=...)` does by default.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence

from ...config import DRAFTER_STRATEGIES, MODEL_STRATEGIES, PROMPT_LOOKUP_DEFAULT, ArmSpec, BenchRequest
from ...errors import InputError
from . import drafters
from .models import LoadedModel


def same_tokenizer(a, b) -> bool:
    """Two tokenizers are interchangeable when they map the same strings to the same ids."""
    if a is b:
        return True
    return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids


def resolve_strategy(arm: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str:
    """The concrete strategy for an arm: 'auto' becomes 'assistant' or 'universal' by comparing tokenizers.

    Gemma 4 assistants, MTP targets and DFlash drafters are recognised first, from their configs (drafters.py).
    """
    picked = drafters.resolve(arm, target, assistant)
    if picked is not None:
        return picked[0]
    if arm.strategy == "early-exit":
        if arm.early_exit_layer >= target.num_layers:
            raise InputError(
                f"early_exit_layer is {arm.early_exit_layer}, but the target has only {target.num_layers} layers; "
                f"choose a layer from 1 to {target.num_layers - 1}."
            )
        return "early-exit"
    if arm.strategy == "prompt-lookup":
        return "prompt-lookup"
    if assistant is None:
        raise InputError(f"The {arm.strategy!r} strategy needs an assistant model.")
    same = same_tokenizer(target.tokenizer, assistant.tokenizer)
    if arm.strategy == "auto":
        return "assistant" if same else "universal"
    if arm.strategy == "assistant" and not same:
        raise InputError(
            f"{assistant.name} uses a different tokenizer from {target.name}, so it cannot assist with the "
            f"'assistant' strategy; choose 'universal' (or 'auto')."
        )
    return arm.strategy


def base_kwargs(request: BenchRequest, target: LoadedModel) -> dict:
    """Arguments every arm shares, so all arms do the same work."""
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    kwargs = {
        "max_new_tokens": request.max_new_tokens,
        "do_sample": request.do_sample,
        "pad_token_id": pad if pad is not None else 0,
    }
    if not request.do_sample:
        # Greedy: neutralise sampling knobs a checkpoint's generation_config may carry.
        kwargs.update(temperature=None, top_p=None, top_k=None)
    if request.fixed_length:
        # As the reference benchmark does: no token ends generation, so every arm produces max_new_tokens.
        kwargs["eos_token_id"] = -1
    return kwargs


def arm_kwargs(arm: ArmSpec, strategy: str, target: LoadedModel, assistant: LoadedModel | None) -> dict:
    """Arguments particular to one assisted arm."""
    if strategy in DRAFTER_STRATEGIES:
        return {**drafters.arm_kwargs(strategy, assistant), **drafters.ensemble_kwargs(arm)}
    if arm.assistant_ensemble_weight is not None:
        return {**arm_kwargs(dataclasses.replace(arm, assistant_ensemble_weight=None), strategy, target, assistant),
                **drafters.ensemble_kwargs(arm)}
    if strategy == "prompt-lookup":
        return {"prompt_lookup_num_tokens": arm.lookup_tokens}
    if strategy == "early-exit":
        return {"assistant_early_exit": arm.early_exit_layer}
    kwargs = {"assistant_model": assistant.model}
    if strategy == "universal":
        kwargs.update(tokenizer=target.tokenizer, assistant_tokenizer=assistant.tokenizer)
    return kwargs


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
DRAFTING_STRATEGIES = ("assistant", "universal", "early-exit")


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


def drafting_settings(
    arm: ArmSpec, strategy: str, drafter_values: dict | None = None, defaults: dict | None = None
) -> dict:
    """The values an arm drafts with and where each came from: you, the checkpoint, or transformers.

    `drafter_values` are `checkpoint_values` of the model that drafts (the assistant; the target for early
    exit and prompt lookup). Only the knobs that change this strategy's drafting are listed. The plain arm
    (strategy 'plain') drafts nothing and gets an empty dict.
    """
    if strategy == "plain":
        return {}
    defaults = transformers_defaults() if defaults is None else defaults
    drafter_values = drafter_values or {}
    values: dict = {}
    source: dict = {}

    def take(knob: str, chosen) -> None:
        if chosen is not None:
            values[knob], source[knob] = chosen, SET_BY_YOU
        elif knob in drafter_values:
            values[knob], source[knob] = drafter_values[knob], CHECKPOINT
        else:
            values[knob], source[knob] = defaults[knob], TRANSFORMERS_DEFAULT

    if strategy == "prompt-lookup":
        values["prompt_lookup_num_tokens"] = arm.lookup_tokens
        source["prompt_lookup_num_tokens"] = SET_BY_YOU if arm.prompt_lookup_num_tokens is not None else ASSISTLAB_DEFAULT
        take("max_matching_ngram_size", None)
    else:
        for knob in DRAFTER_KNOBS:
            take(knob, getattr(arm, knob))
        if strategy == "universal":
            for knob in LOOKBEHIND_KNOBS:
                take(knob, None)
    threshold = values.get("assistant_confidence_threshold")
    values["threshold_adaptation"] = threshold_adaptation_active(strategy, threshold)
    values["source"] = source
    return values


def configure_drafter(
    arm: ArmSpec,
    strategy: str,
    target: LoadedModel,
    assistant: LoadedModel | None,
    settings: dict | None = None,
) -> None:
    """Write the arm's effective drafting values where transformers reads them: the drafter's generation_config.

    Called before every run (warm-up, timed and probe), so what a run leaves behind cannot reach the next:
    the 'heuristic' schedule writes its final draft length back into this config after generate(), and
    another arm may share the model. Unset knobs are written as transformers' defaults, not left alone.
    """
    if strategy in DRAFTER_STRATEGIES:
        drafters.configure(arm, strategy, assistant)
        return
    if strategy == "prompt-lookup":
        return
    drafter = target if strategy == "early-exit" else assistant
    if settings is None:
        settings = drafting_settings(arm, strategy, checkpoint_values(drafter))
    config = drafter.model.generation_config
    for knob in (*DRAFTER_KNOBS, *LOOKBEHIND_KNOBS):
        if knob in settings:
            setattr(config, knob, settings[knob])


def changes_from_transformers(request: BenchRequest, target: LoadedModel, strategies_used: set[str]) -> list[dict]:
    """What AssistLab does differently from a bare generate() call with transformers' defaults, and why."""
    changes = [
        {
            "what": "generation_config.cache_implementation is set to None on every loaded model (the dynamic cache)",
            "why": "some checkpoints (Gemma 3) default to a cache assisted decoding cannot use; plain and assisted "
            "runs must use the same cache kind",
        },
        {
            "what": "pad_token_id is passed (the tokenizer's pad token, else its end-of-sequence token)",
            "why": "one unpadded prompt: it changes no output and spares a warning on every call",
        },
    ]
    if request.fixed_length:
        changes.append({
            "what": "eos_token_id=-1",
            "why": "no token ends generation, so every arm generates max_new_tokens, as the reference benchmark does",
        })
    if not request.do_sample:
        changes.append({
            "what": "temperature, top_p and top_k are passed as None",
            "why": "greedy decoding ignores them; a checkpoint's sampling defaults would only warn",
        })
    if request.chat_template and getattr(target.tokenizer, "chat_template", None):
        changes.append({
            "what": "the prompt goes through the target's chat template",
            "why": "an instruction-tuned model is asked as a chat turn; turn it off to feed the prompt raw",
        })
    if strategies_used & set(DRAFTING_STRATEGIES):
        changes.append({
            "what": "the drafting model's generation_config is rewritten before every run with the arm's settings",
            "why": "the 'heuristic' schedule writes its last draft length back after a run, which bare generate() "
            "would carry into the next call; every AssistLab run starts from the same settings",
        })
    if "prompt-lookup" in strategies_used:
        changes.append({
            "what": f"prompt_lookup_num_tokens is {PROMPT_LOOKUP_DEFAULT} unless you set it",
            "why": "transformers has no default: generate() uses prompt lookup only when given a value",
        })
    return changes


def _prompt_in_assistant_tokens(prompt_ids: Sequence[int], target: LoadedModel, assistant: LoadedModel) -> int:
    """The prompt's length in the assistant's own tokens, as universal assisted generation re-tokenises it.

    A drafter with no tokenizer of its own (Gemma 4 assistants, DFlash) works in the target's tokens.
    """
    if assistant.tokenizer is None or same_tokenizer(target.tokenizer, assistant.tokenizer):
        return len(prompt_ids)
    text = target.tokenizer.decode(list(prompt_ids), skip_special_tokens=True)
    return len(assistant.tokenizer(text, add_special_tokens=True)["input_ids"])


def _draft_length(arm: ArmSpec, assistant: LoadedModel) -> int:
    """The draft length an arm starts with: yours, else the checkpoint's, else transformers' default."""
    if arm.num_assistant_tokens is not None:
        return int(arm.num_assistant_tokens)
    value = checkpoint_values(assistant).get("num_assistant_tokens")
    return int(value if value is not None else transformers_defaults()["num_assistant_tokens"])


def check_context(
    request: BenchRequest, prompt_ids: Sequence[int], target: LoadedModel, assistants: Mapping[str, LoadedModel]
) -> None:
    """Refuse a comparison that would run any model past its context window, naming the model and what to lower.

    The target reads the prompt plus the new tokens; an assistant reads the prompt in its own tokens plus the
    new tokens plus one draft of `num_assistant_tokens`.
    """
    new = request.max_new_tokens
    limit = target.context_length
    if limit and len(prompt_ids) + new > limit:
        raise InputError(
            f"The prompt is {len(prompt_ids)} tokens and {new} new tokens are asked for, but the target "
            f"{target.name} reads at most {limit} tokens; shorten the prompt or lower max_new_tokens "
            f"to {max(1, limit - len(prompt_ids))} or less."
        )
    for arm in request.arms:
        helper = assistants.get(arm.assistant) if arm.strategy in MODEL_STRATEGIES and arm.assistant else None
        if helper is None or not helper.context_length:
            continue
        prompt = _prompt_in_assistant_tokens(prompt_ids, target, helper)
        draft = _draft_length(arm, helper)
        needed = prompt + new + draft
        if needed > helper.context_length:
            room = helper.context_length - prompt - draft
            lower = f"lower max_new_tokens to {room} or less" if room >= 1 else "shorten the prompt"
            raise InputError(
                f"The assistant {helper.name} reads at most {helper.context_length} tokens, but this comparison "
                f"needs up to {needed}: the prompt is {prompt} of its tokens, plus {new} new tokens and a draft of "
                f"{draft}. {lower[0].upper()}{lower[1:]}, or choose an assistant with a "
                f"longer context."
            )
