"""The engine on tiny random models: equal work, identical greedy outputs, consistent counts, exact clocks."""

import itertools

import pytest
import torch
from transformers import GenerationConfig

from assistlab.config import BenchRequest
from assistlab.engines.transformers import models, paths
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.errors import InputError, ModelLoadError
from assistlab.measure import runner
from assistlab.engines.transformers import prompt as tprompt

PROMPT = "write me a long essay on deep learning"
TOKENS = 16


def bench(store, arms, **kwargs):
    request = BenchRequest(
        target="target", arms=tuple(arms), prompt=PROMPT, max_new_tokens=TOKENS,
        repeats=kwargs.pop("repeats", 2), warmup=kwargs.pop("warmup", 1), **kwargs,
    )
    return runner.run_to_report(request, store)


ALL_STRATEGIES = [
    ArmSpec("assistant", "assistant-same"),
    ArmSpec("universal", "assistant-other"),
    ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3),
    ArmSpec("early-exit", early_exit_layer=2),
    # k=5 with the confidence threshold off, so every draft is full length (see the acceptance test below)
    ArmSpec("auto", "target-copy", num_assistant_tokens=5, assistant_confidence_threshold=0.0),
]


@pytest.fixture(scope="module")
def full_report(models_dir, store):
    mp = pytest.MonkeyPatch()
    mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    try:
        yield bench(store, ALL_STRATEGIES).to_dict()
    finally:
        mp.undo()


def test_every_arm_does_equal_work(full_report):
    assert full_report["status"] == "complete"
    assert [a["strategy"] for a in full_report["arms"]] == [
        "plain", "assistant", "universal", "prompt-lookup", "early-exit", "assistant"
    ]
    for arm in full_report["arms"]:
        assert arm["error"] is None
        assert arm["new_tokens"] == [TOKENS, TOKENS], arm["name"]
        assert len(arm["latencies_s"]) == 2  # warm-up excluded


def test_every_arm_reports_its_drafting_settings(full_report):
    params = GenerationConfig._get_default_generation_params()
    plain, same, universal, lookup, early, copy = full_report["arms"]
    assert plain["settings"] == {}
    assert same["name"] == "assistant: assistant-same (transformers defaults)"
    for arm in (same, universal, early):
        for knob in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
            assert arm["settings"][knob] == params[knob] and arm["settings"]["source"][knob] == "transformers default"
        assert arm["settings"]["threshold_adaptation"] is False  # no scikit-learn here, and never for universal
    assert universal["settings"]["assistant_lookbehind"] == params["assistant_lookbehind"]
    assert "assistant_lookbehind" not in same["settings"]
    assert lookup["settings"]["prompt_lookup_num_tokens"] == 3
    assert lookup["settings"]["source"]["prompt_lookup_num_tokens"] == "set by you"
    assert (copy["settings"]["num_assistant_tokens"], copy["settings"]["assistant_confidence_threshold"]) == (5, 0.0)
    assert copy["settings"]["source"]["num_assistant_tokens"] == "set by you"
    whats = " ".join(c["what"] for c in full_report["environment"]["changes_from_transformers"])
    assert "eos_token_id=-1" in whats and "cache_implementation" in whats and "prompt_lookup_num_tokens" in whats


def test_greedy_assisted_output_equals_plain(full_report):
    plain = full_report["arms"][0]["token_ids"]
    assert len(plain) == TOKENS
    for arm, entry in zip(full_report["arms"][1:], full_report["comparison"]):
        assert arm["token_ids"] == plain, arm["name"]
        assert entry["outputs_identical"] is True
        assert entry["first_difference"] is None


def test_outputs_match_a_direct_generate_call(allowed_models, store, full_report):
    _, target = store.get("target", torch.device("cpu"), torch.float32)
    inputs = tprompt.encode_prompt(BenchRequest(target="target", prompt=PROMPT, max_new_tokens=TOKENS), target)
    with torch.inference_mode():
        out = target.model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False, eos_token_id=-1)
    assert out[0, inputs["input_ids"].shape[1]:].tolist() == full_report["arms"][0]["token_ids"]


def test_draft_counts_agree_with_the_step_trace(full_report):
    for arm in full_report["arms"][1:]:
        for run in arm["trace"]:
            assert len(run["drafted"]) == len(run["tokens"]), arm["name"]
            # each verification step adds the accepted drafts plus one token of the target's own
            assert run["tokens"] == [a + 1 for a in run["accepted"]], arm["name"]
            assert all(0 <= a <= d for d, a in zip(run["drafted"], run["accepted"]))
            assert sum(run["tokens"]) == TOKENS
        assert arm["accepted_tokens"] == [sum(r["accepted"]) for r in arm["trace"]]
        assert arm["drafted_tokens"] == [sum(r["drafted"]) for r in arm["trace"]]


