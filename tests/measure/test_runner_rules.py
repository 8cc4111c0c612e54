"""How runs are decided: transformers' drafting defaults, settings with sources, rotated order, precision
stopping and a stop that ends generate() between steps. Fake latencies and a fake clock where possible."""

import itertools
import threading

import numpy as np
import pytest
import torch
from transformers import GenerationConfig

from assistlab import cli as cli_mod
from assistlab.config import CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S, CPU_DEFAULTS, LIMITS, MIN_PRECISION_REPEATS, PROMPT_LOOKUP_DEFAULT, BenchRequest
from assistlab.engines.transformers import hooks, paths
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError
from assistlab.measure import runner, sweep
from assistlab.engines.transformers import prompt as tprompt
from assistlab.engines.transformers import timing
from assistlab.results import explain, sequential, stats
from patience import patient

PROMPT = "write me a long essay on deep learning"
KNOBS = (*paths.DRAFTER_KNOBS, *paths.LOOKBEHIND_KNOBS)


# --- transformers' defaults, read at run time ---------------------------------------------------------------

def test_defaults_are_transformers_own():
    params = GenerationConfig._get_default_generation_params()
    defaults = paths.transformers_defaults()
    assert {k: defaults[k] for k in KNOBS} == {k: params[k] for k in KNOBS}
    settings = paths.drafting_settings(ArmSpec("assistant", "a"), "assistant")
    for knob in paths.DRAFTER_KNOBS:
        assert settings[knob] == params[knob]
        assert settings["source"][knob] == paths.TRANSFORMERS_DEFAULT
    # The figures the issue names for transformers 5.23; a change in transformers fails here, loudly.
    assert (params["num_assistant_tokens"], params["num_assistant_tokens_schedule"],
            params["assistant_confidence_threshold"]) == (20, "constant", 0.4)


def test_defaults_are_read_not_copied(monkeypatch):
    real = GenerationConfig._get_default_generation_params()
    monkeypatch.setattr(GenerationConfig, "_get_default_generation_params",
                        staticmethod(lambda: {**real, "num_assistant_tokens": 13, "assistant_confidence_threshold": 0.25}))
    settings = paths.drafting_settings(ArmSpec("universal", "a"), "universal")
    assert settings["num_assistant_tokens"] == 13 and settings["assistant_confidence_threshold"] == 0.25


def test_settings_say_where_each_value_came_from():
    spec = ArmSpec("universal", "a", num_assistant_tokens=7, assistant_confidence_threshold=0.0)
    settings = paths.drafting_settings(spec, "universal", {"assistant_lookbehind": 3})
    assert settings["num_assistant_tokens"] == 7 and settings["assistant_confidence_threshold"] == 0.0
    assert settings["assistant_lookbehind"] == 3
    assert settings["source"] == {
        "num_assistant_tokens": paths.SET_BY_YOU,
        "num_assistant_tokens_schedule": paths.TRANSFORMERS_DEFAULT,
        "assistant_confidence_threshold": paths.SET_BY_YOU,
        "assistant_lookbehind": paths.CHECKPOINT,
        "target_lookbehind": paths.TRANSFORMERS_DEFAULT,
    }
    assert settings["threshold_adaptation"] is False
    # lookbehinds change only universal drafting; prompt lookup has its own knobs and AssistLab's default k
    assert "assistant_lookbehind" not in paths.drafting_settings(ArmSpec("assistant", "a"), "assistant")
    lookup = paths.drafting_settings(ArmSpec("prompt-lookup"), "prompt-lookup")
    assert lookup["prompt_lookup_num_tokens"] == PROMPT_LOOKUP_DEFAULT
    assert lookup["source"]["prompt_lookup_num_tokens"] == paths.ASSISTLAB_DEFAULT
    assert lookup["max_matching_ngram_size"] == 2 and "num_assistant_tokens" not in lookup
    assert paths.drafting_settings(ArmSpec("prompt-lookup"), "plain") == {}


def test_checkpoint_values_come_from_the_models_own_generation_config(tmp_path):
    class Loaded:
        folder = str(tmp_path)

    assert paths.checkpoint_values(Loaded()) == {}  # no generation_config.json
    (tmp_path / "generation_config.json").write_text('{"num_assistant_tokens": 9, "top_k": 3}')
    assert paths.checkpoint_values(Loaded()) == {"num_assistant_tokens": 9}


