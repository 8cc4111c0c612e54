"""Drafters beyond the classic assistant: Gemma 4 assistants, multi-token prediction, DFlash, ensemble verification.

transformers 5.23 picks them in `GenerationMixin._get_candidate_generator`, in this order:
- `use_mtp=True` -> MTPCandidateGenerator: the target's own MTP layers (config `num_mtp_layers`, alias
  `num_nextn_predict_layers`) draft one token each; transformers reads them from the target's checkpoint files
  on every generate() call;
- an assistant whose class is Gemma4Assistant*/Gemma4UnifiedAssistant* -> SinglePositionMultiTokenCandidateGenerator,
  only for a target whose class starts with Gemma4 or Gemma3n (they return `shared_kv_states`); it drafts
  `num_assistant_tokens` tokens from the target's last hidden state and key/value states, and never adapts;
- `speculation_type="dflash"` with a DFlash drafter (a config with target_layer_ids, block_size, mask_token_id;
  in 5.23 the `muse_glimmer_assistant` model type) -> DFlashTokenCandidateGenerator: one forward drafts
  block_size - 1 tokens from the target's hidden states at target_layer_ids, through the target's own head;
- `assistant_ensemble_weight` w in (0, 1), with any generator that returns draft logits: verification accepts
  against w * p_target + (1 - w) * q_draft, so the text is no longer the target's own (lossy).
All of them skip drafting on the first step (they need one target forward first) and report each verification
through `update_candidate_strategy`, so the runner's per-step record works for them unchanged.

This module decides from the checkpoints' configs which of these a pairing gets, says in one sentence why a
pairing cannot be served, builds the generate() arguments, and says what is lossy and which figures a path
cannot give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config import DRAFTER_STRATEGIES, ArmSpec
from ...errors import InputError

if TYPE_CHECKING:
    from .models import LoadedModel

GEMMA4_ASSISTANT, MTP, DFLASH = DRAFTER_STRATEGIES
GEMMA4_ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
# Class-name prefixes of the targets transformers lets a Gemma 4 assistant draft for (they return shared K/V).
GEMMA4_TARGET_PREFIXES = ("Gemma4", "Gemma3n")
DFLASH_KEYS = ("target_layer_ids", "block_size", "mask_token_id")
# Strategies whose draft length is fixed by a checkpoint, not by num_assistant_tokens.
FIXED_DRAFT_STRATEGIES = (MTP, DFLASH)
# Strategies that draft a fixed num_assistant_tokens every step: schedules and the confidence threshold do nothing.
NON_ADAPTIVE_STRATEGIES = (GEMMA4_ASSISTANT, MTP, DFLASH)
# transformers' global default for num_assistant_tokens; the Gemma 4 generator reads the assistant's own
# generation config, which has no default, so AssistLab fills this in when nothing else sets it.
TRANSFORMERS_DEFAULT_DRAFT = 20

LOSSY_MARK = "[lossy]"
# One sentence for the page on what a lossy arm trades.
LOSSY_TRADE = (
    "A lossy arm (ensemble verification, or any sampled run) accepts drafts the target alone might not have "
    "chosen, so it can be faster, but its text is no longer exactly the target's own; compare the texts before "
    "you trust its speedup."
)

EXAMPLES = {
    GEMMA4_ASSISTANT: "google/gemma-4-E2B-it with google/gemma-4-E2B-it-assistant",
    MTP: "zai-org/GLM-4.5",
    DFLASH: "a muse_glimmer_assistant checkpoint made for its target",
}


# ---------------------------------------------------------------- what a checkpoint is


def is_gemma4_assistant(config) -> bool:
    return getattr(config, "model_type", None) in GEMMA4_ASSISTANT_TYPES


def is_dflash_drafter(config) -> bool:
    return all(getattr(config, key, None) is not None for key in DFLASH_KEYS)


def is_drafter_only(config) -> bool:
    """A checkpoint that cannot generate on its own: it drafts from a target's hidden states."""
    return is_gemma4_assistant(config) or is_dflash_drafter(config)


