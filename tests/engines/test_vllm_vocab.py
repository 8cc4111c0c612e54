"""vLLM's draft_model method with a draft model of another tokenizer (issue 45): it drafts in the vocabulary
intersection where the installed vLLM has use_heterogeneous_vocab; where it has not, or where a model mixes
sliding-window and global layers (vLLM 0.32's limit), the arm is one sentence before any server starts; every
draft model's arm says which kind of drafting ran, beside transformers' universal arm on the same pair.

The fast tests use hand-made tokenizers and configs, and the fake vLLM (tests/fake_openai.py). The tests marked
`real` start real vLLM servers from ASSISTLAB_VLLM_PYTHON on tiny models built here, with a head size of 64, which
vLLM's CPU attention kernels support (a head size of 16 fails at the first request); they are skipped, with the
reason, where it is unset.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_processes import own_vllm_processes, vllm_processes  # noqa: E402

from assistlab.config import BenchRequest  # noqa: E402
from assistlab.engines.transformers.arms import ArmSpec  # noqa: E402
from assistlab.engines.vllm import draft_model, server  # noqa: E402
from assistlab.engines.vllm.arms import VllmArm  # noqa: E402
from assistlab.measure import runner  # noqa: E402

PROMPT = "write me a long essay on deep learning"
# What the probe finds in vLLM 0.32's source (server.PROBE), for the fake vLLM.
VLLM_032 = {"speculative_fields": ["method", "model", "num_speculative_tokens", draft_model.HETEROGENEOUS,
                                   draft_model.SAMPLE_METHOD], "one_kv_cache_group": True}


def python_with(fields=None, one_group=None) -> server.VllmPython:
    return server.VllmPython("/venv/bin/python", "0.32.0", None, None, fields, one_group)


class Tokenizer:
    """A tokenizer as VocabMapping reads one: its vocabulary, and how it spells " a"."""

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        assert text == " a"
        return [next(i for t, i in self.vocab.items() if t.endswith("a") and len(t) == 2)]

    def convert_ids_to_tokens(self, tid: int) -> str:
        return next(t for t, i in self.vocab.items() if i == tid)


# ---------------------------------------------------------------- the intersection, as vLLM counts it


def test_the_intersection_is_counted_as_vllm_counts_it():
    # BPE marks a word-initial space with 'Ġ', SentencePiece with '▁': both read as a space. Shared: " a", " the",
    # "b"; "c" is in both but its target id (7) is past the target's vocabulary of 5, so vLLM does not map it.
    target = Tokenizer({"Ġa": 0, "b": 1, "Ġthe": 2, "<unk>": 3, "x": 4, "c": 7})
    draft = Tokenizer({"▁a": 0, "▁the": 1, "c": 2, "b": 3, "▁dog": 4})
    assert draft_model.intersection_size(target, draft, target_vocab=5, draft_vocab=5) == 3
    assert draft_model.intersection_size(target, draft, target_vocab=8, draft_vocab=5) == 4
    assert draft_model.intersection_size(target, draft, target_vocab=8, draft_vocab=2) == 2  # " a", " the"


@pytest.mark.fast
def test_the_kind_of_drafting_and_what_the_name_and_config_say(allowed_models):
    from assistlab.engines.transformers import models

    target, same, other = (models.tokenizer_only(n) for n in ("target", "assistant-same", "assistant-other"))
    assert draft_model.drafting(target, same) == draft_model.Drafting("same vocabulary", len(target.tokenizer),
                                                                      len(same.tokenizer))
    plan = draft_model.drafting(target, other)
    assert plan.kind == "vocabulary intersection" and plan.source == "computed here"
    shared = set(target.tokenizer.get_vocab()) & set(other.tokenizer.get_vocab())  # both byte-level BPE: 'Ġ'
    assert plan.intersection == len(shared) and 0 < plan.intersection < min(plan.target_vocab, plan.draft_vocab)
    arm = VllmArm("draft_model", 3, draft_model="assistant-other")
    assert arm.named(plan.words()) == f"vllm draft_model: assistant-other (k=3, vocabulary intersection of {len(shared)} tokens)"
    assert arm.named("same vocabulary") == "vllm draft_model: assistant-other (k=3, same vocabulary)"
    assert arm.label == "vllm draft_model: assistant-other (k=3)"  # the request's name, before the tokenizers are read
    # The greedy draft sampling vLLM requires with it, where the installed vLLM has that field.
    assert plan.speculative(python_with(VLLM_032["speculative_fields"])) == {
        "use_heterogeneous_vocab": True, "draft_sample_method": "greedy"}
    assert plan.speculative(python_with(["use_heterogeneous_vocab"])) == {"use_heterogeneous_vocab": True}
    assert draft_model.drafting(target, same).speculative(python_with(VLLM_032["speculative_fields"])) == {}


def test_vllm_s_logged_intersection_replaces_the_computed_one():
    plan = draft_model.Drafting("vocabulary intersection", 393, 350, 287, "computed here")
    log = ("(Worker pid=21938) INFO 12-06 00:48:12 [vocab_mapping.py:122] VocabMapping initialized: target_vocab=393, "
           "draft_vocab=350, intersection=288 (82.3% of draft, 73.3% of target)\n")
    assert plan.logged(log) == draft_model.Drafting("vocabulary intersection", 393, 350, 288, "vLLM's log")
    assert plan.logged("no such line") == plan
    same = draft_model.Drafting("same vocabulary", 393, 393)
    assert same.logged(log) == same


# ---------------------------------------------------------------- what the installed vLLM has, and its limits


@pytest.mark.parametrize("config, kinds", [
    ({"model_type": "gemma3_text", "sliding_window": 512,
      "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}, ("sliding_attention", "full_attention")),
    ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "sliding_window": 16,
                                              "layer_types": ["sliding_attention", "full_attention"]}},
     ("sliding_attention", "full_attention")),  # a multimodal Gemma 3: its text config says it
    ({"model_type": "gemma2", "sliding_window": 4096}, ("sliding_attention", "full_attention")),  # before layer_types
    ({"model_type": "custom", "sliding_window": 1024, "sliding_window_pattern": 6},
     ("sliding_attention", "full_attention")),
    ({"model_type": "gemma3_text", "sliding_window": 16, "layer_types": ["sliding_attention"] * 2}, ()),  # one kind
    ({"model_type": "mistral", "sliding_window": 4096}, ()),  # every layer slides: one KV cache group
    ({"model_type": "qwen2", "sliding_window": None, "layer_types": ["full_attention"] * 4}, ()),
    ({"model_type": "llama"}, ()),
])
def test_layers_of_several_attention_kinds_are_found_in_the_config(config, kinds):
    assert draft_model.attention_kinds(config) == kinds


def test_transformers_gemma_configs_mix_their_layers():
    from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig

    assert set(draft_model.attention_kinds(Gemma3TextConfig().to_dict())) == {"sliding_attention", "full_attention"}
    assert set(draft_model.attention_kinds(Gemma2Config().to_dict())) == {"sliding_attention", "full_attention"}
    assert draft_model.attention_kinds(LlamaConfig().to_dict()) == draft_model.attention_kinds(MistralConfig().to_dict()) == ()


def _model(tmp_path: Path, name: str, config: dict) -> SimpleNamespace:
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    return SimpleNamespace(name=name, folder=str(tmp_path / name))


def test_refusals_name_the_reason_and_what_to_try_instead(tmp_path):
    gemma = _model(tmp_path, "gemma", {"model_type": "gemma3_text", "sliding_window": 512,
                                        "layer_types": ["sliding_attention", "full_attention"]})
    llama, qwen = _model(tmp_path, "llama", {"model_type": "llama"}), _model(tmp_path, "qwen", {"model_type": "qwen2"})
    other = draft_model.Drafting("vocabulary intersection", 300, 350, 200, "computed here")
    same = draft_model.Drafting("same vocabulary", 300, 300)
    new = python_with(VLLM_032["speculative_fields"], True)
    assert draft_model.refusal(other, llama, qwen, new) is None
    assert draft_model.refusal(same, llama, qwen, python_with(None, None)) is None
    for target, draft, role in ((gemma, qwen, "target gemma"), (llama, gemma, "draft model gemma")):
        said = draft_model.refusal(other, target, draft, new)
        assert said.startswith(f"vLLM 0.32.0 cannot run draft_model with the {role}: its layers mix sliding_attention "
                               f"and full_attention")
        assert draft_model.ONE_GROUP in said and "as a transformers assistant (universal assisted generation)" in said
        assert said.count(". ") == 0  # one sentence
    said = draft_model.refusal(same, gemma, gemma, python_with(None, None))  # unread: vLLM 0.32's limit is assumed
    assert "(assisted generation)" in said and draft_model.ONE_GROUP in said
    # A vLLM whose drafter has no such assertion is left to try.
    assert draft_model.refusal(other, gemma, qwen, python_with(VLLM_032["speculative_fields"], False)) is None
    old = draft_model.refusal(other, llama, qwen, python_with(["method", "model"], True))
    assert old == (f"vLLM 0.32.0 in {server.PYTHON_VAR} cannot draft with qwen, which has another tokenizer than llama: "
                   f"its --speculative-config has no use_heterogeneous_vocab (vLLM 0.32 has it); upgrade the vLLM "
                   f"there, or time qwen as a transformers assistant (universal assisted generation).")


def _vllm_tree(root: Path, fields: list[str], assertion: bool) -> Path:
    """A vLLM source tree as the probe reads it (never imported) and a Python that finds it."""
    (root / "vllm" / "config").mkdir(parents=True)
    (root / "vllm" / "v1" / "spec_decode").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("raise ImportError('the probe must not import vLLM')\n")
    body = "\n".join(f"    {f}: int = 0" for f in fields)
    (root / "vllm" / "config" / "speculative.py").write_text(f"class SpeculativeConfig:\n{body}\n    def m(self): x: int = 1\n")
    (root / "vllm" / "v1" / "spec_decode" / "proposer.py").write_text(
        "assert True, 'All drafting layers should belong to the same kv cache group'\n" if assertion else "pass\n")
    python = root / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} \"$@\"\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def test_the_probe_reads_what_the_installed_vllm_has_from_its_source(tmp_path, monkeypatch):
    new = _vllm_tree(tmp_path / "new", ["method", "use_heterogeneous_vocab", "draft_sample_method"], True)
    old = _vllm_tree(tmp_path / "old", ["method", "model"], False)
    monkeypatch.setenv(server.PYTHON_VAR, str(new))
    found = server.find_python()
    assert found.speculative_fields == ("method", "use_heterogeneous_vocab", "draft_sample_method")
    assert found.one_kv_cache_group is True
    monkeypatch.setenv(server.PYTHON_VAR, str(old))
    found = server.find_python()
    assert found.speculative_fields == ("method", "model") and found.one_kv_cache_group is False


def test_the_probe_on_the_installed_vllm():
    if not os.environ.get(server.PYTHON_VAR):
        pytest.skip(f"{server.PYTHON_VAR} is unset (install: {server.INSTALL_CPU})")
    found = server.find_python()
    if not found.vllm.startswith("0.32."):
        pytest.skip(f"vLLM {found.vllm}: this test knows what vLLM 0.32's source has")
    assert {"use_heterogeneous_vocab", "draft_sample_method", "num_speculative_tokens"} <= set(found.speculative_fields)
    assert found.one_kv_cache_group is True


# ---------------------------------------------------------------- whole comparisons with the fake vLLM


def _request(arms, target="target", **kw):
    return BenchRequest(target=target, arms=tuple(arms), prompt=PROMPT, max_new_tokens=6, repeats=2, warmup=1,
                        engines=("transformers", "vllm"), **kw)


def _started(path: Path) -> list[dict | None]:
    """The --speculative-config each fake server was started with (None for plain)."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        argv = json.loads(line)
        out.append(json.loads(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else None)
    return out


@pytest.mark.fast
def test_another_tokenizer_drafts_in_the_intersection_beside_transformers_universal(
        store, allowed_models, fake_vllm_python, tmp_path, monkeypatch):
    from assistlab.cli import tables

    monkeypatch.setenv("FAKE_VLLM_FEATURES", json.dumps(VLLM_032))
    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    before = set(vllm_processes())
    arms = (ArmSpec("universal", "assistant-other"), VllmArm("plain"),
            VllmArm("draft_model", 2, draft_model="assistant-other"), VllmArm("draft_model", 2, draft_model="assistant-same"))
    data = runner.run_to_report(_request(arms), store).to_dict()
    assert data["status"] == "complete", data["message"]
    names = [a["name"] for a in data["arms"]]
    other = next(n for n in names if n.startswith("vllm draft_model: assistant-other (k=2, vocabulary intersection of "))
    assert "vllm draft_model: assistant-same (k=2, same vocabulary)" in names
    assert [a["error"] for a in data["arms"]] == [None] * 5
    servers = data["environment"]["engines"]["vllm"]["servers"]
    config = servers[other]["speculative_config"]
    assert config["use_heterogeneous_vocab"] is True and config["draft_sample_method"] == "greedy"
    assert config["model"].endswith("assistant-other")
    drafting = servers[other]["drafting"]
    assert drafting["kind"] == "vocabulary intersection" and drafting["source"] == "computed here"  # the fake logs none
    assert other.endswith(f"of {drafting['intersection_tokens']} tokens)")
    same = servers["vllm draft_model: assistant-same (k=2, same vocabulary)"]["speculative_config"]
    assert "use_heterogeneous_vocab" not in same and "draft_sample_method" not in same
    assert sorted(c is not None and c.get("use_heterogeneous_vocab", False) for c in _started(tmp_path / "argv.jsonl")) \
        == [False, False, True]
    # One table: transformers' universal arm against its plain, vLLM's intersection against vLLM's plain.
    entries = {c["arm"]: c for c in data["comparison"]}
    assert entries["universal: assistant-other (transformers defaults)"]["baseline"] == "plain"
    assert entries[other]["baseline"] == "vllm plain" and entries[other]["acceptance_rate"] is not None
    table = tables.format_table(data)
    assert "universal: assistant-other (transformers defaults)" in table and other in table
    assert (f"{other}: vLLM 0.0-fake server started by AssistLab; drafting in the {drafting['intersection_tokens']} "
            f"tokens both vocabularies share (vocabulary intersection, computed here)") in table
    assert own_vllm_processes(before) == []


@pytest.mark.slow
def test_the_bundled_pair_is_refused_before_any_server_starts_and_transformers_answers(
        store, fake_vllm_python, tmp_path, monkeypatch):
    """The bundled pair (Gemma 3 270M with SmolLM2 135M, two tokenizers): vLLM 0.32 stops at start-up on Gemma 3's
    sliding-window and global layers, so the arm is that sentence and no server is started for it."""
    from assistlab.engines import catalog

    monkeypatch.setenv("FAKE_VLLM_FEATURES", json.dumps(VLLM_032))
    monkeypatch.setenv("FAKE_ARGV_LOG", str(tmp_path / "argv.jsonl"))
    before = set(vllm_processes())
    arms = (ArmSpec("universal", catalog.BUNDLED_ASSISTANT), VllmArm("plain"),
            VllmArm("draft_model", 3, draft_model=catalog.BUNDLED_ASSISTANT))
    request = BenchRequest(target=catalog.BUNDLED_TARGET, arms=arms, prompt=catalog.default_prompt(catalog.BUNDLED_TARGET),
                           max_new_tokens=4, repeats=2, warmup=1, engines=("transformers", "vllm"))
    data = runner.run_to_report(request, store).to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    (refused,) = [n for n, e in errors.items() if e]
    assert refused.startswith("vllm draft_model: smollm2-135m-instruct (k=3, vocabulary intersection of ")
    assert errors[refused].startswith(f"vLLM 0.0-fake cannot run draft_model with the target {catalog.BUNDLED_TARGET}: "
                                      f"its layers mix sliding_attention and full_attention")
    assert draft_model.ONE_GROUP in errors[refused] and "universal assisted generation" in errors[refused]
    assert _started(tmp_path / "argv.jsonl") == [None]  # vLLM's plain server only
    universal = next(c for c in data["comparison"] if c["arm"].startswith("universal: smollm2"))
    assert universal["speedup"]["n"] == 2 and universal["outputs_identical"] is True
    assert own_vllm_processes(before) == []


# ---------------------------------------------------------------- real vLLM (ASSISTLAB_VLLM_PYTHON)


def _llama(folder: Path, corpus: list[str], vocab: int, layers: int, seed: int, chat: bool) -> None:
    """A tiny random Llama with its own tokenizer and a head size of 64 (hidden 128, 2 heads), which vLLM's CPU
    attention kernels support."""
    import torch
    from tiny import make_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True)
    tok = make_tokenizer(folder, corpus, vocab, chat)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=layers, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=512, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False))
    with torch.no_grad():  # larger weights give peaked, non-degenerate distributions
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    model.save_pretrained(folder, safe_serialization=True)


