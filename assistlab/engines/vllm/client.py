"""Talking to an OpenAI-compatible server: its models, one streaming /v1/completions request, /metrics.

The standard library only (http.client). Every request has a connect timeout, a read timeout and a deadline,
and a watch of its own that shuts its socket on a stop or at the deadline, so a silent or endless server never
holds a run (vLLM aborts a request whose client went away). Every body read is capped, and every text taken
from a server has the API key (and any bearer token) cut out before anyone sees it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ...errors import EngineError
from .redaction import clip, redact  # noqa: F401  (redact: part of this module's interface)

# vLLM's Prometheus counters of speculative decoding (v1/spec_decode/metrics.py), as exposed with `_total`.
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


CONNECT_TIMEOUT_S = 10.0  # to open the connection
READ_TIMEOUT_S = 120.0  # the longest silence between two bytes (a long prompt's prefill on a CPU included)
GET_DEADLINE_S = 30.0  # a whole /v1/models or /metrics answer
DEFAULT_DEADLINE_S = 600.0  # a whole completion, unless the operator's ASSISTLAB_MAX_RUN_S says otherwise
DEADLINE_VAR = "ASSISTLAB_MAX_RUN_S"
# The most AssistLab reads of each answer; more is not a server AssistLab can time.
CAPS = {"/v1/models": 1 << 20, "/metrics": 4 << 20, "stream line": 1 << 20, "error": 64 << 10}
LARGEST_ID = (1 << 31) - 1


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


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise EngineError(f"The server URL {url[:100]!r} has a port that is not a number from 1 to 65535.") from None
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, port, timeout=timeout), parts.path.rstrip("/")


class _Watch:
    """A thread beside one request that shuts its socket when `should_stop()` turns true or the deadline
    passes: a read blocked on a silent server ends at once, not at the next line. `fired` says which."""

    def __init__(self, conn: http.client.HTTPConnection, should_stop: Callable[[], bool], deadline_s: float):
        self.conn, self.should_stop, self.deadline_s = conn, should_stop, deadline_s
        self.fired: str | None = None
        self._sock: socket.socket | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="assistlab-request-watch")

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        end = time.monotonic() + self.deadline_s
        while not self._done.wait(0.05):
            try:
                stop = bool(self.should_stop())
            except Exception:  # noqa: BLE001 - a failing check is a stop: never a request nobody can end
                stop = True
            if stop or time.monotonic() > end:
                self.fired = "stopped" if stop else "deadline"
                # The socket seen at connect: http.client drops conn.sock when the response reads to the close.
                sock = self._sock or self.conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    def connected(self) -> None:
        """After the connection opens: its reads wait up to READ_TIMEOUT_S for a byte (the connect only its own
        timeout); a stop that came while connecting shuts it now."""
        self._sock = self.conn.sock
        if self.conn.sock is not None:
            self.conn.sock.settimeout(min(READ_TIMEOUT_S, self.deadline_s))
            if self.fired:
                with contextlib.suppress(OSError):
                    self.conn.sock.shutdown(socket.SHUT_RDWR)


def _deadline_error(url: str, what: str, seconds: float) -> EngineError:
    return EngineError(f"The server at {url} did not finish {what} within {seconds:g} s, so AssistLab ended it "
                       f"({DEADLINE_VAR} sets the deadline of a completion; default {DEFAULT_DEADLINE_S:g} s).")


def _read_capped(response: http.client.HTTPResponse, cap: int, url: str, what: str) -> bytes:
    body = response.read(cap + 1)
    if len(body) > cap:
        raise EngineError(f"The server at {url} sent more than {_size(cap)} for {what}, the most AssistLab reads "
                          f"of it; is it an OpenAI-compatible server?")
    return body


def _headers(api_key: str | None) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "*/*"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


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
    conn, base = _connection(url, timeout)
    watch = _Watch(conn, should_stop, deadline_s)
    try:
        with watch:
            conn.connect()
            watch.connected()
            conn.request(method, base + path, body=b"" if method == "POST" else None, headers=_headers(api_key))
            response = conn.getresponse()
            body = _read_capped(response, CAPS.get(path, CAPS["error"] if method == "POST" else CAPS["/metrics"]),
                                url, path)
        # A shut socket can end a read early without an error: the part read is not the answer.
        if watch.fired == "deadline":
            raise _deadline_error(url, f"answering {path}", deadline_s)
        if watch.fired == "stopped":
            raise Stopped(f"The request to {url}{path} was stopped.")
        return response.status, body.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        if watch.fired == "deadline":
            raise _deadline_error(url, f"answering {path}", deadline_s) from None
        if watch.fired == "stopped":
            raise Stopped(f"The request to {url}{path} was stopped.") from None
        raise Unreachable(redact(f"Nothing answered at {url} ({type(exc).__name__}: {clip(exc, api_key, 200)}); "
                                 f"check the URL and that the server runs.", api_key)) from None
    finally:
        conn.close()


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


def parse_metrics(text: str) -> dict:
    """The speculative-decoding counters in a Prometheus text, summed over labels; per position by position."""
    out = {"drafts": None, "draft_tokens": None, "accepted_tokens": None, "per_position": {}}
    keys = {DRAFTS: "drafts", DRAFT_TOKENS: "draft_tokens", ACCEPTED_TOKENS: "accepted_tokens"}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name = match["name"].removesuffix("_total")
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if name in keys:
            out[keys[name]] = (out[keys[name]] or 0.0) + value
        elif name == PER_POSITION:
            labels = dict(_LABEL.findall(match["labels"] or ""))
            if labels.get("position", "").isdigit():
                pos = int(labels["position"])
                out["per_position"][pos] = out["per_position"].get(pos, 0.0) + value
    return out


def read_metrics(url: str, api_key: str | None, timeout: float = CONNECT_TIMEOUT_S,
                 should_stop: Callable[[], bool] = lambda: False) -> dict | None:
    """parse_metrics of the server's /metrics, or None when it has none (404, or no such counters at all)."""
    status, body = get(url, "/metrics", api_key, timeout, should_stop)
    return parse_metrics(body) if status == 200 else None


