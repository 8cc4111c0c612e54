"""One load round against a server: every request released at once, each timed on its own."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..base import Clock, RequestRecord
from . import answers, bounds, client, stream


@dataclass
class Sent:
    """What one request brings back: its stream and its share of the client's CPU time, or why it failed."""

    streamed: stream.Streamed | None = None
    cpu_s: float = 0.0
    error: str | None = None


def itl(streamed: stream.Streamed) -> list[float]:
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
                         counts=stream.spec_counts(streamed.spec), token_ids=list(streamed.token_ids or []))


def send_all(url: str, api_key: str | None, bodies: list[dict], clock: Clock, should_stop: Callable[[], bool],
             check: Callable[[stream.Streamed], str | None]) -> tuple[float, list[Sent]]:
    """Stream every body at once (client.stream_all: one event loop, released together): (the round's start on
    `clock`, what each brought back). The first request to fail stops the others. The client's CPU time is the
    round's, shared evenly among its requests (one loop serves them all)."""
    began = time.thread_time()
    round_start, outs = client.stream_all(url, api_key, bodies, clock, should_stop, check)
    cpu = (time.thread_time() - began) / max(1, len(bodies))
    return round_start, [Sent(streamed=out, cpu_s=cpu) if isinstance(out, stream.Streamed)
                         else Sent(cpu_s=cpu, error=str(out)) for out in outs]


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
    return [stream.completion_body(model, p, max_tokens, seed=seed, fixed_length=fixed_length, usage=True)
            for p in prompts]


def checker(url: str, max_tokens: int, fixed_length: bool, vocab: int | None,
            k: int | None = None) -> Callable[[stream.Streamed], str | None]:
    """The check of each answer that run_once makes (answers.problem), that the server sent token ids, and that
    the request's own drafting figures could be true of it at draft length `k` (bounds.request_problem)."""
    def check(streamed: stream.Streamed) -> str | None:
        if streamed.token_ids is None:
            return answers.no_token_ids(url)
        generated = len(streamed.token_ids)
        return (answers.problem(streamed, url, max_tokens, fixed_length, vocab)
                or bounds.request_problem(streamed.spec, url, generated, bounds.draft_length(k, generated)))

    return check


def wall(records: list[RequestRecord]) -> float:
    """From the first request sent to the last one finished."""
    return max(r.started + r.latency for r in records) - min(r.started for r in records)
