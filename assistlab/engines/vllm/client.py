"""Talking to an OpenAI-compatible server: its models, one streaming /v1/completions request, /metrics.

The standard library only (http.client), so that a Stop can close the connection between two chunks: vLLM
aborts a request whose client went away.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ...errors import EngineError

# vLLM's Prometheus counters of speculative decoding (v1/spec_decode/metrics.py), as exposed with `_total`.
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Unreachable(EngineError):
    """Nothing answered at the URL (refused, timed out, not HTTP)."""


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), parts.path.rstrip("/")


def _headers(api_key: str | None) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "*/*"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def get(url: str, path: str, api_key: str | None, timeout: float = 10.0) -> tuple[int, str]:
    """(status, body) of GET url+path; Unreachable in one sentence when nothing answers."""
    conn, base = _connection(url, timeout)
    try:
        conn.request("GET", base + path, headers=_headers(api_key))
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"Nothing answered at {url} ({type(exc).__name__}: {exc}); check the URL and that the "
                          f"server runs.") from None
    finally:
        conn.close()


def served_models(url: str, api_key: str | None, timeout: float = 10.0) -> list[dict]:
    """The entries /v1/models lists ({"id", "root", ...})."""
    status, body = get(url, "/v1/models", api_key, timeout)
    if status in (401, 403):
        raise EngineError(f"The server at {url} refused the API key (HTTP {status}); pass the right one with --server-api-key.")
    if status != 200:
        raise EngineError(f"The server at {url} answered /v1/models with HTTP {status}; is it an OpenAI-compatible server?")
    try:
        entries = [m for m in json.loads(body)["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return entries
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


def read_metrics(url: str, api_key: str | None, timeout: float = 10.0) -> dict | None:
    """parse_metrics of the server's /metrics, or None when it has none (404, or no such counters at all)."""
    status, body = get(url, "/metrics", api_key, timeout)
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


def completion_body(model: str, prompt_ids: list[int], max_tokens: int, *, seed: int = 0,
                    temperature: float = 0.0, fixed_length: bool = True) -> dict:
    """The request every vLLM arm sends: the prompt as token ids, greedy, exactly `max_tokens` new tokens."""
    body = {"model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "return_token_ids": True, "seed": seed, "skip_special_tokens": True,
            "spaces_between_special_tokens": False}
    if fixed_length:
        body.update(ignore_eos=True, min_tokens=max_tokens)
    return body


def stream_completion(url: str, api_key: str | None, body: dict, clock: Callable[[], float],
                      should_stop: Callable[[], bool] = lambda: False, timeout: float = 600.0) -> Streamed:
    """POST /v1/completions with stream=True; each chunk's arrival time on `clock`, from just before sending.

    Between chunks `should_stop()` is checked; when true the connection is closed and `stopped` is set.
    """
    conn, base = _connection(url, timeout)
    out = Streamed()
    payload = json.dumps(body).encode()
    try:
        out.wall_window = (time.time(), 0.0)
        start = clock()
        conn.request("POST", base + "/v1/completions", body=payload, headers=_headers(api_key))
        response = conn.getresponse()
        if response.status != 200:
            detail = response.read().decode("utf-8", "replace")[:300]
            raise EngineError(f"The server at {url} refused the completion request (HTTP {response.status}): {detail}")
        while True:
            line = response.readline()
            if not line:
                break
            if should_stop():
                out.stopped = True
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = clock() - start
            chunk = json.loads(data)
            if chunk.get("error"):
                raise EngineError(f"The server at {url} failed the request: {str(chunk['error'])[:300]}")
            for choice in chunk.get("choices") or []:
                ids = choice.get("token_ids")
                text = choice.get("text") or ""
                out.text += text
                if ids is None:
                    out.token_ids = None
                elif out.token_ids is not None:
                    out.token_ids.extend(int(i) for i in ids)
                count = len(ids) if ids is not None else (1 if text else 0)
                if count:
                    out.times.append(now)
                    out.tokens.append(count)
                out.finish_reason = choice.get("finish_reason") or out.finish_reason
        out.latency = clock() - start
        out.wall_window = (out.wall_window[0], time.time())
        return out
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"The server at {url} stopped answering mid-request ({type(exc).__name__}: {exc}).") from None
    except ValueError:
        raise EngineError(f"The server at {url} streamed something that is not JSON; is it an OpenAI-compatible server?") from None
    finally:
        conn.close()
