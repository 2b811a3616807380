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
