"""The app as an API: `/compare` through gradio_client on a live server, plus the form and page helpers."""

from __future__ import annotations

import socket

import pytest

from assistlab import ui
from assistlab.config import CPU_DEFAULTS
from assistlab.errors import InputError

# gradio's own queue bookkeeping trips pandas deprecation warnings; they are not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*:Warning:gradio.queueing")

API_PARAMETERS = [
    "target", "assistant", "strategy", "prompt", "max_new_tokens", "repeats", "warmup", "also_prompt_lookup",
    "extra_assistants", "chat_template", "do_sample", "seed", "device", "dtype", "num_assistant_tokens",
    "schedule", "confidence_threshold", "prompt_lookup_num_tokens", "early_exit_layer",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def client(models_dir, store, tmp_path_factory):
    from gradio_client import Client

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
        demo = ui.build_app(store, reports_dir=tmp_path_factory.mktemp("reports"))
        options = ui.launch_options({})
        _app, url, _share = demo.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True, **options)
        try:
            yield Client(url, verbose=False)
        finally:
            demo.close()


def compare(client, **kwargs):
    settings = {"prompt": "write me a long essay on deep learning", "max_new_tokens": 8, "repeats": 2, "warmup": 1}
    return client.predict(**{**settings, **kwargs}, api_name="/compare")


def test_compare_returns_the_complete_report(client):
    report, headline = compare(client, target="target", assistant="assistant-other", strategy="auto")
    assert report["schema"] == 1
    assert report["status"] == "complete"
    names = [a["name"] for a in report["arms"]]
    assert names == ["plain", "universal: assistant-other (k=5)", "prompt-lookup (k=10)"]
    assert all(len(a["latencies_s"]) == 2 and a["new_tokens"] == [8, 8] for a in report["arms"])
    assert [c["arm"] for c in report["comparison"]] == names[1:]
    assert report["environment"]["device"] == "cpu"
    assert report["request"]["warmup"] == 1
    lines = headline.splitlines()[:2]  # one line per assisted arm; a note on noisy timings may follow
    assert [line.split(" was ")[0] for line in lines] == names[1:]
    assert all("×" in line for line in lines)


def test_the_api_keeps_its_parameter_names(client):
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare"]
    assert [p["parameter_name"] for p in info["parameters"]] == API_PARAMETERS
    assert all(p["parameter_has_default"] for p in info["parameters"])


