"""The /compare, /compare_suite and /tune APIs take and give what they always did: names, order, types, defaults,
words.

`api_endpoints.json` is gradio's /info for each, as the server described them before their signatures were
derived from `ui.fields` (/tune: as it was added); a change to any API is deliberate only if that file changes
with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assistlab.history import History
from assistlab.ui.api_parameters import COMPARE_API, COMPARE_SUITE_API, FORM_FIELDS, TUNE_API, TUNE_OWN


EXPECTED = json.loads((Path(__file__).parent / "api_endpoints.json").read_text())


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory, store):
    from assistlab import ui

    folder = tmp_path_factory.mktemp("api")
    demo = ui.build_app(store, reports_dir=folder, history=History(f"sqlite:///{folder / 'h.sqlite3'}"))
    return demo.get_api_info()["named_endpoints"]


@pytest.mark.parametrize("name", ["/compare", "/compare_suite", "/tune"])
def test_the_api_describes_itself_as_before(endpoints, name):
    got, expected = endpoints[name], EXPECTED[name]
    assert [p["parameter_name"] for p in got["parameters"]] == [p["parameter_name"] for p in expected["parameters"]]
    for mine, theirs in zip(got["parameters"], expected["parameters"]):
        assert mine == theirs, mine["parameter_name"]
    assert got == expected


def test_both_routes_describe_a_shared_parameter_alike(endpoints):
    compare = {p["parameter_name"]: p for p in endpoints["/compare"]["parameters"]}
    suite = {p["parameter_name"]: p for p in endpoints["/compare_suite"]["parameters"]}
    shared = [name for name in compare if name in suite]
    assert shared == [name for name in FORM_FIELDS if name != "prompt"]  # in the same order in both
    ignore = {"label"}  # gradio numbers each parameter by its place: 1st, 2nd, ...
    for name in shared:
        assert {k: v for k, v in compare[name].items() if k not in ignore} == \
               {k: v for k, v in suite[name].items() if k not in ignore}, name
    assert [p.name for p in COMPARE_API] == list(compare) and [p.name for p in COMPARE_SUITE_API] == list(suite)


def test_tune_describes_the_form_s_fields_as_compare_does(endpoints):
    """/tune's parameters that the form has (all but its own four) read exactly as /compare's: one description."""
    compare = {p["parameter_name"]: p for p in endpoints["/compare"]["parameters"]}
    tune = {p["parameter_name"]: p for p in endpoints["/tune"]["parameters"]}
    own = {p.name for p in TUNE_OWN}
    shared = [name for name in tune if name not in own]
    assert shared and all(name in compare for name in shared)
    for name in shared:
        assert {k: v for k, v in tune[name].items() if k != "label"} == \
               {k: v for k, v in compare[name].items() if k != "label"}, name
    assert [p.name for p in TUNE_API] == list(tune)
    assert tune["repeats"]["parameter_default"] is None and tune["max_time_s"]["python_type"]["type"] == "None | float"
