"""Who owns a saved comparison: any login name can delete its own and no one else's, and retention counts per owner."""

from __future__ import annotations

import pytest

from assistlab import history as hist


def _minimal_report() -> dict:
    from sample_reports import minimal_report

    return minimal_report()


@pytest.mark.parametrize("login", ["ann  lee", "  ann lee ", "x" * 200, "tab\there"])
def test_an_odd_login_name_can_delete_its_own_comparison(tmp_path, login):
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=None)
    try:
        mine, other = db.save(_minimal_report(), owner=login).id, db.save(_minimal_report(), owner="bob").id
        with pytest.raises(hist.HistoryError, match="someone else"):
            db.delete(other, user=login)
        db.delete(mine, user=login)
        assert [e.id for e in db.list().entries] == [other]
    finally:
        db.close()


def test_one_user_saving_many_does_not_push_out_anyone_elses(tmp_path):
    db = hist.History(f"sqlite:///{tmp_path / 'h.sqlite3'}", max_entries=3)
    try:
        alice = [db.save(_minimal_report(), owner="alice").id for _ in range(2)]
        anonymous = db.save(_minimal_report()).id
        mallory = [db.save(_minimal_report(), owner="mallory").id for _ in range(10)]
        kept = {e.id for e in db.list(page_size=100).entries}
        assert kept == {*alice, anonymous, *mallory[-3:]}
    finally:
        db.close()
