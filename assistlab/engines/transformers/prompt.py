"""The prompt as the target reads it: through its chat template or as text, fitted to its context."""

from __future__ import annotations

import dataclasses

from ...config import CONTINUATION_PROMPT, BenchRequest
from ...errors import InputError
from .models import LoadedModel


def uses_chat_template(request: BenchRequest, target: LoadedModel) -> bool:
    """Whether the prompt goes through the target's chat template: asked for, and the target has one."""
    return bool(request.chat_template and getattr(target.tokenizer, "chat_template", None))


def prompt_note(request: BenchRequest, target: LoadedModel) -> str | None:
    """A sentence for a person when the target continues the prompt rather than answering it; None otherwise."""
    if uses_chat_template(request, target):
        return None
    if getattr(target.tokenizer, "chat_template", None):
        why = "The chat template was turned off"
    else:
        why = f"{target.name} has no chat template (it is a base model, not a chat model)"
    return (
        f"{why}, so it continues the prompt as text rather than answering it. A prompt that begins the text you "
        f"want reads better, for example “{CONTINUATION_PROMPT}”."
    )


def encode_prompt(request: BenchRequest, target: LoadedModel) -> dict:
    """Token ids for the prompt: through the chat template when asked for and the target has one."""
    tok = target.tokenizer
    if request.chat_template and getattr(tok, "chat_template", None):
        encoded = tok.apply_chat_template(
            [{"role": "user", "content": request.prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        )
    else:
        encoded = tok(request.prompt, return_tensors="pt")
    return fitted_inputs(encoded, target, request.max_new_tokens)


def fitted_inputs(encoded, target: LoadedModel, max_new_tokens: int, what: str = "The prompt") -> dict:
    """The tokenizer's output on the target's device, refused (naming `what`) when it is empty or when it and
    the new tokens do not fit the target's context."""
    inputs = {k: v.to(target.device) for k, v in encoded.items() if k in ("input_ids", "attention_mask")}
    length = int(inputs["input_ids"].shape[1])
    if length == 0:
        raise InputError(f"{what} became no tokens at all; type some text.")
    limit = target.context_length
    if limit and length + max_new_tokens > limit:
        raise InputError(
            f"{what} is {length} tokens and {max_new_tokens} new tokens are asked for, but "
            f"{target.name} reads at most {limit} tokens; shorten the prompt or lower max_new_tokens."
        )
    return inputs


def encode_turns(bench: BenchRequest, target: LoadedModel, turns: tuple[str, ...], answers: list[str]) -> dict:
    """Token ids for a conversation: the user's turns with the target's own earlier answers between them.

    One turn is exactly `encode_prompt`. Later turns go through the chat template as a conversation
    (or, without one, as the texts joined by blank lines), with the same context-length check.
    """
    if len(turns) == 1:
        return encode_prompt(dataclasses.replace(bench, prompt=turns[0]), target)
    tok = target.tokenizer
    if bench.chat_template and getattr(tok, "chat_template", None):
        messages = []
        for i, user in enumerate(turns):
            messages.append({"role": "user", "content": user})
            if i < len(answers) and i < len(turns) - 1:
                messages.append({"role": "assistant", "content": answers[i]})
        encoded = tok.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    else:
        parts = [p for pair in zip(turns[:-1], answers) for p in pair] + [turns[-1]]
        encoded = tok("\n\n".join(parts), return_tensors="pt")
    return fitted_inputs(encoded, target, bench.max_new_tokens, f"The conversation up to turn {len(turns)}")
