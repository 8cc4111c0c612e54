"""The vLLM engine: where each arm's server is (started here or the operator's), the checks a person reads when
one cannot run, and one timed request (or a load round, load.py) with the counters read around it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from ...errors import AssistLabError, EngineError
from ..base import (Arm, ArmInfo, Clock, Engine, LoadResult, RunFailure, RunResult, Status, Watch, sampling_flags,
                    sum_counts, unwatched, while_loading)
from ..transformers import models as transformer_models
from . import answers, bounds, client, draft_model, load, server, stream, turns
from .launch import (SERVER_UNAVAILABLE, _reservation, start_fresh, start_in_turns,  # noqa: F401
                     start_servers, stop_all, wait_all)
from .arms import VllmArm

NO_METRICS = {"figure": "acceptance", "why": "the server has no vllm:spec_decode counters on /metrics"}
NO_MEMORY = {"figure": "memory", "why": "the server is not on this machine (or not started by AssistLab)"}
SHARED_COUNTERS = {"figure": "exclusive counters", "why": "an operator's server counts every client's requests: "
                   "another client's request during a run would be counted in that run's acceptance"}
REMOTE_WATCH = {"figure": "busy-machine watch of the server", "why": "the watch reads this machine only; the "
                "operator's server runs elsewhere"}


@dataclass
class Endpoint:
    """Where one vLLM arm is served, and what it says about it; `error` is why it cannot run, if it cannot."""

    arm: VllmArm
    label: str
    url: str | None = None
    model: str | None = None
    server: server.Server | None = None
    settings: dict = field(default_factory=dict)
    unavailable: list[dict] = field(default_factory=list)
    error: str | None = None
    vocab_size: int | None = None  # the target's, to check the ids of every answer against
    # The most requests it serves at once: what an operator's /v1/models advertises, or what AssistLab started
    # it with; None when unknown. A load level above it is refused (ServerArm.run_load).
    max_num_seqs: int | None = None
    drafting: draft_model.Drafting | None = None  # a draft model's: same vocabulary or vocabulary intersection
    launch: Callable[[], None] | None = None  # starts its planned server (start_servers), until it has started
    starter: Callable[[], None] | None = None  # starts it again, afresh: servers in blocks (turns.BLOCKS)

    def with_drafting(self, settings: dict) -> dict:
        """`settings` with the kind of drafting, for a draft model's arm."""
        return settings if self.drafting is None else {**settings, "drafting": self.drafting.to_dict()}

    def confirm_drafting(self) -> None:
        """The intersection as vLLM logged it (computed the same way before it started), in the name and settings."""
        if self.drafting is not None and self.server is not None:
            self.drafting = self.drafting.logged(self.server.log_text())
            self.label = self.arm.named(self.drafting.words())
            self.settings = self.with_drafting(self.settings)

    @property
    def api_key(self) -> str | None:
        return self.arm.api_key

    @property
    def pids(self) -> tuple[int, ...]:
        """The server's processes (itself and its workers), whose CPU time is this arm's, not others'."""
        if self.server is None:
            return ()
        return self.server.process_ids()


def operator_endpoint(arm: VllmArm, target_names: tuple[str, ...],
                      should_stop: Callable[[], bool] = lambda: False) -> Endpoint:
    """An operator's server, checked: it answers, and it serves the target (by name, path or folder name;
    the folder, when it is the second name, also gives the vocabulary every answer is checked against)."""
    endpoint = Endpoint(arm, arm.label, url=arm.url, settings={"url": arm.url, "started_by": "operator"},
                        unavailable=[SHARED_COUNTERS, REMOTE_WATCH, NO_MEMORY, *SERVER_UNAVAILABLE],
                        vocab_size=answers.vocab_size(target_names[1] if len(target_names) > 1 else None))
    try:
        entries = client.served_models(arm.url, arm.api_key, should_stop=should_stop)
    except AssistLabError as exc:
        endpoint.error = str(exc)
        return endpoint
    wanted = {n for n in target_names if n} | {os.path.basename(n.rstrip("/")) for n in target_names if n}

    def names(entry: dict) -> set[str]:
        found = {entry["id"], str(entry.get("root") or "")}
        return found | {os.path.basename(n.rstrip("/")) for n in found}

    found = [e["id"] for e in entries if names(e) & wanted]
    models = [e["id"] for e in entries]
    if not found:
        shown = ", ".join(models[:5]) + (f" and {len(models) - 5} more" if len(models) > 5 else "")
        endpoint.error = (f"The server {arm.name} at {arm.url} serves {shown or 'no model'}, not the "
                          f"target {target_names[0]}; point --target at the model it serves, or the server at the target.")
        return endpoint
    endpoint.model = found[0]
    endpoint.settings["served_model"] = found[0]
    seqs = next(e for e in entries if e["id"] == found[0]).get("max_num_seqs")
    if type(seqs) is int and seqs >= 1:
        endpoint.max_num_seqs = endpoint.settings["max_num_seqs"] = seqs
    return endpoint


