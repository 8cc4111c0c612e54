"""Tiny random causal LMs with their own small BPE tokenizers, built in seconds for tests."""

from __future__ import annotations

import contextlib
from pathlib import Path

CORPUS_A = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding lets a small model draft tokens for a large model",
    "deep learning is a field of machine learning based on neural networks",
    "write me a long essay on deep learning and its history",
] * 20
CORPUS_B = [
    "assisted generation verifies drafted tokens in one forward pass",
    "a tokenizer splits text into pieces that a model can read",
    "numbers like 12345 and symbols like #$% are tokens too",
    "deep learning essays are long and full of neural networks",
] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tokenizer(folder: Path, corpus: list[str], vocab_size: int, chat: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def make_model(
    folder: Path,
    corpus: list[str],
    vocab_size: int = 400,
    layers: int = 4,
    hidden: int = 64,
    seed: int = 0,
    chat: bool = False,
) -> Path:
    """A random Llama with its own tokenizer, saved as safetensors into `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(folder, corpus, vocab_size, chat)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights give peaked, non-degenerate distributions
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def make_gemma3_multimodal(folder: Path) -> Path:
    """A tiny random Gemma 3 image-text checkpoint, as the reference's google/gemma-3-27b-it is."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    make_tokenizer(folder, CORPUS_A, 300, chat=False)
    torch.manual_seed(0)
    config = Gemma3Config(
        text_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, vocab_size=300, sliding_window=16, max_position_embeddings=512,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
            patch_size=14,
        ),
        mm_tokens_per_image=4,
    )
    Gemma3ForConditionalGeneration(config).save_pretrained(folder, safe_serialization=True)
    return folder


def build_models_dir(root: Path) -> Path:
    """The models directory the tests allow: target, same-tokenizer assistant, other-tokenizer assistant."""
    make_model(root / "target", CORPUS_A, seed=1, chat=True)
    make_model(root / "assistant-same", CORPUS_A, layers=2, hidden=32, seed=2, chat=True)
    make_model(root / "assistant-other", CORPUS_B, vocab_size=350, layers=2, hidden=32, seed=3)
    # The same-tokenizer assistant drafts from a copy of the target's own weights: acceptance near 100%.
    make_model(root / "target-copy", CORPUS_A, seed=1, chat=True)
    return root


# ---------------------------------------------------------------- the drafters transformers ships (issue 14)

GEMMA4_BUG = "The set of layer types producing a cache is different than the set of layer types using them"


def _peaked(model, seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():  # larger weights give peaked, non-degenerate distributions
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)


def gemma4_assistant_error() -> str | None:
    """Why the pinned transformers cannot build a Gemma 4 assistant from a config, or None once it can.

    In 5.23 every Gemma 4 assistant shares all its layers' key/value states (num_kv_shared_layers equals
    num_hidden_layers, which its config requires), and Gemma4TextConfig.kv_sharing_modes then raises, because
    no layer is left to produce a cache of each type.
    """
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    try:
        text = _gemma4_text(num_hidden_layers=2, vocab_size_per_layer_input=0, hidden_size_per_layer_input=0)
        Gemma4AssistantForCausalLM(Gemma4AssistantConfig(text_config=text, backbone_hidden_size=32))
    except ValueError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def gemma4_all_shared_patch():
    """Let Gemma4TextConfig.kv_sharing_modes answer 'reuse' for a config whose every layer is shared.

    Only for tests, only while the block runs: it is the one check that stops transformers 5.23 from building any
    Gemma 4 assistant (see gemma4_assistant_error); the generation path itself is transformers' own.
    """
    from transformers import Gemma4TextConfig

    original = Gemma4TextConfig.kv_sharing_modes

    def modes(config):
        if config.num_kv_shared_layers and config.num_kv_shared_layers == config.num_hidden_layers:
            return ["reuse"] * config.num_hidden_layers
        return original.fget(config)

    Gemma4TextConfig.kv_sharing_modes = property(modes)
    try:
        yield
    finally:
        Gemma4TextConfig.kv_sharing_modes = original