def counts_between(before: dict | None, after: dict | None) -> dict | None:
    """What one request drafted and accepted: the counters' growth between two readings; None when unknown."""
    if not before or not after or after.get("drafts") is None:
        return None
    grow = {k: int(round((after[k] or 0) - (before.get(k) or 0))) for k in ("drafts", "draft_tokens", "accepted_tokens")}
    length = max([*after["per_position"], -1]) + 1
    grow["accepted_per_position"] = [
        int(round(after["per_position"].get(i, 0) - before["per_position"].get(i, 0))) for i in range(length)
    ]
    return grow


@dataclass
class Streamed:
    """One streamed completion: the clock readings of each chunk that carried tokens, and what it carried."""

    latency: float = 0.0
    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    token_ids: list[int] | None = field(default_factory=list)  # None when the server sent no token ids
    text: str = ""
    stopped: bool = False
    wall_window: tuple[float, float] = (0.0, 0.0)
    finish_reason: str | None = None
    began: float = 0.0  # the clock's reading just before sending: `times` and `latency` count from it
    spec: dict | None = None  # the server's own speculative-decoding figures of this request (spec_figures)


def completion_body(model: str, prompt_ids: list[int], max_tokens: int, *, seed: int = 0,
                    temperature: float = 0.0, fixed_length: bool = True, usage: bool = False) -> dict:
    """The request every vLLM arm sends: the prompt as token ids, greedy, exactly `max_tokens` new tokens.

    With `usage` the stream ends with a usage chunk, where vLLM puts a request's own speculative-decoding
    figures (--per-request-spec-decode-metrics).
    """
    body = {"model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "return_token_ids": True, "seed": seed, "skip_special_tokens": True,
            "spaces_between_special_tokens": False}
    if fixed_length:
        body.update(ignore_eos=True, min_tokens=max_tokens)
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


