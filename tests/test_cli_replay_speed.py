"""The replay command's fast paths outside the context manager: reading JSONL with json's C
scanner, the JSON report written row by row, the chart's bounded number of points and the
replay's rows. Each must give what the plain path gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.cli.errors import InputError
from contextfold.cli.readers import read_conversation

# -- reading ---------------------------------------------------------------------------------


def reference_jsonl(text: str, source: str) -> tuple[list[Any], list[str]]:
    """The plain reading of JSON Lines: ``json.loads`` on every non-blank line."""
    messages, places = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        place = f"line {number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                source, f"not valid JSON: {exc.msg} (column {exc.colno})", place
            ) from None
        except RecursionError:
            raise InputError(
                source,
                "JSON nested too deeply to read (a chat message is a few levels deep)",
                place,
            ) from None
        except ValueError:
            raise InputError(
                source,
                f"a number too long to read (more than {sys.get_int_max_str_digits():,} digits)",
                place,
            ) from None
        if (
            isinstance(value, dict)
            and "role" not in value
            and isinstance(value.get("message"), dict)
        ):
            value = value["message"]
        if not isinstance(value, dict) or "role" not in value:
            kind = "an object" if isinstance(value, dict) else "something else"
            raise InputError(source, f"expected one chat message per line ({kind})", place)
        messages.append(value)
        places.append(place)
    return messages, places


message_lines = st.sampled_from(
    [
        '{"role": "user", "content": "hi"}',
        '{"role":"assistant","content":null,"n":NaN}',
        '  {"role": "user", "content": "padded"}  ',
        '{"role": "tool", "content": "tab"}\t',
        '{"message": {"role": "user", "content": "wrapped"}, "ts": 1}',
        '{"message": {"content": "no role"}}',
        '{"content": "no role"}',
        "[1, 2]",
        '"a string"',
        "null",
        "",
        "   ",
        "\ufeff" + '{"role": "user"}',
        '{"role": "user"} {"role": "user"}',
        '{"role": "user", "content": "\u2028 separator inside"}',
        '{"role": "user", "content": "\\u00e9 \u00e9"}',
        '{"role": "user", "x": 1e999, "y": -0.0}',
        '{"role": "user", "big": ' + "9" * 5000 + "}",
        "[" * 100_000 + "]" * 100_000,
        '{"role": "user", "content": "unterminated',
        "{'role': 'user'}",
        '{"role": "user", "role": "assistant"}',
    ]
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(message_lines, min_size=1, max_size=8), st.sampled_from(["\n", "\r\n", "\r"]))
def test_jsonl_lines_read_as_json_loads_reads_them(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], newline: str
) -> None:
    text = newline.join(lines) + newline
    path = tmp_path_factory.mktemp("jsonl") / "conversation.jsonl"
    path.write_text(text, encoding="utf-8", newline="")
    try:
        # As the reader decodes it: a leading byte-order mark is not part of the text.
        expected: Any = reference_jsonl(text.removeprefix("\ufeff"), str(path))
    except InputError as error:
        expected = error
    if not isinstance(expected, InputError) and not expected[0]:
        with pytest.raises(InputError, match=r"empty|no messages"):
            read_conversation(path, "jsonl")
        return
    try:
        conversation = read_conversation(path, "jsonl")
    except InputError as error:
        assert isinstance(expected, InputError), error
        if "chat message per line" in str(expected):
            assert "chat message per line" in str(error) and error.place == expected.place
        else:
            assert str(error) == str(expected)
        return
    assert not isinstance(expected, InputError), expected
    messages, places = expected
    assert conversation.messages == messages or json.dumps(conversation.messages) == json.dumps(
        messages
    )  # NaN is not equal to itself
    assert conversation.places == places


def test_a_json_document_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextfold.cli.readers as readers

    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(messages))
    calls: list[int] = []
    real = json.loads

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(readers.json, "loads", counting)
    conversation = read_conversation(path)
    assert conversation.format == "json" and conversation.messages == messages
    assert len(calls) == 1


def test_blank_lines_keep_their_numbers_in_places(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('\n{"role": "user"}\n  \n\n{"role": "assistant"}\n{"role": "user"}\n\n')
    conversation = read_conversation(path)
    assert conversation.places == ["line 2", "line 5", "line 6"]


# -- the JSON report -------------------------------------------------------------------------


def reference_json_text(value: Any, indent: str = "") -> str:
    """The report's layout the plain way: ``json.dumps`` for anything that goes on one line."""

    def is_row(value: Any) -> bool:
        if not isinstance(value, dict):
            return not any(isinstance(item, dict | list | tuple) for item in value)
        return not any(
            isinstance(item, dict) or (isinstance(item, list | tuple) and not is_row(item))
            for item in value.values()
        )

    if not isinstance(value, dict | list | tuple) or is_row(value):
        return json.dumps(value, ensure_ascii=False)
    inner = indent + "  "
    if isinstance(value, dict):
        parts = [
            f"\n{inner}"
            + json.dumps(key if isinstance(key, str) else json.dumps(key), ensure_ascii=False)
            + ": "
            + reference_json_text(item, inner)
            for key, item in value.items()
        ]
        return "{" + ",".join(parts) + "\n" + indent + "}"
    parts = [f"\n{inner}" + reference_json_text(item, inner) for item in value]
    return "[" + ",".join(parts) + "\n" + indent + "]"