def test_threshold_adaptation_follows_transformers_rule(monkeypatch):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_sklearn_available", lambda: True)
    assert paths.threshold_adaptation_active("assistant", 0.4) is True
    assert paths.threshold_adaptation_active("assistant", 0.0) is False
    assert paths.threshold_adaptation_active("universal", 0.4) is False  # not for different tokenizers
    assert paths.threshold_adaptation_active("early-exit", 0.4) is False
    assert paths.drafting_settings(ArmSpec("assistant", "a"), "assistant")["threshold_adaptation"] is True
    monkeypatch.setattr(transformers.utils, "is_sklearn_available", lambda: False)
    assert paths.threshold_adaptation_active("assistant", 0.4) is False


def test_the_default_arm_is_labelled_as_transformers_defaults():
    assert ArmSpec("universal", "bundled:smollm2-135m-instruct").label == (
        "universal: smollm2-135m-instruct (transformers defaults)"
    )
    assert ArmSpec("assistant", "x", num_assistant_tokens=5).label == "assistant: x (k=5)"
    assert ArmSpec("assistant", "x", assistant_confidence_threshold=0).label == "assistant: x (threshold 0)"
    assert ArmSpec("prompt-lookup").label == f"prompt-lookup (k={PROMPT_LOOKUP_DEFAULT})"
    assert ArmSpec("auto", "x").num_assistant_tokens is None and ArmSpec("auto", "x").uses_transformers_defaults


def test_sweep_of_a_default_arm_starts_its_schedule_from_transformers_default():
    request = BenchRequest(target="t", arms=(ArmSpec("assistant", "a"),))
    arms = sweep.sweep_arms(request, values=(1, 2), schedules=("heuristic",))
    start = GenerationConfig._get_default_generation_params()["num_assistant_tokens"]
    assert [(a.num_assistant_tokens, a.num_assistant_tokens_schedule) for a in arms] == [
        (1, "constant"), (2, "constant"), (start, "heuristic")
    ]
    assert all(a.assistant_confidence_threshold is None for a in arms)  # still transformers' threshold


# --- the request: precision and time budget --------------------------------------------------------------------

@pytest.mark.parametrize(
    "field, value, words",
    [
        ("precision", 0, "precision is a relative half-width"),
        ("precision", 1.5, "precision is a relative half-width"),
        ("precision", "tight", "precision must be a number"),
        ("precision", float("nan"), "precision must be a finite number"),
        ("max_time_s", 0, "max_time_s must be more than 0"),
        ("max_time_s", LIMITS["max_time_s"] + 1, "max_time_s must be more than 0 and at most"),
        ("max_time_s", True, "max_time_s must be a number"),
    ],
)
def test_bad_stopping_settings_name_the_field(field, value, words):
    with pytest.raises(InputError, match=words):
        BenchRequest(target="t", **{field: value})


def test_precision_makes_repeats_a_maximum():
    r = BenchRequest(target="t", precision="0.05").resolved("cpu")
    assert (r.precision, r.repeats, r.stopping_rule) == (0.05, LIMITS["repeats"], "precision")
    assert r.max_time_s is not None and r.max_time_s > 0
    assert BenchRequest(target="t", precision=0.05, repeats=12, max_time_s=30).resolved("cpu").repeats == 12
    fixed = BenchRequest(target="t", repeats=5).resolved("cpu")
    assert fixed.stopping_rule == "fixed" and fixed.max_time_s is None and fixed.repeats == 5
    # No count given: stop when the answer is clear, within its budgets; the resolved request keeps the rule.
    clear = BenchRequest(target="t").resolved("cpu")
    assert (clear.stopping_rule, clear.stop_rule, clear.repeats, clear.max_time_s) == (
        "clear", "clear", CLEAR_MAX_REPEATS, CLEAR_MAX_TIME_S)
    assert BenchRequest(target="t", stop_rule="fixed").resolved("cpu").repeats == CPU_DEFAULTS["repeats"]


# --- pure rules: rotation and precision ---------------------------------------------------------------------

def test_rotation_puts_every_arm_in_every_position():
    for n in (1, 2, 3, 5):
        rounds = [runner.rotation(n, r) for r in range(n)]
        assert all(sorted(order) == list(range(n)) for order in rounds)
        for position in range(n):
            assert sorted(order[position] for order in rounds) == list(range(n))
    assert runner.rotation(3, 4) == [1, 2, 0]


