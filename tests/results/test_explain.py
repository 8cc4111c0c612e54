"""Token origins, the cost model against hand-worked numbers, and the probe on tiny random models."""

import itertools
import math

import pytest
from transformers import AutoTokenizer

from assistlab.config import BenchRequest
from assistlab.engines.transformers import generation, models, paths
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner
from assistlab.engines.transformers import prompt as tprompt
from assistlab.engines.transformers import timing
from assistlab.results import explain
from assistlab.results.report import RunRecord

PROMPT = "write me a long essay on deep learning"
TOKENS = 16


def record(step_tokens, accepted, token_ids=None):
    return RunRecord(arm=1, repetition=0, latency_s=1.0, new_tokens=sum(step_tokens), ttft_s=None,
                     step_times=[], step_tokens=step_tokens, drafted=[], accepted=accepted,
                     token_ids=token_ids or [], text="")


# ---------------------------------------------------------------- token origins


def test_origins_follow_the_step_record():
    # Step 1 added 3 tokens, 2 of them drafted; step 2 added 1 (nothing accepted); step 3 added 2, 1 drafted.
    origins = explain.token_origins(record([3, 1, 2], [2, 0, 1]))
    assert origins == ["draft", "draft", "target", "target", "draft", "target"]


def test_origins_read_a_report_trace_entry_too():
    assert explain.token_origins({"t_s": [0.1, 0.2], "tokens": [4, 1], "accepted": [3, 0]}) == [
        "draft", "draft", "draft", "target", "target"
    ]


def test_plain_tokens_are_all_the_targets():
    assert explain.token_origins(record([1, 1, 1], [])) == ["target"] * 3
    assert explain.token_origins({"tokens": [1, 1], "t_s": [0.1, 0.2]}) == ["target"] * 2


@pytest.mark.parametrize("steps, accepted", [([2, 1], [1]), ([2, 1], [3, 0]), ([2], [-1])])
def test_inconsistent_step_records_are_refused(steps, accepted):
    with pytest.raises(ValueError):
        explain.token_origins(record(steps, accepted))


@pytest.fixture(scope="module")
def tokenizer(models_dir):
    return AutoTokenizer.from_pretrained(models_dir / "target")


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_a_character_split_over_tokens_goes_to_the_token_that_completes_it(tokenizer):
    e_acute = encode(tokenizer, "é")
    assert len(e_acute) == 2  # byte-level BPE trained on ASCII: one token per UTF-8 byte
    head, fox = encode(tokenizer, "the quick"), encode(tokenizer, " fox")
    ids = head + e_acute + fox
    origins = ["draft"] * len(head) + ["draft", "target"] + ["target"] * len(fox)
    assert explain.origin_segments(tokenizer, ids, origins) == [("the quick", "draft"), ("é fox", "target")]
    origins = ["target"] * len(head) + ["target", "draft"] + ["target"] * len(fox)
    assert explain.origin_segments(tokenizer, ids, origins) == [
        ("the quick", "target"), ("é", "draft"), (" fox", "target")
    ]