@dataclass
class Outcome:
    """One timed request: the stream, the counters' growth around it, the servers' memory after it."""

    streamed: stream.Streamed
    counts: dict | None
    memory: int | None
    metrics: bool  # whether the server had the speculative-decoding counters


def _settled_metrics(endpoint: Endpoint, tries: int = 10, pause_s: float = 0.05,
                     should_stop: Callable[[], bool] = lambda: False) -> dict | None:
    """/metrics once the counters stop moving: vLLM records a step's counts just after sending its tokens."""
    last = client.read_metrics(endpoint.url, endpoint.api_key, should_stop=should_stop)
    for _ in range(tries):
        time.sleep(pause_s)
        now = client.read_metrics(endpoint.url, endpoint.api_key, should_stop=should_stop)
        if now == last:
            return now
        last = now
    return last


def _memory(endpoint: Endpoint) -> int | None:
    if endpoint.server is None:
        return None
    try:
        import psutil

        return sum(psutil.Process(pid).memory_info().rss for pid in endpoint.pids)
    except Exception:  # noqa: BLE001
        return None


def _checked_counts(endpoint: Endpoint, before: dict | None, after: dict | None, generated: int) -> dict | None:
    """counts_between of two /metrics readings around requests that generated `generated` tokens, refused
    (EngineError, one sentence) when they cannot be true of that work (bounds)."""
    k = bounds.draft_length(endpoint.arm.num_speculative_tokens, generated)
    wrong = bounds.reading_problem(before, endpoint.url, k) or bounds.reading_problem(after, endpoint.url, k)
    counts = None if wrong else stream.counts_between(before, after)
    wrong = wrong or bounds.counts_problem(counts, endpoint.url, generated, k, "/metrics")
    if wrong:
        raise EngineError(wrong)
    return counts


def run_once(endpoint: Endpoint, prompt_ids: list[int], max_tokens: int, clock: Callable[[], float],
             should_stop: Callable[[], bool], window: Callable[[], contextlib.AbstractContextManager],
             fixed_length: bool = True, seed: int = 0) -> Outcome:
    """One streamed request between two clock readings, /metrics read before and after (outside the timing).

    An answer that is not the work asked (answers.problem) raises EngineError with its sentence: a failed run,
    never a measurement.
    """
    assisted = endpoint.arm.assisted
    try:
        before = _settled_metrics(endpoint, tries=0, should_stop=should_stop) if assisted else None
        body = stream.completion_body(endpoint.model, prompt_ids, max_tokens, seed=seed, fixed_length=fixed_length)
        with window():
            streamed = client.stream_completion(endpoint.url, endpoint.api_key, body, clock, should_stop)
        if not streamed.stopped:
            wrong = answers.problem(streamed, endpoint.url, max_tokens, fixed_length, endpoint.vocab_size)
            if wrong:
                raise EngineError(wrong)
        after = _settled_metrics(endpoint, should_stop=should_stop) if assisted and not streamed.stopped else None
    except client.Stopped:
        return Outcome(stream.Streamed(stopped=True), None, None, metrics=False)
    counts = _checked_counts(endpoint, before, after, sum(streamed.tokens))
    return Outcome(streamed, counts, _memory(endpoint), metrics=before is not None and before.get("drafts") is not None)


