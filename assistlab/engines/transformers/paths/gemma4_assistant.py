"""A Gemma 4 assistant drafts from the target's own hidden and key/value states.

transformers 5.23 picks SinglePositionMultiTokenCandidateGenerator for an assistant whose class is
Gemma4Assistant*/Gemma4UnifiedAssistant*, only for a target whose class starts with Gemma4 or Gemma3n (they
return `shared_kv_states`). It drafts `num_assistant_tokens` tokens every step and never adapts; it skips
drafting on the first step, which needs one target forward first.
"""

from __future__ import annotations

from ....errors import InputError
from .base import ArmSpec, DraftingPath, LoadedModel, kind

ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
# Class-name prefixes of the targets transformers lets a Gemma 4 assistant draft for (they return shared K/V).
TARGET_PREFIXES = ("Gemma4", "Gemma3n")
# transformers' global default for num_assistant_tokens; the Gemma 4 generator reads the assistant's own
# generation config, which has no default, so AssistLab fills this in when nothing else sets it.
TRANSFORMERS_DEFAULT_DRAFT = 20
# What transformers 5.23 raises for every Gemma 4 assistant (all its layers share key/value states).
BUILD_ERROR = "The set of layer types producing a cache is different than the set of layer types using them"


def is_gemma4_assistant(config) -> bool:
    return getattr(config, "model_type", None) in ASSISTANT_TYPES


class Gemma4Assistant(DraftingPath):
    name = "gemma4-assistant"
    choice_label = "Gemma 4's own assistant, reading the target's memory of the text (gemma4-assistant)"
    drafts = ("a Gemma 4 assistant (`gemma4_assistant`, `gemma4_unified_assistant`) drafting from the target's "
              "own hidden and key/value states (`SinglePositionMultiTokenCandidateGenerator`)")
    auto_picks = "the assistant's config is a Gemma 4 assistant; the target must be a Gemma 4 or Gemma 3n model"
    auto_priority = 0
    owns_checkpoints = True
    needs_assistant = True
    example = "google/gemma-4-E2B-it with google/gemma-4-E2B-it-assistant"
    adaptive = False

    def recognises(self, target: LoadedModel, assistant: LoadedModel | None) -> bool:
        return assistant is not None and is_gemma4_assistant(assistant.model.config)

    def check(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> str | None:
        if assistant is None or not is_gemma4_assistant(assistant.model.config):
            what = f"{assistant.name} is a {kind(assistant)}" if assistant is not None else "no assistant was given"
            raise InputError(
                f"The 'gemma4-assistant' strategy needs a Gemma 4 assistant model, but {what}; choose one made for "
                f"your target (e.g. {self.example}), or use 'assistant' or 'auto' for an ordinary one."
            )
        if not type(target.model).__name__.startswith(TARGET_PREFIXES):
            raise InputError(
                f"{assistant.name} is a Gemma 4 assistant, which drafts from the target's shared key/value states "
                f"that only Gemma 4 and Gemma 3n targets provide, and {target.name} is a {kind(target)}; pair it "
                f"with the Gemma 4 model it was made for, or give {target.name} an ordinary assistant model."
            )
        wanted = getattr(assistant.model.config, "backbone_hidden_size", None)
        have = getattr(target.model.config.get_text_config(), "hidden_size", None)
        if wanted is not None and have is not None and wanted != have:
            raise InputError(
                f"{assistant.name} was made for a target of hidden size {wanted}, but {target.name} has {have}; "
                f"pair it with the Gemma 4 model it was made for (its name without '-assistant')."
            )
        return (
            f"{assistant.name} is a Gemma 4 assistant and {target.name} a {type(target.model).__name__}, so it "
            f"drafts from the target's own hidden and key/value states (SinglePositionMultiTokenCandidateGenerator)."
        )

    def configure(self, spec: ArmSpec, target: LoadedModel, assistant: LoadedModel | None, values: dict) -> None:
        """The Gemma 4 generator reads num_assistant_tokens from the assistant's generation config."""
        if assistant is None:
            return
        model, config = assistant.model, assistant.model.generation_config
        # The checkpoint's own value, read before AssistLab first changes it, so no run inherits another arm's.
        if not hasattr(model, "_assistlab_default_draft"):
            model._assistlab_default_draft = config.num_assistant_tokens or TRANSFORMERS_DEFAULT_DRAFT
        config.num_assistant_tokens = spec.num_assistant_tokens or model._assistlab_default_draft

    def recognises_checkpoint(self, config) -> bool:
        return is_gemma4_assistant(config)

    def model_class(self, config):
        # A Gemma 4 assistant nests a Gemma 4 text config, which the loader would otherwise load as a plain
        # Gemma 4 text model.
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        if is_gemma4_assistant(config) and type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
            return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
        return None

    def load_hint(self, config, exc: BaseException) -> str:
        if not (is_gemma4_assistant(config) and BUILD_ERROR in str(exc)):
            return ""
        import transformers

        return (
            f". transformers {transformers.__version__} cannot build Gemma 4 assistant models: its key/value "
            f"sharing check rejects a model whose every layer shares key/value states, as every Gemma 4 assistant "
            f"does; use a transformers release that builds them, or another assistant."
        )


PATH = Gemma4Assistant()