def test_precision_reached_only_with_a_stated_level_inside_the_target():
    inside = {"median": 2.0, "ci_low": 1.92, "ci_high": 2.08, "level": 0.94, "n": 5}
    assert runner.precision_reached([inside], 0.05)
    assert not runner.precision_reached([inside], 0.03)
    assert not runner.precision_reached([{**inside, "ci_high": 2.2}], 0.05)
    assert not runner.precision_reached([{**inside, "level": None}], 0.05)  # a bare range of runs
    assert not runner.precision_reached([{**inside, "level": 0.875, "interval": "range"}], 0.05)
    assert runner.precision_reached([{**inside, "interval": "order-statistic"}], 0.05)
    assert not runner.precision_reached([{k: v for k, v in inside.items() if k != "level"}], 0.05)
    assert not runner.precision_reached([inside, {"median": None, "ci_low": None, "ci_high": None}], 0.05)
    assert not runner.precision_reached([], 0.05)


# --- the loop, with fake latencies and a fake clock ---------------------------------------------------------------

class FakeTime:
    """A clock that advances only when a fake run takes its latency; plain takes 1 s, assisted about 0.5 s."""

    def __init__(self, noise: float, seed: int = 0):
        self.now = 0.0
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.calls: list[dict] = []
        self.assisted_cycle = None  # set to an iterator of assisted latencies to replace the noisy 0.5 s

    def clock(self) -> float:
        return self.now

    def timed_generate(self, target, inputs, kwargs, clock, assisted, *args, **more):
        assistant = kwargs.get("assistant_model")
        config = assistant.generation_config if assistant is not None else None
        self.calls.append({
            "assisted": assisted,
            "stop": kwargs.get("stopping_criteria"),
            "draft": None if config is None else tuple(getattr(config, k) for k in paths.DRAFTER_KNOBS),
        })
        if config is not None:  # leave the shared model dirty, as a previous run or another arm might
            config.num_assistant_tokens, config.assistant_confidence_threshold = 3, 0.9
            config.num_assistant_tokens_schedule = "heuristic"
        if assisted and self.assisted_cycle is not None:
            latency = next(self.assisted_cycle)
        else:
            latency = (0.5 if assisted else 1.0) * (1.0 + self.noise * float(self.rng.standard_normal()))
        self.now += latency
        n = kwargs["max_new_tokens"]
        output = torch.cat([inputs["input_ids"], torch.zeros((1, n), dtype=torch.long)], dim=1)
        streamer = timing.StepStreamer(clock, 0.0)
        streamer.times, streamer.tokens = [latency], [n]
        return timing.Timed(latency=latency, streamer=streamer, drafted=[], accepted=[], output=output,
                            memory=0, wall_window=(0.0, 0.0))


@pytest.fixture
def fake(monkeypatch, allowed_models):
    """Fake timed runs, a probe that only records its arguments, and speedups that state a level."""
    real_speedup = stats.speedup

    def speedup(*args, **kwargs):
        s = real_speedup(*args, **kwargs)
        return {**s, "level": s.get("level") or 0.95}

    ft = FakeTime(noise=0.002)
    probes = []

    def probe(target, inputs, kwargs, configure=lambda: None, clock=None):
        configure()
        probes.append(kwargs)
        return {"error": "not probed in this test"}

    monkeypatch.setattr(timing, "timed_generate", ft.timed_generate)
    monkeypatch.setattr(timing, "probe_arm", probe)
    monkeypatch.setattr(stats, "speedup", speedup)
    ft.probes = probes
    return ft


def run(store, fake, arms=(ArmSpec("prompt-lookup"),), **kwargs):
    request = BenchRequest(target="target", arms=tuple(arms), prompt=PROMPT, max_new_tokens=4,
                           warmup=kwargs.pop("warmup", 1), **kwargs)
    events = list(runner.run_benchmark(request, store, clock=fake.clock))
    return events, events[-1].report.to_dict()