def test_a_copy_of_the_target_is_always_accepted(full_report):
    copy = full_report["comparison"][-1]
    assert copy["acceptance_rate"] == 1.0
    # k=5 drafts + 1 bonus token per forward, with the last step cut short by max_new_tokens
    assert copy["tokens_per_forward"] == pytest.approx(TOKENS / 3)


def test_plain_trace_is_one_token_per_step(full_report):
    plain = full_report["arms"][0]
    for run in plain["trace"]:
        assert run["tokens"] == [1] * TOKENS
        assert run["t_s"] == sorted(run["t_s"])


def test_fake_clock_gives_exact_latencies(allowed_models, store):
    # The clock advances one second per reading: start, one reading per streamed step, end.
    ticks = itertools.count()
    report = runner.run_to_report(
        BenchRequest(target="target", arms=(ArmSpec("auto", "target-copy"),), prompt=PROMPT,
                     max_new_tokens=TOKENS, repeats=2, warmup=1),
        store,
        clock=lambda: float(next(ticks)),
    ).to_dict()
    plain, assisted = report["arms"]
    assert plain["latencies_s"] == [TOKENS + 1.0] * 2
    assert plain["ttft_s"] == [1.0, 1.0]
    assert plain["trace"][0]["t_s"] == [float(i) for i in range(1, TOKENS + 1)]
    steps = len(assisted["trace"][0]["tokens"])
    assert assisted["latencies_s"] == [steps + 1.0] * 2
    assert report["comparison"][0]["speedup"]["median"] == pytest.approx((TOKENS + 1) / (steps + 1))


def test_no_collection_during_a_timed_run_and_no_full_one_before_each(allowed_models, store, monkeypatch):
    # A full collection walks every object of the process (0.33 s with gradio loaded) before each run: only the
    # young generations are collected before a run, and none at all while it is timed.
    import gc

    from assistlab.engines.transformers import timing

    asked, enabled_while_timed = [], []
    real_collect = timing.gc.collect

    def collect(generation=2):
        asked.append(generation)
        return real_collect(generation)

    class Watching(timing.StepStreamer):
        def put(self, value) -> None:
            enabled_while_timed.append(gc.isenabled())
            super().put(value)

    monkeypatch.setattr(timing.gc, "collect", collect)
    monkeypatch.setattr(timing, "StepStreamer", Watching)
    runner.run_to_report(BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt=PROMPT,
                                      max_new_tokens=TOKENS, repeats=2, warmup=1), store)
    assert len(enabled_while_timed) > TOKENS and not any(enabled_while_timed)
    assert len(asked) >= 6 and all(generation < 2 for generation in asked)
    assert gc.isenabled()


def test_runs_are_interleaved_in_rotated_order_and_warmup_comes_first(allowed_models, store):
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt=PROMPT,
                           max_new_tokens=4, repeats=3, warmup=2)
    events = [e for e in runner.run_benchmark(request, store) if e.kind == "run"]
    names = [(e.warmup, e.message.split(":")[0]) for e in events]
    plain, lookup = "plain", "prompt-lookup (k=10)"
    # round r starts at arm r mod 2: warm-ups 0 and 1, then repetitions 0, 1 and 2
    assert names == [(True, plain), (True, lookup), (True, lookup), (True, plain),
                     (False, plain), (False, lookup), (False, lookup), (False, plain), (False, plain), (False, lookup)]
    assert [e.done for e in events] == list(range(1, 11))
    assert all(e.total == 10 for e in events)
    data = events[-1].report.to_dict()
    assert data["orders"] == [[0, 1], [1, 0], [0, 1]]
    assert data["warmup_orders"] == [[0, 1], [1, 0]]
    assert data["arms"][0]["positions"] == [0, 1, 0] and data["arms"][1]["positions"] == [1, 0, 1]
    assert [row.split(",")[-3] for row in events[-1].report.to_csv().splitlines()[1:]] == ["0", "1", "1", "0", "0", "1"]


def test_stop_between_runs_keeps_what_was_measured(allowed_models, store):
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt=PROMPT,
                           max_new_tokens=4, repeats=5, warmup=0)
    runs = []
    final = None
    for event in runner.run_benchmark(request, store, should_stop=lambda: len(runs) >= 3):
        if event.kind == "run":
            runs.append(event)
        final = event
    assert final.kind == "done" and final.report.status == "stopped"
    data = final.report.to_dict()
    # rotated: plain, lookup (repetition 1), then lookup, plain (repetition 2); the stop came before the fourth
    assert len(runs) == 3
    assert data["counted_repetitions"] == 1 and data["planned_repetitions"] == 5
    # the lookup run of the cut repetition 2 is dropped: a stopped report keeps whole repetitions only (issue 20)
    assert [len(a["latencies_s"]) for a in data["arms"]] == [1, 1] and len(data["orders"]) == 1
    assert data["stopping"]["ended_by"] == "stopped" and data["stopping"]["repetitions"] == 1
    assert "Stopped after 1 of 5 repetitions" in data["message"]