def load_round(endpoint: Endpoint, prompts: list[list[int]], request, clock: Clock, should_stop: Callable[[], bool],
               watch: Watch) -> LoadResult | RunFailure:
    """One round of requests sent at once (load.send_all) inside the watch; acceptance from each request's own
    figures when the server gives them all, else from /metrics read before and after (outside the timing)."""
    assisted = endpoint.arm.assisted
    try:
        before = client.read_metrics(endpoint.url, endpoint.api_key, should_stop=should_stop) if assisted else None
        bodies = load.bodies_for(endpoint.model, prompts, request.max_new_tokens, request.fixed_length, request.seed)
        check = load.checker(endpoint.url, request.max_new_tokens, request.fixed_length, endpoint.vocab_size,
                             endpoint.arm.num_speculative_tokens)
        with watch(endpoint.pids):
            round_start, sent = load.send_all(endpoint.url, endpoint.api_key, bodies, clock, should_stop, check)
        failed = load.failure(sent, should_stop)
        if failed:
            return RunFailure(failed[0], stopped=failed[1])
        records = [load.record(i, s, round_start) for i, s in enumerate(sent)]
        source, counts = None, None
        if assisted and all(r.counts is not None for r in records):
            source, counts = "per-request", sum_counts([r.counts for r in records])
        elif assisted:
            counts = _checked_counts(endpoint, before, _settled_metrics(endpoint, should_stop=should_stop),
                                     sum(r.tokens for r in records))
            source = "metrics" if counts is not None else None
    except client.Stopped:
        return RunFailure("stopped", stopped=True)
    return LoadResult(len(prompts), load.wall(records), records, source, counts, _memory(endpoint))


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


