"""Talking to an OpenAI-compatible server over HTTP: its models, /metrics, sleep mode's calls, and one streaming
/v1/completions request.

On httpx. Each request runs in an event loop of its own (the callers are threads: a comparison's, each load
round's requests), under a cancel scope that a stop or the request's deadline cancels at once, whatever the
request is waiting for (the connection, the headers, the next byte), so a silent or endless server never holds a
run; the connection closes with it and vLLM aborts a request whose client went away. httpx's timeouts bound the
connect and each silence; every body read is capped here, and every text taken from a server has the API key
(and any bearer token) cut out before anyone sees it. What the answers mean is engines/vllm/stream.py.
"""

from __future__ import annotations

import functools
import json
import math
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc
import httpx

from ...errors import EngineError
from . import stream
from .redaction import clip, redact  # noqa: F401  (redact: part of this module's interface)

CONNECT_TIMEOUT_S = 10.0  # to open the connection
READ_TIMEOUT_S = 120.0  # the longest silence between two bytes (a long prompt's prefill on a CPU included)
GET_DEADLINE_S = 30.0  # a whole /v1/models or /metrics answer
DEFAULT_DEADLINE_S = 600.0  # a whole completion, unless the operator's ASSISTLAB_MAX_RUN_S says otherwise
DEADLINE_VAR = "ASSISTLAB_MAX_RUN_S"
WATCH_S = 0.05  # how often a request asks whether it should stop
# The most AssistLab reads of each answer; more is not a server AssistLab can time.
CAPS = {"/v1/models": 1 << 20, "/metrics": 4 << 20, "stream line": 1 << 20, "error": 64 << 10}
T = TypeVar("T")


class Unreachable(EngineError):
    """Nothing answered at the URL (refused, timed out, not HTTP)."""


class Stopped(EngineError):
    """A stop (`should_stop()`) ended the request before its answer was read."""


def request_deadline_s(environ: dict | None = None) -> float:
    """The deadline of one completion: the operator's ASSISTLAB_MAX_RUN_S when it is a positive number."""
    text = ((os.environ if environ is None else environ).get(DEADLINE_VAR) or "").strip()
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_DEADLINE_S
    return value if 0 < value < float("inf") else DEFAULT_DEADLINE_S


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


@functools.cache
def _tls() -> ssl.SSLContext:
    """The system's certificates, as the standard library trusts them; made once (loading them takes a while)."""
    return ssl.create_default_context()