def test_a_bad_model_is_a_clear_error_and_the_app_keeps_serving(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        compare(client, target="/etc")
    message = str(caught.value)
    assert "outside the allowed models folder" in message
    assert "Traceback" not in message
    with pytest.raises(AppError, match="needs an assistant model"):
        compare(client, target="target", assistant="", strategy="assistant")
    report, _ = compare(client, target="target", strategy="prompt-lookup", also_prompt_lookup=False, repeats=1)
    assert report["status"] == "complete"
    assert [a["name"] for a in report["arms"]] == ["plain", "prompt-lookup (k=10)"]


# ---------------------------------------------------------------- the form, the files, the launcher


def test_the_form_adds_prompt_lookup_and_extra_assistants():
    request = ui.request_from_form(
        "target", "assistant-same", "assistant", "hi", extra_assistants="a-one, a-two\na-three",
        num_assistant_tokens=7.0,
    )
    assert [(a.strategy, a.assistant) for a in request.arms] == [
        ("assistant", "assistant-same"), ("assistant", "a-one"), ("assistant", "a-two"), ("assistant", "a-three"),
        ("prompt-lookup", None),
    ]
    assert request.arms[0].num_assistant_tokens == 7
    only = ui.request_from_form("target", "ignored", "prompt-lookup", "hi", also_prompt_lookup=True)
    assert [(a.strategy, a.assistant) for a in only.arms] == [("prompt-lookup", None)]


def test_zero_or_empty_counts_mean_the_device_default():
    request = ui.request_from_form("target", "x", "auto", "hi", max_new_tokens=0, repeats=None, warmup=None,
                                   confidence_threshold=0, early_exit_layer=0)
    assert (request.max_new_tokens, request.repeats, request.warmup) == (None, None, None)
    assert request.resolved("cpu").max_new_tokens == CPU_DEFAULTS["max_new_tokens"]
    assert request.arms[0].assistant_confidence_threshold is None
    zero_warmup = ui.request_from_form("target", "x", "auto", "hi", warmup=0)
    assert zero_warmup.warmup == 0


def test_the_form_refuses_what_the_engine_refuses():
    with pytest.raises(InputError, match="early_exit_layer"):
        ui.request_from_form("target", "", "early-exit", "hi", early_exit_layer=0)
    with pytest.raises(InputError, match="prompt is empty"):
        ui.request_from_form("target", "x", "auto", "   ")


def test_gpu_seconds_grows_with_the_work():
    small = ui.request_from_form("t", "a", "auto", "hi", max_new_tokens=16, repeats=1, warmup=0)
    large = ui.request_from_form("t", "a", "auto", "hi", max_new_tokens=512, repeats=10, warmup=2)
    assert 60 <= ui.gpu_seconds(small) < ui.gpu_seconds(large) <= 1800


def test_session_stops_are_per_session():
    stops = ui.SessionStops()
    stops.stop("a")
    assert stops.flag("a").is_set() and not stops.flag("b").is_set()
    stops.arm("a")
    assert not stops.flag("a").is_set()
    flag = stops.flag("c")
    stops.forget("c")
    assert flag.is_set()  # a closed tab stops the run it left behind


def test_report_files_are_written_where_the_app_owns_them(tmp_path, models_dir, store, monkeypatch):
    from assistlab.config import ArmSpec, BenchRequest
    from assistlab.runner import run_to_report

    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    report = run_to_report(
        BenchRequest("target", (ArmSpec("prompt-lookup"),), prompt="hi", max_new_tokens=4, repeats=1, warmup=0),
        store,
    )
    json_path, csv_path = ui.ReportFiles(tmp_path).write(report)
    assert json_path.startswith(str(tmp_path)) and csv_path.startswith(str(tmp_path))
    assert '"schema": 1' in open(json_path).read()
    assert open(csv_path).read().startswith("arm,strategy,repetition")


def test_page_text_is_escaped_and_differences_marked():
    assert ui.diff_html("the cat <b>", "the dog <b>") == "the <del>cat</del><mark>dog</mark> &lt;b&gt;"
    assert ui.diff_html("same\x07 text", "same\x07 text") == "same\ufffd text"  # control characters made visible
    report = {
        "arms": [
            {"name": "plain", "strategy": "plain", "text": "<script>alert(1)</script>", "latencies_s": [1.0]},
            {"name": "x<y", "strategy": "assistant", "text": "<script>alert(2)</script>", "latencies_s": [1.0]},
        ],
        "comparison": [{"arm": "x<y", "outputs_identical": False, "first_difference": 5}],
    }
    page = ui.texts_html(report)
    assert "<script>" not in page and "x&lt;y" in page
    assert "differs from token 6" in page


def test_launch_options_read_the_environment():
    default = ui.launch_options({})
    assert default["server_name"] == "127.0.0.1"
    assert "server_port" not in default and "root_path" not in default and "auth" not in default
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "8080", "GRADIO_ROOT_PATH": "/lab",
           "ASSISTLAB_AUTH": "ann:pw1, bob:p:w2"}
    options = ui.launch_options(env)
    assert (options["server_name"], options["server_port"], options["root_path"]) == ("0.0.0.0", 8080, "/lab")
    assert options["auth"] == [("ann", "pw1"), ("bob", "p:w2")]
    with pytest.raises(InputError, match="ASSISTLAB_AUTH"):
        ui.launch_options({"ASSISTLAB_AUTH": "nobody"})


def test_all_model_work_shares_one_gpu_slot(models_dir, store, monkeypatch):
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    demo = ui.build_app(store)
    heavy = {fn.name: fn for fn in demo.fns.values() if fn.name in ("run_stream", "compare")}
    assert set(heavy) == {"run_stream", "compare"}
    assert {(fn.concurrency_id, fn.concurrency_limit) for fn in heavy.values()} == {(ui.GPU_GROUP, 1)}
    assert heavy["compare"].api_name == "compare"
    assert heavy["run_stream"].api_visibility == "private"
    light = [fn for fn in demo.fns.values() if fn.name in ("request_stop", "arm_stop")]
    assert light and not any(fn.queue for fn in light)  # Stop must not wait behind the run it stops
    assert demo._queue.max_size == ui.QUEUE_SIZE


def test_on_zero_gpu_the_run_goes_through_spaces_gpu(allowed_models, store, monkeypatch):
    import sys
    import threading
    import types

    asked = []

    def gpu(duration):
        def wrap(fn):
            def on_gpu(*args, **kwargs):
                asked.append(duration(*args, **kwargs))
                yield from fn(*args, **kwargs)
            return on_gpu
        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=gpu))
    request = ui.request_from_form("target", "", "prompt-lookup", "hi", max_new_tokens=4, repeats=1, warmup=0)
    events = list(ui._gpu_runner(store)(request, threading.Event()))
    assert events[-1].kind == "done" and events[-1].report.status == "complete"
    assert asked == [ui.gpu_seconds(request)]
