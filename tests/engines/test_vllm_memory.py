"""What each launched vLLM server reserves: a KV cache sized from the comparison's context, passed to the
server, checked (with weights and processes) against the free memory before the first one starts."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assistlab.config import BenchRequest  # noqa: E402
from assistlab.engines.vllm import memory, server  # noqa: E402
from assistlab.engines.vllm.arms import VllmArm  # noqa: E402
from assistlab.errors import EngineError  # noqa: E402
from assistlab.measure import runner  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/, where fake_openai.py is


@pytest.fixture
def fake_vllm_python(tmp_path, monkeypatch):
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} -c \'print("{{\\"vllm\\": \\"0.0-fake\\", \\"torch\\": null, '
        f'\\"transformers\\": null}}")\'; fi\n'
        f'shift 2\nexec {sys.executable} {HERE / "fake_openai.py"} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(server.PYTHON_VAR, str(script))
    monkeypatch.delenv(server.MEMORY_VAR, raising=False)
    monkeypatch.delenv(memory.CPU_SPACE_VAR, raising=False)
    return script


def test_kv_bytes_from_the_config_by_hand(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
         "hidden_size": 640}))
    assert memory.kv_bytes_per_token(json.loads((tmp_path / "config.json").read_text()), "bfloat16") == 18_432
    # 1,030 tokens round up to 1,040 (65 blocks of 16): × 18,432 B × 1.5 = 28.8 MB, under the 64 MiB floor
    assert memory.kv_cache_bytes([str(tmp_path)], 1030, "bfloat16") == memory.FLOOR_BYTES
    assert memory.kv_cache_bytes([str(tmp_path)], 8192, "float32") == 8192 * 18_432 * 2 * 3 // 2
    assert memory.kv_cache_bytes([str(tmp_path / "none")], 1024, "bfloat16") is None


def _request(arms, **kw) -> BenchRequest:
    return BenchRequest(target="target", arms=tuple(arms), prompt="write me a long essay", max_new_tokens=6,
                        repeats=1, warmup=0, engines=("vllm",), **kw)


def test_each_server_gets_its_kv_cache_and_the_report_says_what_it_reserved(store, allowed_models,
                                                                              fake_vllm_python, tmp_path, monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    data = runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3))), store).to_dict()
    assert data["status"] == "complete", data["message"]
    servers = data["environment"]["engines"]["vllm"]["servers"]
    for settings in servers.values():
        reserved = settings["memory"]
        assert reserved["kv_cache_bytes"] >= memory.FLOOR_BYTES
        assert reserved["reserved_bytes"] == (reserved["reserved_kv_bytes"] + reserved["weights_bytes"]
                                              + reserved["overhead_bytes"])
        assert settings["environment"][memory.CPU_SPACE_VAR] == "1"
        assert settings["gpu_memory_utilization"] is None
    argv = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(argv) == 2 and all("--kv-cache-memory-bytes" in a for a in argv)
    kv = [int(a[a.index("--kv-cache-memory-bytes") + 1]) for a in argv]
    assert kv == [s["memory"]["kv_cache_bytes"] for s in servers.values()]


def test_servers_that_cannot_fit_even_alone_are_refused_with_the_figures_before_any_starts(store, allowed_models,
                                                                                 fake_vllm_python, tmp_path,
                                                                                 monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * memory.GIB)
    with pytest.raises(EngineError) as info:  # no vLLM arm can run, and there is no other arm
        runner.run_to_report(_request((VllmArm("plain"), VllmArm("ngram", 3))), store)
    error = str(info.value)
    # Each: a 1 GiB KV space, the tiny model's weights, and the processes' 4.4 GB measured with vLLM 0.32's CPU build.
    assert re.search(r"vllm plain alone needs about 5\.\d GB and this machine has 2\.1 GB of memory free, so it was "
                     r"not started", error)
    assert re.search(r"vllm plain 5\.\d GB \(KV cache 1\.1 GB", error)
    assert not log.exists()  # no server was started


def test_the_operator_s_share_still_overrides(store, allowed_models, fake_vllm_python, tmp_path, monkeypatch):
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_ARGV_LOG", str(log))
    monkeypatch.setenv(server.MEMORY_VAR, "0.2")
    monkeypatch.delenv(server.ARGS_VAR, raising=False)  # the real-vLLM tests' session sets a KV size of its own there
    data = runner.run_to_report(_request((VllmArm("plain"),)), store).to_dict()
    assert data["status"] == "complete", data["message"]
    settings = data["environment"]["engines"]["vllm"]["servers"]["vllm plain"]
    assert settings["gpu_memory_utilization"] == 0.2 and settings["memory"] is None
    argv = json.loads(log.read_text().splitlines()[0])
    assert "--kv-cache-memory-bytes" not in argv and argv[argv.index("--gpu-memory-utilization") + 1] == "0.2"
    assert os.environ.get(memory.CPU_SPACE_VAR) is None