@pytest.mark.fast
def test_auto_picks_by_comparing_tokenizers(allowed_models, store):
    cpu = torch.device("cpu")
    _, target = store.get("target", cpu, torch.float32)
    _, same = store.get("assistant-same", cpu, torch.float32)
    _, other = store.get("assistant-other", cpu, torch.float32)
    assert paths.resolve_strategy(ArmSpec("auto", "x"), target, same) == "assistant"
    assert paths.resolve_strategy(ArmSpec("auto", "x"), target, other) == "universal"
    with pytest.raises(InputError, match="different tokenizer"):
        paths.resolve_strategy(ArmSpec("assistant", "x"), target, other)


@pytest.mark.fast
def test_early_exit_beyond_depth_is_refused(allowed_models, store):
    with pytest.raises(InputError, match="only 4 layers"):
        bench(store, [ArmSpec("early-exit", early_exit_layer=4)])


def test_heuristic_schedule_starts_afresh_each_run(allowed_models, store):
    # threshold 0: transformers' default 0.4 would stop a random model's drafts early, hiding the schedule
    spec = ArmSpec("assistant", "target-copy", num_assistant_tokens=2, num_assistant_tokens_schedule="heuristic",
                   assistant_confidence_threshold=0.0)
    report = bench(store, [spec], repeats=2, warmup=1).to_dict()
    traces = report["arms"][1]["trace"]
    # every run begins with the configured 2 drafts, although the heuristic grew it during the previous run
    assert [t["drafted"][0] for t in traces] == [2, 2]
    assert max(traces[0]["drafted"]) > 2
    assert report["arms"][1]["spec"]["num_assistant_tokens_schedule"] == "heuristic"


def test_sampling_runs_with_a_seed(allowed_models, store):
    report = bench(store, [ArmSpec("assistant", "assistant-same")], do_sample=True, seed=3, repeats=2).to_dict()
    assert report["request"]["do_sample"] is True
    assert all(a["new_tokens"] == [TOKENS, TOKENS] for a in report["arms"])


@pytest.mark.fast
def test_chat_template_is_applied_when_present(allowed_models, store):
    _, target = store.get("target", torch.device("cpu"), torch.float32)
    with_template = tprompt.encode_prompt(BenchRequest(target="target", prompt=PROMPT, max_new_tokens=4), target)
    raw = tprompt.encode_prompt(
        BenchRequest(target="target", prompt=PROMPT, max_new_tokens=4, chat_template=False), target
    )
    assert with_template["input_ids"].shape[1] > raw["input_ids"].shape[1]


@pytest.mark.fast
def test_prompt_longer_than_context_is_refused(allowed_models, store):
    with pytest.raises(InputError, match="reads at most 512 tokens"):
        runner.run_to_report(
            BenchRequest(target="target", prompt="deep " * 600, max_new_tokens=8, repeats=1, warmup=0), store
        )


@pytest.mark.fast
def test_multimodal_checkpoint_loads_as_its_text_model(allowed_models, store):
    from transformers import Gemma3ForConditionalGeneration

    _, loaded = store.get("gemma3-mm", torch.device("cpu"), torch.float32)
    assert type(loaded.model).__name__ == "Gemma3ForCausalLM"
    full = Gemma3ForConditionalGeneration.from_pretrained(allowed_models / "gemma3-mm")
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.inference_mode():
        assert torch.allclose(loaded.model(input_ids=ids).logits, full(input_ids=ids).logits, atol=1e-5)


@pytest.mark.fast
def test_model_store_reuses_loaded_models(allowed_models):
    store = models.ModelStore(max_models=2)
    cpu = torch.device("cpu")
    key, first = store.get("assistant-same", cpu, torch.float32)
    assert store.get("assistant-same", cpu, torch.float32)[1] is first
    store.get("assistant-other", cpu, torch.float32)
    store.get("target", cpu, torch.float32, keep={key})
    assert len(store) == 2 and store.get("assistant-same", cpu, torch.float32)[1] is first


def test_choose_dtype_and_device():
    cpu = torch.device("cpu")
    assert models.choose_dtype("auto", cpu) == torch.float32
    assert models.choose_dtype("bfloat16", cpu) == torch.bfloat16
    assert models.choose_device("cpu") == cpu
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA GPU"):
            models.choose_device("cuda")
        assert models.choose_device("auto") == cpu


@pytest.mark.fast
def test_folder_without_weights(allowed_models):
    (allowed_models / "empty").mkdir(exist_ok=True)
    with pytest.raises(ModelLoadError, match="config.json"):
        models.ModelStore().get("empty", torch.device("cpu"), torch.float32)