@pytest.fixture
def head64_pair(tmp_path, monkeypatch) -> Path:
    """A target and a draft model with different byte-level BPE tokenizers, neither with sliding-window layers."""
    from tiny import CORPUS_A, CORPUS_B

    root = tmp_path / "models"
    _llama(root / "vocab-target", CORPUS_A, 400, 2, 1, chat=True)
    _llama(root / "vocab-draft", CORPUS_B, 350, 1, 3, chat=False)
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    return root


@pytest.mark.slow
def test_real_vllm_drafts_in_the_intersection_beside_transformers_universal(store, real_vllm, head64_pair):
    from assistlab.cli import tables
    from assistlab.engines.transformers import models
    from assistlab.views import panels

    if draft_model.HETEROGENEOUS not in (real_vllm.speculative_fields or ()):
        pytest.skip(f"vLLM {real_vllm.vllm} has no {draft_model.HETEROGENEOUS}")
    before = set(vllm_processes())
    arms = (ArmSpec("universal", "vocab-draft"), VllmArm("plain"), VllmArm("draft_model", 3, draft_model="vocab-draft"))
    request = BenchRequest(target="vocab-target", arms=arms, prompt=PROMPT, max_new_tokens=16, repeats=2, warmup=1,
                           engines=("transformers", "vllm"))
    data = runner.run_to_report(request, store).to_dict()
    assert data["status"] == "complete", data["message"]
    assert [a["error"] for a in data["arms"]] == [None] * 4, [a["error"] for a in data["arms"]]
    name = data["arms"][3]["name"]
    settings = data["environment"]["engines"]["vllm"]["servers"][name]
    drafting = settings["drafting"]
    # vLLM's own figure, which AssistLab computes the same way from the two tokenizers.
    computed = draft_model.drafting(*(models.tokenizer_only(n) for n in ("vocab-target", "vocab-draft")))
    assert drafting["source"] == "vLLM's log" and drafting["intersection_tokens"] == computed.intersection
    assert name == f"vllm draft_model: vocab-draft (k=3, vocabulary intersection of {computed.intersection} tokens)"
    assert settings["speculative_config"]["use_heterogeneous_vocab"] is True
    # Greedy: its text is token for token vLLM plain's; its acceptance comes from /metrics.
    entry = next(c for c in data["comparison"] if c["arm"] == name)
    assert entry["baseline"] == "vllm plain" and entry["outputs_identical"] is True and entry["speedup"]["n"] == 2
    counts = [t["counts"] for t in data["arms"][3]["trace"]]
    assert all(c["drafts"] >= 1 and c["draft_tokens"] >= c["accepted_tokens"] >= 0 for c in counts), counts
    assert entry["acceptance_rate"] is not None
    assert data["arms"][3]["text"] == data["arms"][2]["text"]
    # Beside transformers' universal arm on the same pair, in one table (the command line's and the page's).
    universal = next(c for c in data["comparison"] if c["arm"].startswith("universal: vocab-draft"))
    assert universal["baseline"] == "plain" and universal["outputs_identical"] is True
    table, ranking = tables.format_table(data), panels.ranking_html(data)
    for arm in (universal["arm"], name):
        assert arm in table and arm in ranking
    print(f"universal {universal['speedup']}, intersection {entry['speedup']}, acceptance {entry['acceptance_rate']}, "
          f"counts {counts}")
    assert own_vllm_processes(before) == []
