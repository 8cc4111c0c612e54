"""The interface every engine implements: prepare a request, give its arms, time one run of an arm, close."""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

Clock = Callable[[], float]
# The busy-machine watch of one run: `watch(pids)` is a context manager around the timed call, told which
# processes besides this one do the arm's work (a server's), so their CPU time is not counted as others'.
Watch = Callable[..., contextlib.AbstractContextManager]

HEARTBEAT_S = 2.0  # how often a waiting step (a model loading, a server starting) reports its elapsed time

LOSSY_MARK = "[lossy]"
# One sentence for the page on what a lossy arm trades.
LOSSY_TRADE = (
    "A lossy arm (ensemble verification, or any sampled run) accepts drafts the target alone might not have "
    "chosen, so it can be faster, but its text is no longer exactly the target's own; compare the texts before "
    "you trust its speedup."
)


@contextlib.contextmanager
def unwatched(*_pids: int) -> Iterator[None]:
    """The watch when nothing watches: warm-up runs, and machines that cannot be read."""
    yield


@dataclass
class ArmInfo:
    """What an arm is, decided when its plan is made; `error` says why it stopped early, if it did.

    `flags` (lossless, lossy_reason, figures_unavailable) and `analysis_drops` (cost-model figures its path
    cannot give) come from the engine that planned the arm; the report reads them and never asks the engine.
    """

    name: str
    strategy: str
    spec: dict | None = None
    error: str | None = None
    settings: dict | None = None  # paths.drafting_settings: effective drafting values and their sources
    choice: str | None = None  # why the drafters path was picked (paths.resolve), for those paths
    engine: str = "transformers"
    unavailable: list[dict] | None = None  # figures the engine cannot give for this arm: [{figure, why}]
    flags: dict | None = None  # {"lossless", "lossy_reason", "figures_unavailable"}, set by its engine's plan
    analysis_drops: tuple[str, ...] = ()  # cost-model keys this arm's path cannot give (set to None)
    left: str | None = None  # why a search (measure/tune.py) stopped timing it: rounds skip it, as a failed arm

    @property
    def assisted(self) -> bool:
        return self.strategy != "plain"


def sampling_flags(do_sample: bool) -> dict:
    """The flags of an arm whose verification keeps the target's tokens: lossless unless it samples."""
    return {"lossless": not do_sample, "lossy_reason": "sampling" if do_sample else None, "figures_unavailable": []}


@dataclass
class Status:
    """A status line while an engine prepares: the step under way and, when known, the seconds it has left."""

    message: str
    step: str = ""
    eta_s: float | None = None


@dataclass
class RunResult:
    """One timed run of one arm, as plain data. Times are seconds from the run's start."""

    latency: float
    times: list[float]  # when each group of new tokens arrived
    tokens: list[int]  # how many tokens each group held
    token_ids: list[int]  # the new tokens only
    memory: int | None
    wall_window: tuple[float, float]  # Unix times around the run, to show that no two runs overlapped
    drafted: list[int] = field(default_factory=list)  # per draft step, when the engine sees its steps
    accepted: list[int] = field(default_factory=list)
    counts: dict | None = None  # a server's speculative-decoding counters for this run, instead of per step
    origins: bool = True  # whether drafted/accepted say which tokens came from a draft (text segments)


@dataclass
class RequestRecord:
    """One request of a load round, as plain data. Times are seconds from the round's start."""

    index: int  # its place in the round, 0 .. concurrency-1
    started: float  # when it was sent
    latency: float  # end to end, from sending to its last byte
    ttft: float | None  # time to its first token; None when no token came
    itl: list[float]  # per token after the first: the gap before its chunk over the tokens the chunk held
    tokens: int  # new tokens received
    client_cpu_s: float  # this process's CPU time sending and reading its round, shared evenly by its requests
    counts: dict | None = None  # its own drafted/accepted figures when the server reports them per request
    token_ids: list[int] = field(default_factory=list)


