"""Which assisted method an arm gets, and the generate() keyword arguments for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .config import MODEL_STRATEGIES, ArmSpec, BenchRequest
from .errors import InputError
from .models import LoadedModel


def same_tokenizer(a, b) -> bool:
    """Two tokenizers are interchangeable when they map the same strings to the same ids."""
    if a is b:
        return True
    return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids


def resolve_strategy(arm: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str:
    """The concrete strategy for an arm: 'auto' becomes 'assistant' or 'universal' by comparing tokenizers."""
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
    if strategy == "prompt-lookup":
        return {"prompt_lookup_num_tokens": arm.prompt_lookup_num_tokens}
    if strategy == "early-exit":
        return {"assistant_early_exit": arm.early_exit_layer}
    kwargs = {"assistant_model": assistant.model}
    if strategy == "universal":
        kwargs.update(tokenizer=target.tokenizer, assistant_tokenizer=assistant.tokenizer)
    return kwargs


def configure_drafter(arm: ArmSpec, strategy: str, target: LoadedModel, assistant: LoadedModel | None) -> None:
    """Set the drafting knobs where transformers reads them: the drafting model's generation_config.

    Called before every run, so a schedule that writes back into the config ('heuristic') starts afresh
    each time and no state leaks from one run into the next.
    """
    if strategy == "prompt-lookup":
        return
    drafter = target if strategy == "early-exit" else assistant
    config = drafter.model.generation_config
    config.num_assistant_tokens = arm.num_assistant_tokens
    config.num_assistant_tokens_schedule = arm.num_assistant_tokens_schedule
    config.assistant_confidence_threshold = arm.assistant_confidence_threshold or 0.0


def _prompt_in_assistant_tokens(prompt_ids: Sequence[int], target: LoadedModel, assistant: LoadedModel) -> int:
    """The prompt's length in the assistant's own tokens, as universal assisted generation re-tokenises it."""
    if same_tokenizer(target.tokenizer, assistant.tokenizer):
        return len(prompt_ids)
    text = target.tokenizer.decode(list(prompt_ids), skip_special_tokens=True)
    return len(assistant.tokenizer(text, add_special_tokens=True)["input_ids"])


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
        needed = prompt + new + arm.num_assistant_tokens
        if needed > helper.context_length:
            room = helper.context_length - prompt - arm.num_assistant_tokens
            lower = f"lower max_new_tokens to {room} or less" if room >= 1 else "shorten the prompt"
            raise InputError(
                f"The assistant {helper.name} reads at most {helper.context_length} tokens, but this comparison "
                f"needs up to {needed}: the prompt is {prompt} of its tokens, plus {new} new tokens and a draft of "
                f"{arm.num_assistant_tokens}. {lower[0].upper()}{lower[1:]}, or choose an assistant with a "
                f"longer context."
            )