def _client(connect_s: float, read_s: float, limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    """One request's client. No proxy from the environment (a lab's proxy would not reach its own servers), no
    redirects, and no compression: a cap counts the bytes that came over the wire, not a decompressed bomb."""
    return httpx.AsyncClient(timeout=httpx.Timeout(read_s, connect=connect_s), trust_env=False, verify=_tls(),
                             follow_redirects=False, limits=limits or httpx.Limits())


def _headers(api_key: str | None) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "*/*", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _address(url: str, path: str) -> httpx.URL:
    try:
        return httpx.URL(url.rstrip("/") + path)
    except httpx.InvalidURL:
        raise EngineError(f"The server URL {url[:100]!r} has a port that is not a number from 1 to 65535.") from None


def _stopping(should_stop: Callable[[], bool]) -> bool:
    try:
        return bool(should_stop())
    except Exception:  # noqa: BLE001 - a failing check is a stop: never a request nobody can end
        return True


def _bounded(work: Callable[[], Awaitable[T]], should_stop: Callable[[], bool],
             deadline_s: float) -> tuple[T | None, str | None]:
    """Run `work` in an event loop of its own: (its value, None), or (None, "stopped" or "deadline") when a stop
    or the deadline cancelled it first. What `work` raises is raised as it is."""
    async def main() -> tuple[T | None, str | None, BaseException | None]:
        fired: list[str] = []
        value, error = None, None

        async def watch(scope: anyio.CancelScope) -> None:
            while not _stopping(should_stop):
                await anyio.sleep(WATCH_S)
            fired.append("stopped")
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(watch, group.cancel_scope)
            with anyio.move_on_after(deadline_s) as timer:
                try:
                    value = await work()
                except Exception as exc:  # noqa: BLE001 - raised below, not inside the group's ExceptionGroup
                    error = exc
            if timer.cancelled_caught and not fired:  # a stop due by now counts first, as the watch would
                fired.append("stopped" if _stopping(should_stop) else "deadline")
            group.cancel_scope.cancel()
        return value, (fired[0] if fired else None), error

    value, fired, error = anyio.run(main)
    if error is not None and fired is None:
        raise error
    return value, fired


def _deadline_error(url: str, what: str, seconds: float) -> EngineError:
    return EngineError(f"The server at {url} did not finish {what} within {seconds:g} s, so AssistLab ended it "
                       f"({DEADLINE_VAR} sets the deadline of a completion; default {DEFAULT_DEADLINE_S:g} s).")


def _unreachable(url: str, exc: Exception, api_key: str | None, mid: bool) -> Unreachable:
    said = (f"The server at {url} stopped answering mid-request" if mid else f"Nothing answered at {url}")
    why = f"{type(exc).__name__}: {clip(exc, api_key, 200)}"
    tail = "." if mid else "; check the URL and that the server runs."
    return Unreachable(redact(f"{said} ({why}){tail}", api_key))


async def _read_capped(response: httpx.Response, cap: int, url: str, what: str | None) -> bytes:
    """The body, at most `cap` bytes: more is an EngineError naming `what`, or (`what` None) cut at the cap."""
    body = bytearray()
    async for piece in response.aiter_raw():
        body += piece
        if len(body) > cap:
            if what is None:
                return bytes(body[:cap])
            raise EngineError(f"The server at {url} sent more than {_size(cap)} for {what}, the most AssistLab "
                              f"reads of it; is it an OpenAI-compatible server?")
    return bytes(body)


def get(url: str, path: str, api_key: str | None, timeout: float = CONNECT_TIMEOUT_S,
        should_stop: Callable[[], bool] = lambda: False, deadline_s: float = GET_DEADLINE_S) -> tuple[int, str]:
    """(status, body) of GET url+path, the body capped (CAPS); Unreachable in one sentence when nothing answers."""
    return _call("GET", url, path, api_key, timeout, should_stop, deadline_s)


def post(url: str, path: str, api_key: str | None, timeout: float = CONNECT_TIMEOUT_S,
         should_stop: Callable[[], bool] = lambda: False, deadline_s: float = GET_DEADLINE_S) -> tuple[int, str]:
    """(status, body) of an empty POST to url+path (sleep mode's /sleep and /wake_up), as `get` reads its answer:
    bounded by `deadline_s`, ended at once by a stop, the body capped."""
    return _call("POST", url, path, api_key, timeout, should_stop, deadline_s)


def _call(method: str, url: str, path: str, api_key: str | None, timeout: float,
          should_stop: Callable[[], bool], deadline_s: float) -> tuple[int, str]:
    address = _address(url, path)
    cap = CAPS.get(path, CAPS["error"] if method == "POST" else CAPS["/metrics"])

    async def work() -> tuple[int, bytes]:
        async with _client(timeout, min(READ_TIMEOUT_S, deadline_s)) as http:
            content = b"" if method == "POST" else None
            async with http.stream(method, address, content=content, headers=_headers(api_key)) as response:
                return response.status_code, await _read_capped(response, cap, url, path)

    try:
        answer, fired = _bounded(work, should_stop, deadline_s)
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc, api_key, mid=False) from None
    if fired == "deadline":
        raise _deadline_error(url, f"answering {path}", deadline_s)
    if fired == "stopped":
        raise Stopped(f"The request to {url}{path} was stopped.")
    status, body = answer
    return status, body.decode("utf-8", "replace")


def served_models(url: str, api_key: str | None, timeout: float = CONNECT_TIMEOUT_S,
                  should_stop: Callable[[], bool] = lambda: False) -> list[dict]:
    """The entries /v1/models lists ({"id", "root", ...}); their texts with the key cut out."""
    status, body = get(url, "/v1/models", api_key, timeout, should_stop)
    if status in (401, 403):
        raise EngineError(f"The server at {url} refused the API key (HTTP {status}); pass the right one with --server-api-key.")
    if status != 200:
        raise EngineError(f"The server at {url} answered /v1/models with HTTP {status}; is it an OpenAI-compatible server?")
    try:
        entries = [m for m in json.loads(body)["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return [{**m, "id": clip(m["id"], api_key, 200), "root": clip(str(m.get("root") or ""), api_key, 500)}
                for m in entries]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EngineError(f"The server at {url} answered /v1/models with something that is not a model list.") from None


def read_metrics(url: str, api_key: str | None, timeout: float = CONNECT_TIMEOUT_S,
                 should_stop: Callable[[], bool] = lambda: False) -> dict | None:
    """stream.parse_metrics of the server's /metrics, or None when it has none (404, or no such counters)."""
    status, body = get(url, "/metrics", api_key, timeout, should_stop)
    return stream.parse_metrics(body) if status == 200 else None


async def _lines(response: httpx.Response, url: str):
    """The stream's lines as they come, each at most CAPS["stream line"] bytes."""
    cap, buffer = CAPS["stream line"], b""
    async for piece in response.aiter_raw():
        *lines, buffer = (buffer + piece).split(b"\n")
        if len(buffer) > cap or any(len(line) >= cap for line in lines):
            raise EngineError(f"The server at {url} sent a stream line longer than {_size(cap)}, the most "
                              f"AssistLab reads of one line; is it an OpenAI-compatible server?")
        for line in lines:
            yield line
    if buffer:
        yield buffer


async def _completion(http: httpx.AsyncClient, url: str, api_key: str | None, body: dict,
                      clock: Callable[[], float], should_stop: Callable[[], bool], out: stream.Streamed) -> None:
    """One streamed completion into `out`: each chunk's arrival on `clock`, from just before sending; a stop
    between lines sets `out.stopped`. EngineError in one sentence for an answer that is not a completion stream."""
    address, asked = _address(url, "/v1/completions"), int(body.get("max_tokens") or 0)
    payload = json.dumps(body).encode()
    out.wall_window = (time.time(), 0.0)
    start = out.began = clock()
    async with http.stream("POST", address, content=payload, headers=_headers(api_key)) as response:
        if response.status_code != 200:
            detail = (await _read_capped(response, CAPS["error"], url, None)).decode("utf-8", "replace")
            raise EngineError(redact(f"The server at {url} refused the completion request (HTTP "
                                     f"{response.status_code}): {clip(detail, api_key, 300)}", api_key))
        async for line in _lines(response, url):
            if _stopping(should_stop):
                out.stopped = True
                return
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            stream.take(out, data, clock() - start, url, api_key, asked)
    out.latency = clock() - start
    out.wall_window = (out.wall_window[0], time.time())


def _mid_request(url: str, exc: httpx.HTTPError, api_key: str | None) -> Unreachable:
    return _unreachable(url, exc, api_key, mid=not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)))


