"""A busy machine is named: the decision on hand-made readings, and once with real CPU-burning processes."""

import subprocess
import sys
import time

import pytest

from assistlab.measure import contention
from assistlab.measure.contention import CpuReading, Window
from assistlab.engines.transformers import timing
from assistlab.results import report as report_mod
from patience import patient


def readings(*values):
    """A fake read_cpu returning (wall, busy, steal, own) tuples in turn."""
    queue = [CpuReading(*v) for v in values]
    return lambda: queue.pop(0)


def test_others_time_is_the_machines_busy_time_less_this_process_plus_steal():
    before, after = CpuReading(10.0, 100.0, 1.0, 5.0), CpuReading(12.0, 103.2, 1.1, 7.0)
    wall, others, steal = contention.cpu_window(before, after)
    # busy grew 3.2 s, this process used 2.0 of it, the hypervisor stole 0.1: others 1.2 + 0.1.
    assert wall == pytest.approx(2.0) and others == pytest.approx(1.3) and steal == pytest.approx(0.1)
    # Tick rounding can make own time exceed the machine's: never a negative share.
    assert contention.cpu_window(before, CpuReading(11.0, 101.0, 1.0, 6.5))[1] == 0.0


def test_an_idle_machine_gets_no_warning():
    # Two timed calls of 2 s and 1 s; others used 0.06 and 0.03 CPU seconds: 0.03 cores on average.
    monitor = contention.Monitor(
        read_cpu=readings((0, 50, 0, 0), (2, 52.06, 0, 2), (5, 53.06, 0, 2), (6, 54.09, 0, 3)), cpu_count=2
    )
    for _ in range(2):
        with monitor.window():
            pass
    record = monitor.record
    assert record["windows"] == 2 and record["timed_seconds"] == pytest.approx(3.0)
    assert record["other_cpu_cores"] == pytest.approx(0.03)
    assert record["other_cpu_percent"] == pytest.approx(1.5)
    assert record["gpu"] == {"available": False, "reason": "the runs were not on a GPU"}
    assert contention.warnings(record) == []


def test_a_busy_cpu_is_named_at_the_threshold_and_not_below():
    def summary(cores):
        return contention.summarize([Window(4.0, cores * 4.0, 0.0)], cpu_count=2)

    assert contention.warnings(summary(0.24)) == []
    [warning] = contention.warnings(summary(0.25))
    assert warning["code"] == "busy-machine"
    assert "0.25 CPU cores" in warning["message"] and "12% of this machine's 2" in warning["message"]
    assert "may not hold" in warning["message"]


def test_settle_waits_while_others_are_busy_and_no_longer():
    # Others use 1.0, then 0.6, then 0.1 cores over 0.2 s steps: quiet on the third step.
    read = readings((0, 10, 0, 0), (0.2, 10.2, 0, 0), (0.4, 10.32, 0, 0), (0.6, 10.34, 0, 0), (0.8, 10.8, 0, 0))
    slept = []
    assert contention.settle(read=read, sleep=slept.append) == pytest.approx(0.6)
    assert slept == [0.2, 0.2, 0.2]


def test_settle_gives_up_on_a_machine_that_stays_busy():
    values = [(0.2 * i, 10 + 0.4 * i, 0, 0) for i in range(40)]  # others always use 2 cores
    slept = []
    assert contention.settle(max_s=1.0, read=readings(*values), sleep=slept.append) == pytest.approx(1.0)
    assert len(slept) == 5


def test_settle_ends_when_told_to_stop():
    values = [(0.2 * i, 10 + 0.4 * i, 0, 0) for i in range(40)]  # a machine that stays busy
    slept = []
    waited = contention.settle(read=readings(*values), sleep=slept.append, should_stop=lambda: len(slept) >= 2)
    assert waited == pytest.approx(0.4) and len(slept) == 2  # Stop pressed: no point waiting for a quiet machine


def test_settle_returns_at_once_on_an_idle_machine_or_without_readings():
    assert contention.settle(read=readings((0, 10, 0, 0), (0.2, 10.01, 0, 0)), sleep=lambda s: None) == pytest.approx(0.2)

    def unreadable():
        raise OSError("no /proc")

    assert contention.settle(read=unreadable, sleep=lambda s: None) == 0.0


def test_the_average_is_weighted_by_time_and_the_busiest_window_is_kept():
    record = contention.summarize([Window(9.0, 0.9, 0.0), Window(1.0, 1.5, 0.5)], cpu_count=4)
    assert record["other_cpu_cores"] == pytest.approx(0.24)  # 2.4 s over 10 s
    assert record["other_cpu_cores_busiest_window"] == pytest.approx(1.5)
    assert record["steal_cores"] == pytest.approx(0.05)
    assert contention.warnings(record) == []  # a short burst in one call does not flag the whole comparison


