"""One set-up for a comparison, a sweep and a workload: prepare every engine the request needs, gather the arms."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from ..config import BenchRequest
from ..engines import registry
from ..engines.base import Arm, Engine, Host, Preparation, Status
from ..errors import EngineError
from ..results.events import Event
from . import contention


@dataclass
class Setup:
    """The prepared engines of one measurement and their arms, in the order they are reported."""

    host: Host
    engines: list[Engine]
    arms: list[Arm]
    messages: list[str]
    described: dict  # the loaded models by role, for the environment and the rough estimate
    machine: dict  # the machine and versions, read by the host where the runs happen
    engines_env: dict = field(default_factory=dict)  # per engine with arms: what it records (versions, servers)
    quiet: dict | None = None  # the waits for busy processes before each run (contention.Quiet), when any


def place(request: BenchRequest):
    """(device, dtype) for the request on this machine, before anything loads."""
    return registry.HOST.place(request)


def prepare(
    request: BenchRequest,
    store,
    device,
    dtype,
    should_stop: Callable[[], bool],
    elapsed: Callable[[], float],
    status: Callable[[Status], Event],
    engines: list[Engine],
    check: Callable[[Host], None] | None = None,
    prompt_tokens: Callable[[Host], int] | None = None,
) -> Generator[Event, None, Setup]:
    """Prepare the host, then every other engine the request wants; their arms, named apart.

    Each engine is appended to `engines` as soon as it exists, so the caller closes every one (`close`) however
    this ends. `check(host)`, when given, runs as soon as the host holds the target, so a prompt that does not
    fit is refused before any server starts; `prompt_tokens(host)` is the longest prompt the arms will be sent
    (a workload's), asked only by an engine that sizes for it; None: the request's own prompt. Raises
    EngineError when no arm at all can run.
    """
    preparation = Preparation(request, store, device, dtype, should_stop, elapsed)
    host = registry.HOST(preparation)
    engines.append(host)
    yield from _statuses(host.prepare(), status)
    preparation.host = host
    if check is not None:
        check(host)
    if prompt_tokens is not None:
        preparation.prompt_tokens = lambda: prompt_tokens(host)
    for cls in registry.engines_for(request)[1:]:
        engine = cls(preparation)
        engines.append(engine)
        yield from _statuses(engine.prepare(), status)
    yield from _statuses(host.settle(should_stop), status)
    arms = named_apart([arm for engine in engines for arm in engine.arms()])
    if arms and all(a.info.error for a in arms) and not should_stop():  # a stop's own errors end as a stop
        raise EngineError(next(a.info.error for a in arms))
    quiet = None
    if any(e.busy_processes() for e in engines):
        quiet = contention.Quiet(lambda: [pid for e in engines for pid in e.busy_processes()])
        for arm in arms:
            arm.quiet = quiet
    described = host.described()
    return Setup(host, list(engines), arms, preparation.messages, described, host.machine(described),
                 {e.name: e.environment() for e in engines if e.wanted(request)}, None if quiet is None else quiet.record)


def named_apart(arms: list[Arm]) -> list[Arm]:
    """Two arms with the same name (the same settings, or one label on two engines) get "#2", "#3", ..."""
    names: set[str] = set()
    for arm in arms:
        base, name, copy = arm.info.name, arm.info.name, 1
        while name in names:
            copy += 1
            name = f"{base} #{copy}"
        arm.info.name = name
        names.add(name)
    return arms


def close(engines: list[Engine]) -> None:
    """Close every engine (servers stopped, memory freed), the last prepared first; one failing stops none other."""
    errors = []
    for engine in reversed(engines):
        try:
            engine.close()
        except Exception as exc:  # noqa: BLE001 - the others must still close; the first is raised after
            errors.append(exc)
    if errors:
        raise errors[0]


def _statuses(steps: Generator[Status, None, object], status: Callable[[Status], Event]) -> Generator[Event, None, None]:
    for step in steps:
        yield status(step)
