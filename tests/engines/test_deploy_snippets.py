"""The code a search hands over to deploy runs as pasted (issue 43): on the tiny models, the transformers
snippet of plain generation, of prompt lookup and of an assistant model, each run in a fresh Python, loads the
models from where they are, defines the searched prompt, and generates the searched number of new tokens; a
bundled model is its converted folder and a hub id stays one, in the `vllm serve` line too."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from assistlab.engines import registry
from assistlab.engines.transformers import bundled
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.vllm.arms import VllmArm

PROMPT = "the quick brown fox jumps over the lazy dog's \"tail\"\nand the quick brown fox"
REQUEST = {"prompt": PROMPT, "max_new_tokens": 5, "chat_template": True, "do_sample": False, "device": "cpu"}
# Appended to each snippet: what it generated, read back by the test.
CHECK = 'print("GENERATED", output.shape[1] - inputs["input_ids"].shape[1], prompt == {prompt!r})'


def _run(snippet: str) -> subprocess.CompletedProcess:
    program = snippet + "\n" + CHECK.format(prompt=PROMPT)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})


@pytest.mark.slow
def test_the_transformers_snippets_run_as_pasted_on_the_tiny_models(allowed_models):
    deploy = registry.SETTINGS["transformers"].deploy
    snippets = {
        "plain": deploy(None, "target", None, request=REQUEST),
        "prompt lookup": deploy(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2), "target",
                                {"strategy": "prompt-lookup"}, request=REQUEST),
        "assistant": deploy(ArmSpec("auto", "assistant-same", num_assistant_tokens=3), "target",
                            {"strategy": "assistant"}, request=REQUEST),
    }
    for what, deployed in snippets.items():
        text = deployed["snippet"]
        # The models where they are (no assistlab reference left), the prompt defined, the searched length.
        assert f"from_pretrained({str(allowed_models / 'target')!r})" in text, what
        assert "max_new_tokens=5)" in text and "max_new_tokens=256" not in text, what
        assert f"prompt = {PROMPT!r}" in text and "apply_chat_template" in text, what
        done = _run(text)
        assert done.returncode == 0, f"{what}: {done.stderr[-2000:]}"
        generated, same = done.stdout.split("GENERATED")[-1].split()
        assert 1 <= int(generated) <= 5 and same == "True", (what, done.stdout)
    assert "prompt_lookup_num_tokens=2" in snippets["prompt lookup"]["snippet"]
    assert "assistant_model=assistant" in snippets["assistant"]["snippet"]
    assert str(allowed_models / "assistant-same") in snippets["assistant"]["snippet"]
    assert snippets["plain"]["generate_kwargs"] == {} and snippets["plain"]["strategy"] == "plain"


def test_a_bundled_model_is_its_converted_folder_and_a_hub_id_stays_one():
    deploy = registry.SETTINGS["transformers"].deploy
    folder = str(bundled.converted_dir(bundled.lookup("bundled:gemma-3-270m")))
    text = deploy(ArmSpec("auto", "bundled:smollm2-135m-instruct"), "bundled:gemma-3-270m", None,
                  request={**REQUEST, "max_new_tokens": 64})["snippet"]
    assert all("bundled:" not in line for line in text.splitlines() if not line.startswith("#"))
    assert f"AutoModelForCausalLM.from_pretrained({folder!r})" in text
    assert "max_new_tokens=64)" in text and f"prompt = {PROMPT!r}" in text
    compile(text, "snippet", "exec")  # it is Python as it stands
    hub = deploy(None, "org/model@abc123", None, request={**REQUEST, "chat_template": False})["snippet"]
    assert "from_pretrained('org/model', revision='abc123')" in hub
    assert "apply_chat_template" not in hub and 'inputs = tokenizer(prompt, return_tensors="pt")' in hub
    # vLLM: the server's model is where it is too, and the searched request follows as a comment.
    vllm = registry.SETTINGS["vllm"].deploy(VllmArm("ngram", 4), "bundled:gemma-3-270m", None,
                                            request={**REQUEST, "max_new_tokens": 64})
    assert shlex.split(vllm["command"])[:3] == ["vllm", "serve", folder]
    comment = vllm["snippet"].splitlines()[-1]
    assert comment.startswith("# curl ") and '"max_tokens": 64' in comment and "quick brown fox" in comment
    assert shlex.split(registry.SETTINGS["vllm"].deploy(None, "org/model@abc123")["command"]) == [
        "vllm", "serve", "org/model", "--revision", "abc123"]