def test_gpu_use_by_others_is_named_and_idle_gpu_is_not():
    available = {"available": True}
    quiet = contention.summarize([Window(2.0, 0.0, 0.0, 95.0, 2.0, 1)], 8, available)
    assert quiet["gpu"]["utilization_percent"] == 95.0 and quiet["gpu"]["other_processes"] == 1
    assert contention.warnings(quiet) == []  # our own kernels keep it 95% busy; others only 2%
    busy = contention.summarize([Window(2.0, 0.0, 0.0, 99.0, 30.0, 1)], 8, available)
    [warning] = contention.warnings(busy)
    assert "GPU busy 30%" in warning["message"]
    unknown = contention.summarize([Window(2.0, 0.0, 0.0, 99.0, None, 2)], 8, available)
    assert "2 other process(es) used the GPU" in contention.warnings(unknown)[0]["message"]


def test_nvml_per_process_samples_count_only_others():
    # Two sampling moments; this process (7) at 80% and 70%, another (9) at 20% and 40%: others 30%.
    samples = [(7, 100, 80.0), (9, 100, 20.0), (7, 200, 70.0), (9, 200, 40.0)]
    assert contention.others_share(samples, own_pid=7) == pytest.approx(30.0)
    assert contention.others_share([], own_pid=7) == 0.0


def test_no_nvml_is_recorded_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    assert contention._Nvml(0).status == {"available": False, "reason": "the nvidia-ml-py package is not installed"}


def test_no_driver_is_recorded_not_raised():
    pytest.importorskip("pynvml")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the no-driver path cannot be seen here")
    status = contention._Nvml(0).status
    assert status["available"] is False and "NVML" in status["reason"]


def test_the_report_carries_the_warning_and_the_verdict_says_so():
    busy = {"code": "busy-machine", "message": "The machine was busy."}
    assert report_mod.is_busy({"warnings": [busy]}) and not report_mod.is_busy({"warnings": []})
    entry = {"arm": "a", "speedup": {"median": 1.3, "ci_low": 1.2, "ci_high": 1.4, "n": 5}}
    assert report_mod.speedup_sentence(entry, busy=True).endswith("may not hold on an idle one.")
    assert "busy" not in report_mod.speedup_sentence(entry)


