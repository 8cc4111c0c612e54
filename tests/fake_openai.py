"""A tiny OpenAI-compatible server on loopback for the vLLM engine's tests: /v1/models, a streaming
/v1/completions of canned token ids, and /metrics with speculative-decoding counters that grow per request.

Importable (`FakeServer(...)` runs in a thread) and runnable: `python fake_openai.py --port P --model M ...`
takes vLLM's server flags, so a fake ASSISTLAB_VLLM_PYTHON can start it as AssistLab starts vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Behaviour:
    """What the fake serves: the model, the token ids, seconds per chunk, tokens per chunk, counters per request."""

    def __init__(self, model="target", root=None, token_ids=None, delay_s=0.01, per_chunk=1, drafts=None,
                 metrics=True, api_key=None, max_num_seqs=None, spec_metrics=None, fail_above=None,
                 fail_mode="503", extra_metrics=()):
        self.model, self.root = model, root or model
        self.max_num_seqs = max_num_seqs  # advertised in /v1/models when set
        # The `metrics.speculative_decoding` of a final usage chunk, sent when the body asks for its usage
        # (stream_options.include_usage), as vLLM's --per-request-spec-decode-metrics does; None: no metrics.
        self.spec_metrics = spec_metrics
        # More than this many completions in flight at once: the extra one fails, with HTTP 503 ("503") or by
        # dropping its connection mid-stream ("drop"). None: it serves any number.
        self.fail_above, self.fail_mode = fail_above, fail_mode
        self.in_flight = self.most_in_flight = 0
        self.token_ids = token_ids  # None: 7, 8, 9, ... as many as asked
        self.delay_s, self.per_chunk = delay_s, per_chunk
        self.delay_for = None  # seconds per chunk by the requests in flight (None: delay_s)
        self.drafts = drafts  # per request: (drafts, draft_tokens, accepted_tokens, [per position])
        self.metrics, self.api_key = metrics, api_key
        # Lines added to /metrics once a request has completed (a hostile server's figures, as it sends them).
        self.extra_metrics, self.completed = list(extra_metrics), 0
        self.totals = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}
        self.requests: list[dict] = []
        self.disconnected = threading.Event()
        self.lock = threading.Lock()
        # vLLM's sleep mode (--enable-sleep-mode with VLLM_SERVER_DEV_MODE=1): /sleep, /wake_up, /is_sleeping. A
        # completion while asleep is refused (and counted); `wake_hang_from`: the wake (1-based) from which
        # /wake_up never answers. `events`: a JSON-lines file every server appends its moments to, with `port`.
        self.sleep_mode, self.asleep = False, False
        self.wakes = self.sleeps = self.refused_asleep = 0
        self.wake_hang_from: int | None = None
        self.events: str | None = None
        self.port: int | None = None

    def log(self, event: str) -> None:
        if self.events:
            with open(self.events, "a") as fh:
                fh.write(json.dumps({"t": time.time(), "port": self.port, "event": event}) + "\n")


def _handler(b: Behaviour):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _authorised(self) -> bool:
            if b.api_key and self.headers.get("Authorization") != f"Bearer {b.api_key}":
                self._send(401, {"error": "bad key"})
                return False
            return True

        def _send(self, code, data, kind="application/json"):
            body = data if isinstance(data, bytes) else json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if not self._authorised():
                return
            if self.path == "/v1/models":
                entry = {"id": b.model, "root": b.root, "object": "model"}
                if b.max_num_seqs is not None:
                    entry["max_num_seqs"] = b.max_num_seqs
                self._send(200, {"object": "list", "data": [entry]})
            elif self.path == "/metrics" and b.metrics:
                t = b.totals
                lines = [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{b.model}"}} {t["drafts"]}.0',
                         f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{b.model}"}} {t["draft_tokens"]}.0',
                         f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{b.model}"}} {t["accepted"]}.0']
                lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{b.model}",'
                          f'position="{i}"}} {v}.0' for i, v in enumerate(t["per_pos"])]
                lines += b.extra_metrics if b.completed else []
                self._send(200, ("# HELP x\n" + "\n".join(lines) + "\n").encode(), "text/plain")
            elif self.path == "/health":
                self._send(200, b"")
            elif self.path == "/is_sleeping" and b.sleep_mode:
                self._send(200, {"is_sleeping": b.asleep})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            if not self._authorised():
                return
            if self.path.split("?")[0] in ("/sleep", "/wake_up"):
                self._sleep_or_wake(self.path.split("?")[0])
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if b.asleep:
                with b.lock:
                    b.refused_asleep += 1
                b.log("refused")
                self._send(400, {"error": "The engine is sleeping; wake it up first."})
                return
            b.log("request")
            with b.lock:
                b.requests.append(body)
            if body.get("model") != b.model:
                self._send(404, {"error": f"The model `{body.get('model')}` does not exist."})
                return
            with b.lock:
                b.in_flight += 1
                b.most_in_flight = max(b.most_in_flight, b.in_flight)
                over = b.fail_above is not None and b.in_flight > b.fail_above
            try:
                self._complete(body, over)
            finally:
                with b.lock:
                    b.in_flight -= 1
                b.log("request_end")

        def _sleep_or_wake(self, path):
            if not b.sleep_mode:
                self._send(404, {"detail": "Not Found"})
                return
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if path == "/sleep":
                time.sleep(0.05)
                with b.lock:
                    b.sleeps += 1
                    b.asleep = True
                b.log("sleep")
                self._send(200, {"status": "sleeping", "level": 1})
                return
            with b.lock:
                b.wakes += 1
                hang = b.wake_hang_from is not None and b.wakes >= b.wake_hang_from
            if hang:  # a wake that never answers (and never wakes)
                b.log("wake_hang")
                time.sleep(600)
                return
            time.sleep(0.05)
            with b.lock:
                b.asleep = False
            b.log("wake")
            self._send(200, {"status": "awake", "tags": None})

        def _complete(self, body, over):
            if over and b.fail_mode == "503":
                self._send(503, {"error": f"Server overloaded: more than {b.fail_above} requests at once"})
                return
            n = int(body["max_tokens"])
            ids = list(b.token_ids[:n]) if b.token_ids is not None else [7 + i % 50 for i in range(n)]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for start in range(0, len(ids), b.per_chunk):
                    time.sleep(b.delay_s if b.delay_for is None else b.delay_for(b.in_flight))
                    part = ids[start:start + b.per_chunk]
                    last = start + b.per_chunk >= len(ids)
                    chunk = {"choices": [{"index": 0, "text": "".join(f"<{i}>" for i in part), "token_ids": part,
                                          "finish_reason": "length" if last else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if over:  # "drop": the server goes away mid-answer
                        self.connection.shutdown(2)
                        return
                if b.spec_metrics is not None and (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens":
                             len(ids)}, "metrics": {"speculative_decoding": b.spec_metrics}}
                    self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                b.disconnected.set()
                return
            with b.lock:
                b.completed += 1
            if b.drafts:
                drafts, tokens, accepted, per_pos = b.drafts
                with b.lock:
                    t = b.totals
                    t["drafts"] += drafts
                    t["draft_tokens"] += tokens
                    t["accepted"] += accepted
                    t["per_pos"] = [a + c for a, c in zip(t["per_pos"] + [0] * len(per_pos), per_pos)]

    return Handler


class FakeServer:
    """`with FakeServer(Behaviour(...)) as url:` serves on a free loopback port until the block ends."""

    def __init__(self, behaviour: Behaviour, port: int = 0):
        self.behaviour = behaviour
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(behaviour))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str]) -> None:
    """Run as vLLM's server would be run: the flags AssistLab passes, plus FAKE_* variables for behaviour."""
    import os

    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--served-model-name")
    parser.add_argument("--port", type=int)
    parser.add_argument("--speculative-config", default=None)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    args, _ = parser.parse_known_args(argv)
    if os.environ.get("FAKE_ARGV_LOG"):  # the command line as vLLM would get it, one JSON list per server
        with open(os.environ["FAKE_ARGV_LOG"], "a") as log:
            log.write(json.dumps(argv) + "\n")
    if os.environ.get("FAKE_FAIL"):
        sys.stderr.write("INFO starting\nValueError: To serve at least one request the KV cache memory is too small\n"
                         "RuntimeError: Engine core initialization failed.\n")
        sys.exit(1)
    time.sleep(float(os.environ.get("FAKE_START_S", "0.2")))
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    if os.environ.get("FAKE_REFUSE_SCHEDULE") and "num_speculative_tokens_per_batch_size" in (spec or {}):
        # vLLM 0.32's words (v1/spec_decode/dynamic/utils.py) for a schedule its engine core will not take
        sys.stderr.write("INFO starting\nValueError: The first batch-size range must start at 1 so every runtime "
                         "batch size has a defined schedule.\nRuntimeError: Engine core initialization failed.\n")
        sys.exit(1)
    k = (spec or {}).get("num_speculative_tokens", 0)
    # Figures that could be true of a request at draft length k: positions 0 .. k-1, accepted within drafted.
    drafts = (4, 4 * k, min(6, 4 * k), ([3, 2, 1] + [0] * max(0, k - 3))[:k]) if spec else None
    behaviour = Behaviour(model=args.served_model_name or args.model, root=args.model, drafts=drafts,
                          delay_s=float(os.environ.get("FAKE_DELAY_S", "0.01")), per_chunk=2 if spec else 1)
    # FAKE_DELAYS_BY_K: {"k": [seconds per chunk alone, with others in flight]}, "0" for plain: each draft length
    # its own speed alone and under load, so a search finds a different best k per load level. A schedule
    # (num_speculative_tokens_per_batch_size) drafts the k of its range that holds the requests in flight.
    by_k = json.loads(os.environ.get("FAKE_DELAYS_BY_K") or "{}")
    if by_k:
        ranges = (spec or {}).get("num_speculative_tokens_per_batch_size")

        def delay_for(in_flight: int) -> float:
            now = next((r[2] for r in ranges if r[0] <= in_flight <= r[1]), k) if ranges else k
            alone, busy = by_k.get(str(now), (behaviour.delay_s, behaviour.delay_s))
            return float(alone if in_flight <= 1 else busy)

        behaviour.delay_for = delay_for
    # Sleep mode as vLLM has it: the flag, and its development endpoints only with VLLM_SERVER_DEV_MODE=1.
    behaviour.sleep_mode = args.enable_sleep_mode and os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
    behaviour.events, behaviour.port = os.environ.get("FAKE_EVENT_LOG") or None, args.port
    # FAKE_WAKE_HANG: "plain" or "spec" (the servers it applies to) and, after a colon, the first wake that hangs.
    hang, _, first = os.environ.get("FAKE_WAKE_HANG", "").partition(":")
    if hang and (hang == "spec") == bool(spec):
        behaviour.wake_hang_from = int(first or 1)
    server = FakeServer(behaviour, args.port)
    behaviour.log("start")
    print(f"fake vLLM serving {behaviour.model} on {server.url}", flush=True)
    server.thread.start()
    # A child in the same process group, as vLLM's engine core is: it must not outlive the server.
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def ended(_signum, _frame):  # stopped as AssistLab stops a server: the moment goes into the event log
        behaviour.log("stop")
        child.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, ended)
    try:
        server.thread.join()
    finally:
        child.kill()


if __name__ == "__main__":
    main(sys.argv[1:])
