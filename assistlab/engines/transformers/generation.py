"""What every arm's generate() call shares, what AssistLab does differently from a bare call, and whether the
prompt and the new tokens fit every model's context window."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...config import PROMPT_LOOKUP_DEFAULT, BenchRequest
from ...errors import InputError
from . import paths
from .loaded import LoadedModel


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
    if any(paths.BY_NAME[s].rewrites_drafter_config for s in strategies_used if s in paths.BY_NAME):
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
    if assistant.tokenizer is None or paths.same_tokenizer(target.tokenizer, assistant.tokenizer):
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
        if arm.engine != "transformers":
            continue
        helper = assistants.get(arm.assistant) if arm.strategy in paths.MODEL_STRATEGIES and arm.assistant else None
        if helper is None or not helper.context_length:
            continue
        prompt = _prompt_in_assistant_tokens(prompt_ids, target, helper)
        draft = paths.draft_length(arm, helper)
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
