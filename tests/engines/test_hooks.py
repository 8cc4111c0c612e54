"""The private-API module: the pinned transformers still has what it wraps, and each run counts only itself."""

import threading
import time

import pytest
import torch

from assistlab.config import BenchRequest
from assistlab.engines.transformers import generation, hooks, models, paths
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.engines.transformers import prompt as tprompt
from assistlab.engines.transformers import timing

PROMPT = "write me a long essay on deep learning"
TOKENS = 24


def test_the_pinned_transformers_has_the_private_api_assistlab_wraps():
    # An upgrade that renames _get_candidate_generator, changes its parameters or the generator's methods
    # fails here, with the list of what changed.
    assert hooks.check_private_api() == []


def test_check_private_api_notices_a_missing_method(monkeypatch):
    from transformers import GenerationMixin

    monkeypatch.delattr(GenerationMixin, hooks.FACTORY)
    assert hooks.check_private_api() == [f"transformers' GenerationMixin has no {hooks.FACTORY} any more."]


@pytest.fixture(scope="module")
def setup(models_dir, store):
    """The cached target, its prompt ids, and (kwargs, configure) for two assisted arms on it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        device = models.choose_device("cpu")
        dtype = models.choose_dtype("auto", device)
        specs = (ArmSpec("assistant", "target-copy"), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3))
        request = BenchRequest(target="target", arms=specs, prompt=PROMPT, max_new_tokens=TOKENS,
                               device="cpu").resolved("cpu")
        target = store.get("target", device, dtype, False)[1]
        base = generation.base_kwargs(request, target)
        arms = []
        for spec in specs:
            helper = store.get(spec.assistant, device, dtype, False)[1] if spec.assistant else None
            strategy = paths.resolve_strategy(spec, target, helper)
            paths.configure_drafter(spec, strategy, target, helper)
            arms.append({**base, **paths.arm_kwargs(spec, strategy, target, helper)})
        yield target, tprompt.encode_prompt(request, target), arms


def consistent(timed) -> bool:
    """A run's counts agree with its own step trace: one count per step, accepted + 1 tokens per step."""
    return timed.streamer.tokens == [a + 1 for a in timed.accepted] and len(timed.drafted) == len(timed.accepted)


def test_two_runs_on_one_cached_model_at_once_each_count_their_own_steps(setup):
    target, inputs, arms = setup
    own_attributes = dict(target.model.__dict__)
    start = threading.Barrier(len(arms))
    results: dict[int, list] = {i: [] for i in range(len(arms))}
    errors: list[BaseException] = []
    overlaps = []

    def work(index: int) -> None:
        try:
            start.wait()
            for _ in range(4):
                results[index].append(timing.timed_generate(target, inputs, arms[index], time.perf_counter, True))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arms))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert all(len(r) == 4 for r in results.values())
    for a in results[0]:
        for b in results[1]:
            lo, hi = max(a.wall_window[0], b.wall_window[0]), min(a.wall_window[1], b.wall_window[1])
            overlaps.append(hi > lo)
    assert any(overlaps), "the two threads never ran at the same time, so this test proved nothing"
    for index, runs in results.items():
        for timed in runs:
            assert consistent(timed), (index, timed.streamer.tokens, timed.accepted)
            assert sum(timed.streamer.tokens) == TOKENS
    # A copy of the target drafts what the target says: all accepted, in every run of that thread.
    assert all(sum(t.accepted) == sum(t.drafted) > 0 for t in results[0])
    # The shared model was never changed: no patched attribute left, none added, no hooks.
    assert dict(target.model.__dict__) == own_attributes
    assert hooks.FACTORY not in target.model.__dict__ and "forward" not in target.model.__dict__
    assert not target.model._forward_hooks and not target.model._forward_pre_hooks


def test_timed_verification_records_how_many_tokens_each_forward_processed(setup):
    target, inputs, arms = setup
    ticks = iter(range(10_000))
    with hooks.instrumented(target.model, lambda: float(next(ticks))) as (proxy, trace), torch.inference_mode():
        out = proxy.generate(**inputs, **arms[0])
    assert out.shape[1] - inputs["input_ids"].shape[1] == TOKENS
    steps = len(trace.accepted)
    assert len(trace.verify_s) == len(trace.verify_tokens) == len(trace.draft_s) == steps
    # The first verification reads the prompt and the drafts; later ones the last token plus the drafts.
    prompt = inputs["input_ids"].shape[1]
    assert trace.verify_tokens[0] == prompt + trace.drafted[0]
    assert trace.verify_tokens[1:] == [d + 1 for d in trace.drafted[1:]]
    assert trace.verify_s == [1.0] * steps and trace.draft_s == [1.0] * steps
    assert trace.generator == "AssistedCandidateGenerator"


@pytest.mark.fast
def test_a_method_left_on_the_model_instance_still_goes_through_the_proxy(allowed_models, store):
    """pytest's monkeypatch (and some libraries) leave `generate` bound to the model in its instance dict;
    the proxy must not call the model itself through it, or no step would be counted."""
    _, target = store.get("target", torch.device("cpu"), torch.float32)
    _, helper = store.get("assistant-same", torch.device("cpu"), torch.float32)
    target.model.__dict__["generate"] = target.model.generate  # bound to the model, as an undone patch leaves it
    try:
        inputs = target.tokenizer("the quick brown fox", return_tensors="pt")
        with hooks.instrumented(target.model) as (proxy, trace), torch.inference_mode():
            proxy.generate(**inputs, assistant_model=helper.model, max_new_tokens=6, eos_token_id=-1, do_sample=False)
        assert trace.drafted and len(trace.drafted) == len(trace.accepted)
    finally:
        target.model.__dict__.pop("generate", None)