def sum_counts(counts: list[dict]) -> dict:
    """Speculative-decoding counts added up (drafts, draft_tokens, accepted_tokens, and by position)."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": []}
    for c in counts:
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            out[key] += int(c.get(key) or 0)
        per, mine = list(c.get("accepted_per_position") or []), out["accepted_per_position"]
        mine.extend([0] * (len(per) - len(mine)))
        for i, value in enumerate(per):
            mine[i] += int(value)
    return out


@dataclass
class LoadResult:
    """One round of `concurrency` requests sent at once to one arm: each request, and the round's wall time."""

    concurrency: int
    wall_s: float  # from the first request sent to the last one finished
    requests: list[RequestRecord]
    # Where acceptance came from: "per-request" (the server's own figures per request), "metrics" (the growth
    # of /metrics around the round, `counts`; another client of the server would be counted too), or None.
    counts_source: str | None = None
    counts: dict | None = None
    memory: int | None = None


@dataclass
class RunFailure:
    """Why a run gave no measurement; `stopped` when a stop cut it short (then it is simply discarded)."""

    reason: str
    oom: bool = False
    stopped: bool = False


class Arm(ABC):
    """One arm of a comparison: what it is (`info`) and how to time one run of it."""

    info: ArmInfo
    probes: bool = False  # whether it has an untimed drafting-cost run (the cost model's c)

    @abstractmethod
    def run(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
            watch: Watch) -> RunResult | RunFailure:
        """Time one run on the prompt's token ids; `round_index` numbers its round (a sampled run's seed)."""

    def warm_up(self, prompt_ids: list[int], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                tokens: int) -> RunResult | RunFailure:
        """An untimed run that brings the arm to its steady speed before the counted ones. An engine that can ask
        for fewer new tokens generates `tokens` (a few are enough: the one-time costs come with the first
        step); by default, a whole run."""
        return self.run(prompt_ids, round_index, clock, should_stop, unwatched)

    def probe(self, prompt_ids: list[int], clock: Clock, should_stop: Callable[[], bool], watch: Watch) -> dict | None:
        """The untimed drafting-cost run (explain.explain_arm reads it), or None when a stop cut it short."""
        return None

    loads: bool = False  # whether it can be timed under load (run_load), many requests at once
    # Waits, before a timed run, for the engines' busy processes to go quiet (set by measure.setup); None: no wait.
    quiet: Callable[[Callable[[], bool]], None] | None = None

    def run_load(self, prompts: list[list[int]], round_index: int, clock: Clock, should_stop: Callable[[], bool],
                 watch: Watch) -> LoadResult | RunFailure:
        """Send one request per prompt (token ids), all at once, and time each; only arms with `loads`.

        The level is len(prompts): a comparison sends its prompt that many times, a workload its prompts in turn.
        """
        return RunFailure(f"{self.info.name} cannot be timed under load: its engine runs one request at a time")

    # Whether its engine serves it one arm at a time on a server started fresh for each block of its runs
    # (measure/blocks.py orders the runs then); enter_block makes it ready before each block.
    in_blocks: bool = False

    def enter_block(self, should_stop: Callable[[], bool]) -> Generator[Status, None, bool]:
        """Before a block of this arm's runs, untimed: yields Status while it gets ready; True when it starts
        afresh (a new server: its warm-up comes again). By default nothing to do."""
        return False
        yield  # a generator, as callers `yield from` it

    def with_info(self, info: ArmInfo) -> Arm:
        """This arm under another ArmInfo (a workload's prompt marks its own failures); all else shared."""
        other = copy.copy(self)
        other.info = info
        return other


@dataclass
class Preparation:
    """What every engine of one comparison shares while it prepares; set up by measure.setup."""

    request: Any  # the BenchRequest, resolved and canonical
    store: Any  # the process's model store, for the engines that load models in this process
    device: Any
    dtype: str
    should_stop: Callable[[], bool]
    elapsed: Callable[[], float]  # seconds since the comparison started, for status lines
    messages: list[str] = field(default_factory=list)  # loading notes the report keeps
    host: Any = None  # the engine that holds the target's tokenizer (registry.HOST), once prepared
    # The longest prompt any arm will be sent (a workload's), for engines that size for it; None: the request's.
    prompt_tokens: Callable[[], int] | None = None


