"""The page's stylesheet colours what it must."""

from __future__ import annotations


def test_a_not_saved_note_is_coloured_as_a_warning():
    from assistlab.ui.style import CSS

    assert "p.al-note.al-failed" in CSS and "#b91c1c" in CSS.split("p.al-note.al-failed {")[1].split("}")[0]
