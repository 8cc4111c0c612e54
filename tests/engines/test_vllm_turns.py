"""vLLM servers that take turns: the plan before any server starts (all at once, in turns, or an arm's sentence),
and the turns under sleep mode against fake servers that implement /sleep, /wake_up and /is_sleeping (never two
awake, no request to a sleeping server, waking outside every timed span, nothing left after Stop or SIGTERM,
a wake that never answers ending only its arm)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_events import GB, events, most_at_once
from server_events import reservation as _server
from vllm_processes import own_vllm_processes, vllm_processes

from assistlab.cli.tables import format_table
from assistlab.config import BenchRequest
from assistlab.engines.vllm import memory, turns
from assistlab.engines.vllm.arms import VllmArm
from assistlab.measure import runner
from assistlab.views.panels import environment_markdown, servers_words

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the plan, with memory figures by hand

def test_servers_that_fit_together_run_all_at_once():
    plan = turns.plan([_server("plain", 2), _server("ngram", 2)], 20 * GB, sleep_mode=True)
    assert (plan.design, plan.refused, plan.words) == (turns.TOGETHER, {}, "all at once")
    assert plan.need_bytes == 10 * GB  # (2 + 1 + 2) GB each
    assert turns.plan([_server("plain", 2)], None, sleep_mode=False).design == turns.TOGETHER  # free unknown


def test_a_27b_target_twice_on_one_80gb_gpu_takes_turns():
    # Gemma 3 27B in bfloat16: 54 GB of weights, a 1 GB KV cache, 2 GB of context each: 57 GB alone, 114 together.
    plan = turns.plan([_server("vllm plain", 54), _server("vllm ngram", 54)], 79 * GB, sleep_mode=True,
                      where="GPU memory")
    assert plan.design == turns.SLEEP and plan.refused == {}
    assert plan.words == ("servers took turns (vLLM's sleep mode, one awake at a time): the target did not fit "
                          "twice in GPU memory (114.0 GB needed, 79.0 GB free)")
    assert plan.record()["design"] == "sleep" and plan.record()["need_bytes"] == 114 * GB


def test_turns_need_cpu_memory_for_the_weights_of_the_servers_asleep():
    two = [_server("vllm plain", 54), _server("vllm ngram", 54)]
    assert turns.plan(two, 79 * GB, True, "GPU memory", host_free=60 * GB).design == turns.SLEEP
    short = turns.plan(two, 79 * GB, True, "GPU memory", host_free=40 * GB)
    assert short.design == turns.TOGETHER and set(short.refused) == {"vllm plain", "vllm ngram"}
    assert "asleep, their weights (54.0 GB) move to CPU memory, and this machine has 40.0 GB" in short.refused[
        "vllm ngram"]


def test_five_servers_take_turns_when_one_awake_beside_four_asleep_fits():
    five = [_server(f"k{k}", 6) for k in range(5)]  # 9 GB each: 45 together; 9 + 4 × 2 asleep = 17
    plan = turns.plan(five, 24 * GB, sleep_mode=True)
    assert plan.design == turns.SLEEP and "the 5 servers did not fit together" in plan.words
    crowded = turns.plan(five, 16 * GB, sleep_mode=True)  # 17 > 16: not even in turns
    assert crowded.design == turns.TOGETHER and set(crowded.refused) == {f"k{k}" for k in range(5)}
    assert "cannot take turns either: one awake (k0, 9.0 GB) beside the others asleep (8.0 GB" in crowded.refused["k0"]


def test_only_a_server_that_cannot_fit_alone_gets_a_sentence():
    plan = turns.plan([_server("plain", 2), _server("draft", 30)], 20 * GB, sleep_mode=True)
    assert plan.design == turns.TOGETHER and list(plan.refused) == ["draft"]
    assert plan.refused["draft"].startswith("The vLLM server for draft alone needs about 33.0 GB and this machine "
                                            "has 20.0 GB of memory free, so it was not started")
    # the two that remain do not fit together: they take turns, the third still has its sentence
    plan = turns.plan([_server("plain", 8), _server("ngram", 8), _server("draft", 30)], 20 * GB, sleep_mode=True)
    assert plan.design == turns.SLEEP and list(plan.refused) == ["draft"]


def test_turns_can_be_asked_for(monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    assert turns.forced()
    plan = turns.plan([_server("plain", 1), _server("ngram", 1)], 100 * GB, sleep_mode=True, force=True)
    assert plan.design == turns.SLEEP and "as asked" in plan.words
    assert turns.plan([_server("plain", 1), _server("ngram", 1)], 100 * GB, sleep_mode=False,
                      force=True).design == turns.BLOCKS  # no sleep mode: in blocks (test_vllm_blocks.py)
    monkeypatch.setenv(turns.TURNS_VAR, "sometimes")
    with pytest.raises(Exception, match=turns.TURNS_VAR):
        turns.forced()


def test_weights_counted_in_the_server_s_dtype(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    assert memory.weights_bytes(str(tmp_path)) == 1000
    assert memory.weights_bytes(str(tmp_path), "float32") == 2000  # a bfloat16 checkpoint served in float32
    assert memory.weights_bytes(str(tmp_path), "bfloat16") == 1000


# ---------------------------------------------------------------- in turns, with sleep mode (fake servers)

def _request(arms, **kw) -> BenchRequest:
    return BenchRequest(target="target", arms=tuple(arms), prompt="write me a long essay", max_new_tokens=6,
                        repeats=kw.pop("repeats", 3), warmup=1, engines=("vllm",), **kw)


@pytest.fixture
def sleepy(fake_vllm_python, allowed_models, tmp_path, monkeypatch):
    """A fake vLLM whose platform has sleep mode; every server appends its moments to one log."""
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FAKE_VLLM_FEATURES", json.dumps({"sleep_mode": True}))
    monkeypatch.setenv("FAKE_EVENT_LOG", str(log))
    monkeypatch.setenv("FAKE_START_S", "0.1")
    monkeypatch.delenv("ASSISTLAB_VLLM_MEMORY", raising=False)
    return log


def _most_awake(moments: list[dict]) -> int:
    return most_at_once(moments, ("start", "wake"), ("sleep",))


def test_servers_that_do_not_fit_take_turns_one_awake_outside_every_timed_span(store, sleepy, monkeypatch):
    # Two servers of about 5.5 GB each (a 1 GiB KV space, the tiny weights, 4.4 GB of processes): 11 GB together;
    # one awake beside the other asleep, 9.9 GB.
    monkeypatch.setattr(memory, "available_bytes", lambda: int(10.2 * GB))
    before = set(vllm_processes())
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3)), concurrency=(1, 2),
                                         load_rounds=2), store).to_dict()
    assert data["status"] == "complete", data["message"]
    held = data["environment"]["engines"]["vllm"]["turns"]
    assert held["design"] == "sleep" and held["words"].startswith("servers took turns (vLLM's sleep mode")
    assert "the target did not fit twice in memory" in held["words"]
    logged = events(sleepy)
    assert _most_awake(logged) == 1  # never two awake, from the first start to the last run
    assert not [e for e in logged if e["event"] == "refused"]  # no request ever reached a sleeping server
    ports = {e["port"] for e in logged}
    assert len(ports) == 2
    # Each run and each load round wakes its server and puts it to sleep: 1 warm-up + 3 runs + 2 levels × 3 rounds.
    for label in ("vllm plain", "vllm ngram (k=3, lookup 2-4)"):
        figures = held["arms"][label]
        assert figures["wakes"] == 1 + 3 + 2 * 3 and figures["sleeps"] == figures["wakes"] + 1  # + after start
        assert all(0 < s < 5 for s in figures["wake_s"]) and figures["median_wake_s"] > 0
        assert data["environment"]["engines"]["vllm"]["servers"][label]["sleep_mode"] is True
    # Said in a few plain words on the command line and the page, and kept in the API's report.
    said = servers_words(data)
    assert said.startswith("vLLM servers took turns (vLLM's sleep mode") and "never inside a timed run" in said
    assert said in format_table(data) and "**Servers**" in environment_markdown(data)
    moments = [e["t"] for e in logged if e["event"] in ("wake", "sleep")]
    windows = [tuple(w) for arm in data["arms"] for w in arm["wall_windows"] if w]
    assert windows, "the report keeps each run's wall-clock window"
    assert not [(t, w) for t in moments for w in windows if w[0] <= t <= w[1]]  # no wake nor sleep while timed
    assert own_vllm_processes(before) == []


def test_stop_mid_run_in_turns_leaves_nothing(store, sleepy, monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    comparison = runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3))), store)
    for event in comparison:
        if event.kind == "run" and event.report is not None and event.report.runs:
            break
    assert own_vllm_processes(before)
    comparison.close()  # Stop, or a cancelled request
    assert own_vllm_processes(before) == []
    assert _most_awake(events(sleepy)) == 1


def test_a_wake_that_never_answers_ends_that_arm_only(store, sleepy, monkeypatch):
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    monkeypatch.setenv(turns.WAKE_VAR, "2")
    monkeypatch.setenv("FAKE_WAKE_HANG", "spec:2")  # the ngram server wakes for its warm-up, then never again
    before = set(vllm_processes())
    began = time.monotonic()
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3), VllmArm("ngram", 2)),
                                         repeats=2), store).to_dict()
    assert time.monotonic() - began < 120
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert errors["vllm plain"] is None
    for label in ("vllm ngram (k=3, lookup 2-4)", "vllm ngram (k=2, lookup 2-4)"):
        assert errors[label].startswith(f"The vLLM server for {label} did not wake up within 2 s "
                                        f"({turns.WAKE_VAR}), so it was stopped")
    assert len(data["arms"][0]["latencies_s"]) == 2  # plain went on to the end
    assert _most_awake(events(sleepy)) <= 1
    assert own_vllm_processes(before) == []


def test_sigterm_in_turns_stops_the_cli_and_every_server(models_dir, fake_vllm_python, tmp_path):
    log = tmp_path / "events.jsonl"  # the process mark (conftest) goes with os.environ to the CLI and its servers
    env = {**os.environ, "ASSISTLAB_MODELS_DIR": str(models_dir),
           "ASSISTLAB_VLLM_PYTHON": str(fake_vllm_python), "PYTHONPATH": str(ROOT), "FAKE_START_S": "0.1",
           "FAKE_DELAY_S": "0.5", "FAKE_EVENT_LOG": str(log), "FAKE_VLLM_FEATURES": json.dumps({"sleep_mode": True}),
           turns.TURNS_VAR: "always"}
    env.pop("ASSISTLAB_VLLM_MEMORY", None)  # the real-vLLM fixture's, for the session: vLLM would size the servers
    cli = subprocess.Popen(
        [sys.executable, "-m", "assistlab", "bench", "--target", "target", "--engines", "vllm", "--vllm-method",
         "ngram", "--max-new-tokens", "8", "--repeats", "5", "--warmup", "0", "--prompt", "hello there"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end and not (log.exists() and '"request"' in log.read_text()):
            time.sleep(0.2)
        assert log.exists() and '"request"' in log.read_text(), cli.poll()
        cli.send_signal(signal.SIGTERM)
        _out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Stopped by SIGTERM." in err
    end = time.monotonic() + 10
    while time.monotonic() < end and vllm_processes():
        time.sleep(0.2)
    assert vllm_processes() == []
    assert _most_awake(events(log)) == 1


def test_the_design_in_a_few_plain_words():
    def report(held: dict) -> dict:
        return {"environment": {"engines": {"vllm": {"servers": {}, "turns": held}}}}

    together = report({"design": "together", "words": "all at once", "need_bytes": 11e9, "free_bytes": 20e9})
    assert servers_words(together) == "vLLM servers: all at once (they fit together: 11.0 GB of 20.0 GB free)."
    assert servers_words({"environment": {"engines": {"vllm": {"servers": {}}}}}) is None  # the operator's only
    took = report({"design": "sleep", "words": "servers took turns (vLLM's sleep mode, one awake at a time): the "
                   "target did not fit twice in GPU memory (114.0 GB needed, 79.0 GB free)",
                   "arms": {"vllm plain": {"wake_s": [0.2, 0.4], "sleep_s": [0.1, 0.1, 0.1]},
                            "vllm ngram": {"wake_s": [0.3], "sleep_s": [0.2, 0.2]}}})
    assert servers_words(took) == (
        "vLLM servers took turns (vLLM's sleep mode, one awake at a time): the target did not fit twice in GPU "
        "memory (114.0 GB needed, 79.0 GB free); each run woke its server first (0.30 s, median of 3 wakes) and "
        "put it to sleep after (0.10 s), never inside a timed run.")


def test_gpu_free_memory_is_read_per_visible_device_without_a_cuda_context(monkeypatch):
    from types import SimpleNamespace

    fake = SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 3,
                           nvmlDeviceGetHandleByIndex=lambda i: i,
                           nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(free=(h + 1) * GB))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert memory.device_free_bytes() == [1 * GB, 2 * GB, 3 * GB]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert memory.device_free_bytes() == [3 * GB, 1 * GB]


def test_on_a_gpu_the_plan_counts_the_first_device_s_free_memory(store, sleepy, monkeypatch):
    monkeypatch.setattr(memory, "device_free_bytes", lambda: [80 * GB, 1 * GB])
    monkeypatch.setenv(turns.TURNS_VAR, "always")
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3)), repeats=1), store).to_dict()
    assert data["status"] == "complete", data["message"]
    held = data["environment"]["engines"]["vllm"]["turns"]
    assert held["design"] == "sleep" and held["where"] == "GPU memory" and held["free_bytes"] == 80 * GB
    reserved = data["environment"]["engines"]["vllm"]["servers"]["vllm plain"]["memory"]
    assert reserved["overhead_bytes"] == memory.GPU_OVERHEAD_BYTES
    assert reserved["reserved_kv_bytes"] == reserved["kv_cache_bytes"]  # the device holds exactly what is asked


def test_a_failed_start_in_turns_says_why_and_leaves_nothing(store, sleepy, monkeypatch):
    from assistlab.engines.transformers.arms import ArmSpec

    monkeypatch.setenv(turns.TURNS_VAR, "always")
    monkeypatch.setenv("FAKE_FAIL", "1")  # every server exits while starting, as one the kernel killed would
    before = set(vllm_processes())
    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"), VllmArm("plain"), VllmArm("ngram", 3)),
                           prompt="write me a long essay", max_new_tokens=6, repeats=1, warmup=0,
                           engines=("transformers", "vllm"))
    data = runner.run_to_report(request, store).to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert "exited with code 1 while starting" in errors["vllm plain"]
    assert errors["plain"] is None and data["status"] == "complete"  # the transformers arms finish
    assert own_vllm_processes(before) == []


def test_a_server_killed_while_it_sleeps_ends_its_arm_and_the_others_go_on(store, sleepy, monkeypatch):
    import psutil

    monkeypatch.setenv(turns.TURNS_VAR, "always")
    before = set(vllm_processes())
    comparison = runner.run_benchmark(_request((VllmArm("plain"), VllmArm("ngram", 3))), store)
    final, killed = None, False
    for event in comparison:
        final = event
        if not killed and event.kind == "run" and event.report is not None and len(event.report.runs) == 1:
            killed = True
            found = own_vllm_processes(before)
            ngram = next((int(line.split()[0]) for line in found if "--speculative-config" in line
                          and "fake_openai" in line), None)
            assert ngram is not None, found
            os.killpg(os.getpgid(ngram), signal.SIGKILL)  # as the kernel's out-of-memory killer would
            psutil.Process(ngram).wait(10) if psutil.pid_exists(ngram) else None
    data = final.report.to_dict()
    errors = {a["name"]: a["error"] for a in data["arms"]}
    assert errors["vllm ngram (k=3, lookup 2-4)"].startswith(
        "The vLLM server for vllm ngram (k=3, lookup 2-4) could not wake up: its process had ended")
    assert errors["vllm plain"] is None and len(data["arms"][0]["latencies_s"]) == 3
    assert own_vllm_processes(before) == []