def _gemma4_text(vocab_size: int = 300, **overrides) -> dict:
    layer_types = ["sliding_attention", "full_attention"] * (overrides.get("num_hidden_layers", 4) // 2)
    config = dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=16, sliding_window=16, max_position_embeddings=512,
        layer_types=layer_types, vocab_size_per_layer_input=vocab_size, hidden_size_per_layer_input=8,
        num_kv_shared_layers=2, pad_token_id=3, bos_token_id=1, eos_token_id=2,
    )
    config.update(overrides)
    return config


def make_gemma4_pair(target: Path, assistant: Path) -> tuple[Path, Path]:
    """A tiny Gemma 4 text target (two of its four layers share K/V) and a Gemma 4 assistant made for it.

    Building the assistant needs gemma4_all_shared_patch() active in 5.23; loading and running it does too.
    """
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig

    target.mkdir(parents=True, exist_ok=True)
    assistant.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(target, CORPUS_A, 300, chat=True)
    text = _gemma4_text(len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id)
    torch.manual_seed(4)
    model = Gemma4ForCausalLM(Gemma4TextConfig(**text))
    _peaked(model, 4)
    model.save_pretrained(target, safe_serialization=True)
    drafter_text = dict(text, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                        vocab_size_per_layer_input=0, hidden_size_per_layer_input=0)
    drafter = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(text_config=drafter_text, backbone_hidden_size=32))
    _peaked(drafter, 5)
    drafter.save_pretrained(assistant, safe_serialization=True)  # no tokenizer: it drafts in the target's tokens
    return target, assistant


MTP_TARGET_LAYERS = 46  # transformers 5.23 knows GLM-4 MoE MTP weights only after layer 46 or 92 (Air, full)


def make_mtp_target(folder: Path) -> Path:
    """A tiny GLM-4 MoE target whose checkpoint carries one MTP layer, stored as GLM-4.5-Air stores it."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    from transformers.modeling_layers import MtpModel

    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(folder, CORPUS_A, 300, chat=True)
    layers = MTP_TARGET_LAYERS
    config = Glm4MoeConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=layers, max_position_embeddings=512, num_nextn_predict_layers=1,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(6)
    model = Glm4MoeForCausalLM(config)
    _peaked(model, 6)
    model.save_pretrained(folder, safe_serialization=True)
    # The MTP layer as the checkpoint stores it: model.layers.<layers>.{enorm,hnorm,eh_proj,shared_head.norm,<block>}
    mtp = MtpModel(model, 1)
    _peaked(mtp, 7)
    extra = {}
    for key, value in mtp.state_dict().items():
        if key.startswith(("embed_tokens", "shared_head")):
            continue  # shared with the target
        rest = key.removeprefix("layers.0.")
        rest = rest.removeprefix("mtp_block.")
        if rest.startswith("post_norm."):
            rest = "shared_head.norm." + rest.removeprefix("post_norm.")
        extra[f"model.layers.{layers}.{rest}"] = value.detach().clone().contiguous()
    (weights,) = folder.glob("*.safetensors")
    tensors = load_file(weights)
    tensors.update(extra)
    save_file(tensors, weights, metadata={"format": "pt"})
    return folder


def make_dflash_drafter(folder: Path, target: Path) -> Path:
    """A tiny DFlash draft model (transformers' muse_glimmer_assistant) for the Llama `target` of build_models_dir."""
    import json

    import torch
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    folder.mkdir(parents=True, exist_ok=True)
    text = json.loads((target / "config.json").read_text())
    config = MuseGlimmerAssistantConfig(
        hidden_size=text["hidden_size"], intermediate_size=text["hidden_size"] * 2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=text["hidden_size"] // 4,
        max_position_embeddings=512, sliding_window=64, block_size=4, mask_token_id=text["pad_token_id"],
        target_layer_ids=[0, text["num_hidden_layers"] - 2], bos_token_id=text["bos_token_id"],
        eos_token_id=text["eos_token_id"], pad_token_id=text["pad_token_id"],
    )
    torch.manual_seed(8)
    model = MuseGlimmerAssistantModel(config)
    _peaked(model, 8)
    model.save_pretrained(folder, safe_serialization=True)  # no tokenizer, no head: it borrows the target's
    return folder
