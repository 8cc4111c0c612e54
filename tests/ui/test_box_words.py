"""Boxes say what they mean: a message names the Repetitions box, and an empty box shows what it will use."""

from __future__ import annotations

import pytest

from assistlab.config import BenchRequest
from assistlab.errors import InputError
from assistlab.ui.fields import in_page_words, request_from_form


@pytest.mark.parametrize(("field", "value", "said"), [
    ("repeats", 0, "Repetitions must be between 1 and 50, got 0."),
    ("repeats", "five", "Repetitions must be a whole number, got 'five'."),
    ("warmup", 11, "Warm-up runs must be between 0 and 10, got 11."),
])
def test_a_bad_count_names_the_box_a_person_sees(field, value, said):
    with pytest.raises(InputError) as bad:
        BenchRequest(target="org/name", **{field: value})
    assert in_page_words(str(bad.value)) == said


def test_the_form_path_names_repetitions_too():
    with pytest.raises(InputError) as bad:
        request_from_form(target="org/name", assistant="org/small", strategy="assistant", prompt="Hi", repeats="0")
    assert in_page_words(str(bad.value)) == "Repetitions must be between 1 and 50, got 0."
    # An ordinary word inside a sentence stays a word.
    assert in_page_words("Add repeats must wait.") == "Add repeats must wait."


def test_prompts_per_kind_of_task_is_empty_and_shows_the_number_it_will_use(store):
    from assistlab import ui
    from assistlab.ui import suite_tab

    demo = ui.build_app(store)
    [box] = [b for b in demo.blocks.values() if getattr(b, "label", None) == "Prompts per kind of task"]
    assert box.value in ("", None) and box.placeholder == "1"  # not a 0 that reads as "no prompts"
    assert suite_tab.per_category_placeholder("file") == "all of them"
    # Left empty it takes one of each kind (Spec-Bench), every prompt of a file; a number typed is taken.
    assert suite_tab.suite_request_from_form("spec-bench", ["qa"], "", "first", 0, "first").per_category is None
    assert suite_tab.suite_request_from_form("spec-bench", ["qa"], " 3 ", "first", 0, "first").per_category == 3