def stream_completion(url: str, api_key: str | None, body: dict, clock: Callable[[], float],
                      should_stop: Callable[[], bool] = lambda: False, timeout: float = CONNECT_TIMEOUT_S,
                      deadline_s: float | None = None) -> stream.Streamed:
    """POST /v1/completions with stream=True; each chunk's arrival time on `clock`, from just before sending.

    When `should_stop()` turns true the request is cancelled (mid-chunk too, and while connecting) and `stopped`
    is set. A request that passes its deadline (request_deadline_s()), sends more tokens than `max_tokens`, a line
    over its cap or something that is not a completion chunk raises EngineError in one sentence naming the server.
    """
    deadline_s = request_deadline_s() if deadline_s is None else deadline_s
    out = stream.Streamed()

    async def work() -> None:
        async with _client(timeout, min(READ_TIMEOUT_S, deadline_s)) as http:
            await _completion(http, url, api_key, body, clock, should_stop, out)

    try:
        _none, fired = _bounded(work, should_stop, deadline_s)
    except httpx.HTTPError as exc:
        raise _mid_request(url, exc, api_key) from None
    if fired == "deadline":
        raise _deadline_error(url, "the completion", deadline_s)
    out.stopped = out.stopped or fired == "stopped"
    return out


def stream_all(url: str, api_key: str | None, bodies: list[dict], clock: Callable[[], float],
               should_stop: Callable[[], bool], check: Callable[[stream.Streamed], str | None] = lambda s: None,
               timeout: float = CONNECT_TIMEOUT_S,
               deadline_s: float | None = None) -> tuple[float, list[stream.Streamed | EngineError]]:
    """Every body streamed at once, as tasks of one event loop on connections of their own: (the round's start on
    `clock`, each request's Streamed or the EngineError that ended it). Each request has the deadline of one
    completion; an answer `check` finds wrong (its sentence) is that request's error. The first error cancels the
    others, which come back `stopped`, as does every request when `should_stop()` turns true."""
    deadline_s = request_deadline_s() if deadline_s is None else deadline_s
    outs: list[stream.Streamed | EngineError] = [stream.Streamed() for _ in bodies]
    began: list[float] = []

    async def one(http: httpx.AsyncClient, i: int, group: anyio.abc.TaskGroup) -> None:
        out = outs[i]
        with anyio.move_on_after(deadline_s) as timer:
            try:
                await _completion(http, url, api_key, bodies[i], clock, should_stop, out)
                wrong = None if out.stopped else check(out)
                if wrong:
                    outs[i] = EngineError(wrong)
            except httpx.HTTPError as exc:
                outs[i] = _mid_request(url, exc, api_key)
            except EngineError as exc:
                outs[i] = exc
            except Exception as exc:  # noqa: BLE001 - one request failing ends the round, not this process
                outs[i] = EngineError(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        if timer.cancelled_caught:
            outs[i] = _deadline_error(url, "the completion", deadline_s)
        if isinstance(outs[i], EngineError):
            group.cancel_scope.cancel()

    async def work() -> None:
        limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
        async with _client(timeout, min(READ_TIMEOUT_S, deadline_s), limits) as http:
            async with anyio.create_task_group() as group:
                began.append(clock())
                for i in range(len(bodies)):
                    group.start_soon(one, http, i, group)

    _bounded(work, should_stop, math.inf)
    for out in outs:
        if isinstance(out, stream.Streamed) and not out.latency:
            out.stopped = True  # cancelled: by a stop, or by another request's error
    return (began[0] if began else clock()), outs