# vLLM's per-request figures (SpeculativeDecodingMetrics in entrypoints/generate/base/protocol.py): whole
# counts, two ratios, and the histogram of verify steps by how many drafts each accepted.
SPEC_COUNTS = ("num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens")
SPEC_RATIOS = ("mean_acceptance_length", "draft_acceptance_rate")


def _spec(chunk: dict, url: str, api_key: str | None) -> dict | None:
    """A chunk's metrics.speculative_decoding, checked: whole counts and ratios, none negative; None when absent."""
    metrics = chunk.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else metrics
    if spec is None:
        return None

    def whole(v: object) -> bool:
        return (type(v) is int or (type(v) is float and v.is_integer())) and 0 <= v <= LARGEST_ID

    histogram = spec.get("acceptance_histogram") if isinstance(spec, dict) else None
    if (not isinstance(spec, dict) or not all(whole(spec.get(k)) for k in SPEC_COUNTS)
            or not all(type(spec.get(k)) in (int, float) and 0 <= spec[k] < float("inf") for k in SPEC_RATIOS)
            or not isinstance(histogram, list) or not all(whole(v) for v in histogram)):
        raise EngineError(f"The server at {url} sent per-request speculative-decoding metrics that are not "
                          f"non-negative numbers with a histogram of whole counts ({_shown(spec, api_key)}), so "
                          f"AssistLab cannot read this request's acceptance.")
    return {**{k: int(spec[k]) for k in SPEC_COUNTS}, **{k: float(spec[k]) for k in SPEC_RATIOS},
            "acceptance_histogram": [int(v) for v in histogram]}


