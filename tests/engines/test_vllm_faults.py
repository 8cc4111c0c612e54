"""Servers that misbehave on purpose: every request has timeouts, a deadline and capped reads, a stop ends it
at once, the API key never comes back through a server's text, and a wrong or malformed answer fails its arm
alone in one sentence, never a measurement."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assistlab.config import BenchRequest  # noqa: E402
from assistlab.engines.transformers.arms import ArmSpec  # noqa: E402
from assistlab.engines.vllm import arms as varms  # noqa: E402
from assistlab.engines.vllm import client, stream  # noqa: E402
from assistlab.errors import EngineError, InputError  # noqa: E402
from assistlab.measure import runner  # noqa: E402

KEY = "SECRETKEY-123456"
ODD_KEY = 'sk-"odd\\key-1234567890'  # a quote and a backslash: JSON-escaped in a JSON body
CUT_INTO = 7  # characters of the key's echo that fall after the cut
PROMPT = "write me a long essay on deep learning"


def _chunk(ids, last=False) -> bytes:
    data = {"choices": [{"index": 0, "text": "".join(f"<{i}>" for i in ids) if all(type(i) is int for i in ids)
                         else "x", "token_ids": ids, "finish_reason": "length" if last else None}]}
    return f"data: {json.dumps(data)}\n\n".encode()


class Misbehaving:
    """An OpenAI-compatible server on loopback whose /v1/models and /v1/completions misbehave as `models` and
    `completions` say; `closed` is set when a client went away mid-answer."""

    def __init__(self, models: str = "ok", completions: str = "ok"):
        self.models, self.completions = models, completions
        self.closed, self.posted = threading.Event(), threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _head(self, code=200, kind="application/json", length=None):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()

            def do_GET(self):
                try:
                    if self.path != "/v1/models":
                        self._head(404, length=0)
                        return
                    body = json.dumps({"data": [{"id": "target", "root": "target"}]}).encode()
                    if outer.models == "huge":
                        body = json.dumps({"data": [{"id": "x" * 100}] * 30_000}).encode()
                    if outer.models == "slow":  # one byte a second
                        self._head(length=len(body))
                        for byte in body:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(1)
                        return
                    self._head(length=len(body))
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    outer.closed.set()

            def do_POST(self):
                outer.posted.set()
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                n, mode = int(request["max_tokens"]), outer.completions
                try:
                    if mode in ("cut400", "cutstream"):  # the key echoed so that the 300-character cut splits it
                        key = self.headers["Authorization"].removeprefix("Bearer ")
                        form = json.dumps(key)[1:-1] if mode == "cut400" else key  # a JSON body escapes it
                        text = "x" * (300 - len(form) + CUT_INTO) + form + " and the rest of the message" * 5
                        if mode == "cut400":
                            body = text.encode()
                            self._head(400, "application/json", len(body))
                            self.wfile.write(body)
                        else:
                            self._head(kind="text/event-stream")
                            self.wfile.write(f"data: {json.dumps({'error': text})}\n\n".encode())
                            self.wfile.flush()
                        return
                    if mode == "echo400":
                        body = f"bad request; you sent Authorization: {self.headers['Authorization']}".encode()
                        self._head(400, "text/plain", len(body))
                        self.wfile.write(body)
                        return
                    self._head(kind="text/event-stream")
                    if mode == "hang":  # headers, then nothing at all
                        while True:
                            time.sleep(0.05)
                            self.wfile.write(b"")
                            if self.rfile.closed:
                                break
                            try:
                                self.connection.settimeout(0.05)
                                if self.connection.recv(1, 0) == b"":
                                    raise ConnectionResetError
                            except TimeoutError:
                                continue
                    if mode == "keepalive":
                        while True:
                            self.wfile.write(b": keep-alive\n\n")
                            self.wfile.flush()
                            time.sleep(0.1)
                    if mode == "longline":
                        self.wfile.write(b"data: " + b"1" * (3 << 20))
                        self.wfile.flush()
                        return
                    chunks = {"ok": [_chunk([7 + i], i == n - 1) for i in range(n)],
                              "short": [_chunk([7 + i], i == 1) for i in range(2)],
                              "many": [_chunk([7 + i % 40]) for i in range(n * 10)],
                              "oov": [_chunk([10_000 + i], i == n - 1) for i in range(n)],
                              "list": [b"data: [1, 2, 3]\n\n"],
                              "objects": [_chunk([{"id": 7}])],
                              "huge": [_chunk([10 ** 30])],
                              "negative": [_chunk([-5])],
                              "nofinish": [_chunk([7 + i]) for i in range(n)]}[mode]
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        time.sleep(0.005)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    outer.closed.set()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "Misbehaving":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _request(url: str, api_key: str | None = None, max_new_tokens: int = 6, vllm_only: bool = False) -> BenchRequest:
    arms = (*(() if vllm_only else (ArmSpec("prompt-lookup"),)), *varms.parse_servers([f"plain={url}"], api_key=api_key))
    return BenchRequest(target="target", arms=arms, prompt=PROMPT, max_new_tokens=max_new_tokens, repeats=1,
                        warmup=0, engines=("vllm",) if vllm_only else ("transformers", "vllm"))


def _vllm_error(store, url: str, **kw) -> tuple[dict, str]:
    data = runner.run_to_report(_request(url, **kw), store).to_dict()
    arm = next(a for a in data["arms"] if a["engine"] == "vllm")
    assert data["status"] == "complete", data["message"]  # the transformers arms go on
    assert next(a for a in data["arms"] if a["name"] == "plain")["error"] is None
    assert arm["error"] and not arm["latencies_s"], arm  # a failed run, never a measurement
    return data, arm["error"]


# ---------------------------------------------------------------- 6: every timed answer is checked


@pytest.mark.parametrize("mode, words", [
    ("short", "sent 2 of the 6 tokens asked"),
    ("many", "more than the 6 tokens asked"),
    ("oov", "outside the target's vocabulary of"),
    ("nofinish", "no finish_reason"),
])
def test_a_wrong_answer_is_a_failed_run_with_its_sentence(store, allowed_models, mode, words):
    with Misbehaving(completions=mode) as fake:
        _data, error = _vllm_error(store, fake.url)
    assert words in error and fake.url in error


# ---------------------------------------------------------------- 7: malformed streams, bad ports


@pytest.mark.parametrize("mode, words", [
    ("list", "a stream chunk that is a list ([1, 2, 3])"),
    ("objects", 'token ids that are not whole numbers from 0 to 2147483647 ([{"id": 7}])'),
    ("huge", "token ids that are not whole numbers"),
    ("negative", "token ids that are not whole numbers from 0 to 2147483647 ([-5])"),
])
def test_a_malformed_stream_is_one_sentence_and_fails_its_arm_alone(store, allowed_models, mode, words):
    with Misbehaving(completions=mode) as fake:
        _data, error = _vllm_error(store, fake.url)
    assert words in error and f"The server at {fake.url}" in error
    assert "Error" not in error and "unexpected" not in error


@pytest.mark.parametrize("port", ["99999", "abc", "0"])
def test_a_bad_port_is_one_sentence(port, monkeypatch):
    with pytest.raises(InputError, match="port that is not a number from 1 to 65535"):
        varms.VllmArm(url=f"http://127.0.0.1:{port}")
    # Under an allow-list entry without a port, the page's check gives the same sentence
    from assistlab import access
    from assistlab.ui import fields

    monkeypatch.setenv(access.SERVERS_ENV, "http://127.0.0.1")
    with pytest.raises(InputError, match="port that is not a number"):
        fields._vllm_arms(("plain",), (), f"plain=http://127.0.0.1:{port}", None, {})


# ---------------------------------------------------------------- 4: the key never comes back


def test_the_api_key_is_cut_from_a_server_s_error(store, allowed_models, tmp_path):
    with Misbehaving(completions="echo400") as fake:
        data, error = _vllm_error(store, fake.url, api_key=KEY)
    assert "refused the completion request (HTTP 400)" in error and "Bearer [redacted]" in error
    assert KEY not in json.dumps(data)
    assert client.redact(f"x {KEY} y Bearer abc.def", KEY) == "x [redacted] y Bearer [redacted]"


@pytest.mark.parametrize("mode", ["cut400", "cutstream"])
def test_a_key_echoed_across_the_cut_never_shows_in_part(store, allowed_models, mode):
    """An HTTP error body (JSON-escaped echo) and an error chunk inside a stream, each with the key placed so that
    the 300-character cut splits it: no 6 characters of it, in any form, reach the report."""
    import urllib.parse

    with Misbehaving(completions=mode) as fake:
        data, error = _vllm_error(store, fake.url, api_key=ODD_KEY)
    assert ("refused the completion request" if mode == "cut400" else "failed the request") in error, error
    forms = [ODD_KEY, json.dumps(ODD_KEY)[1:-1], urllib.parse.quote(ODD_KEY, safe="")]
    for text in (error, json.dumps(data)):
        leaks = [form[i:i + 6] for form in forms for i in range(len(form) - 5) if form[i:i + 6] in text]
        assert not leaks, (leaks, error)


# ---------------------------------------------------------------- 3+5: deadlines, caps, a stop at once


def test_a_huge_models_list_is_capped_and_says_which_cap(store, allowed_models):
    with Misbehaving(models="huge") as fake:
        _data, error = _vllm_error(store, fake.url)
    assert "sent more than 1 MiB for /v1/models" in error


def test_a_huge_stream_line_is_capped(store, allowed_models):
    with Misbehaving(completions="longline") as fake:
        _data, error = _vllm_error(store, fake.url)
    assert "a stream line longer than 1 MiB" in error


def test_endless_keep_alives_end_at_the_deadline():
    with Misbehaving(completions="keepalive") as fake:
        began = time.monotonic()
        body = stream.completion_body("target", [1, 2, 3], 6)
        with pytest.raises(EngineError, match="did not finish the completion within 1.5 s"):
            client.stream_completion(fake.url, None, body, time.perf_counter, deadline_s=1.5)
        assert time.monotonic() - began < 5
        assert fake.closed.wait(5)


def test_the_operator_s_max_run_s_ends_an_endless_stream(store, allowed_models, monkeypatch):
    monkeypatch.setenv(client.DEADLINE_VAR, "8")
    assert client.request_deadline_s() == 8
    with Misbehaving(completions="keepalive") as fake:
        began = time.monotonic()
        data = runner.run_to_report(_request(fake.url, vllm_only=True), store).to_dict()
        assert fake.posted.is_set() and fake.closed.wait(5)
    assert data["status"] == "stopped" and "ASSISTLAB_MAX_RUN_S" in data["message"]
    assert time.monotonic() - began < 60


def test_a_stop_ends_a_request_to_a_silent_server_at_once(store, allowed_models):
    stop = threading.Event()
    with Misbehaving(completions="hang") as fake:
        stopped_at = []

        def stop_once_asked():
            if fake.posted.wait(120):
                time.sleep(0.3)
                stopped_at.append(time.monotonic())
                stop.set()

        threading.Thread(target=stop_once_asked, daemon=True).start()
        for last in runner.run_benchmark(_request(fake.url, vllm_only=True), store, should_stop=stop.is_set):
            pass
        assert stopped_at and time.monotonic() - stopped_at[0] < 5  # at once, not at the read timeout
        assert fake.closed.wait(5)  # the connection was closed, not left to the server
    assert last.report.status == "stopped"


def test_a_stop_ends_a_slow_models_list_at_once():
    stop = threading.Event()
    with Misbehaving(models="slow") as fake:
        threading.Timer(0.5, stop.set).start()
        began = time.monotonic()
        with pytest.raises(client.Stopped):
            client.served_models(fake.url, None, should_stop=stop.is_set)
        assert time.monotonic() - began < 3


def test_a_slow_models_list_ends_at_its_deadline():
    with Misbehaving(models="slow") as fake:
        began = time.monotonic()
        with pytest.raises(EngineError, match="did not finish answering /v1/models within 2 s"):
            client.get(fake.url, "/v1/models", None, deadline_s=2)
        assert time.monotonic() - began < 5


class Silent:
    """A TCP listener that accepts connections and never answers a byte: a request waits for its headers."""

    def __init__(self):
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted, self.closed = threading.Event(), threading.Event()

    def _serve(self):
        import contextlib

        with contextlib.suppress(OSError):
            conn, _ = self.sock.accept()
            self.accepted.set()
            with conn:
                while conn.recv(65536):  # read the request, answer nothing; b"" once the client closed
                    pass
                self.closed.set()

    def __enter__(self) -> "Silent":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.sock.close()


def test_a_stop_ends_a_request_still_waiting_for_its_headers():
    stop = threading.Event()
    with Silent() as fake:
        threading.Thread(target=lambda: fake.accepted.wait(10) and (time.sleep(0.3), stop.set()), daemon=True).start()
        began = time.monotonic()
        out = client.stream_completion(fake.url, None, stream.completion_body("target", [1, 2, 3], 6),
                                       time.perf_counter, should_stop=stop.is_set)
        assert out.stopped and not out.tokens
        assert time.monotonic() - began < 5  # at once, not at the 120 s read timeout
        assert fake.closed.wait(5)  # the connection was closed, not left open


def test_a_server_that_never_sends_headers_ends_at_the_deadline():
    with Silent() as fake:
        began = time.monotonic()
        with pytest.raises(EngineError, match="did not finish answering /metrics within 1.5 s"):
            client.get(fake.url, "/metrics", None, deadline_s=1.5)
        assert time.monotonic() - began < 5 and fake.closed.wait(5)


def test_a_proxy_in_the_environment_is_not_used_for_the_lab_s_own_servers(monkeypatch):
    """A lab's HTTP proxy would not reach the servers on its own network: AssistLab talks to them directly."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with Misbehaving() as fake:
        assert [m["id"] for m in client.served_models(fake.url, None)] == ["target"]
        out = client.stream_completion(fake.url, None, stream.completion_body("target", [1, 2, 3], 6), time.perf_counter)
    assert out.token_ids == [7, 8, 9, 10, 11, 12] and out.finish_reason == "length"


def test_a_stop_while_an_operator_server_is_checked_ends_as_a_stop(store, allowed_models):
    """A Stop that lands while the server's model list is read (before anything is timed) is a stopped
    comparison, not a failed one."""
    stop = threading.Event()
    with Misbehaving(models="slow") as fake:
        threading.Timer(0.5, stop.set).start()
        events = list(runner.run_benchmark(_request(fake.url, vllm_only=True), store, should_stop=stop.is_set))
    assert events[-1].kind == "done" and events[-1].report.status == "stopped", events[-1].report.message
