"""Requests are validated at birth, and references resolve only inside what the operator allowed."""

import os

import pytest

from assistlab.config import LIMITS, BenchRequest
from assistlab.engines import catalog
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import AssistLabError, InputError


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("max_new_tokens", 0, "max_new_tokens must be between 1"),
        ("max_new_tokens", -5, "max_new_tokens must be between 1"),
        ("max_new_tokens", LIMITS["max_new_tokens"] + 1, "max_new_tokens must be between"),
        ("max_new_tokens", "many", "max_new_tokens must be a whole number"),
        ("max_new_tokens", 2.5, "max_new_tokens must be a whole number"),
        ("max_new_tokens", float("nan"), "max_new_tokens must be a whole number"),
        ("repeats", 0, "repeats must be between 1"),
        ("repeats", 10**9, "repeats must be between"),
        ("warmup", -1, "warmup must be between 0"),
        ("prompt", "   ", "prompt is empty"),
        ("prompt", ["a", "b"], "batch inputs are not supported"),
        ("prompt", "x" * (LIMITS["prompt_chars"] + 1), "Shorten it"),
        ("target", "", "Choose a target model"),
        ("device", "tpu", "device must be one of"),
        ("dtype", "int3", "dtype must be one of"),
    ],
)
def test_bad_settings_name_the_field(field, value, words):
    with pytest.raises(InputError, match=words):
        BenchRequest(**{"target": "t", field: value})


def test_numbers_from_text_fields_are_accepted():
    r = BenchRequest(target="t", max_new_tokens="32", repeats=3.0, warmup="0")
    assert (r.max_new_tokens, r.repeats, r.warmup) == (32, 3, 0)


def test_resolved_fills_device_defaults_only_where_unset():
    r = BenchRequest(target="t", repeats=7)
    cpu, cuda = r.resolved("cpu"), r.resolved("cuda")
    assert (cpu.max_new_tokens, cpu.repeats, cpu.warmup) == (32, 7, 1)  # short on a CPU: a first answer soon
    assert cuda.max_new_tokens == 256


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"strategy": "universal"}, "needs an assistant"),
        ({"strategy": "early-exit"}, "early_exit_layer is required"),
        ({"strategy": "prompt-lookup", "prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens must be between 1"),
        ({"strategy": "auto", "assistant": "a", "num_assistant_tokens": 0}, "num_assistant_tokens must be between 1"),
        ({"strategy": "auto", "assistant": "a", "num_assistant_tokens_schedule": "fast"}, "schedule must be one of"),
        ({"strategy": "auto", "assistant": "a", "assistant_confidence_threshold": 1.5}, "must be in"),
        ({"strategy": "medusa"}, "strategy must be one of"),
    ],
)
def test_bad_arms(kwargs, words):
    with pytest.raises(InputError, match=words):
        ArmSpec(**kwargs)


def test_too_many_arms():
    with pytest.raises(InputError, match="At most"):
        BenchRequest(target="t", arms=(ArmSpec("prompt-lookup"),) * (LIMITS["arms"] + 1))


def test_requests_are_frozen_and_hashable():
    r = BenchRequest(target="t", arms=(ArmSpec("prompt-lookup"),))
    with pytest.raises(AttributeError):
        r.target = "other"  # type: ignore[misc]
    assert hash(r) == hash(BenchRequest(target="t", arms=(ArmSpec("prompt-lookup"),)))


@pytest.mark.parametrize(
    "text, kind, location",
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", "hub", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("google/gemma-3-27b-it@main", "hub", "google/gemma-3-27b-it"),
        ("gpt2", "hub", "gpt2"),
        ("bundled:gemma-3-270m", "bundled", "bundled:gemma-3-270m"),
    ],
)
def test_resolve_hub_and_bundled(text, kind, location, monkeypatch):
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    ref = catalog.resolve(text)
    assert (ref.kind, ref.location) == (kind, location)


def test_revision_is_kept():
    assert catalog.resolve("org/name@v1.0").revision == "v1.0"


@pytest.mark.parametrize("text", ["org/na me", "a/b/c", "org/name@", "bundled:nope", "", "x" * 600, "org/-bad--id"])
def test_malformed_references(text, monkeypatch):
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    with pytest.raises(AssistLabError):
        catalog.resolve(text)


def test_local_folders_disabled_without_models_dir(monkeypatch):
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    with pytest.raises(InputError, match="ASSISTLAB_MODELS_DIR"):
        catalog.resolve("/tmp")


def test_local_folder_inside_models_dir(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path))
    assert catalog.resolve("m").location == str((tmp_path / "m").resolve())
    assert catalog.resolve(str(tmp_path / "m")).kind == "local"


@pytest.mark.parametrize("text", ["/etc", "../..", "../../etc", "m/../../", "~/"])
def test_paths_outside_models_dir_are_refused(text, tmp_path, monkeypatch):
    (tmp_path / "models" / "m").mkdir(parents=True)
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path / "models"))
    with pytest.raises(InputError, match="outside the allowed models folder"):
        catalog.resolve(text)


def test_symlink_pointing_out_is_refused(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", tmp_path / "models" / "link")
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path / "models"))
    with pytest.raises(InputError, match="outside the allowed models folder"):
        catalog.resolve("link")


def test_presets_start_with_the_bundled_pair():
    first = catalog.PRESETS[0]
    assert (first.target, first.assistant) == (catalog.BUNDLED_TARGET, catalog.BUNDLED_ASSISTANT)
    assert any(p.target == "google/gemma-3-27b-it" and p.assistant == "Qwen/Qwen2.5-0.5B-Instruct" for p in catalog.PRESETS)


def test_assisted_arms_as_the_app_and_cli_build_them():
    from assistlab.engines.transformers.arms import assisted_arms

    arms = assisted_arms("universal", ["a", "b"], num_assistant_tokens=3, prompt_lookup_num_tokens=4)
    assert [(a.strategy, a.assistant) for a in arms] == [("universal", "a"), ("universal", "b"), ("prompt-lookup", None)]
    assert arms[1].num_assistant_tokens == 3 and arms[2].prompt_lookup_num_tokens == 4
    arms = assisted_arms("early-exit", ["a"], early_exit_layer=2, also_prompt_lookup=False)
    assert [(a.strategy, a.assistant, a.early_exit_layer) for a in arms] == [("early-exit", None, 2), ("auto", "a", None)]
    assert [a.strategy for a in assisted_arms("prompt-lookup", [])] == ["prompt-lookup"]
    with pytest.raises(InputError, match="needs an assistant"):
        assisted_arms("assistant", ["  "])