def mtp_layers(config) -> int:
    """How many MTP layers a target's config declares (0 when none)."""
    return int(getattr(config.get_text_config(), "num_mtp_layers", 0) or 0)


def drafter_model_class(config):
    """The class to load a drafter-only checkpoint with, or None for an ordinary causal LM.

    A Gemma 4 assistant nests a Gemma 4 text config, which the loader would otherwise load as a plain Gemma 4
    text model; a DFlash drafter is a base model with no head of its own (it borrows the target's).
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING

    if is_gemma4_assistant(config) and type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    if is_dflash_drafter(config) and type(config) in MODEL_MAPPING:
        return MODEL_MAPPING[type(config)]
    return None


# What transformers 5.23 raises for every Gemma 4 assistant (all its layers share key/value states).
GEMMA4_BUILD_ERROR = "The set of layer types producing a cache is different than the set of layer types using them"


def load_hint(config, exc: BaseException) -> str:
    """A sentence to add to a load failure that AssistLab can explain, else ''."""
    if is_gemma4_assistant(config) and GEMMA4_BUILD_ERROR in str(exc):
        import transformers

        return (
            f". transformers {transformers.__version__} cannot build Gemma 4 assistant models: its key/value "
            f"sharing check rejects a model whose every layer shares key/value states, as every Gemma 4 assistant "
            f"does; use a transformers release that builds them, or another assistant."
        )
    return ""


def _kind(model: LoadedModel) -> str:
    return f"{type(model.model).__name__} ({getattr(model.model.config, 'model_type', '?')})"


# ---------------------------------------------------------------- which path a pairing gets


def _check_gemma4(target: LoadedModel, assistant: LoadedModel | None) -> str:
    if assistant is None or not is_gemma4_assistant(assistant.model.config):
        what = f"{assistant.name} is a {_kind(assistant)}" if assistant is not None else "no assistant was given"
        raise InputError(
            f"The 'gemma4-assistant' strategy needs a Gemma 4 assistant model, but {what}; choose one made for "
            f"your target (e.g. {EXAMPLES[GEMMA4_ASSISTANT]}), or use 'assistant' or 'auto' for an ordinary one."
        )
    if not type(target.model).__name__.startswith(GEMMA4_TARGET_PREFIXES):
        raise InputError(
            f"{assistant.name} is a Gemma 4 assistant, which drafts from the target's shared key/value states that "
            f"only Gemma 4 and Gemma 3n targets provide, and {target.name} is a {_kind(target)}; pair it with the "
            f"Gemma 4 model it was made for, or give {target.name} an ordinary assistant model."
        )
    wanted = getattr(assistant.model.config, "backbone_hidden_size", None)
    have = getattr(target.model.config.get_text_config(), "hidden_size", None)
    if wanted is not None and have is not None and wanted != have:
        raise InputError(
            f"{assistant.name} was made for a target of hidden size {wanted}, but {target.name} has {have}; pair it "
            f"with the Gemma 4 model it was made for (its name without '-assistant')."
        )
    return (
        f"{assistant.name} is a Gemma 4 assistant and {target.name} a {type(target.model).__name__}, so it drafts "
        f"from the target's own hidden and key/value states (SinglePositionMultiTokenCandidateGenerator)."
    )


def _check_mtp(target: LoadedModel) -> str:
    layers = mtp_layers(target.model.config)
    if not layers:
        raise InputError(
            f"{target.name} has no MTP layers (its config sets no num_mtp_layers or num_nextn_predict_layers), so "
            f"'mtp' has nothing to draft with; choose a target that ships them (e.g. {EXAMPLES[MTP]}), or use an "
            f"assistant model or prompt-lookup."
        )
    from transformers.modeling_layers import MtpModel

    try:
        MtpModel.get_mtp_weights_regex(target.model)
    except (ValueError, AttributeError, TypeError):
        raise InputError(
            f"{target.name} declares {layers} MTP layer(s), but transformers knows no layout for the MTP weights of "
            f"a {type(target.model).__name__} checkpoint, so it cannot load them; use an assistant model or "
            f"prompt-lookup with this target."
        ) from None
    return f"{target.name} carries {layers} MTP layer(s), so it drafts for itself with no second model (use_mtp=True)."


def _check_dflash(target: LoadedModel, assistant: LoadedModel | None) -> str:
    if assistant is None or not is_dflash_drafter(assistant.model.config):
        what = f"{assistant.name} is a {_kind(assistant)}" if assistant is not None else "no draft model was given"
        raise InputError(
            f"The 'dflash' strategy needs a DFlash draft model (a config with target_layer_ids, block_size and "
            f"mask_token_id, e.g. {EXAMPLES[DFLASH]}), but {what}; choose one, or use 'assistant' or 'auto'."
        )
    config, text = assistant.model.config, target.model.config.get_text_config()
    deepest = max(config.target_layer_ids)
    if deepest >= target.num_layers:
        raise InputError(
            f"{assistant.name} reads the target's layer {deepest}, but {target.name} has only {target.num_layers} "
            f"layers; pair it with the target it was made for."
        )
    if getattr(config, "hidden_size", None) != getattr(text, "hidden_size", None):
        raise InputError(
            f"{assistant.name} works in hidden size {config.hidden_size}, but {target.name} has "
            f"{getattr(text, 'hidden_size', '?')}; pair it with the target it was made for."
        )
    if not 0 <= config.mask_token_id < getattr(text, "vocab_size", 0):
        raise InputError(
            f"{assistant.name} uses mask token {config.mask_token_id}, which is not in {target.name}'s vocabulary; "
            f"pair it with the target it was made for."
        )
    return (
        f"{assistant.name} is a DFlash draft model, so it drafts {config.block_size - 1} tokens per step in one "
        f"forward from {target.name}'s hidden states at layers {list(config.target_layer_ids)}."
    )


def resolve(arm: ArmSpec, target: LoadedModel, assistant: LoadedModel | None) -> tuple[str, str] | None:
    """(strategy, why it was picked) for an arm this module serves; None leaves the arm to the classic rules.

    Raises InputError, in one sentence that says what would work, for a pairing the path cannot serve.
    """
    chosen = arm.strategy
    if chosen == MTP:
        return MTP, _check_mtp(target)
    if chosen == GEMMA4_ASSISTANT:
        return GEMMA4_ASSISTANT, _check_gemma4(target, assistant)
    if chosen == DFLASH:
        return DFLASH, _check_dflash(target, assistant)
    if assistant is None:
        if chosen != "auto":
            return None
        if mtp_layers(target.model.config):
            return MTP, "auto picked mtp: no assistant model was given and " + _check_mtp(target)
        raise InputError(
            f"With no assistant model, 'auto' can only use the target's own MTP layers, and {target.name} has none; "
            f"choose an assistant model, or the prompt-lookup strategy."
        )
    config = assistant.model.config
    for path, test, check in (
        (GEMMA4_ASSISTANT, is_gemma4_assistant, _check_gemma4),
        (DFLASH, is_dflash_drafter, _check_dflash),
    ):
        if test(config):
            if chosen != "auto":
                raise InputError(
                    f"{assistant.name} is a {_kind(assistant)}, which can draft only through the '{path}' path; "
                    f"choose that strategy (or auto)."
                )
            return path, f"auto picked {path}: " + check(target, assistant)
    return None


def check_settings(arm: ArmSpec, strategy: str, do_sample: bool) -> None:
    """Refuse settings that would silently change nothing on the resolved path."""
    if arm.assistant_ensemble_weight is not None and strategy == "universal" and not do_sample:
        raise InputError(
            "Universal assisted generation with greedy decoding compares tokens, not probabilities, so "
            "assistant_ensemble_weight would change nothing; turn on sampling, or use an assistant with the same "
            "tokenizer."
        )


def arm_kwargs(strategy: str, assistant: LoadedModel | None) -> dict:
    """generate() arguments for the paths this module serves."""
    if strategy == MTP:
        return {"use_mtp": True}
    if strategy == DFLASH:
        return {"assistant_model": assistant.model, "speculation_type": "dflash"}
    return {"assistant_model": assistant.model}


def ensemble_kwargs(arm: ArmSpec) -> dict:
    """The ensemble-verification argument, for any path, when the arm sets a weight."""
    weight = arm.assistant_ensemble_weight
    return {} if weight is None else {"assistant_ensemble_weight": weight}


def configure(arm: ArmSpec, strategy: str, assistant: LoadedModel | None) -> None:
    """Before every run: the Gemma 4 generator reads num_assistant_tokens from the assistant's generation config."""
    if strategy != GEMMA4_ASSISTANT or assistant is None:
        return
    model, config = assistant.model, assistant.model.generation_config
    # The checkpoint's own value, read before AssistLab first changes it, so no run inherits another arm's.
    if not hasattr(model, "_assistlab_default_draft"):
        model._assistlab_default_draft = config.num_assistant_tokens or TRANSFORMERS_DEFAULT_DRAFT
    config.num_assistant_tokens = arm.num_assistant_tokens or model._assistlab_default_draft


