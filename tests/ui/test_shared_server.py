"""A live server under bad input, several users at once, a full queue: one clear sentence each, and it keeps serving."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
import torch

# The cheapest comparison that still runs the target: one plain and one prompt-lookup run of two tokens.
GOOD = {"target": "target", "strategy": "prompt-lookup", "also_prompt_lookup": False, "prompt": "deep learning",
        "max_new_tokens": 2, "repeats": 1, "warmup": 0}


@pytest.fixture(scope="module")
def server_models(models_dir, tmp_path_factory):
    """Good tiny models and broken checkpoints in this module's own allowed folder."""
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("server-models")
    for name in ("target", "assistant-same", "assistant-other"):
        shutil.copytree(models_dir / name, root / name)

    (root / "no-weights").mkdir()
    shutil.copy(root / "assistant-same" / "config.json", root / "no-weights" / "config.json")

    shutil.copytree(root / "assistant-same", root / "pickle-only")
    (root / "pickle-only" / "model.safetensors").unlink()
    torch.save({}, root / "pickle-only" / "pytorch_model.bin")

    shutil.copytree(root / "assistant-same", root / "remote-code")
    config = json.loads((root / "remote-code" / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (root / "remote-code" / "config.json").write_text(json.dumps(config))

    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(root / "encoder", safe_serialization=True)

    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(root / "assistant-same", outside / "model")
    (root / "escape").symlink_to(outside / "model", target_is_directory=True)  # a real model, but outside
    return root


@pytest.fixture(scope="module")
def url(server_models, store, launch_app):
    with launch_app(server_models, store) as address:
        yield address


@pytest.fixture(scope="module")
def client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


def compare(client, **changes):
    return client.predict(**{**GOOD, **changes}, api_name="/compare")


def assert_good(report: dict) -> None:
    assert report["status"] == "complete"
    assert report["request"]["warmup"] == 0  # 0 warm-up runs is valid: it means none
    assert [len(a["latencies_s"]) for a in report["arms"]] == [1, 1]


BAD_INPUTS = [
    ("hub id with a space", {"target": "org/na me"}, "'org/na me' is not a hub id"),
    ("hub id with two slashes", {"target": "a/b/c"}, "'a/b/c' is not a hub id"),
    ("absolute path", {"target": "/etc"}, "outside the allowed models folder"),
    ("parent path", {"target": "../.."}, "outside the allowed models folder"),
    ("symlink pointing out", {"target": "escape"}, "outside the allowed models folder"),
    ("assistant outside", {"strategy": "auto", "assistant": "/etc"}, "'/etc' is outside the allowed models folder"),
    ("folder without weights", {"target": "no-weights"}, "no-weights has no weights"),
    ("pickle weights only", {"target": "pickle-only"}, "only pickle weights"),
    ("config with auto_map", {"target": "remote-code"}, "never runs code from a checkpoint"),
    ("encoder", {"target": "encoder"}, "is an encoder (BertConfig), not a causal language model"),
    ("assistant with another tokenizer", {"strategy": "assistant", "assistant": "assistant-other"},
     "uses a different tokenizer"),
    ("early exit beyond the depth", {"strategy": "early-exit", "early_exit_layer": 9},
     "early_exit_layer is 9, but the target has only 4 layers"),
    ("prompt-lookup length 0", {"prompt_lookup_num_tokens": 0}, "prompt_lookup_num_tokens must be between 1 and 64"),
    ("empty prompt", {"prompt": "  \n "}, "The prompt is empty"),
    ("prompt beyond the context", {"prompt": "deep " * 600}, "reads at most 512 tokens"),
    ("max_new_tokens 0", {"max_new_tokens": 0}, "max_new_tokens must be between 1 and 2048, got 0"),
    ("max_new_tokens negative", {"max_new_tokens": -5}, "max_new_tokens must be between 1 and 2048, got -5"),
    ("max_new_tokens not a number", {"max_new_tokens": "abc"}, "max_new_tokens must be a whole number, got 'abc'"),
    ("max_new_tokens huge", {"max_new_tokens": 10**9}, "max_new_tokens must be between 1 and 2048, got 1000000000"),
    ("repeats 0", {"repeats": 0}, "repeats must be between 1 and 50, got 0"),
    ("repeats negative", {"repeats": -1}, "repeats must be between 1 and 50, got -1"),
    ("repeats not a number", {"repeats": "abc"}, "repeats must be a whole number, got 'abc'"),
    ("repeats huge", {"repeats": 10**9}, "repeats must be between 1 and 50, got 1000000000"),
    # warmup 0 is valid (no warm-up): every good request below uses it.
    ("warmup negative", {"warmup": -1}, "warmup must be between 0 and 10, got -1"),
    ("warmup not a number", {"warmup": "abc"}, "warmup must be a whole number, got 'abc'"),
    ("warmup huge", {"warmup": 10**9}, "warmup must be between 0 and 10, got 1000000000"),
]


@pytest.mark.fast
@pytest.mark.parametrize("changes, words", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_one_clear_sentence_and_the_next_request_works(client, changes, words):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        compare(client, **changes)
    message = str(caught.value)
    assert words in message
    assert "Traceback" not in message and "\n" not in message.strip() and len(message) < 400
    assert_good(compare(client)[0])


@pytest.mark.slow
def test_four_clients_at_once_all_finish_and_no_two_timed_runs_overlap(server_models, store, launch_app):
    from gradio_client import Client
    from gradio_client.utils import Status

    # Model loading waits at a gate until all four requests are with the server, so they are really in flight
    # together however fast one comparison is.
    gate, entered = threading.Event(), threading.Event()
    with launch_app(server_models, GatedStore(store, gate, entered)) as address:
        clients = [Client(address, verbose=False) for _ in range(4)]
        start = threading.Barrier(len(clients))
        jobs, results = [None] * 4, [None] * 4

        def one(i: int) -> None:
            start.wait()
            jobs[i] = clients[i].submit(**{**GOOD, "strategy": "auto", "assistant": "assistant-same",
                                           "also_prompt_lookup": True, "max_new_tokens": 4, "repeats": 2},
                                        api_name="/compare")
            try:
                results[i] = jobs[i].result(timeout=120)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        try:
            assert entered.wait(30), "no comparison started"
            in_flight = _wait_for(lambda: all(j is not None for j in jobs) and sum(
                j.status().code in (Status.IN_QUEUE, Status.PROCESSING, Status.STARTING) for j in jobs) == 4)
            assert in_flight, "the four requests were never all with the server at once"
        finally:
            gate.set()
        for thread in threads:
            thread.join(timeout=150)
    assert not [r for r in results if not isinstance(r, tuple)], "a client did not get its report"

    reports = [report for report, _headline in results]
    for report in reports:
        assert report["status"] == "complete"
        assert [len(a["latencies_s"]) for a in report["arms"]] == [2, 2, 2]
        assert report["comparison"] and report["ranking"]
    windows = sorted(tuple(w) for report in reports for arm in report["arms"] for w in arm["wall_windows"])
    assert len(windows) == 4 * 3 * 2
    for (_, end), (next_start, _) in zip(windows, windows[1:]):
        assert end <= next_start, "two timed runs overlapped: the GPU slot let two comparisons in at once"


class GatedStore:
    """A ModelStore that holds every load until the test opens the gate, so a run can be kept in flight."""

    def __init__(self, inner, gate: threading.Event, entered: threading.Event):
        self.inner, self.gate, self.entered = inner, gate, entered

    def get(self, *args, **kwargs):
        self.entered.set()
        self.gate.wait(timeout=60)
        return self.inner.get(*args, **kwargs)


def _wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_beyond_the_queue_a_client_is_told_the_queue_is_full(server_models, store, launch_app):
    from gradio_client import Client
    from gradio_client.utils import QueueError, Status

    gate, entered = threading.Event(), threading.Event()
    with launch_app(server_models, GatedStore(store, gate, entered), queue_max_size=1) as address:
        try:
            running = Client(address, verbose=False).submit(**GOOD, api_name="/compare")
            assert entered.wait(30), "the first comparison never started"
            waiting = Client(address, verbose=False).submit(**GOOD, api_name="/compare")
            assert _wait_for(lambda: waiting.status().code == Status.IN_QUEUE), "the second never queued"
            refused = Client(address, verbose=False).submit(**GOOD, api_name="/compare")
            with pytest.raises(QueueError, match="Queue is full"):
                refused.result(timeout=30)
        finally:
            gate.set()
        assert_good(running.result(timeout=60)[0])
        assert_good(waiting.result(timeout=60)[0])
