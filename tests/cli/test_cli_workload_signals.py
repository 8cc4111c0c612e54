"""A workload on the command line kept as a comparison is: saved with --save, and when it is stopped by SIGINT,
SIGTERM or an interrupt the stop flag cannot catch, its table, its JSON and its history entry hold what it
measured (whole repetitions only), with the exit status of the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assistlab import history as hist

# A `python -m assistlab` workload per case: about a minute each on a busy machine.
slow = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("--strategy", "prompt-lookup", "--no-prompt-lookup")  # plain and prompt lookup: no drafter to load
PROMPTS = "\n".join(json.dumps(r) for r in [
    {"category": "fox", "prompt": "the quick brown fox"},
    {"category": "fox", "prompt": "the lazy dog"},
    {"category": "essay", "prompt": "write me a long essay"},
])


class Workload:
    """`bench --suite-file` in a process of its own, its stderr read as it comes."""

    def __init__(self, models_dir: Path, tmp_path: Path, *extra: str) -> None:
        prompts = tmp_path / "prompts.jsonl"
        prompts.write_text(PROMPTS)
        self.json, self.data = tmp_path / "workload.json", tmp_path / "data"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ASSISTLAB_MODELS_DIR": str(models_dir),
               "ASSISTLAB_DATA_DIR": str(self.data)}
        env.pop("ASSISTLAB_DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "assistlab", "bench", "--target", "target", *ARMS, "--suite-file", str(prompts),
             "--max-new-tokens", "8", "--warmup", "0", "--json", str(self.json), "--save", *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, words: str, within: float = 240.0) -> None:
        deadline = time.monotonic() + within
        while not any(words in line for line in self.lines):
            assert self.proc.poll() is None, "".join(self.lines)[-3000:]
            assert time.monotonic() < deadline, f"no {words!r} within {within:g} s: {''.join(self.lines)[-3000:]}"
            time.sleep(0.02)

    def finish(self) -> tuple[int, str, str]:
        try:
            out = self.proc.stdout.read()
            self.proc.wait(timeout=180)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        return self.proc.returncode, out, "".join(self.lines)

    def saved(self) -> list[dict]:
        store = hist.History(f"sqlite:///{self.data / hist.DB_FILENAME}", max_entries=None)
        try:
            return [store.get(e.id)[1] for e in store.list().entries]
        finally:
            store.close()


def _kept_as_stopped(workload: Workload, out: str) -> dict:
    """The JSON report, checked to be a stopped workload of whole repetitions, the same one the history holds."""
    report = json.loads(workload.json.read_text())
    assert report["kind"] == "suite" and report["status"] == "stopped", report["message"]
    measured = [p for p in report["suite"]["prompts"] if p.get("runs")]
    assert measured, report["suite"]["prompts"]
    for prompt in measured:  # whole repetitions only: every arm ran as many times as the plain one
        counts = {len(run["latencies_s"]) for run in prompt["runs"]}
        assert counts == {prompt["repetitions"]}, (prompt["id"], counts)
    assert "overall" in out and "category" in out, out  # the table
    saved = workload.saved()
    assert len(saved) == 1 and saved[0]["kind"] == "suite" and saved[0]["status"] == "stopped", saved
    assert saved[0]["suite"]["overall"]["prompts"] == report["suite"]["overall"]["prompts"]
    return report


@slow
def test_a_finished_workload_is_saved_with_save(models_dir, tmp_path):
    workload = Workload(models_dir, tmp_path, "--repeats", "1")
    code, _out, err = workload.finish()
    assert code == 0, err[-3000:]
    assert "Saved to the history as" in err, err[-3000:]
    (saved,) = workload.saved()
    assert saved["kind"] == "suite" and saved["status"] == "complete" and saved["suite"]["overall"]["prompts"] == 3


@slow
def test_sigterm_stops_a_workload_keeping_what_it_measured(models_dir, tmp_path):
    workload = Workload(models_dir, tmp_path, "--repeats", "20")
    workload.wait_for("Prompt 1 of 3 (1, fox) · Repetition 2 of 20")
    workload.proc.send_signal(signal.SIGTERM)
    code, out, err = workload.finish()
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert "Stopped by SIGTERM." in err and "Saved to the history as" in err, err[-3000:]
    _kept_as_stopped(workload, out)


@slow
def test_sigint_at_the_start_of_a_prompt_keeps_the_table_and_json(models_dir, tmp_path):
    workload = Workload(models_dir, tmp_path, "--until-clear", "--repeats", "3")
    workload.wait_for("Prompt 1 of 3 (1, fox) measured")
    workload.proc.send_signal(signal.SIGINT)
    code, out, err = workload.finish()
    assert code == 0, err[-3000:]  # one Ctrl-C is a stop asked for, as in a single comparison
    assert "error:" not in err and "Saved to the history as" in err, err[-3000:]
    report = _kept_as_stopped(workload, out)
    assert report["suite"]["overall"]["prompts"] >= 1


def test_an_interrupt_the_stop_flag_cannot_catch_keeps_what_was_measured(models_dir, tmp_path, monkeypatch, capsys):
    """Ctrl-C twice raises KeyboardInterrupt wherever the command is (here: mid-repetition, in the command's own
    loop): the workload still ends as a stopped one, its cut repetition dropped, with its table, its JSON and its
    history entry, and exit status 130 (it said 'error: interrupted' and kept nothing)."""
    import importlib

    from assistlab.measure import suite_runner

    cli_main = importlib.import_module("assistlab.cli.main")  # assistlab.cli.main is also the function's name

    real = suite_runner.run_suite

    def cut_mid_repetition(*args, **kwargs):
        runs = 0
        for event in real(*args, **kwargs):
            yield event
            runs += event.kind == "run" and not event.warmup
            if runs == 3:  # repetition 2's first arm done, its second not
                raise KeyboardInterrupt

    monkeypatch.setattr(suite_runner, "run_suite", cut_mid_repetition)
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(models_dir))
    monkeypatch.setenv("ASSISTLAB_DATA_DIR", str(tmp_path / "data"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(PROMPTS)
    out_json = tmp_path / "workload.json"
    code = cli_main.main(["bench", "--target", "target", *ARMS, "--suite-file", str(prompts), "--max-new-tokens", "8",
                          "--warmup", "0", "--repeats", "5", "--quiet", "--json", str(out_json), "--save"])
    out, err = capsys.readouterr()
    assert code == 130, err
    assert "error" not in err and "Stopped by an interrupt" in err and "Saved to the history as" in err, err
    report = json.loads(out_json.read_text())
    assert report["status"] == "stopped" and "Stopped by an interrupt after 1 of 3 prompts" in report["message"]
    first = report["suite"]["prompts"][0]
    assert first["status"] == "stopped" and first["repetitions"] == 1, first
    assert {len(run["latencies_s"]) for run in first["runs"]} == {1}, first["runs"]
    assert [p["status"] for p in report["suite"]["prompts"][1:]] == ["not run", "not run"]
    assert "overall" in out
    store = hist.History(f"sqlite:///{tmp_path / 'data' / hist.DB_FILENAME}", max_entries=None)
    (entry,) = store.list().entries
    assert store.get(entry.id)[1]["status"] == "stopped"
    store.close()
