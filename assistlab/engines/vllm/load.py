"""One load round against a server: a thread per request, all released at once, each request timed on its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import AssistLabError
from ..base import Clock, RequestRecord
from . import answers, bounds, client


@dataclass
class Sent:
    """What one request's thread brings back: its stream and CPU time, or why it failed."""

    streamed: client.Streamed | None = None
    cpu_s: float = 0.0
    error: str | None = None


def itl(streamed: client.Streamed) -> list[float]:
    """Per token after the first: the gap before its chunk over the tokens the chunk held. Tokens that came
    with the first one count 0, so the gaps add up to the time from the first token to the last (TPOT's)."""
    if not streamed.times:
        return []
    out = [0.0] * (streamed.tokens[0] - 1)
    for k in range(1, len(streamed.times)):
        gap = (streamed.times[k] - streamed.times[k - 1]) / streamed.tokens[k]
        out += [gap] * streamed.tokens[k]
    return out


def record(index: int, sent: Sent, round_start: float) -> RequestRecord:
    streamed = sent.streamed
    return RequestRecord(index=index, started=streamed.began - round_start, latency=streamed.latency,
                         ttft=streamed.times[0] if streamed.times else None, itl=itl(streamed),
                         tokens=sum(streamed.tokens), client_cpu_s=sent.cpu_s,
                         counts=client.spec_counts(streamed.spec), token_ids=list(streamed.token_ids or []))


def send_all(url: str, api_key: str | None, bodies: list[dict], clock: Clock, should_stop: Callable[[], bool],
             check: Callable[[client.Streamed], str | None]) -> tuple[float, list[Sent]]:
    """Stream every body at once, one thread each, released together by a barrier: (the round's start on
    `clock`, what each brought back). The first request to fail stops the others; every thread is joined."""
    sent = [Sent() for _ in bodies]
    failed = threading.Event()  # the first failure ends the other requests of the round at once

    def stop() -> bool:
        return failed.is_set() or should_stop()

    barrier = threading.Barrier(len(bodies) + 1)

    def one(i: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        began = time.thread_time()
        try:
            streamed = client.stream_completion(url, api_key, bodies[i], clock, stop)
            sent[i].error = None if streamed.stopped else check(streamed)
            sent[i].streamed = streamed
        except client.Stopped:
            sent[i].streamed = client.Streamed(stopped=True)
        except AssistLabError as exc:
            sent[i].error = str(exc)
        except Exception as exc:  # noqa: BLE001 - one request failing must end the round, not this process
            sent[i].error = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
        sent[i].cpu_s = time.thread_time() - began
        if sent[i].error:
            failed.set()

    threads = [threading.Thread(target=one, args=(i,), daemon=True, name=f"assistlab-load-{i}")
               for i in range(len(bodies))]
    started: list[threading.Thread] = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
        round_start = clock()
        barrier.wait()
    except BaseException:
        barrier.abort()  # a thread that could not start (or Ctrl-C): the others go home unsent
        failed.set()
        raise
    finally:
        for thread in started:
            thread.join()
    return round_start, sent


def failure(sent: list[Sent], should_stop: Callable[[], bool]) -> tuple[str, bool] | None:
    """(sentence, stopped) when the round is no measurement: a stop (it is discarded), else the first error."""
    if should_stop():
        return "stopped", True
    error = next((s.error for s in sent if s.error), None)
    if error:
        return error, False
    if any(s.streamed is None or s.streamed.stopped for s in sent):
        return "stopped", True
    return None


def bodies_for(model: str, prompts: list[list[int]], max_tokens: int, fixed_length: bool, seed: int) -> list[dict]:
    """One body per prompt, each asking for its usage chunk (where a request's acceptance figures come)."""
    return [client.completion_body(model, p, max_tokens, seed=seed, fixed_length=fixed_length, usage=True)
            for p in prompts]


def checker(url: str, max_tokens: int, fixed_length: bool, vocab: int | None,
            k: int | None = None) -> Callable[[client.Streamed], str | None]:
    """The check of each answer that run_once makes (answers.problem), that the server sent token ids, and that
    the request's own drafting figures could be true of it at draft length `k` (bounds.request_problem)."""
    def check(streamed: client.Streamed) -> str | None:
        if streamed.token_ids is None:
            return answers.no_token_ids(url)
        generated = len(streamed.token_ids)
        return (answers.problem(streamed, url, max_tokens, fixed_length, vocab)
                or bounds.request_problem(streamed.spec, url, generated, bounds.draft_length(k, generated)))

    return check


def wall(records: list[RequestRecord]) -> float:
    """From the first request sent to the last one finished."""
    return max(r.started + r.latency for r in records) - min(r.started for r in records)
