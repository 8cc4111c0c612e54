"""Tiny random causal LMs with their own small BPE tokenizers, built in seconds for tests."""

from __future__ import annotations

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