# ---------------------------------------------------------------- lossy arms and figures a path cannot give


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


def figures_unavailable(strategy: str, spec: dict | None) -> list[dict]:
    """[{figure, why}] for what this path cannot give, so the report says it rather than showing a wrong number."""
    spec = spec or {}
    out = []
    if strategy == MTP:
        out.append({"figure": "best_k", "why": "the draft length is the target's number of MTP layers, fixed by "
                    "the checkpoint, so the cost model's best draft length is not a setting you can apply"})
        out.append({"figure": "num_assistant_tokens sweep", "why": "MTP drafts one token per MTP layer; "
                    "num_assistant_tokens does not apply"})
        out.append({"figure": "c", "why": "the drafting cost leaves out loading the MTP layers, which transformers "
                    "does on every generate() call (see the probe's setup_s; it is in the timed latency)"})
    if strategy == DFLASH:
        out.append({"figure": "best_k", "why": "DFlash drafts its whole block in one forward, so drafting does not "
                    "cost c per token as the cost model assumes, and the block size is fixed by the draft checkpoint"})
        out.append({"figure": "num_assistant_tokens sweep", "why": "the block size of the draft checkpoint sets the "
                    "draft length; num_assistant_tokens does not apply"})
    if strategy in NON_ADAPTIVE_STRATEGIES and (
        spec.get("num_assistant_tokens_schedule", "constant") != "constant"
        or spec.get("assistant_confidence_threshold")
    ):
        out.append({"figure": "schedule", "why": f"the {strategy} path drafts a fixed number of tokens every step, "
                    "so the schedule and the confidence threshold change nothing"})
    if spec.get("assistant_ensemble_weight") is not None:
        out.append({"figure": "alpha", "why": "with ensemble verification alpha is the acceptance against the "
                    "mixed distribution, not the target's, so the prediction holds only for this weight"})
    return out


def arm_flags(strategy: str, spec: dict | None, do_sample: bool) -> dict:
    """The fields every assisted arm and comparison entry carry: lossless, why not, what it cannot give."""
    ok, why = lossless(spec, do_sample)
    return {"lossless": ok, "lossy_reason": why, "figures_unavailable": figures_unavailable(strategy, spec)}


def restrict_analysis(analysis: dict, strategy: str) -> dict:
    """Drop cost-model figures a path cannot give (see figures_unavailable)."""
    if strategy in FIXED_DRAFT_STRATEGIES:
        analysis["best_k"] = analysis["best_k_speedup"] = None
    return analysis