class Number(int):
    """An int subclass: json writes it as an int."""


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included: json writes NaN, Infinity
    | st.text(max_size=5)
    | st.sampled_from(["\ud800", "é", '"', "\\", "%s", "a, b", "}, {", "\u2028"])
    | st.integers().map(Number)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=20,
)
row_keys = st.lists(st.sampled_from(["a", "b", "c%", 'd"', "é"]), unique=True, max_size=5)


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows sharing their keys (as a replay's do), now and then one that does not."""
    keys = draw(row_keys)
    count = draw(st.integers(0, 6))
    made = [{key: draw(values) for key in keys} for _ in range(count)]
    if made and draw(st.booleans()):
        made.insert(
            draw(st.integers(0, len(made))),
            draw(st.dictionaries(st.text(max_size=3), values, max_size=3)),
        )
    return made


plain_values = scalars | st.lists(scalars, max_size=3)


@st.composite
def plain_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows of plain values sharing their keys, each key mostly of one type: a replay's."""
    keys = draw(row_keys)
    kinds = {key: draw(st.sampled_from([plain_values, st.integers(), st.floats()])) for key in keys}
    return [{key: draw(kinds[key]) for key in keys} for _ in range(draw(st.integers(0, 6)))]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values | rows() | plain_rows(), max_size=5))
def test_the_report_is_written_as_the_plain_layout_writes_it(
    tmp_path_factory: pytest.TempPathFactory, data: dict[str, Any]
) -> None:
    from contextfold.cli.report import write_json

    try:
        expected = (reference_json_text(data) + "\n").encode("utf-8", "backslashreplace")
    except ValueError:
        return  # an integer too long to write: json refuses it either way
    path = write_json(tmp_path_factory.mktemp("json") / "report.json", data)
    assert path.read_bytes() == expected


def test_a_replay_report_is_written_as_the_plain_layout_writes_it(tmp_path: Path) -> None:
    from contextfold.cli.replay import replay_messages
    from contextfold.cli.report import _line_encoder, _row_lines, write_json
    from support import agent_run

    result = replay_messages(agent_run(20, result_chars=1200), {}, 8_000)
    data = {"source": "x", "effective_config": {"strategies": ["a", "b"]}} | result.to_dict()
    encode = _line_encoder()
    # The rows take the column-at-a-time path, and it writes what json.dumps writes.
    lines = _row_lines(data["rows"], encode)
    assert lines == [json.dumps(row, ensure_ascii=False) for row in data["rows"]]
    assert any(row["applied"] for row in data["rows"]) and len(lines) > 2
    path = write_json(tmp_path / "replay.json", data)
    assert path.read_bytes() == (reference_json_text(data) + "\n").encode()
    assert result.totals.compactions > 0