BURN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def test_processes_burning_the_cpu_are_named():
    """Two processes keep both cores busy while this one waits: the warning must appear."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        time.sleep(0.5)  # let them start
        monitor = contention.Monitor()
        with monitor.window():
            time.sleep(2.0)  # a 'timed run' that itself uses no CPU
    finally:
        for proc in burners:
            proc.kill()
        for proc in burners:
            proc.wait(timeout=patient(10))
    record = monitor.record
    assert record["windows"] == 1
    assert record["other_cpu_cores"] >= 1.0, record  # two burners on two cores: well above a quarter core
    assert [w["code"] for w in contention.warnings(record)] == ["busy-machine"]


def test_this_process_own_work_is_not_counted_as_others():
    import psutil

    me = psutil.Process()
    monitor = contention.Monitor()
    before = sum(me.cpu_times()[:2])
    with monitor.window():
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            pass
    own_cores = (sum(me.cpu_times()[:2]) - before) / monitor.record["timed_seconds"]
    record = monitor.record
    # Whatever else runs here now, others and this process together cannot have used more than every core:
    # counting our own busy loop as others' would break this whenever the loop got real CPU time.
    assert own_cores > 0.05, "the busy loop got no CPU at all; nothing was tested"
    assert record["other_cpu_cores"] + own_cores <= record["cpu_count"] + 0.2, (record, own_cores)


def test_a_comparison_records_one_window_per_counted_run(allowed_models, store):
    from assistlab.config import BenchRequest
    from assistlab.engines.transformers.arms import ArmSpec
    from assistlab.measure import runner

    request = BenchRequest(target="target", arms=(ArmSpec("prompt-lookup"),), prompt="the quick brown fox",
                           max_new_tokens=4, repeats=2, warmup=1, device="cpu")
    data = runner.run_to_report(request, store).to_dict()
    record = data["environment"]["contention"]
    assert record["windows"] == 4  # 2 repetitions x 2 arms; warm-up runs are not watched
    timed = sum(sum(a["latencies_s"]) for a in data["arms"])
    assert timed <= record["timed_seconds"] <= timed + 0.5  # the window is the timed span plus two /proc reads
    assert record["other_cpu_cores"] is not None
    # The untimed drafting-cost run is watched apart: its own warning follows its own window (issue 19).
    from assistlab.results import busy

    probe_busy = busy.probe_disturbed(data["arms"][1]["probe"].get("contention"))
    assert data["comparison"][0]["probe_busy"] == probe_busy
    assert data["warnings"] == contention.warnings(record) + (
        [busy.probe_warning(data["comparison"][0]["arm"], probe_busy)] if probe_busy else [])


def test_the_page_headline_shows_the_warning_beside_the_verdict():
    from assistlab.views import panels

    message = "The machine was busy: others used 1.50 CPU cores. The result may not hold on an idle machine."
    made = {
        "status": "complete", "request": {"do_sample": False}, "counted_repetitions": 5, "planned_repetitions": 5,
        "warnings": [{"code": "busy-machine", "message": message}],
        "arms": [{"name": "plain", "strategy": "plain", "latencies_s": [1.0] * 5, "error": None,
                  "latency_summary": {"n": 5, "median": 1.0, "iqr": 0.0}},
                 {"name": "a", "strategy": "assistant", "latencies_s": [0.8] * 5, "error": None,
                  "latency_summary": {"n": 5, "median": 0.8, "iqr": 0.0}}],
        "comparison": [{"arm": "a", "speedup": {"median": 1.25, "ci_low": 1.2, "ci_high": 1.3, "n": 5,
                                                "level": 0.94}}],
    }
    html = panels.headline_html(made)
    # One line under the answer, the warning's own sentence one click away (issue 30).
    assert '<p class="al-warning" role="alert">⚠ Measured on a busy machine: the result may not hold' in html
    assert html.count("al-warning\"") == 1 and f"<summary>What was busy, and what to do</summary><p>{message}" in html
    made["warnings"] = []
    assert "al-warning" not in panels.headline_html(made) and "idle one" not in panels.headline_html(made)


def test_a_busy_machine_during_the_drafting_cost_run_is_named_beside_the_prediction(allowed_models, store,
                                                                                     monkeypatch):
    """Others get busy only during the untimed probe: the timed runs stay clean, the prediction is flagged."""
    from assistlab.cli.tables import format_table
    from assistlab.config import BenchRequest
    from assistlab.engines.transformers.arms import ArmSpec
    from assistlab.measure import runner
    from assistlab.views import panels

    others = {"busy_s": 0.0}

    def fake_read():  # others' CPU time grows only while a probe runs
        return CpuReading(time.monotonic(), others["busy_s"], 0.0, 0.0)

    real_monitor, real_probe = contention.Monitor, timing.probe_arm

    def busy_probe(*args, **kwargs):
        result = real_probe(*args, **kwargs)
        others["busy_s"] += 50.0  # far above a quarter core over any probe's length
        return result

    monkeypatch.setattr(runner.contention, "Monitor", lambda device=None: real_monitor(device, read_cpu=fake_read))
    monkeypatch.setattr(timing, "probe_arm", busy_probe)
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "target-copy"),), prompt="the quick brown fox",
                           max_new_tokens=6, repeats=2, warmup=0, device="cpu")
    data = runner.run_to_report(request, store).to_dict()
    assert data["environment"]["contention"]["other_cpu_cores"] == 0.0  # the timed runs were not disturbed
    assert data["environment"]["probe_contention"]["windows"] == 1
    probe = data["arms"][1]["probe"]
    assert probe["contention"]["other_cpu_cores"] > 1.0
    entry = data["comparison"][0]
    assert entry["probe_busy"] and "while it was measured" in entry["probe_busy"]
    assert [w["code"] for w in data["warnings"]] == ["busy-probe"]
    assert f"drafting cost of {entry['arm']} was measured" in data["warnings"][0]["message"]
    assert "may be far off" in data["warnings"][0]["message"]
    assert "may not hold on an idle one" not in report_mod.speedup_sentence(entry)  # the timed verdict stands
    assert entry["predicted_speedup"] is not None  # a copy of the target drafts every step: c is measured
    why = panels.why_html(data)  # the sentence stands beside the prediction
    assert 'class="al-sub al-probe-busy"' in why and "may be far off" in why
    assert "prediction may be far off" in format_table(data)
    headline = panels.headline_html(data)  # one line under the answer, the sentence one click away
    assert "⚠ The drafting cost was measured on a busy machine: the predicted speedup may be far off" in headline
    assert "The machine was busy while the drafting cost" in headline.split("<details", 1)[1]