class ServerArm(Arm):
    """One vLLM arm: a streamed request to its server, timed here, with the server's counters read around it;
    under load a round of them at once (load_round), refused above what the server serves at once."""

    loads = True

    def __init__(self, info: ArmInfo, endpoint: Endpoint, request, held: turns.Turns | None = None):
        self.info, self.endpoint, self.request = info, endpoint, request
        # The servers' turns: under sleep mode each run wakes this arm's server before its clock starts and puts
        # it to sleep after its last reading; otherwise nothing.
        self.held = held if held is not None else turns.Turns(turns.Plan(turns.TOGETHER, "all at once"), 1.0)
        # In blocks (no sleep mode, and they do not fit together): its server starts afresh before each block.
        self.in_blocks = self.held.in_blocks and endpoint.starter is not None

    def enter_block(self, should_stop: Callable[[], bool]) -> Generator[Status, None, bool]:
        """Before a block of this arm's runs: its server started afresh (the one before stopped), untimed, with a
        status line while it loads; True when it was started. A failed start is this arm's error."""
        endpoint = self.endpoint
        if not self.in_blocks or endpoint.error:
            return False
        step = f"Starting the vLLM server for {endpoint.label}"
        began = time.perf_counter()
        abandoned = threading.Event()  # the comparison closed mid-start (a cancelled request): stop waiting
        fresh = yield from while_loading(
            lambda: self.held.enter(endpoint, lambda: should_stop() or abandoned.is_set(), lambda _label, _s: None),
            lambda: Status(f"{step} for its block of runs (servers take turns: one at a time; "
                           f"{time.perf_counter() - began:.0f} s so far, about a minute each)...", step),
            cancel=abandoned.set)
        if endpoint.error:
            self.info.error = endpoint.error
        elif fresh:  # what the server started with, as the arm's settings say when all start at once
            self.info.settings = endpoint.settings
            self.info.unavailable += [u for u in endpoint.unavailable if u not in self.info.unavailable]
        return bool(fresh)

    def run(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
            watch: Watch) -> RunResult | RunFailure:
        return self._request(prompt_ids, clock, should_stop, watch, self.request.max_new_tokens)

    def warm_up(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                tokens: int) -> RunResult | RunFailure:
        return self._request(prompt_ids, clock, should_stop, unwatched, min(tokens, self.request.max_new_tokens))

    def _request(self, prompt_ids: list[int], clock: Clock, should_stop: Callable[[], bool], watch: Watch,
                 tokens: int) -> RunResult | RunFailure:
        endpoint, request = self.endpoint, self.request
        try:
            with self.held.turn(endpoint, should_stop):
                outcome = run_once(endpoint, prompt_ids, tokens, clock, should_stop,
                                   lambda: watch(endpoint.pids), request.fixed_length, request.seed)
        except client.Stopped:
            return RunFailure("stopped", stopped=True)
        except AssistLabError as exc:
            return RunFailure(str(exc))
        except Exception as exc:  # noqa: BLE001 - one arm failing must not lose the others' results
            return RunFailure(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        streamed = outcome.streamed
        if streamed.stopped:
            return RunFailure("stopped", stopped=True)
        if streamed.token_ids is None:
            return RunFailure(answers.no_token_ids(endpoint.url))
        if not outcome.metrics and self.info.assisted and NO_METRICS not in self.info.unavailable:
            self.info.unavailable.append(NO_METRICS)
        return RunResult(latency=streamed.latency, times=list(streamed.times), tokens=list(streamed.tokens),
                         token_ids=list(streamed.token_ids), memory=outcome.memory, wall_window=streamed.wall_window,
                         counts=outcome.counts, origins=False)  # a server does not say which tokens were drafted

    def run_load(self, prompts: list[list[int]], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                 watch: Watch) -> LoadResult | RunFailure:
        endpoint, level = self.endpoint, len(prompts)
        if endpoint.max_num_seqs is not None and level > endpoint.max_num_seqs:
            said = ("max_num_seqs in its /v1/models" if endpoint.settings.get("started_by") == "operator" else
                    "the --max-num-seqs AssistLab started it with")
            return RunFailure(f"concurrency {level} is more than the {endpoint.max_num_seqs} requests at once that "
                              f"the server {endpoint.label} at {endpoint.url} serves ({said}), so this level is not "
                              f"measured on it; choose levels up to {endpoint.max_num_seqs}.")
        try:
            with self.held.turn(endpoint, should_stop):
                result = load_round(endpoint, prompts, self.request, clock, should_stop, watch)
        except client.Stopped:
            return RunFailure("stopped", stopped=True)
        except AssistLabError as exc:
            return RunFailure(str(exc))
        except Exception as exc:  # noqa: BLE001 - one arm failing must not lose the others' results
            return RunFailure(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        if (isinstance(result, LoadResult) and self.info.assisted and result.counts_source is None
                and NO_METRICS not in self.info.unavailable):
            self.info.unavailable.append(NO_METRICS)
        return result


class VllmEngine(Engine):
    """vLLM servers, one per arm: the operator's (a URL) or started here, with AssistLab's settings."""

    name = "vllm"

    def __init__(self, preparation):
        super().__init__(preparation)
        self.endpoints: list[Endpoint] = []
        self.record: dict = {}
        self.held = turns.Turns(turns.Plan(turns.TOGETHER, "all at once"), 1.0)  # the plan's, once made

    @classmethod
    def wanted(cls, request) -> bool:
        return any(a.engine == cls.name for a in request.arms)

    def prepare(self) -> Generator[Status, None, None]:
        """Check every vLLM arm, start AssistLab's servers and wait for them.

        An arm that cannot run keeps its sentence in `error` and the other arms still run. The servers' context
        is sized for the longest prompt they will be sent (`preparation.prompt_tokens`, a workload's longest;
        the request's own prompt when None). `close()` stops them.
        """
        prep = self.preparation
        request, target, endpoints = prep.request, prep.host.target, self.endpoints
        drafts = yield from self._drafts()
        specs = [a for a in request.arms if a.engine == self.name]
        python, problem = None, None
        if any(s.url is None for s in specs):
            step = "Finding vLLM"
            yield Status(f"Checking the Python in {server.PYTHON_VAR} for vLLM...", step)
            try:
                python = yield from while_loading(server.find_python, lambda: Status("Checking for vLLM...", step))
            except AssistLabError as exc:
                problem = str(exc)
        for spec in specs:
            if spec.url is not None:
                endpoints.append(operator_endpoint(spec, (target.name, target.folder), prep.should_stop))
                continue
            endpoint = Endpoint(spec, spec.label, error=problem)
            helper = drafts.get(spec.draft_model) if spec.method == "draft_model" else None
            if helper is not None:  # in the target's vocabulary, or in the tokens both share; refused before it starts
                plan = endpoint.drafting = draft_model.drafting(target, helper)
                endpoint.label, endpoint.settings = spec.named(plan.words()), endpoint.with_drafting({})
                endpoint.error = problem or draft_model.refusal(plan, target, helper, python)
            endpoints.append(endpoint)
        prompt = len(prep.host.encode(request)) if prep.prompt_tokens is None else prep.prompt_tokens()
        longest = max([s.num_speculative_tokens or 0 for s in specs] + [0])
        needed = max(2048, prompt + request.max_new_tokens + longest + 16)
        max_len = min(needed, target.context_length) if target.context_length else needed
        if python is not None:
            plan = start_servers(endpoints, python, target.folder, transformer_models.dtype_name(prep.dtype),
                                 max_len, {text: m.folder for text, m in drafts.items()}, served_name=target.name,
                                 sequences=request.concurrency[-1] if request.concurrency else 1)
            self.held = held = turns.Turns(plan, start=start_fresh)
            step = "Starting the vLLM servers"
            began = prep.elapsed()
            waiting = {"label": ""}

            def on_wait(label: str, _seconds: float) -> None:
                waiting["label"] = label

            one_by_one = " one after another, each put to sleep once ready" if held.sleeping else ""

            def status() -> Status:
                return Status(f"Starting the vLLM servers{one_by_one} ({waiting['label'] or 'loading'}, "
                              f"{prep.elapsed() - began:.0f} s so far; about a minute each)...", step)

            abandoned = threading.Event()
            stopping = lambda: prep.should_stop() or abandoned.is_set()  # noqa: E731
            waiting_for = ((lambda: start_in_turns(endpoints, held, stopping, on_wait)) if held.sleeping else
                           (lambda: wait_all(endpoints, stopping, on_wait)))
            if not held.in_blocks:  # in blocks each starts before its first block of runs (ServerArm.enter_block)
                yield status()
                yield from while_loading(waiting_for, status, cancel=abandoned.set)
        plain = next((e for e in endpoints if not e.arm.assisted), None)
        for endpoint in endpoints:
            if endpoint.arm.assisted and not endpoint.error and (plain is None or plain.error):
                endpoint.error = (f"its baseline, {plain.label}, could not run" if plain is not None else
                                  "there is no vLLM plain arm to time it against; add one (--server plain=URL)")
        self.record = {
            "vllm": None if python is None else python.vllm,
            "python": None if python is None else python.path,
            "torch": None if python is None else python.torch,
            "transformers": None if python is None else python.transformers,
            "servers": {e.label: e.settings for e in endpoints},
            "problem": problem,
        }
        if python is not None and any(e.arm.url is None for e in endpoints):
            self.record["turns"] = self.held.record()  # how the servers were held; live: wakes and sleeps grow

    def _drafts(self) -> Generator[Status, None, dict]:
        """The tokenizers of the vLLM draft models (loaded here only to compare their vocabulary with the target's:
        draft_model.drafting); an EAGLE head has no tokenizer of its own (the server reads the target's)."""
        prep, drafts = self.preparation, {}
        for spec in prep.request.arms:
            if spec.engine == self.name and spec.method == "draft_model" and spec.draft_model not in drafts:
                drafts[spec.draft_model] = yield from while_loading(
                    lambda text=spec.draft_model: transformer_models.tokenizer_only(text, prep.messages.append),
                    lambda: Status("Reading the draft model's tokenizer...", "Reading the draft model's tokenizer"))
        return drafts

    def arms(self) -> list[Arm]:
        """One arm per endpoint, in the request's order (the setup names them apart from other engines' arms)."""
        return [ServerArm(ArmInfo(e.label, e.arm.method, e.arm.to_dict(), error=e.error, settings=e.settings,
                                  engine=self.name, unavailable=list(e.unavailable),
                                  flags=sampling_flags(self.preparation.request.do_sample)),  # greedy keeps the target's tokens
                          e, self.preparation.request, self.held)
                for e in self.endpoints]

    def environment(self) -> dict:
        return self.record

    def busy_processes(self) -> tuple[int, ...]:
        """The servers AssistLab started (an operator's run elsewhere): each polls a core for about a second
        after its last request."""
        return tuple(pid for e in self.endpoints for pid in e.pids)

    def close(self) -> None:
        stop_all(self.endpoints)