def test_precision_target_stops_once_every_interval_is_tight(store, fake):
    events, data = run(store, fake, precision=0.05, max_time_s=1000)
    stop = data["stopping"]
    assert stop["rule"] == "precision" and stop["reached"] is True and stop["ended_by"] == "precision"
    # The time-uniform interval (honest under a look after every repetition) is bounded from 6 repetitions on
    # at 95% for one arm; the fixed-n interval this rule used before allowed 5, and was not honest when peeked at.
    assert stop["repetitions"] == sequential.fewest_for_verdict(0.05) == 6 == data["counted_repetitions"]
    assert stop["level"] == 0.95 and [len(a["looks"]) for a in stop["arms"].values()] == [6]
    assert stop["target"] == 0.05 and stop["max_repetitions"] == LIMITS["repeats"]
    assert stop["elapsed_s"] == pytest.approx(sum(data["arms"][0]["latencies_s"] + data["arms"][1]["latencies_s"]))
    assert data["status"] == "complete" and "±5%" in data["message"]
    runs = [e for e in events if e.kind == "run"]
    assert runs[0].total == (1 + LIMITS["repeats"]) * 2  # progress against the most that may run
    assert "repetition 1/at most 50" in runs[2].message


def test_precision_not_reached_ends_at_the_time_budget(store, fake):
    # Repetitions of 1.4 s and 1.6 s in turn (speedups 2.5 and 1.67, never within ±1%): after 6 (9.0 s) the
    # mean predicts 10.5 s, so a 7th starts; after 7 (10.4 s) it predicts 11.9 s, past 11 s, so no 8th.
    fake.noise = 0.0
    fake.assisted_cycle = itertools.cycle([0.4, 0.6])
    _, data = run(store, fake, precision=0.01, max_time_s=11, warmup=0)
    stop = data["stopping"]
    assert (stop["reached"], stop["ended_by"], stop["repetitions"]) == (False, "time budget", 7)
    assert stop["elapsed_s"] == pytest.approx(10.4) and stop["elapsed_s"] <= 11
    assert data["status"] == "complete" and "time budget" in data["message"]


def test_precision_not_reached_ends_at_the_most_repetitions(store, fake):
    fake.noise = 0.2
    _, data = run(store, fake, precision=0.0001, repeats=6, max_time_s=1000)
    stop = data["stopping"]
    assert (stop["reached"], stop["ended_by"], stop["repetitions"]) == (False, "repetitions", 6)
    assert data["planned_repetitions"] == 6


def test_fixed_count_runs_exactly_that_many(store, fake):
    _, data = run(store, fake, repeats=3)
    stop = data["stopping"]
    assert (stop["rule"], stop["reached"], stop["repetitions"], stop["ended_by"]) == ("fixed", True, 3, "repetitions")
    assert data["orders"] == [[0, 1], [1, 0], [0, 1]] and data["warmup_orders"] == [[0, 1]]


def test_a_round_is_done_on_its_last_run_only(store, fake):
    """The page redraws on `round_done` events: one per warm-up round and per repetition, after every arm ran."""
    events, data = run(store, fake, arms=(ArmSpec("prompt-lookup"), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3)),
                       repeats=3)
    runs = [e for e in events if e.kind == "run"]
    assert [e.round_done for e in runs] == [False, False, True] * 4
    assert [e.warmup for e in runs if e.round_done] == [True, False, False, False]
    # Besides, one status event redraws the final answer once the repetitions end, before the drafting-cost runs.
    answer = [e for e in events if e.round_done and e.kind != "run"]
    assert [(e.kind, e.step) for e in answer] == [("status", "The answer")]
    assert events.index(answer[0]) < next(i for i, e in enumerate(events) if "drafting cost" in e.step)


def test_drafting_settings_are_reset_before_every_run(store, fake):
    events, data = run(store, fake, arms=(ArmSpec("assistant", "assistant-same"),), repeats=3, warmup=2)
    defaults = paths.transformers_defaults()
    expected = tuple(defaults[k] for k in paths.DRAFTER_KNOBS)
    drafted = [c["draft"] for c in fake.calls if c["assisted"]]
    assert len(drafted) == 5  # 2 warm-ups + 3 repetitions, each after the previous one dirtied the config
    assert drafted == [expected] * 5
    arm = data["arms"][1]
    assert arm["name"] == "assistant: assistant-same (transformers defaults)"
    assert {k: arm["settings"][k] for k in paths.DRAFTER_KNOBS} == dict(zip(paths.DRAFTER_KNOBS, expected))
    assert set(arm["settings"]["source"].values()) == {paths.TRANSFORMERS_DEFAULT}
    assert data["arms"][0]["settings"] == {}
    # the probe configures too, and can be stopped like every other run
    assert len(fake.probes) == 1 and fake.probes[0]["stopping_criteria"] is not None
    changes = data["environment"]["changes_from_transformers"]
    assert all(set(c) == {"what", "why"} and c["what"] and c["why"] for c in changes)
    assert any("eos_token_id=-1" in c["what"] for c in changes)
    assert any("cache_implementation" in c["what"] for c in changes)


