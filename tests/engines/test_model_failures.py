"""Bad checkpoints, memory limits and failures end in one clear sentence, and the next request still works."""

import json
import re
import socket
import time

import pytest
import torch

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers import models
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import AssistLabError, ModelLoadError, ResourceError
from assistlab.measure import runner

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def bad_models(models_dir):
    """Broken checkpoints next to the good ones, inside the allowed folder."""
    import shutil

    from transformers import BertConfig, BertModel

    root = models_dir
    remote = root / "remote-code"
    shutil.copytree(root / "assistant-same", remote, dirs_exist_ok=True)
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (remote / "config.json").write_text(json.dumps(config))

    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(root / "encoder")

    pickle = root / "pickle-only"
    shutil.copytree(root / "assistant-same", pickle, dirs_exist_ok=True)
    (pickle / "model.safetensors").unlink()
    torch.save({}, pickle / "pytorch_model.bin")

    no_weights = root / "no-weights"
    no_weights.mkdir(exist_ok=True)
    shutil.copy(root / "assistant-same" / "config.json", no_weights / "config.json")

    no_tokenizer = root / "no-tokenizer"
    no_tokenizer.mkdir(exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(root / "assistant-same" / name, no_tokenizer / name)
    return root


@pytest.mark.fast
@pytest.mark.parametrize(
    "folder, words",
    [
        ("remote-code", "never runs code from a checkpoint"),
        ("encoder", "not a causal language model"),
        ("pickle-only", "only pickle weights"),
        ("no-weights", "has no weights"),
        ("no-tokenizer", "no usable tokenizer"),
        ("does-not-exist", "cannot be reached|not found"),
    ],
)
def test_bad_checkpoints_are_refused_clearly(bad_models, allowed_models, folder, words, monkeypatch):
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(AssistLabError, match=words):
        models.ModelStore().get(folder, CPU, torch.float32)


def test_unreachable_hub_fails_within_seconds(monkeypatch):
    """Nothing stubbed: the Hub's address is a loopback port nobody listens on, and offline mode is off.

    Without the reachability check, huggingface_hub retries the download for about half a minute.
    """
    from huggingface_hub import constants

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: connections are refused
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert models._hub_reachable(timeout=3.0) is False
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        models.ModelStore().get("no-such-org/no-such-model-xyz", CPU, torch.float32)
    assert time.perf_counter() - started < 15


def test_hub_errors_become_sentences():
    import httpx2
    from huggingface_hub import errors as hub_errors

    response = httpx2.Response(403, request=httpx2.Request("GET", "https://hub.invalid/x"))
    ref = catalog.ModelRef("google/gemma-3-27b-it", "hub", "google/gemma-3-27b-it")
    gated = models._hub_error(hub_errors.GatedRepoError("gated", response=response), ref)
    assert "HF_TOKEN" in str(gated) and "gated" in str(gated)
    missing = models._hub_error(hub_errors.RepositoryNotFoundError("404", response=response), ref)
    assert "not found" in str(missing)


@pytest.mark.fast
def test_a_model_too_big_is_refused_with_numbers(allowed_models, monkeypatch):
    monkeypatch.setattr(models, "free_bytes", lambda device: 1000)
    with pytest.raises(ResourceError, match=r"needs about .* GB in float32, but only 0\.0 GB of memory is free"):
        models.ModelStore().get("target", CPU, torch.float32)


@pytest.mark.fast
def test_short_memory_evicts_cached_models_first(allowed_models, monkeypatch):
    store = models.ModelStore()
    store.get("assistant-same", CPU, torch.float32)
    # Plenty of memory once the cache is empty, none while it holds a model.
    monkeypatch.setattr(models, "free_bytes", lambda device: 1 if len(store) else 10**12)
    store.get("assistant-other", CPU, torch.float32)
    assert [m.ref.text for m in store.loaded()] == ["assistant-other"]


@pytest.mark.fast
def test_idle_models_are_dropped(allowed_models):
    store = models.ModelStore(idle_seconds=0.0)
    store.get("assistant-same", CPU, torch.float32)
    store.get("assistant-other", CPU, torch.float32)
    assert [m.ref.text for m in store.loaded()] == ["assistant-other"]


def _request(**kwargs):
    base = dict(target="target", arms=(ArmSpec("auto", "assistant-same"), ArmSpec("prompt-lookup")),
                prompt="deep learning", max_new_tokens=6, repeats=2, warmup=0)
    return BenchRequest(**{**base, **kwargs})


def test_oom_in_one_arm_keeps_the_others(allowed_models, store):
    _, helper = store.get("assistant-same", CPU, torch.float32)

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helper.model, "forward", out_of_memory)
        report = runner.run_to_report(_request(), store).to_dict()
    plain, assisted, lookup = report["arms"]
    assert "ran out of memory" in assisted["error"] and "lower max_new_tokens" in assisted["error"]
    assert assisted["latencies_s"] == []
    assert len(plain["latencies_s"]) == 2 and len(lookup["latencies_s"]) == 2
    assert "failed" in report["message"] and assisted["name"] in report["message"]
    # the models stay loaded and the next request succeeds
    assert runner.run_to_report(_request(), store).to_dict()["status"] == "complete"


def test_oom_in_the_plain_run_is_a_clear_error(allowed_models, store):
    _, target = store.get("target", CPU, torch.float32)

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    with pytest.MonkeyPatch.context() as patch, pytest.raises(ResourceError, match="ran out of memory"):
        patch.setattr(target.model, "generate", out_of_memory)
        runner.run_to_report(_request(), store)
    target.model.__dict__.pop("generate", None)  # the undone patch leaves the bound method in the instance
    assert runner.run_to_report(_request(), store).to_dict()["status"] == "complete"


def test_a_crashing_assistant_reports_which_arm_failed(allowed_models, store):
    _, helper = store.get("assistant-same", CPU, torch.float32)

    def crash(*args, **kwargs):
        raise RuntimeError("assistant kernel exploded")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helper.model, "forward", crash)
        report = runner.run_to_report(_request(), store).to_dict()
    helper.model.__dict__.pop("forward", None)  # the undone patch leaves the bound method in the instance
    assert "assistant kernel exploded" in report["arms"][1]["error"]
    assert report["comparison"][1]["speedup"]["median"] is not None  # prompt lookup still compared


def test_an_unknown_model_name_says_so_first_with_the_closest_known_names(monkeypatch):
    from assistlab.engines import catalog
    from assistlab.engines.transformers import models

    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    text = models.not_cached_words("Qwen/Qwen2.5-05B-Instruct")
    assert text.startswith("No model named Qwen/Qwen2.5-05B-Instruct is known here (did you mean ")
    assert "Qwen/Qwen2.5-0.5B-Instruct" in text
    assert text.index("did you mean") < text.index("docs/models.md#bringing-a-model")
    text = models.not_cached_words("foo/definitely-not-a-model")
    assert text.startswith("No model named foo/definitely-not-a-model is known here (check the spelling): ")
    # One sentence that names the docs page, not the how-to itself (eight lines of it, once).
    assert text.endswith("; docs/models.md#bringing-a-model says how to bring it here.")
    assert not re.search(r"[.!?]\s", text) and "hf download" not in text, text
