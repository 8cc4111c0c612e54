"""Each engine's declared settings (engines/settings.py, transformers/tuning.py, vllm/tuning.py): the search space,
--candidates' syntax and its refusals, the bench options and the deploy line a winner gets."""

import json
import shlex

import pytest

from assistlab.cli.parser import build_parser, request_from_args
from assistlab.engines import registry
from assistlab.engines.search_space import parse_candidates, search_space
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.vllm.arms import VllmArm
from assistlab.errors import EngineError, InputError
from assistlab.measure.tune import candidate_arms

DECLARED = list(registry.SETTINGS.values())
TRANSFORMERS = [registry.SETTINGS["transformers"]]


def test_the_default_space_is_each_searched_family_over_its_declared_values():
    arms = search_space(TRANSFORMERS, ["org/helper"])
    assert arms == [ArmSpec("auto", "org/helper"), ArmSpec("auto", "org/helper", num_assistant_tokens=3),
                    ArmSpec("auto", "org/helper", num_assistant_tokens=8), ArmSpec("prompt-lookup"),
                    ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3),
                    ArmSpec("prompt-lookup", prompt_lookup_num_tokens=5)]
    # Without an assistant the families that need one are left out, not refused.
    assert all(a.strategy == "prompt-lookup" for a in search_space(TRANSFORMERS, []))


def test_candidates_narrow_the_space_across_engines():
    text = "prompt-lookup:prompt_lookup_num_tokens=3,5,10; vllm ngram:num_speculative_tokens=1,2 prompt_lookup_max=5"
    assert parse_candidates(text, DECLARED) == {
        ("transformers", "prompt-lookup"): {"prompt_lookup_num_tokens": (3, 5, 10)},
        ("vllm", "ngram"): {"num_speculative_tokens": (1, 2), "prompt_lookup_max": (5,)}}
    arms = candidate_arms(["transformers", "vllm"], [], text)
    assert [a.label for a in arms] == [
        "prompt-lookup (k=3)", "prompt-lookup (k=5)", "prompt-lookup (k=10)", "vllm plain",
        "vllm ngram (k=1, lookup 2-5)", "vllm ngram (k=2, lookup 2-5)"]
    # 'default' is the engine's own value; a family named alone keeps its declared values.
    assert search_space(TRANSFORMERS, [], "prompt-lookup:prompt_lookup_num_tokens=default,4") == [
        ArmSpec("prompt-lookup"), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=4)]
    assert len(search_space(DECLARED, [], "ngram")) == 4


@pytest.mark.parametrize("text, words", [
    ("prompt-lookup:k=3", "has no setting 'k'"),
    ("sglang ngram:num_speculative_tokens=2", "no engine 'sglang'"),
    ("ngram:num_speculative_tokens=two", "takes a whole number"),
    ("auto:num_assistant_tokens=3", "drafts with an assistant model; give one with assistants"),
    ("prompt-lookup:prompt_lookup_num_tokens", "write each setting as name=values"),
    ("vllm ngram extra:x=1", "each part reads"),
])
def test_a_bad_candidates_text_is_refused_in_one_sentence(text, words):
    from assistlab.cli.tune import OPTIONS

    with pytest.raises(InputError, match=words) as caught:
        search_space(DECLARED, [], text)
    # Raised with the field it concerns; the command line names it by its option, the API by its name.
    assert caught.value.field == "candidates"
    assert str(caught.value).startswith("candidates: ") and "{" not in str(caught.value)
    said = caught.value.worded(OPTIONS)
    assert said.startswith("--candidates: ") and "{" not in said
    assert "give one with --assistant." in said if "assistant model" in words else "--assistant" not in said