def test_a_stop_during_warm_up_counts_no_time(store, fake):
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt=PROMPT, max_new_tokens=4,
                           warmup=1, precision=0.05)
    events = list(runner.run_benchmark(request, store, clock=fake.clock, should_stop=lambda: len(fake.calls) >= 1))
    data = events[-1].report.to_dict()
    assert data["status"] == "stopped" and len(fake.calls) == 1 and fake.now > 0
    assert (data["stopping"]["repetitions"], data["stopping"]["elapsed_s"]) == (0, 0.0)
    assert data["warmup_orders"] == [[0, 1]] and data["orders"] == []


def test_every_generate_call_gets_a_stopping_criterion(store, fake):
    run(store, fake, repeats=2)
    criteria = [c["stop"] for c in fake.calls]
    assert len(criteria) == 6
    assert all(len(c) == 1 and isinstance(c[0], timing.StopOnFlag) for c in criteria)
    assert len({id(c[0]) for c in criteria}) == 6  # a fresh one per run, so a cut run is known as cut


# --- a real stop from another thread, mid-run ---------------------------------------------------------------------

def test_a_stop_from_another_thread_ends_generate_within_a_step(allowed_models, store):
    """A 300-token prompt-lookup run is stopped from another thread ten clock readings in: generate() returns at
    the next step, the cut run is discarded, and the report ends 'stopped' with the run before it."""
    stop, go = threading.Event(), threading.Event()
    state = {"armed": False, "reads": 0, "after_stop": 0}

    def clock():
        import time

        if state["armed"]:
            state["reads"] += 1
            if stop.is_set():
                state["after_stop"] += 1
            elif state["reads"] == 10:
                go.set()
                assert stop.wait(patient(30)), "the stopping thread never ran"
        return time.perf_counter()

    def stopper():
        go.wait(patient(120))
        stop.set()

    thread = threading.Thread(target=stopper, daemon=True)
    thread.start()
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2),),
                           prompt=PROMPT, max_new_tokens=300, repeats=3, warmup=0)
    events = []
    for event in runner.run_benchmark(request, store, clock=clock, should_stop=stop.is_set):
        events.append(event)
        if event.kind == "run" and event.round_done:
            # Repetition 0 is whole; repetition 1 starts with prompt lookup (the order rotates): the run to stop.
            state["armed"] = True
    thread.join(patient(5))
    final = events[-1].report.to_dict()
    assert final["status"] == "stopped" and final["stopping"]["ended_by"] == "stopped"
    # The cut prompt-lookup run is not counted, and a stopped report keeps whole repetitions only (issue 20).
    assert [len(a["latencies_s"]) for a in final["arms"]] == [1, 1]
    assert final["arms"][0]["new_tokens"] == [300]
    # after the stop, at most a step's readings and the end of the call: not the ~290 steps left
    assert 1 <= state["after_stop"] <= 4


# --- the command line -------------------------------------------------------------------------------------------

def test_cli_defaults_leave_drafting_to_transformers():
    args = cli_mod.build_parser().parse_args(["bench"])
    request = cli_mod.request_from_args(args)
    model_arm, lookup = request.arms
    assert model_arm.uses_transformers_defaults and model_arm.label.endswith("(transformers defaults)")
    assert lookup.prompt_lookup_num_tokens is None and lookup.lookup_tokens == PROMPT_LOOKUP_DEFAULT
    assert (request.precision, request.max_time_s, request.repeats) == (None, None, None)


def test_cli_precision_and_budget_flags():
    args = cli_mod.build_parser().parse_args(
        ["bench", "--precision", "0.05", "--max-time", "300", "--repeats", "20", "--num-assistant-tokens", "6"]
    )
    request = cli_mod.request_from_args(args)
    assert (request.precision, request.max_time_s, request.repeats) == (0.05, 300.0, 20)
    assert request.arms[0].num_assistant_tokens == 6 and request.arms[0].label.endswith("(k=6)")
    with pytest.raises(InputError, match="precision is a relative half-width"):
        cli_mod.request_from_args(cli_mod.build_parser().parse_args(["bench", "--precision", "5"]))