class Engine(ABC):
    """One way to generate: it prepares a request, gives its arms (its own plain arm first), and closes.

    `close()` runs however a comparison ends (done, stopped, an error, a cancelled request): servers stop and
    memory is freed there. Register a new engine in engines/registry.py.
    """

    name: ClassVar[str]

    def __init__(self, preparation: Preparation):
        self.preparation = preparation

    @classmethod
    @abstractmethod
    def wanted(cls, request) -> bool:
        """Whether this request has arms on this engine (the host engine is prepared either way)."""

    @abstractmethod
    def prepare(self) -> Generator[Status, None, None]:
        """Load or start what the request needs, yielding status lines (with a heartbeat while it waits)."""

    @abstractmethod
    def arms(self) -> list[Arm]:
        """This engine's arms, plain first; an arm that cannot run carries its sentence in `info.error`."""

    def environment(self) -> dict:
        """What the report records of this engine (versions, servers); {} for nothing."""
        return {}

    def busy_processes(self) -> tuple[int, ...]:
        """Processes on this machine that may still be working after a run (a server polling after its last
        request): every timed run waits for them to go quiet first, whichever engine it is on."""
        return ()

    def close(self) -> None:
        """Stop what `prepare` started; called once, however the comparison ends."""


class Host(Engine):
    """The engine that holds the target's tokenizer in this process (registry.HOST): it is prepared first, for
    every request, whether or not it has arms, and it turns prompts into the token ids every arm is sent."""

    target: Any  # the loaded target (or only its tokenizer), once prepared: name, folder, context_length

    @staticmethod
    @abstractmethod
    def place(request) -> tuple[Any, Any]:
        """(device, dtype) for this request on this machine, before anything loads."""

    @property
    @abstractmethod
    def tokenizer(self): ...

    @abstractmethod
    def encode(self, request) -> list[int]:
        """The prompt's token ids; InputError when it is empty or does not fit the target."""

    @abstractmethod
    def encode_turns(self, bench, turns: tuple[str, ...], answers: list[str]) -> list[int]:
        """A conversation's token ids, its earlier answers between the user's turns."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    def check(self, request, prompt_ids: list[int]) -> None:
        """Refuse a prompt that does not fit every model this engine loaded."""

    def settle(self, should_stop: Callable[[], bool]) -> Generator[Status, None, None]:
        """Wait, with status lines, for work of this process that would slow the timed runs."""
        yield from ()

    @abstractmethod
    def dtype_name(self) -> str: ...

    @abstractmethod
    def described(self) -> dict:
        """The loaded models, by role ("target", "assistant <text>"), for the report's environment."""

    @abstractmethod
    def machine(self, described: dict) -> dict:
        """The machine and versions a result depends on, read where the runs happen."""

    def prompt_facts(self, request) -> dict:
        return {}

    def assistant_parameters(self, request, described: dict) -> list[int]:
        """Per arm of the request, the parameters of the model that drafts for it (0 when none), for estimates."""
        return [0 for _ in request.arms]

    def changes(self, request, strategies: set[str]) -> list[dict]:
        """What this engine does differently from its bare library call, and why."""
        return []


def while_loading(call: Callable[[], object], heartbeat: Callable[[], object],
                  cancel: Callable[[], None] | None = None) -> Generator[object, None, object]:
    """Run `call` in a worker thread, yielding `heartbeat()` every few seconds until it returns; its result.

    The worker runs in a copy of this thread's context, so it sees the GPUs this comparison holds
    (models.placed_on). When the wait is abandoned (the generator closed, Ctrl-C), `cancel()` tells the
    worker to give up before the pool waits for it.
    """
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="assistlab-load") as pool:
        future = pool.submit(context.run, call)
        try:
            while True:
                try:
                    return future.result(timeout=HEARTBEAT_S)
                except concurrent.futures.TimeoutError:
                    yield heartbeat()
        except BaseException:
            if cancel is not None:
                cancel()
            raise