def test_families_replace_the_default_families_and_the_candidates_must_be_among_them():
    # The page's ticks: only the families named are searched, each over its declared values.
    assert search_space(DECLARED, ["org/helper"], families=["transformers prompt-lookup"]) == search_space(
        TRANSFORMERS, [], "prompt-lookup")
    # A family the engines do not search by default is searched once ticked; the family alone names it where one
    # engine has it.
    arms = search_space(DECLARED, ["org/draft"], families=["draft_model"])
    assert arms and all(a.method == "draft_model" and a.draft_model == "org/draft" for a in arms)
    # A ticked family that drafts with an assistant is passed over without one, as the default families are.
    assert search_space(TRANSFORMERS, [], families=["transformers auto", "transformers prompt-lookup"]) == \
        search_space(TRANSFORMERS, [])
    with pytest.raises(InputError, match="^families leaves nothing to search: tick at least one family"):
        search_space(TRANSFORMERS, [], families=["transformers auto"])
    with pytest.raises(InputError, match="^families leaves nothing to search") as caught:
        search_space(TRANSFORMERS, ["org/helper"], families=[])
    assert caught.value.field == "families"
    with pytest.raises(InputError, match="names transformers prompt-lookup, which families leaves out") as caught:
        search_space(TRANSFORMERS, ["org/helper"], "prompt-lookup", families=["transformers auto"])
    assert caught.value.worded({"candidates": "--candidates", "families": "--families"}) == (
        "--candidates names transformers prompt-lookup, which --families leaves out; tick it or leave it out of "
        "--candidates.")
    with pytest.raises(InputError, match="'vllm beam': no such family here; the families are transformers auto"):
        search_space(DECLARED, [], families=["vllm beam"])


def test_the_command_line_s_families_narrow_the_tuner_s_search():
    from assistlab.cli.tune import request_from_args as tune_from_args

    args = build_parser().parse_args(["tune", "--target", "org/model", "--assistant", "org/helper",
                                      "--families", "transformers prompt-lookup"])
    assert [a.strategy for a in tune_from_args(args).arms] == ["prompt-lookup"] * 3


def _bench_arms(args: list[str]) -> tuple:
    """The arms `bench` would time with these options."""
    return request_from_args(build_parser().parse_args(["bench", "--target", "org/model", *args])).arms


def test_the_winner_gets_its_bench_options_and_deploy_line():
    vllm = registry.SETTINGS["vllm"]
    arm = VllmArm("ngram", 4, 2, 5)
    assert vllm.bench_args(arm) == ["--engines", "vllm", "--vllm-method", "ngram", "--vllm-speculative-tokens", "4",
                                    "--vllm-lookup-min", "2", "--vllm-lookup-max", "5"]
    assert _bench_arms(vllm.bench_args(arm)) == (VllmArm("plain"), arm)  # bench times exactly that arm
    line = vllm.deploy(arm, "org/model")["command"]
    words = shlex.split(line)
    assert words[:3] == ["vllm", "serve", "org/model"] and words[3] == "--speculative-config"
    assert json.loads(words[4]) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                                    "prompt_lookup_max": 5}
    transformers = registry.SETTINGS["transformers"]
    spec = ArmSpec("auto", "org/helper", num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
    deployed = transformers.deploy(spec, "org/model", {"strategy": "assistant"})
    assert deployed["generate_kwargs"] == {"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant"}
    assert ("target.generate(**inputs, assistant_model=assistant, num_assistant_tokens=3, "
            "num_assistant_tokens_schedule='constant', max_new_tokens=256)") in deployed["snippet"]
    assert transformers.bench_args(spec) == ["--strategy", "auto", "--assistant", "org/helper",
                                             "--num-assistant-tokens", "3", "--schedule", "constant",
                                             "--no-prompt-lookup"]
    assert _bench_arms(transformers.bench_args(spec)) == (spec,)
    lookup = ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3)
    assert _bench_arms(transformers.bench_args(lookup)) == (lookup,)
    # The simplest first: the defaults, then the shortest draft.
    ranked = sorted([ArmSpec("prompt-lookup", prompt_lookup_num_tokens=5), ArmSpec("prompt-lookup"),
                     ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3)], key=transformers.simplicity)
    assert [a.lookup_tokens for a in ranked] == [10, 3, 5]


def test_the_docs_table_is_made_from_the_declarations():
    from pathlib import Path

    from assistlab.engines.search_space import settings_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    assert settings_table(DECLARED) in page, "regenerate docs/tune.md's table with settings_table"


def test_every_declared_flag_is_a_bench_option():
    """A setting's `flag` is the bench option that sets it: a declaration and the parser cannot drift apart."""
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    options = {flag for action in bench._actions for flag in action.option_strings}
    flags = {s.flag for e in DECLARED for f in e.families for s in f.settings}
    assert flags <= options, flags - options


def test_the_engines_names_as_a_person_reads_them():
    assert [registry.SETTINGS[e].possessive for e in ("transformers", "vllm")] == ["transformers'", "vLLM's"]


