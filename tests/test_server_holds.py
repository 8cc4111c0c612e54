"""Issue 20 (items 5, 6, 8-12): names, shutdown, hostile inputs, CSV cells, owners, the login's reach, caps."""

from __future__ import annotations

import shutil

import pytest

from assistlab import history as hist
from assistlab.config import BenchRequest
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner


# --- item 5: a local folder is named by its path inside the models folder ----------------------------------

def test_two_local_folders_with_the_same_name_stay_two_models(models_dir, store, tmp_path, monkeypatch):
    root = tmp_path / "models"
    shutil.copytree(models_dir / "target", root / "target")
    for team in ("team1", "team2"):
        shutil.copytree(models_dir / "assistant-same", root / team / "tiny")
    monkeypatch.setenv("ASSISTLAB_MODELS_DIR", str(root))
    request = BenchRequest(target="target", arms=(ArmSpec("assistant", "team1/tiny"), ArmSpec("assistant", "team2/tiny")),
                           prompt="hello there", max_new_tokens=4, repeats=1, warmup=0)
    report = runner.run_to_report(request, store).to_dict()
    names = [arm["name"] for arm in report["arms"][1:]]
    assert any("team1/tiny" in n for n in names) and any("team2/tiny" in n for n in names), names
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        entry, _ = db.get(db.save(report).id)
        assert entry.assistants == "team1/tiny, team2/tiny"
        (section,) = db.leaderboard()
        assert sorted(row.assistant for row in section.rows) == ["team1/tiny", "team2/tiny"]
        assert [e.id for e in db.list(assistant="team2/tiny").entries] == [entry.id]
    finally:
        db.close()
