"""`bench --save` and the `history` command, through a real command line on tiny models."""

import json
import re

import pytest
from commandline import cli

pytestmark = pytest.mark.slow  # each test runs several `python -m assistlab` processes

BENCH = ("bench", "--target", "target", "--assistant", "assistant-same", "--no-prompt-lookup", "--max-new-tokens", "4",
         "--repeats", "2", "--warmup", "0", "--quiet")


def test_saved_comparison_is_listed_shown_ranked_and_deleted(models_dir, tmp_path):
    env = {"ASSISTLAB_DATA_DIR": str(tmp_path / "data"), "ASSISTLAB_DATABASE_URL": ""}
    ran = cli(*BENCH, "--save", "--json", str(tmp_path / "r.json"), models_dir=models_dir, env_extra=env)
    assert ran.returncode == 0, ran.stderr
    saved = re.search(r"Saved to the history as ([0-9a-f]{16})", ran.stderr)
    assert saved, ran.stderr
    run_id = saved.group(1)
    assert (tmp_path / "data" / "history.sqlite3").exists()

    listed = cli("history", env_extra=env)
    assert listed.returncode == 0 and run_id in listed.stdout and "assistant-same" in listed.stdout
    as_json = json.loads(cli("history", "--json", "--assistant", "assistant-same", env_extra=env).stdout)
    assert as_json["total"] == 1 and as_json["entries"][0]["id"] == run_id
    assert as_json["entries"][0]["target"] == "target" and as_json["entries"][0]["status"] == "complete"
    assert json.loads(cli("history", "--json", "--device", "cuda", env_extra=env).stdout)["total"] == 0

    shown = cli("history", "show", run_id, env_extra=env)
    assert shown.returncode == 0 and f"Comparison {run_id}" in shown.stdout and "outputs identical" in shown.stdout
    report = json.loads(cli("history", "show", run_id, "--json", env_extra=env).stdout)
    assert report == json.loads((tmp_path / "r.json").read_text())

    board = cli("history", "leaderboard", env_extra=env)
    assert board.returncode == 0 and "assistant: assistant-same (transformers defaults)" in board.stdout and run_id in board.stdout

    assert cli("history", "delete", run_id, env_extra=env).returncode == 0
    gone = cli("history", "show", run_id, env_extra=env)
    assert gone.returncode == 2 and gone.stderr.startswith("error: There is no saved comparison")
    assert "Traceback" not in gone.stderr
    bad = cli("history", "show", "../../etc/passwd", env_extra=env)
    assert bad.returncode == 2 and "16 letters" in bad.stderr


def test_an_unusable_history_still_prints_the_comparison(models_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = {"ASSISTLAB_DATA_DIR": str(blocker / "data"), "ASSISTLAB_DATABASE_URL": ""}
    ran = cli(*BENCH, "--save", models_dir=models_dir, env_extra=env)
    assert ran.returncode == 0, ran.stderr
    assert "×" in ran.stdout and "outputs identical" in ran.stdout
    warnings = [line for line in ran.stderr.splitlines() if "not saved to the history" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "Traceback" not in ran.stderr
    listed = cli("history", env_extra=env)
    assert listed.returncode == 2 and listed.stderr.startswith("error: Cannot use the history file")
