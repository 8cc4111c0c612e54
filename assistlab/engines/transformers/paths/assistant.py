"""A small model with the target's own tokenizer drafts; the target verifies (classic assisted generation)."""

from __future__ import annotations

from ....errors import InputError
from . import settings
from .base import ArmSpec, DraftingPath, LoadedModel, same_tokenizer


class Assistant(DraftingPath):
    name = "assistant"
    choice_label = "Assistant model with the same word list (tokenizer)"
    drafts = "a small model with the same tokenizer"
    auto_picks = "the assistant is an ordinary causal LM whose vocabulary equals the target's"
    auto_priority = 3
    needs_assistant = True
    example = "Qwen/Qwen2.5-7B-Instruct with Qwen/Qwen2.5-0.5B-Instruct"
    rewrites_drafter_config = True

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        return assistant is not None and same_tokenizer(target.tokenizer, assistant.tokenizer)

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        super().check(spec, target, assistant)
        if not same_tokenizer(target.tokenizer, assistant.tokenizer):
            raise InputError(
                f"{assistant.name} uses a different tokenizer from {target.name}, so it cannot assist with the "
                f"'assistant' strategy; choose 'universal' (or 'auto')."
            )
        return None

    def settings(self, spec: ArmSpec, drafter_values: dict, defaults: dict) -> dict:
        # The one path on which transformers adapts the confidence threshold (with scikit-learn installed).
        return settings.effective(spec, settings.DRAFTER_KNOBS, drafter_values, defaults, adapts=True)


PATH = Assistant()
