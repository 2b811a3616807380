"""The CLI's JSON files: the same data as ``json.dumps`` would write, leaves one to a line."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.cli.report import write_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=5))
def test_what_is_written_reads_back_as_the_data(data: dict[str, Any]) -> None:
    # A folder of its own per example: a fixed path in /tmp is shared with every other test
    # run on the machine, and two runs at once read each other's half-written file.
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "replay.json"
        write_json(target, data)
        assert json.loads(target.read_text(encoding="utf-8")) == json.loads(json.dumps(data))


def test_rows_are_one_to_a_line_and_containers_indented(tmp_path: Path) -> None:
    rows = [{"request": n, "tokens": n * 10, "note": None} for n in range(3)]
    data = {"totals": {"requests": 3, "ratio": math.pi}, "rows": rows, "empty": []}
    path = write_json(tmp_path / "replay.json", data)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert '    {"request": 1, "tokens": 10, "note": null},' in lines
    assert '  "empty": []' in lines
    assert json.loads(path.read_text(encoding="utf-8")) == data


def test_non_string_keys_are_named_as_json_names_them(tmp_path: Path) -> None:
    data = {"outer": {1: [1], 2.5: {"a": 1}, False: [[2]], None: [{}]}}
    path = write_json(tmp_path / "keys.json", data)
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(data))
