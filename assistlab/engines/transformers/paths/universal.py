"""A small model with another tokenizer drafts; transformers re-tokenises between the two vocabularies.

This is the reference benchmark's path (Gemma 3 27B with Qwen2.5-0.5B): `generate()` gets `tokenizer` and
`assistant_tokenizer` beside `assistant_model` (AssistedCandidateGeneratorDifferentTokenizers).
"""

from __future__ import annotations

from ....errors import InputError
from . import settings
from .base import ArmSpec, DraftingPath, LoadedModel


class Universal(DraftingPath):
    name = "universal"
    choice_label = "Assistant model with another word list (universal)"
    drafts = "a small model with another tokenizer (`tokenizer` and `assistant_tokenizer` go to `generate()`)"
    auto_picks = "the assistant is an ordinary causal LM with a different vocabulary"
    auto_priority = 4
    needs_assistant = True
    example = "google/gemma-3-27b-it with Qwen/Qwen2.5-0.5B-Instruct"
    rewrites_drafter_config = True

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        return assistant is not None  # what 'assistant' does not take (the registry asks it first)

    def check_settings(self, spec: ArmSpec, do_sample: bool) -> None:
        if spec.assistant_ensemble_weight is not None and not do_sample:
            raise InputError(
                "Universal assisted generation with greedy decoding compares tokens, not probabilities, so "
                "assistant_ensemble_weight would change nothing; turn on sampling, or use an assistant with the "
                "same tokenizer."
            )

    def generate_kwargs(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> dict:
        return {"assistant_model": assistant.model, "tokenizer": target.tokenizer,
                "assistant_tokenizer": assistant.tokenizer}

    def settings(self, spec: ArmSpec, drafter_values: dict, defaults: dict) -> dict:
        knobs = (*settings.DRAFTER_KNOBS, *settings.LOOKBEHIND_KNOBS)
        return settings.effective(spec, knobs, drafter_values, defaults, adapts=False)


PATH = Universal()
