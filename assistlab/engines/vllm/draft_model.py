"""vLLM's draft_model method: which kind of drafting an arm does (in the target's own vocabulary, or, where the draft
model has another tokenizer, in the tokens both vocabularies share, sized as vLLM sizes them), and the limits of the
installed vLLM that refuse a pair in one sentence before any server starts."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ..transformers.paths import same_tokenizer
from .answers import vocab_size
from .server import PYTHON_VAR, VllmPython

SAME = "same vocabulary"
INTERSECTION = "vocabulary intersection"
# vLLM 0.32's SpeculativeConfig fields: drafting in the shared tokens, and the draft sampling it allows with it.
HETEROGENEOUS = "use_heterogeneous_vocab"
SAMPLE_METHOD = "draft_sample_method"
# vLLM 0.32 keeps layers of different attention kinds in different KV cache groups, and its drafter stops at
# start-up unless all drafting layers are in one (v1/spec_decode/llm_base_proposer.py).
ONE_GROUP = "All drafting layers should belong to the same kv cache group"
# Models whose config.json may predate `layer_types` and still mix sliding-window and global layers.
MIXED_MODEL_TYPES = ("gemma2", "gemma3", "gemma3_text")
# What vLLM logs once it has built the intersection (v1/spec_decode/vocab_mapping.py).
LOGGED = re.compile(r"VocabMapping initialized: target_vocab=(\d+), draft_vocab=(\d+), intersection=(\d+)")


@dataclass(frozen=True)
class Drafting:
    """How a draft_model arm drafts: `kind` is SAME or INTERSECTION; `intersection` the tokens both vocabularies
    share (INTERSECTION only), from `source`: "computed here" (as vLLM computes it) or "vLLM's log"."""

    kind: str
    target_vocab: int | None = None
    draft_vocab: int | None = None
    intersection: int | None = None
    source: str | None = None

    @property
    def heterogeneous(self) -> bool:
        return self.kind == INTERSECTION

    def words(self) -> str:
        """What the arm's name says: 'same vocabulary' or 'vocabulary intersection of 288 tokens'."""
        if not self.heterogeneous or self.intersection is None:
            return self.kind
        return f"{self.kind} of {self.intersection} tokens"

    def speculative(self, python: VllmPython) -> dict:
        """What the arm's --speculative-config takes for this kind of drafting ({} in the same vocabulary)."""
        if not self.heterogeneous:
            return {}
        extra: dict = {HETEROGENEOUS: True}
        if SAMPLE_METHOD in (python.speculative_fields or ()):
            extra[SAMPLE_METHOD] = "greedy"  # the only draft sampling vLLM allows with it
        return extra

    def logged(self, log: str) -> Drafting:
        """This drafting with vLLM's own figures, where its log has them."""
        found = LOGGED.findall(log or "")
        if not self.heterogeneous or not found:
            return self
        target, draft, shared = (int(x) for x in found[-1])
        return Drafting(self.kind, target, draft, shared, "vLLM's log")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "words": self.words(), "target_vocab": self.target_vocab,
                "draft_vocab": self.draft_vocab, "intersection_tokens": self.intersection, "source": self.source}


def _space_prefixes(tokenizer) -> tuple[str, ...]:
    """The mark a tokenizer puts on a word-initial space ('Ġ' in BPE, '▁' in SentencePiece), as vLLM finds it."""
    try:
        ids = tokenizer.encode(" a", add_special_tokens=False)
        if ids:
            token = tokenizer.convert_ids_to_tokens(ids[0])
            if isinstance(token, str) and len(token) > 1 and token.endswith("a") and token[0] not in (" ", "\t"):
                return (token[:-1],)
    except Exception:  # noqa: BLE001 - vLLM falls back the same way on any failure
        pass
    return ("\u0120", "\u2581")


def _normalised(tokenizer) -> dict[str, int]:
    """Each token's text with its space mark as a space, to the first id that has it."""
    prefixes, out = _space_prefixes(tokenizer), {}
    for token, tid in tokenizer.get_vocab().items():
        for prefix in prefixes:
            if token.startswith(prefix):
                token = " " + token[len(prefix):]
                break
        out.setdefault(token, tid)
    return out


def intersection_size(target_tokenizer, draft_tokenizer, target_vocab: int, draft_vocab: int) -> int:
    """The tokens both vocabularies share, counted as vLLM 0.32's VocabMapping counts them: the same text once
    the space marks are normalised, with ids inside each model's vocabulary."""
    target, draft = _normalised(target_tokenizer), _normalised(draft_tokenizer)
    shared = target.keys() & draft.keys()
    return sum(1 for token in shared if target[token] < target_vocab and draft[token] < draft_vocab)


def drafting(target, draft) -> Drafting:
    """How vLLM drafts for `target` with `draft` (both loaded, at least their tokenizers and folders)."""
    target_vocab = vocab_size(target.folder) or len(target.tokenizer)
    draft_vocab = vocab_size(draft.folder) or len(draft.tokenizer)
    if same_tokenizer(target.tokenizer, draft.tokenizer):
        return Drafting(SAME, target_vocab, draft_vocab)
    shared = intersection_size(target.tokenizer, draft.tokenizer, target_vocab, draft_vocab)
    return Drafting(INTERSECTION, target_vocab, draft_vocab, shared, "computed here")


def _config(folder: str) -> dict:
    try:
        with open(os.path.join(str(folder), "config.json")) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def attention_kinds(config: dict) -> tuple[str, ...]:
    """The kinds of attention a config.json (a dict) mixes in its layers, or () for one kind: its `layer_types`
    (top level or text_config), else a Gemma 2/3 model type or a `sliding_window_pattern` with a sliding window."""
    for part in (config, config.get("text_config")):
        if not isinstance(part, dict):
            continue
        types = part.get("layer_types")
        if isinstance(types, list) and types:
            kinds = tuple(dict.fromkeys(str(t) for t in types))
            if len(kinds) > 1:
                return kinds
            continue  # one kind of layer: one KV cache group
        pattern = part.get("sliding_window_pattern")
        if part.get("model_type") in MIXED_MODEL_TYPES or (
                part.get("sliding_window") and isinstance(pattern, int) and pattern > 1):
            return ("sliding_attention", "full_attention")
    return ()


def refusal(plan: Drafting, target, draft, python: VllmPython) -> str | None:
    """Why the installed vLLM cannot draft for `target` with `draft`, in one sentence with what to try instead;
    None when it can."""
    path = "universal assisted generation" if plan.heterogeneous else "assisted generation"
    instead = f"time {draft.name} as a transformers assistant ({path})"
    if python.one_kv_cache_group is not False:  # the assertion is in the installed vLLM (or it could not be read)
        for role, model in (("target", target), ("draft model", draft)):
            kinds = attention_kinds(_config(model.folder))
            if kinds:
                return (f"vLLM {python.vllm} cannot run draft_model with the {role} {model.name}: its layers mix "
                        f"{' and '.join(kinds)}, which vLLM keeps in separate KV cache groups, and its drafter "
                        f"needs all drafting layers in one (it stops at start-up with “{ONE_GROUP}”); {instead}, or "
                        f"pick a target and draft model whose layers all use one kind of attention.")
    if plan.heterogeneous and HETEROGENEOUS not in (python.speculative_fields or ()):
        return (f"vLLM {python.vllm} in {PYTHON_VAR} cannot draft with {draft.name}, which has another tokenizer "
                f"than {target.name}: its --speculative-config has no {HETEROGENEOUS} (vLLM 0.32 has it); upgrade "
                f"the vLLM there, or {instead}.")
    return None