def spec_counts(spec: dict | None) -> dict | None:
    """A request's own figures as the counts counts_between gives: steps, drafted, accepted, by position (a
    step that accepted j drafts accepted positions 0 .. j-1)."""
    if spec is None:
        return None
    histogram = spec["acceptance_histogram"]
    length = max(spec["num_spec_tokens"], len(histogram) - 1)
    return {"drafts": spec["num_spec_steps"], "draft_tokens": spec["num_draft_tokens"],
            "accepted_tokens": spec["num_accepted_draft_tokens"],
            "accepted_per_position": [sum(histogram[i + 1:]) for i in range(length)]}


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _shown(value: object, api_key: str | None) -> str:
    """A short, key-free quote of what a server sent, for the sentence that names it."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return clip(text, api_key, 80, "...")


def _choices(chunk: object, url: str, api_key: str | None) -> list[dict]:
    """The choices of one stream chunk, checked: objects, with text a string and token ids whole numbers."""
    if not isinstance(chunk, dict):
        raise EngineError(f"The server at {url} sent a stream chunk that is {_kind(chunk)} "
                          f"({_shown(chunk, api_key)}), not a JSON object; is it an OpenAI-compatible server?")
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise EngineError(f"The server at {url} sent stream choices that are not a list of objects "
                          f"({_shown(choices, api_key)}); is it an OpenAI-compatible server?")
    for choice in choices:
        ids, text, reason = choice.get("token_ids"), choice.get("text"), choice.get("finish_reason")
        if ids is not None and (not isinstance(ids, list) or not all(
                type(i) is int and 0 <= i <= LARGEST_ID for i in ids)):
            raise EngineError(f"The server at {url} sent token ids that are not whole numbers from 0 to "
                              f"{LARGEST_ID} ({_shown(ids, api_key)}); is it an OpenAI-compatible server?")
        if text is not None and not isinstance(text, str):
            raise EngineError(f"The server at {url} sent a text that is {_kind(text)} ({_shown(text, api_key)}), "
                              f"not a string.")
        if reason is not None and not isinstance(reason, str):
            raise EngineError(f"The server at {url} sent a finish_reason that is {_kind(reason)} "
                              f"({_shown(reason, api_key)}), not a string.")
    return choices


def stream_completion(url: str, api_key: str | None, body: dict, clock: Callable[[], float],
                      should_stop: Callable[[], bool] = lambda: False, timeout: float = CONNECT_TIMEOUT_S,
                      deadline_s: float | None = None) -> Streamed:
    """POST /v1/completions with stream=True; each chunk's arrival time on `clock`, from just before sending.

    When `should_stop()` turns true the connection is shut (mid-chunk too) and `stopped` is set. A request
    that passes its deadline (request_deadline_s()), sends more tokens than `max_tokens`, a line over its cap
    or something that is not a completion chunk raises EngineError in one sentence naming the server.
    """
    deadline_s = request_deadline_s() if deadline_s is None else deadline_s
    asked = int(body.get("max_tokens") or 0)
    conn, base = _connection(url, timeout)
    out = Streamed()
    payload = json.dumps(body).encode()
    watch = _Watch(conn, should_stop, deadline_s)
    try:
        with watch:
            out.wall_window = (time.time(), 0.0)
            start = out.began = clock()
            conn.connect()
            watch.connected()
            conn.request("POST", base + "/v1/completions", body=payload, headers=_headers(api_key))
            response = conn.getresponse()
            if response.status != 200:
                detail = clip(response.read(CAPS["error"]).decode("utf-8", "replace"), api_key, 300)
                raise EngineError(redact(f"The server at {url} refused the completion request (HTTP "
                                         f"{response.status}): {detail}", api_key))
            cap = CAPS["stream line"]
            done = False
            while True:
                line = response.readline(cap + 1)
                if watch.fired:
                    break
                if not line:
                    break
                if len(line) > cap:
                    raise EngineError(f"The server at {url} sent a stream line longer than {_size(cap)}, the most "
                                      f"AssistLab reads of one line; is it an OpenAI-compatible server?")
                if should_stop():
                    out.stopped = True
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                now = clock() - start
                chunk = json.loads(data)
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise EngineError(redact(f"The server at {url} failed the request: "
                                             f"{clip(chunk['error'], api_key, 300)}",
                                             api_key))
                choices = _choices(chunk, url, api_key)
                out.spec = _spec(chunk, url, api_key) or out.spec
                for choice in choices:
                    ids = choice.get("token_ids")
                    text = choice.get("text") or ""
                    out.text += text
                    if ids is None:
                        out.token_ids = None
                    elif out.token_ids is not None:
                        out.token_ids.extend(ids)
                    count = len(ids) if ids is not None else (1 if text else 0)
                    if count:
                        out.times.append(now)
                        out.tokens.append(count)
                    out.finish_reason = choice.get("finish_reason") or out.finish_reason
                if asked and sum(out.tokens) > asked:
                    raise EngineError(f"The server at {url} sent more than the {asked} tokens asked "
                                      f"({sum(out.tokens)} so far), so AssistLab ended the request.")
        if watch.fired == "stopped" and not done:
            out.stopped = True
        elif watch.fired == "deadline" and not done:
            raise _deadline_error(url, "the completion", deadline_s)
        out.latency = clock() - start
        out.wall_window = (out.wall_window[0], time.time())
        return out
    except (OSError, http.client.HTTPException) as exc:
        if watch.fired == "stopped":
            out.stopped = True
            return out
        if watch.fired == "deadline":
            raise _deadline_error(url, "the completion", deadline_s) from None
        raise Unreachable(redact(f"The server at {url} stopped answering mid-request ({type(exc).__name__}: "
                                 f"{clip(exc, api_key, 200)}).", api_key)) from None
    except (ValueError, RecursionError):
        raise EngineError(f"The server at {url} streamed something that is not JSON; is it an OpenAI-compatible server?") from None
    finally:
        conn.close()
