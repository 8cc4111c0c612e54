"""The one place that touches transformers' private candidate generator (`_get_candidate_generator`).

Every assisted run gets its own shallow proxy of the model: a second Python object of the same class whose
`__dict__` is a copy of the model's, so it shares the parameters, submodules, config and hook tables, but
not its own attributes. The instruments go on the proxy only: `_get_candidate_generator` (to count drafted
and accepted tokens, and to time drafting) and, when verification is timed, `forward`. No module hook is
registered, because the hook tables are shared. The one restore rule: nothing to restore, because the
shared model is never changed; the proxy is dropped when its run ends. So two runs on one cached model,
even at the same time in two threads, each count only their own steps.

`check_private_api()` states what AssistLab relies on; the test suite calls it against the pinned
transformers so an upgrade that changes it fails in a test, not quietly in a run.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Clock = Callable[[], float]

FACTORY = "_get_candidate_generator"
# What AssistLab calls or wraps, with the parameters it passes or receives by name.
FACTORY_PARAMETERS = ("generation_config", "input_ids", "inputs_tensor", "logits_processor", "model_kwargs",
                      "assistant_model", "target_tokenizer", "assistant_tokenizer")
GENERATOR_METHODS = {"get_candidates": ("input_ids",), "update_candidate_strategy": ("input_ids", "scores", "num_matches")}


@dataclass
class DraftTrace:
    """What one assisted generate() did, step by step; it belongs to that run alone.

    drafted/accepted: per verification step, from update_candidate_strategy (scores has one row per
    candidate plus the bonus token). With timing on: draft_s (each get_candidates call), draft_starts (the
    clock when each began, so step lengths follow), verify_s and verify_tokens (each verification forward
    of the target and how many tokens it processed).
    """

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_s: list[float] = field(default_factory=list)
    draft_starts: list[float] = field(default_factory=list)
    verify_s: list[float] = field(default_factory=list)
    verify_tokens: list[int] = field(default_factory=list)
    generator: str = ""
    setup_s: float | None = None  # building the candidate generator (MTP loads its layers from disk here)


def _proxy(model):
    """A shallow stand-in for `model`: same class, its own copy of the instance attributes.

    Methods bound to the model that sit in its instance attributes (accelerate's forward wrapper, or a
    `generate` a patch left behind) are bound to the proxy instead, so every call goes through the proxy.
    """
    proxy = object.__new__(type(model))
    for name, value in model.__dict__.items():
        if inspect.ismethod(value) and value.__self__ is model:
            value = types.MethodType(value.__func__, proxy)
        proxy.__dict__[name] = value
    return proxy


def _input_length(args: tuple, kwargs: dict) -> int:
    """Tokens a forward call processes: the length of input_ids (or inputs_embeds)."""
    for value in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), args[0] if args else None):
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 2:
            return int(shape[1])
    return 0


@contextlib.contextmanager
def instrumented(
    model, clock: Clock | None = None, sync: Callable[[], None] = lambda: None
) -> Iterator[tuple[object, DraftTrace]]:
    """Yield (proxy, trace): call generate() on the proxy and the trace fills with that run's steps.

    Without a clock only drafted and accepted tokens are counted (cheap enough for timed runs). With one,
    each drafting call and each verification forward is also timed, `sync()` draining the device before
    every reading. Early exit drafts with the target itself: forwards during drafting are not verification.
    """
    trace = DraftTrace()
    proxy = _proxy(model)
    original_factory = getattr(proxy, FACTORY)
    drafting = [False]

    def factory(*args, **kwargs):
        if clock is None:
            generator = original_factory(*args, **kwargs)
        else:
            sync()
            start = clock()
            generator = original_factory(*args, **kwargs)
            sync()
            trace.setup_s = clock() - start
        trace.generator = type(generator).__name__
        get, update = generator.get_candidates, generator.update_candidate_strategy

        def counting_update(input_ids, scores, num_matches):
            trace.drafted.append(int(scores.shape[1]) - 1)
            trace.accepted.append(int(num_matches))
            return update(input_ids, scores, num_matches)

        def timed_get(*a, **kw):
            sync()
            start = clock()
            drafting[0] = True
            try:
                result = get(*a, **kw)
            finally:
                drafting[0] = False
            sync()
            trace.draft_starts.append(start)
            trace.draft_s.append(clock() - start)
            return result

        # On the generator object this run created: nothing shared is touched.
        generator.update_candidate_strategy = counting_update
        if clock is not None:
            generator.get_candidates = timed_get
        return generator

    proxy.__dict__[FACTORY] = factory
    if clock is not None:
        forward = proxy.forward  # bound to the proxy, or accelerate's wrapper bound to the model

        @functools.wraps(forward)  # transformers reads forward's signature to decide which inputs to pass
        def timed_forward(*args, **kwargs):
            if drafting[0]:
                return forward(*args, **kwargs)
            sync()
            start = clock()
            output = forward(*args, **kwargs)
            sync()
            trace.verify_s.append(clock() - start)
            trace.verify_tokens.append(_input_length(args, kwargs))
            return output

        proxy.__dict__["forward"] = timed_forward
    yield proxy, trace


def check_private_api() -> list[str]:
    """What differs, in the installed transformers, from the private API this module relies on ([] if none)."""
    from transformers import GenerationMixin
    from transformers.generation.candidate_generator import CandidateGenerator

    problems = []
    method = getattr(GenerationMixin, FACTORY, None)
    if method is None:
        return [f"transformers' GenerationMixin has no {FACTORY} any more."]
    params = inspect.signature(method).parameters
    missing = [p for p in FACTORY_PARAMETERS if p not in params]
    if missing:
        problems.append(f"{FACTORY} lost the parameters {', '.join(missing)}.")
    source = inspect.getsource(GenerationMixin._assisted_decoding)
    for call in (f"self.{FACTORY}(", "candidate_generator.update_candidate_strategy(", "self(**model_inputs)"):
        if call not in source:
            problems.append(f"_assisted_decoding no longer calls {call}...).")
    for name, wanted in GENERATOR_METHODS.items():
        fn = getattr(CandidateGenerator, name, None)
        if fn is None:
            problems.append(f"CandidateGenerator has no {name} any more.")
            continue
        have = list(inspect.signature(fn).parameters)[1:]
        if have[: len(wanted)] != list(wanted):
            problems.append(f"CandidateGenerator.{name} takes {have}, expected {list(wanted)} first.")
    return problems