def test_cli_help_shows_transformers_defaults(capsys):
    with pytest.raises(SystemExit):
        cli_mod.build_parser().parse_args(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    params = GenerationConfig._get_default_generation_params()
    assert f"transformers' default, {params['num_assistant_tokens']}" in text
    assert f"transformers' default, {params['assistant_confidence_threshold']}" in text
    assert "<transformers:" not in text
    # the help says the defaults the run uses: no count means stop when the answer is clear
    assert f"default: stop when the answer is clear, at most {CLEAR_MAX_REPEATS} repetitions" in text


def test_cli_sentences_for_stopping_and_settings():
    stopping = {"rule": "precision", "target": 0.05, "max_time_s": 300.0, "max_repetitions": 50,
                "reached": False, "repetitions": 9, "elapsed_s": 301.2, "ended_by": "time budget"}
    assert cli_mod.stopping_sentence(stopping) == (
        "until every speedup was known to ±5% (not reached, the time budget ran out); 9 in 301.2 s of a 300 s budget."
    )
    settings = paths.drafting_settings(ArmSpec("assistant", "a", num_assistant_tokens=4), "assistant")
    phrase = cli_mod.settings_phrase(settings)
    assert phrase.startswith("num_assistant_tokens 4 (set by you), num_assistant_tokens_schedule constant "
                             "(transformers default)")


# --- the default arm is bare generate() ---------------------------------------------------------------------------

class _Steps(timing.StepStreamer):
    """Tokens per step of a bare generate() call (the prompt is skipped as in the runner)."""

    def __init__(self):
        super().__init__(lambda: 0.0, 0.0)


@pytest.mark.parametrize("assistant, strategy", [("assistant-same", "assistant"), ("assistant-other", "universal")])
def test_the_default_arm_drafts_exactly_as_bare_generate(allowed_models, store, assistant, strategy):
    """Freshly loaded models and generate(assistant_model=...) with no drafting arguments, against AssistLab's
    default arm run after the shared models were left dirty: the same tokens in the same verification steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokens = 16
    request = BenchRequest(target="target", arms=(ArmSpec("auto", assistant),), prompt=PROMPT, max_new_tokens=tokens,
                           repeats=1, warmup=0)
    cpu = torch.device("cpu")
    _, cached = store.get(assistant, cpu, torch.float32)
    cached.model.generation_config.num_assistant_tokens = 3  # what an earlier run might have left behind
    cached.model.generation_config.assistant_confidence_threshold = 0.0
    data = runner.run_to_report(request, store).to_dict()
    arm = data["arms"][1]
    assert arm["strategy"] == strategy and arm["name"].endswith("(transformers defaults)")

    target = AutoModelForCausalLM.from_pretrained(allowed_models / "target").eval()
    helper = AutoModelForCausalLM.from_pretrained(allowed_models / assistant).eval()
    _, loaded_target = store.get("target", cpu, torch.float32)
    inputs = tprompt.encode_prompt(request.resolved("cpu"), loaded_target)
    extra = {}
    if strategy == "universal":
        extra = dict(tokenizer=AutoTokenizer.from_pretrained(allowed_models / "target"),
                     assistant_tokenizer=AutoTokenizer.from_pretrained(allowed_models / assistant))
    steps = _Steps()
    with hooks.instrumented(target) as (proxy, trace), torch.inference_mode():
        out = proxy.generate(**inputs, assistant_model=helper, max_new_tokens=tokens, eos_token_id=-1,
                             do_sample=False, streamer=steps, **extra)
    drafted, accepted = trace.drafted, trace.accepted
    assert arm["token_ids"] == out[0, inputs["input_ids"].shape[1]:].tolist()
    trace = arm["trace"][0]
    assert (trace["tokens"], trace["drafted"], trace["accepted"]) == (steps.tokens, drafted, accepted)
    # and the check can tell: with transformers' threshold off, this pair drafts differently
    off = BenchRequest(target="target", arms=(ArmSpec("auto", assistant, assistant_confidence_threshold=0.0),),
                       prompt=PROMPT, max_new_tokens=tokens, repeats=1, warmup=0)
    assert runner.run_to_report(off, store).to_dict()["arms"][1]["trace"][0]["drafted"] != drafted