def test_each_declared_setting_is_a_bench_option_made_from_its_declaration():
    """The command line's options for an engine's settings come from the declaration: every declared flag is in
    `bench --help` under its engine's group, and a value given lands in the arm request's field of that name."""
    from assistlab.cli import parser as cli_parser

    text = build_parser()._subparsers._group_actions[0].choices["bench"].format_help()
    for declared in DECLARED:
        assert f"{declared.title or declared.engine} settings" in text
        for setting in declared.options():
            assert setting.flag in text
            args = build_parser().parse_args(["bench", setting.flag, (setting.choices or ("3",))[0]])
            assert cli_parser._setting_values(args, declared.engine)[setting.name] == (setting.choices or ("3",))[0]
    # A third engine's declaration brings its own option, with no line of the parser written for it.
    from assistlab.engines.settings import EngineSettings, Family, Setting

    knob = Setting("draft_depth", int, (None, 2), None, "how deep it drafts", "--fake-draft-depth", "draft depth")
    fake = EngineSettings("fake", (Family("fake", "tree", "a tree of drafts", (knob,), lambda v, a: None),))
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    cli_parser._add_setting_options(bench, fake)
    assert bench.parse_args(["--fake-draft-depth", "4"]).draft_depth == "4"
    assert "fake settings" in bench.format_help() and "--fake-draft-depth" in bench.format_help()
    # ... and its bench options for an arm, from the same declaration: each set setting as its flag.
    from types import SimpleNamespace

    assert fake.bench_args(SimpleNamespace(strategy="tree", draft_depth=4)) == ["--fake-draft-depth", "4"]
    assert fake.bench_args(SimpleNamespace(strategy="tree", draft_depth=None)) == []


def test_the_arm_options_reach_the_arms_they_set():
    args = build_parser().parse_args(["bench", "--strategy", "prompt-lookup", "--prompt-lookup-num-tokens", "4",
                                      "--engines", "transformers,vllm", "--vllm-method", "ngram",
                                      "--vllm-speculative-tokens", "3", "--vllm-lookup-max", "5"])
    arms = request_from_args(args).arms
    assert any(getattr(a, "prompt_lookup_num_tokens", None) == 4 for a in arms)
    vllm = [a for a in arms if isinstance(a, VllmArm) and a.method == "ngram"]
    assert vllm and vllm[0].num_speculative_tokens == 3 and vllm[0].prompt_lookup_max == 5


def test_a_family_that_cannot_run_here_says_why_and_vllm_s_finder_decides(monkeypatch, fake_vllm_python):
    """vLLM's families cannot run where AssistLab finds no vLLM (its finder, server.find_python): unset, a Python
    without vLLM; found (the fake vLLM Python answers as a real one does), nothing is said."""
    from assistlab.engines.search_space import unavailable_families
    from assistlab.engines.vllm import server

    assert unavailable_families(DECLARED) == {}  # found: every family can run
    def no_vllm(**_):
        raise EngineError(f"{server.PYTHON_VAR}=... has no working vLLM")

    monkeypatch.setattr(server, "find_python", no_vllm)
    absent = unavailable_families(DECLARED)
    assert set(absent) == {"vllm ngram", "vllm draft_model", "vllm mtp", "vllm suffix"}
    assert all(why.startswith("vLLM is not installed on this server") for why in absent.values())
    assert "not found through ASSISTLAB_VLLM_PYTHON" in absent["vllm ngram"]
    monkeypatch.delenv(server.PYTHON_VAR)
    assert "ASSISTLAB_VLLM_PYTHON is not set" in unavailable_families(DECLARED)["vllm ngram"]
    # transformers' families run wherever AssistLab does.
    assert not any(key.startswith("transformers") for key in unavailable_families(DECLARED))


def test_mtp_cannot_run_for_a_target_here_without_mtp_layers(monkeypatch, tmp_path):
    """vLLM's mtp drafts with the target's own MTP layers: a target whose config.json is on this machine and
    declares none is said to lack them; one that declares some, or one not here to read, is not judged."""
    from assistlab.engines.search_space import unavailable_families

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(tmp_path))
    for name, config in (("target", {"model_type": "llama"}), ("with-mtp", {"num_nextn_predict_layers": 1})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    found = {"transformers": None, "vllm": None}
    assert unavailable_families(DECLARED, "target", found) == {"vllm mtp": "target has no MTP layers"}
    assert unavailable_families(DECLARED, "with-mtp", found) == {}
    assert unavailable_families(DECLARED, "org/not-on-this-machine", found) == {}
    # The engine's own reason comes first: without vLLM every vLLM family says that.
    assert set(unavailable_families(DECLARED, "target", {"vllm": "vLLM is not installed"}).values()) == {
        "vLLM is not installed"}