def test_word_starts_keep_their_space_with_a_sentencepiece_style_decoder():
    # Metaspace decoders (Llama, T5) drop the space of a decode's first word, so decoding each token alone
    # would lose every space; one token of left context keeps them.
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(BPE(unk_token="<unk>"))
    raw.pre_tokenizer, raw.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    raw.train_from_iterator(["the quick brown fox"] * 5, trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    ids = encode(tok, "the quick brown fox")
    assert tok.decode(ids[1:2]) == "quick"  # the pitfall this guards against
    assert explain.origin_segments(tok, ids, ["draft", "target"] * 2) == [
        ("the", "draft"), (" quick", "target"), (" brown", "draft"), (" fox", "target")
    ]


def test_segments_join_to_the_decoded_text_even_with_broken_bytes_and_specials(tokenizer):
    ids = encode(tokenizer, "deep") + [tokenizer.eos_token_id] + encode(tokenizer, " learning") + encode(
        tokenizer, "日"
    )[:1]  # ends in half a character
    origins = ["draft" if i % 3 else "target" for i in range(len(ids))]
    segments = explain.origin_segments(tokenizer, ids, origins)
    text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert "".join(t for t, _ in segments) == text
    assert text.endswith("\ufffd")
    assert all(a[1] != b[1] for a, b in zip(segments, segments[1:]))  # neighbours are merged


# ---------------------------------------------------------------- alpha, the cost model, the limit


def test_alpha_counts_only_positions_the_target_judged():
    # Passes 3+1+0+2 = 6; failures where a < d: steps 2 and 3, so 2; alpha = 6 / 8.
    steps = [(3, 3), (3, 1), (3, 0), (2, 2)]
    assert explain.estimate_alpha(steps) == pytest.approx(0.75)
    # The pooled acceptance rate is lower: 6 / 11 counts never-judged tokens as rejected.
    assert 6 / 11 < explain.estimate_alpha(steps)


@pytest.mark.parametrize(
    "steps, alpha",
    [([(5, 5), (5, 5)], 1.0), ([(4, 0), (4, 0)], 0.0), ([(0, 0), (3, 1)], 0.5), ([(0, 0)], None), ([], None)],
)
def test_alpha_edge_cases(steps, alpha):
    assert explain.estimate_alpha(steps) == alpha


def test_alpha_refuses_more_accepted_than_drafted():
    with pytest.raises(ValueError):
        explain.estimate_alpha([(2, 3)])


def test_cost_model_by_hand():
    # alpha 0.5, k 3: (1 - 0.5^4) / 0.5 = 1.875 tokens per step; cost 3 * 0.1 + 1 = 1.3; 1.875 / 1.3.
    model = explain.cost_model(0.5, 0.1, 3)
    assert model["tokens_per_step"] == pytest.approx(1.875)
    assert model["step_cost"] == pytest.approx(1.3)
    assert model["predicted_speedup"] == pytest.approx(75 / 52)
    # k=1: 1.5/1.1 = 1.364; k=2: 1.75/1.2 = 1.458; k=3: 1.442; so 2 is best.
    assert model["best_k"] == 2
    assert model["best_k_speedup"] == pytest.approx(1.75 / 1.2)


def test_cost_model_by_hand_at_high_acceptance():
    # alpha 0.8, k 4: (1 - 0.32768) / 0.2 = 3.3616; cost 1.2; speedup 2.80133.
    model = explain.cost_model(0.8, 0.05, 4)
    assert model["tokens_per_step"] == pytest.approx(3.3616)
    assert model["predicted_speedup"] == pytest.approx(3.3616 / 1.2)
    # k=7: 4.16114/1.35 = 3.0823; k=8: 4.32891/1.40 = 3.0921; k=9: 4.46313/1.45 = 3.0780.
    assert model["best_k"] == 8
    assert model["best_k_speedup"] == pytest.approx(4.32891136 / 1.4)


def test_cost_model_limits():
    # Everything accepted: k+1 tokens per step; 5 / (4 * 0.25 + 1) = 2.5.
    assert explain.cost_model(1.0, 0.25, 4)["predicted_speedup"] == pytest.approx(2.5)
    # Nothing accepted: one token per step at k*c+1 the cost: 1 / 1.6.
    nothing = explain.cost_model(0.0, 0.2, 3)
    assert nothing["tokens_per_step"] == pytest.approx(1.0)
    assert nothing["predicted_speedup"] == pytest.approx(0.625)
    assert nothing["best_k"] == 1
    with pytest.raises(ValueError):
        explain.cost_model(1.2, 0.1, 3)


def test_cost_model_with_a_verification_line_by_hand():
    # alpha 0.5, k 3, c 0.1, verifying n tokens costs 0.8 + 0.1 n: step 0.3 + 1.2 = 1.5; 1.875 / 1.5 = 1.25.
    model = explain.cost_model(0.5, 0.1, 3, verify=(0.8, 0.1))
    assert model["step_cost"] == pytest.approx(1.5)
    assert model["predicted_speedup"] == pytest.approx(1.25)
    # k=1: 1.5/1.1 = 1.364; k=2: 1.75/1.3 = 1.346: dearer verification favours shorter drafts.
    assert model["best_k"] == 1 and model["best_k_speedup"] == pytest.approx(1.5 / 1.1)


def test_fit_verify_cost_by_hand():
    # Points (1, 1.0), (1, 1.2), (5, 2.0), (5, 2.2): means 1.1 at 1 and 2.1 at 5, so b = 0.25, a = 0.85.
    fit = explain.fit_verify_cost([(1, 1.0), (1, 1.2), (5, 2.0), (5, 2.2)])
    assert fit["a"] == pytest.approx(0.85) and fit["b"] == pytest.approx(0.25)
    assert (fit["points"], fit["tokens_min"], fit["tokens_max"]) == (4, 1, 5)
    flat = explain.fit_verify_cost([(3, 1.5), (3, 2.5)])  # one token count: no slope to find
    assert flat["a"] == pytest.approx(2.0) and flat["b"] == 0.0
    assert explain.fit_verify_cost([]) is None


def test_verify_points_take_step_length_minus_drafting_and_skip_the_prefill_step():
    probe = {"step_s": [0.9, 0.05, 0.04], "draft_s": [0.5, 0.02, 0.01], "verify_tokens": [30, 4, 2],
             "drafted": [3, 3, 1]}
    # Step 2: (0.05 - 0.02) / 0.01 = 3 steps for 4 tokens; step 3: 0.03 / 0.01 = 3 for 2.
    assert explain.verify_points(probe, 0.01) == [(4, pytest.approx(3.0)), (2, pytest.approx(3.0))]
    assert explain.plain_points([[0.0, 0.01, 0.03]], 0.01) == [(1, pytest.approx(1.0)), (1, pytest.approx(2.0))]


def test_prediction_costs_each_step_at_its_own_draft_length():
    # Prompt lookup: one step drafted 4 (alpha 0.5: 1.9375 tokens), one drafted nothing (1 token).
    # c 0.05, verify 0.9 + 0.1 n: costs 0.2 + 1.4 = 1.6 and 0 + 1.0 = 1.0; speedup 2.9375 / 2.6.
    assert explain.predict_speedup(0.5, 0.05, [4, 0], (0.9, 0.1)) == pytest.approx(2.9375 / 2.6)
    # The ideal model: costs 1.2 and 1.0.
    assert explain.predict_speedup(0.5, 0.05, [4, 0]) == pytest.approx(2.9375 / 2.2)
    # With one k for every step it is cost_model's speedup.
    assert explain.predict_speedup(0.5, 0.1, [3, 3], (0.8, 0.1)) == pytest.approx(1.25)


def test_break_even_alpha_by_hand():
    # k 1, c 0.5, ideal verify: a step costs 1.5 and yields 1 + alpha, so alpha = 0.5 breaks even.
    assert explain.break_even_alpha(0.5, [1]) == pytest.approx(0.5, abs=1e-5)
    # k 2, c 0.5, verify 0.5 + 0.5 n: 1 + 2 = 3 per step, but at most 3 tokens: even only at alpha 1.
    assert explain.break_even_alpha(0.5, [2], (0.5, 0.5)) == pytest.approx(1.0, abs=1e-5)
    assert explain.break_even_alpha(0.6, [2], (0.5, 0.5)) is None  # 3.2 per step: never pays
    assert explain.break_even_alpha(0.0, [2], (0.2, 0.1)) == 0.0  # 0.5 per step: pays even at alpha 0


def test_the_three_shares_multiply_to_the_measured_speedup():
    # alpha 0.3, k 4: 0.99757 / 0.7 = 1.42510 tokens per step; predicted 1.42510 / 1.2 = 1.18758.
    predicted = explain.cost_model(0.3, 0.05, 4)["predicted_speedup"]
    assert predicted == pytest.approx(1.4251 / 1.2)
    shares = explain.limit_shares(predicted, 1.1, 0.3, 0.05, 4)
    assert shares["acceptance"] == pytest.approx(1.4251 / 5)
    assert shares["assistant"] == pytest.approx(1 / 1.2)
    assert shares["overhead"] == pytest.approx(1.1 / predicted)
    assert 5 * math.prod(shares.values()) == pytest.approx(1.1)


def test_low_acceptance_is_named():
    predicted = explain.cost_model(0.3, 0.05, 4)["predicted_speedup"]
    assert explain.limit_kind(predicted, 1.1, 0.3, 0.05, 4) == "acceptance"  # shares 0.285, 0.833, 0.926
    sentence = explain.limiting_factor(predicted, 1.1, 0.3, 0.05, 4)
    assert sentence.startswith("Low acceptance") and "0.30" in sentence and "1.43" in sentence


def test_a_slow_assistant_is_named():
    # alpha 0.9, c 0.5, k 4: 4.0951 tokens over a 3.0 cost; shares 0.819, 0.333, 1.3/1.365 = 0.952.
    predicted = explain.cost_model(0.9, 0.5, 4)["predicted_speedup"]
    assert predicted == pytest.approx(4.0951 / 3)
    assert explain.limit_kind(predicted, 1.3, 0.9, 0.5, 4) == "assistant"
    sentence = explain.limiting_factor(predicted, 1.3, 0.9, 0.5, 4, universal=True)
    assert sentence.startswith("A slow assistant") and "re-tokenisation" in sentence and "3.00×" in sentence


def test_overhead_is_named_with_its_cause():
    # alpha 0.9, c 0.02, k 4: predicted 4.0951 / 1.08 = 3.7918, measured 1.5: overhead share 0.396.
    predicted = explain.cost_model(0.9, 0.02, 4)["predicted_speedup"]
    assert predicted == pytest.approx(4.0951 / 1.08)
    assert explain.limit_kind(predicted, 1.5, 0.9, 0.02, 4) == "overhead"
    sentence = explain.limiting_factor(predicted, 1.5, 0.9, 0.02, 4, verify_cost=2.5)
    assert sentence.startswith("Overhead") and "1.50×" in sentence and "3.79×" in sentence
    assert "costs 2.50 plain decode steps" in sentence
    assert "2.50" not in explain.limiting_factor(predicted, 1.5, 0.9, 0.02, 4, verify_cost=1.0)


def test_nothing_limits_a_perfect_pair():
    assert explain.limiting_factor(5.0, 5.0, 1.0, 0.0, 4).startswith("Nothing limits")


def test_plain_step_leaves_out_the_prefill():
    # Run 1: (0.9 - 0.5) / 3 = 0.1333; run 2: (1.4 - 1.0) / 2 = 0.2; the median of the two is their mean.
    assert explain.plain_step_seconds([[0.5, 0.6, 0.7, 0.9], [1.0, 1.2, 1.4]]) == pytest.approx(
        (0.4 / 3 + 0.2) / 2
    )
    assert explain.plain_step_seconds([[0.3], []]) is None


def test_explain_arm_by_hand():
    probe = {
        "drafted": [4, 4, 4, 4],
        "accepted": [4, 1, 0, 3],
        "draft_s": [0.5, 0.004, 0.004, 0.002],  # the first includes the assistant's prefill: left out
        "verify_s": [0.3, 0.012, 0.012, 0.012],
    }
    result = explain.explain_arm(probe, [], [[0.0, 0.01, 0.02, 0.03]], 1.0, "assistant")
    assert result["target_step_s"] == pytest.approx(0.01)
    assert result["drafting_s_per_token"] == pytest.approx(0.010 / 12)
    assert result["c"] == pytest.approx(0.010 / 12 / 0.01)
    assert result["verify_cost"] == pytest.approx(1.2)
    # Passes 8, failures 3 (steps 2, 3, 4): alpha 8/11; k 4.
    assert result["alpha"] == pytest.approx(8 / 11)
    assert result["k"] == pytest.approx(4.0)
    assert result["tokens_per_step_measured"] == pytest.approx(3.0)
    tokens = (1 - (8 / 11) ** 5) / (3 / 11)
    assert result["tokens_per_step_predicted"] == pytest.approx(tokens)
    # Verification: the plain steps are (1 token, 1.0 step) twice, the probe's later steps (5 tokens, 1.2
    # steps) three times; the line through them is 0.95 + 0.05 * tokens.
    assert result["verify_fit"]["a"] == pytest.approx(0.95) and result["verify_fit"]["b"] == pytest.approx(0.05)
    assert result["predicted_speedup"] == pytest.approx(tokens / (4 / 12 + 1.2))
    assert result["predicted_speedup_ideal"] == pytest.approx(tokens / (4 / 12 + 1))
    assert result["prediction_error"] == pytest.approx(tokens / (4 / 12 + 1.2) / 1.0 - 1)
    # Break even where 1 + a + a^2 + a^3 + a^4 = 4/12 + 1.2 = 1.5333: a = 0.3513 (0.35 gives 1.5304).
    even = result["break_even_alpha"]
    assert sum(even**i for i in range(5)) == pytest.approx(4 / 12 + 1.2, abs=1e-5)
    assert 0.35 < even < 0.36
    assert result["limit_kind"] == "overhead"
    assert "costs 1.20 plain decode steps" in result["limit"]


def test_explain_arm_prefers_the_timed_steps_and_keeps_a_lone_prompt_lookup_match():
    probe = {"drafted": [3, 0, 0], "accepted": [1, 0, 0], "draft_s": [0.003, 0.001, 0.001], "verify_s": [0.02] * 3}
    timed = [(3, 3), (3, 0)]
    result = explain.explain_arm(probe, timed, [[0.0, 0.01, 0.02]], None, "prompt-lookup")
    assert result["alpha"] == pytest.approx(3 / 4)
    assert result["k"] == pytest.approx(3.0)
    # Only the first step drafted, so it is kept: 0.005 s over 3 tokens.
    assert result["drafting_s_per_token"] == pytest.approx(0.005 / 3)
    assert result["limit"]


def test_explain_arm_without_drafts_or_probe_says_why():
    nothing = explain.explain_arm({}, [(0, 0), (0, 0)], [[0.0, 0.1]], 0.9)
    assert nothing["alpha"] is None and nothing["predicted_speedup"] is None
    assert nothing["limit"].startswith("Nothing was drafted")
    # Issue 36 item 7: a ratio measured with nothing drafted is said not to be a speedup.
    assert nothing["limit_kind"] == explain.NOTHING_DRAFTED and "Its 0.90× against plain is not a speedup" in (
        nothing["limit"])
    noise = explain.explain_arm({}, [(0, 0), (0, 0)], [[0.0, 0.1]], 2.46)
    assert "Its 2.46× against plain is not a speedup" in noise["limit"]
    assert "not a speedup" not in explain.nothing_drafted_words(None)
    unprobed = explain.explain_arm(None, [(3, 1)], [[0.0, 0.1]], 0.9)
    assert unprobed["alpha"] == pytest.approx(0.5) and unprobed["c"] is None
    assert "not measured" in unprobed["limit"]
    assert explain.explain_arm(None, [], [], None)["limit"] is None  # an arm with no finished run
    failed = explain.explain_arm({"error": "the cost-model run failed: boom"}, [(3, 1)], [[0.0, 0.1]], 0.9)
    assert "boom" in failed["limit"]


# ---------------------------------------------------------------- on tiny random models

ARMS = (
    ArmSpec("auto", "target-copy"),
    ArmSpec("universal", "assistant-other"),
    ArmSpec("early-exit", early_exit_layer=2),
)


@pytest.fixture(scope="module")
def bench(models_dir, store):
    """A finished comparison plus what the probe needs: the target, the prompt ids and each arm's kwargs."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    try:
        request = BenchRequest(target="target", arms=ARMS, prompt=PROMPT, max_new_tokens=TOKENS,
                               repeats=2, warmup=0, device="cpu")
        report = runner.run_to_report(request, store)
        device = models.choose_device("cpu")
        dtype = models.choose_dtype("auto", device)
        target = store.get("target", device, dtype, False)[1]
        request = request.resolved("cpu")
        base = generation.base_kwargs(request, target)
        setups = []
        for spec in ARMS:
            helper = store.get(spec.assistant, device, dtype, False)[1] if spec.assistant else None
            strategy = paths.resolve_strategy(spec, target, helper)
            kwargs = {**base, **paths.arm_kwargs(spec, strategy, target, helper)}
            configure = lambda s=spec, st=strategy, h=helper: paths.configure_drafter(s, st, target, h)
            setups.append((strategy, kwargs, configure))
        yield report, target, tprompt.encode_prompt(request, target), setups
    finally:
        mp.undo()


def test_origin_marks_add_up_to_the_engines_accepted_counts(bench):
    report, target, _, _ = bench
    assert report.status == "complete"
    for run in report.runs:
        origins = explain.token_origins(run)
        assert len(origins) == run.new_tokens == TOKENS
        assert origins.count("draft") == sum(run.accepted)
        segments = explain.origin_segments(target.tokenizer, run.token_ids, origins)
        assert "".join(text for text, _ in segments) == run.text
    copy_runs = report.runs_of(1)
    # A copy of the target drafts what the target would say: every drafted token is accepted.
    assert all(explain.token_origins(r).count("draft") == sum(r.drafted) > 0 for r in copy_runs)
    assert all(set(explain.token_origins(r)) == {"target"} for r in report.plain)
    assert explain.text_segments(target.tokenizer, copy_runs[-1])[0][1] in ("draft", "target")


def test_probe_sees_the_same_steps_and_leaves_no_trace(bench):
    report, target, inputs, setups = bench
    for index, (strategy, kwargs, configure) in enumerate(setups, start=1):
        probe = timing.probe_arm(target, inputs, kwargs, configure)
        assert "error" not in probe, probe
        timed = report.runs_of(index)[0]
        # Greedy decoding: the instrumented run drafts and accepts exactly what the timed runs did.
        assert probe["drafted"] == timed.drafted and probe["accepted"] == timed.accepted, strategy
        assert len(probe["draft_s"]) == len(probe["verify_s"]) == len(timed.drafted)
        assert probe["new_tokens"] == TOKENS
    model = target.model
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert "_get_candidate_generator" not in model.__dict__


def test_probe_with_a_fake_clock_times_each_phase_exactly(bench):
    # One second per reading: each drafting call and each verification forward takes exactly one second,
    # including early exit, whose drafting forwards run on the target itself and must not count as verifying.
    _, target, inputs, setups = bench
    for strategy, kwargs, configure in setups:
        ticks = itertools.count()
        probe = timing.probe_arm(target, inputs, kwargs, configure, clock=lambda: float(next(ticks)))
        steps = len(probe["drafted"])
        assert probe["draft_s"] == [1.0] * steps, strategy
        assert probe["verify_s"] == [1.0] * steps, strategy
        assert probe["setup_s"] == 1.0, strategy  # building the candidate generator, read around it once
        assert probe["latency_s"] == 4.0 * steps + 1.0 + 2.0


def test_a_failing_probe_reports_instead_of_raising(bench):
    _, target, inputs, setups = bench
    _, kwargs, configure = setups[0]
    probe = timing.probe_arm(target, inputs, {**kwargs, "max_new_tokens": -3}, configure)
    assert probe["error"].startswith("the cost-model run failed")
    assert "_get_candidate_generator" not in target.model.__dict__


def test_the_report_carries_the_cost_model_of_every_assisted_arm(bench):
    """The runner's own untimed probe feeds the comparison: the path the page and CLI show."""
    report, _, _, setups = bench
    data = report.to_dict()
    for index, (strategy, _, _) in enumerate(setups, start=1):
        result = data["comparison"][index - 1]
        assert math.isfinite(result["c"]) and result["c"] > 0, strategy
        assert 0.0 <= result["alpha"] <= 1.0
        assert math.isfinite(result["predicted_speedup"]) and result["predicted_speedup"] > 0
        assert result["analysis"]["limit_kind"] in explain.LIMIT_KINDS
        assert result["limit"].endswith(".")
        assert data["arms"][index]["probe"]["generator"]
        assert math.isfinite(result["predicted_speedup_ideal"]) and math.isfinite(result["prediction_error"])
        assert result["prediction_error"] == pytest.approx(
            result["predicted_speedup"] / result["analysis"]["measured_speedup"] - 1
        )
        # One verification line for the target, from the plain steps and every probe's later steps.
        fit = result["analysis"]["verify_fit"]
        probes = [data["arms"][i]["probe"] for i in range(1, len(data["arms"]))]
        plain_steps = sum(len(t["t_s"]) - 1 for t in data["arms"][0]["trace"])
        assert fit["points"] == plain_steps + sum(len(p["drafted"]) - 1 for p in probes)
        assert fit["tokens_min"] == 1 and fit["tokens_max"] > 1
    assert explain.estimate_alpha(zip(report.runs_of(1)[0].drafted, report.runs_of(1)[0].accepted)) == 1.0
