"""What a vLLM server's answers mean: the completion request every vLLM arm sends, its stream chunks checked
one by one, a request's own speculative-decoding figures, and the server's Prometheus counters.

No network here (engines/vllm/client.py talks to the server); each check names the server and quotes what it
sent with the API key cut out (redaction.clip).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ...errors import EngineError
from .redaction import clip, redact

# vLLM's Prometheus counters of speculative decoding (v1/spec_decode/metrics.py), as exposed with `_total`.
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
LARGEST_ID = (1 << 31) - 1


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


def take(out: Streamed, data: bytes, now: float, url: str, api_key: str | None, asked: int) -> None:
    """One `data:` payload of the stream (not [DONE]) into `out`, arrived at `now`: its choices checked, its tokens
    counted, its own figures kept. EngineError in one sentence for an error chunk, something not a completion
    chunk, or more tokens than the `asked` (0: no limit)."""
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        raise EngineError(f"The server at {url} streamed something that is not JSON; is it an OpenAI-compatible "
                          f"server?") from None
    if isinstance(chunk, dict) and chunk.get("error"):
        raise EngineError(redact(f"The server at {url} failed the request: {clip(chunk['error'], api_key, 300)}",
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
        raise EngineError(f"The server at {url} sent more than the {asked} tokens asked ({sum(out.tokens)} so far), "
                          f"so AssistLab ended the request.")