# -- the replay's rows and totals ------------------------------------------------------------


def test_rows_behave_as_the_frozen_dataclass_they_are() -> None:
    import copy
    import dataclasses
    import pickle

    from contextfold.cli.replay import ReplayRow, _new_row

    values = (3, 9, 120, 130, 90, 9, 6, True, 2, ["drop_oldest"], 100, 92, 4, 40, 0.44)
    names = [field.name for field in dataclasses.fields(ReplayRow)]
    assert names[:3] == ["request", "history_messages", "history_tokens"] and len(names) == 15
    row = ReplayRow(**dict(zip(names, values, strict=True)))
    assert row == ReplayRow(*values) == _new_row(values)
    assert row != dataclasses.replace(row, level=3)
    assert dataclasses.replace(row, level=3).level == 3
    assert [getattr(row, name) for name in names] == list(values)
    assert dataclasses.asdict(row) == dict(zip(names, values, strict=True))
    assert dataclasses.astuple(row) == values
    assert repr(row).startswith("ReplayRow(request=3, history_messages=9, ")
    assert not row.over_budget and dataclasses.replace(row, tokens_after=101).over_budget
    for name in (*names, "other"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(row, name, 1)
    assert pickle.loads(pickle.dumps(row)) == row
    deep = copy.deepcopy(row)
    assert deep == row and deep.applied is not row.applied
    assert copy.copy(row) == row
    assert row != values  # a row is not a tuple


def reference_totals(rows: list[Any]) -> dict[str, Any]:
    later = rows[1:]
    later_sent = sum(row.tokens_after for row in later)
    before = sum(row.history_tokens for row in rows)
    sent = sum(row.tokens_after for row in rows)
    return {
        "requests": len(rows),
        "compactions": sum(1 for row in rows if row.compacted),
        "levels_used": sorted({row.level for row in rows if row.level > 0}),
        "rungs_used": sorted({rung for row in rows for rung in row.applied}),
        "largest_history": max(row.history_tokens for row in rows),
        "largest_after": max(row.tokens_after for row in rows),
        "history_tokens_total": before,
        "tokens_sent_total": sent,
        "saved_share": 1 - sent / before if before else 0.0,
        "prefix_share": sum(row.prefix_tokens for row in later) / later_sent if later_sent else 0.0,
        "over_budget_requests": sum(1 for row in rows if row.over_budget),
        "budget": rows[-1].budget,
        "trigger": rows[-1].trigger,
    }


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.integers(0, 10**6),
            st.booleans(),
            st.integers(0, 4),
            st.lists(st.sampled_from(["drop_oldest", "truncate_long_text", "x"]), max_size=2),
            st.integers(1, 10**6),
            st.integers(0, 10**6),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_totals_read_from_columns_are_the_rows_totals(draws: list[tuple[Any, ...]]) -> None:
    from contextfold.cli.replay import ReplayRow, _totals

    rows = [
        ReplayRow(
            n + 1, n, history, 0, after, 0, 0, compacted, level, applied, budget, 9, 0, prefix, 0.0
        )
        for n, (history, after, compacted, level, applied, budget, prefix) in enumerate(draws)
    ]
    messages = [{"role": "user", "content": "q"}]
    totals = dataclasses_asdict(_totals(rows, messages, messages))
    assert {key: totals[key] for key in reference_totals(rows)} == reference_totals(rows)


def dataclasses_asdict(value: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(value)


def test_the_replay_result_is_not_formatted_on_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """asyncio.run formats the repr of its main task (with its result) when it restores the
    SIGINT handler; a replay's result (every row) must not be that result."""
    from contextfold.cli.replay import ReplayResult, ReplayRow, replay_messages

    reprs: list[str] = []

    def counted(self: Any) -> str:
        reprs.append(type(self).__name__)
        return "..."

    monkeypatch.setattr(ReplayResult, "__repr__", counted)
    monkeypatch.setattr(ReplayRow, "__repr__", counted)
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    result = replay_messages(messages, {}, 8_000)
    assert len(result.rows) == 2
    assert reprs == []


def test_a_replay_does_not_copy_or_change_the_messages_it_is_given() -> None:
    from types import MappingProxyType

    from contextfold.cli.replay import replay_messages
    from support import agent_run

    messages = agent_run(6, result_chars=300)
    before = json.dumps(messages, sort_keys=True)
    plain = replay_messages(messages, {}, 8_000)
    assert json.dumps(messages, sort_keys=True) == before
    # Any other mapping is turned into a dict first, as before: the same replay.
    proxied = replay_messages([MappingProxyType(m) for m in messages], {}, 8_000)
    assert proxied.to_dict() == plain.to_dict()


# -- the chart -------------------------------------------------------------------------------


def spiky(count: int, seed: int = 7) -> list[int]:
    """A sawtooth with compaction drops, noise and a few lone spikes."""
    import random

    rng = random.Random(seed)
    sizes, size = [], 0
    for step in range(count):
        size = 50 if step % 997 == 0 else size + rng.randint(0, 30)
        sizes.append(size)
    for step in rng.sample(range(count), 5):
        sizes[step] = 200_000 + step  # one-request spikes, each a different height
    sizes[count // 3] = 0  # one lone dip
    return sizes


def test_a_short_line_is_drawn_through_every_point() -> None:
    from contextfold.cli.chart import MAX_POINTS, _envelope, _marks_kept

    sizes = spiky(MAX_POINTS)
    steps, drawn = _envelope(sizes)
    assert list(steps) == list(range(1, MAX_POINTS + 1)) and drawn is sizes
    marks = list(range(0, MAX_POINTS, 3))
    assert _marks_kept(marks, sizes) is marks


@pytest.mark.parametrize("count", [2_001, 10_007, 300_000])
def test_a_long_line_keeps_every_stretchs_lowest_and_highest_point(count: int) -> None:
    from contextfold.cli.chart import MAX_POINTS, _envelope

    sizes = spiky(count)
    steps, drawn = _envelope(sizes)
    assert len(steps) == len(drawn) <= MAX_POINTS + 2
    assert list(steps) == sorted(set(steps)) and steps[0] == 1 and steps[-1] == count
    assert all(sizes[step - 1] == size for step, size in zip(steps, drawn, strict=True))
    assert max(drawn) == max(sizes) and min(drawn) == min(sizes)
    spikes = [step + 1 for step, size in enumerate(sizes) if size >= 200_000]
    assert set(spikes) <= set(steps)  # every lone spike, not only the highest
    assert sizes.index(0) + 1 in steps  # and the lone dip
    # Each stretch of requests keeps its extremes: no stretch of the line looks flatter.
    width = -(-count // (MAX_POINTS // 2))
    for start in range(0, count, width * 5):
        inside = [
            size for step, size in zip(steps, drawn, strict=True) if start < step <= start + width
        ]
        if inside:
            assert max(inside) <= max(sizes[start : start + width])
    assert len(steps) > MAX_POINTS // 2  # one or two points per stretch


def test_many_compaction_marks_keep_their_extremes() -> None:
    from contextfold.cli.chart import MAX_POINTS, _marks_kept

    sizes = spiky(100_000)
    marks = list(range(0, 100_000, 7))
    kept = _marks_kept(marks, sizes)
    assert len(kept) <= MAX_POINTS and set(kept) <= set(marks) and kept == sorted(kept)
    marked = [sizes[mark] for mark in marks]
    assert max(sizes[mark] for mark in kept) == max(marked)
    assert min(sizes[mark] for mark in kept) == min(marked)


def test_the_envelope_chart_looks_like_the_chart_of_every_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.image as image
    import numpy

    import contextfold.cli.chart as chart

    sizes = spiky(30_000)
    series = [
        chart.Series("line", sizes, "#1565c0", marks=list(range(0, 30_000, 997))),
        # Solid: a dashed line's dashes fall where its drawn length puts them, which an
        # envelope (a shorter path) shifts; the dashes are the same, a little moved.
        chart.Series("other", [size // 2 for size in sizes], "#7b1fa2"),
    ]

    def draw(name: str) -> Any:
        path = chart.write_size_chart(
            tmp_path / name, series, window=150_000, window_label="w", trigger=120_000, title="t"
        )
        return image.imread(path)

    enveloped = draw("envelope.png")
    monkeypatch.setattr(chart, "MAX_POINTS", 10**9)
    every = draw("every.png")
    assert enveloped.shape == every.shape
    differing = (numpy.abs(enveloped - every).max(axis=2) > 0.1).sum()
    # At most the sides of a one-request spike move by a pixel (its neighbours drawn are a
    # stretch's extremes, up to a pixel away): a fraction of a percent of the image.
    assert differing < every.shape[0] * every.shape[1] * 0.005


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from("ab\n é€😀\ud800\udfff"), max_size=6)),
    st.integers(1, 8),
)
def test_the_report_text_is_encoded_in_parts_as_it_is_whole(chunks: list[str], size: int) -> None:
    from contextfold.cli.report import _encoded

    whole = "".join(chunks).encode("utf-8", "backslashreplace")
    assert b"".join(_encoded(chunks, size)) == whole


def test_the_replay_command_lets_go_of_its_data_before_drawing_the_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matplotlib's parsers leave tracebacks in reference cycles; one that holds the frames
    below the chart must not hold the messages or the rows (the collector is off during
    the command, and walking them later took seconds)."""
    import gc
    import weakref

    from contextfold.cli import commands, main

    alive: dict[str, Any] = {}
    real_read, real_replay = commands.read_conversation, commands.replay_messages
    real_chart = commands.write_size_chart

    def read(*args: Any, **kwargs: Any) -> Any:
        conversation = real_read(*args, **kwargs)
        alive["conversation"] = weakref.ref(conversation)
        return conversation

    def replay(*args: Any, **kwargs: Any) -> Any:
        result = real_replay(*args, **kwargs)
        alive["result"] = weakref.ref(result)
        return result

    def chart(*args: Any, **kwargs: Any) -> Any:
        try:
            raise ValueError("a parser backtracking")
        except ValueError as error:
            kept = error  # a traceback cycle: this frame and every frame below it
        alive["at chart"] = [name for name, ref in alive.items() if ref() is not None]
        assert kept.__traceback__ is not None
        return real_chart(*args, **kwargs)

    monkeypatch.setattr(commands, "read_conversation", read)
    monkeypatch.setattr(commands, "replay_messages", replay)
    monkeypatch.setattr(commands, "write_size_chart", chart)
    path = tmp_path / "conv.jsonl"
    path.write_text(
        "\n".join(json.dumps(m) for m in [{"role": "user", "content": "q"}] * 3)
        + "\n"
        + json.dumps({"role": "assistant", "content": "a"})
        + "\n"
    )
    enabled = gc.isenabled()
    gc.disable()
    try:
        assert main(["replay", str(path), "--out", str(tmp_path / "out"), "-q"]) == 0
    finally:
        if enabled:
            gc.enable()
    assert alive["at chart"] == []
    assert (tmp_path / "out" / "requests.png").read_bytes()[:4] == b"\x89PNG"


def test_the_notice_cost_the_pass_counted_is_the_one_the_prefix_uses(monkeypatch) -> None:
    """The replay takes the notice's cost from the pass that counted it: the same figures
    as counting it again."""
    from contextfold import ContextFold
    from contextfold.cli.replay import replay_messages

    conversation = [{"role": "system", "content": "You are terse."}]
    for turn in range(300):
        conversation += [
            {"role": "user", "content": f"What is item {turn}?"},
            {"role": "assistant", "content": f"Item {turn} is fine, as before."},
        ]
    reused = replay_messages(conversation, {}, 3_000, max_output_tokens=500)
    assert reused.totals.compactions > 5
    monkeypatch.setattr(ContextFold, "_notice_view_cost", lambda self: (None, 0))
    counted = replay_messages(conversation, {}, 3_000, max_output_tokens=500)
    assert [r.prefix_tokens for r in reused.rows] == [r.prefix_tokens for r in counted.rows]
    assert reused.rows == counted.rows
