"""The one-look admission of common shapes (`contextfold.common_shapes`) must store and
classify exactly what the general path does, and must leave everything else to it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.common_shapes import admit_common_shape
from contextfold.conventions import stamp_timestamp
from contextfold.history import History
from contextfold.ingress import cap_tool_result
from contextfold.messages import MessageValidationError, inspect_message, private_copy, to_plain
from contextfold.tokens import ExactCounter

CAP = 64  # a small ingress cap, so results over it are generated often


def general_path(message: Any) -> tuple[dict[str, Any], Any] | Exception:
    """What `History.prepare` stores and concludes without the one-look path."""
    try:
        plain = to_plain(message)
        info = inspect_message(plain, index=0)
        stored, clips = cap_tool_result(private_copy(plain, index=0), CAP)
        return stored, (inspect_message(stored, index=0) if clips else info)
    except (MessageValidationError, ValueError, TypeError) as error:
        return error


# Text that is usually plain ASCII, sometimes not (accents, a lone surrogate, a reminder
# envelope), and sometimes longer than the cap.
texts = st.one_of(
    st.sampled_from(["", "hi", "What is item 4?", "<system-reminder>x</system-reminder>"]),
    st.text(alphabet="abc <>{}\"':,", max_size=80),
    st.text(max_size=12),
    st.just("caf\u00e9"),
    st.just("bad \ud800"),
    st.just("y" * (CAP + 1)),
)
ids = st.one_of(st.sampled_from(["call_1", "call_2", "", "c\u00e9"]), st.integers(0, 3), st.none())
odd_values = st.one_of(st.none(), st.integers(-2, 2), st.floats(allow_nan=True), st.just([]))


@st.composite
def metadata(draw: st.DrawFn) -> Any:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return None
    if choice == 1:
        return {"timestamp": draw(st.one_of(texts, odd_values))}
    if choice == 2:
        return {"timestamp": "2026-12-01T10:00:00.000+00:00", "source": "hook"}
    if choice == 3:
        return {"amplifier_public_reference_only": True, "timestamp": "t"}
    if choice == 4:
        return "not a dict"
    return {}


@st.composite
def calls(draw: st.DrawFn) -> Any:
    def call() -> Any:
        shape = draw(st.integers(0, 6))
        function: Any = {
            "name": draw(st.sampled_from(["lookup", "", "l\u00e9"])),
            "arguments": draw(st.one_of(st.just('{"item": 1}'), texts, st.just({"a": 1}))),
        }
        made: Any = {"id": draw(ids), "type": "function", "function": function}
        if shape == 1:
            del made["type"]
        elif shape == 2:
            made["extra"] = 1
        elif shape == 3:
            made["function"] = "lookup"
        elif shape == 4:
            made = {"id": draw(ids), "tool": "lookup", "arguments": {"item": 1}}
        elif shape == 5:
            function["extra"] = True
        return made

    kind = draw(st.integers(0, 3))
    if kind == 0:
        return None
    if kind == 1:
        return "not a list"
    return [call() for _ in range(draw(st.integers(0, 3)))]


@st.composite
def messages(draw: st.DrawFn) -> Any:
    role = draw(st.sampled_from(["user", "assistant", "tool", "system", "function", "robot", None]))
    message: dict[Any, Any] = {"role": role}
    content = draw(
        st.one_of(
            texts,
            st.none(),
            st.just([{"type": "text", "text": "hi"}]),
            st.just(42),
            st.just({"a": 1}),
        )
    )
    if draw(st.booleans()) or content is not None:
        message["content"] = content
    if role in ("tool", "user") and draw(st.booleans()):
        message["tool_call_id"] = draw(ids)
    if role in ("assistant", "user") and draw(st.booleans()):
        message["tool_calls"] = draw(calls())
    found = draw(metadata())
    if found is not None:
        message["metadata"] = found
    if draw(st.integers(0, 9)) == 0:
        message[draw(st.sampled_from(["name", "thinking_block", 7]))] = "x"
    if draw(st.booleans()):
        message = stamp_timestamp(message)
    return message


ascii_texts = st.text(alphabet="abcxyz 019<>{}\"':,-", max_size=CAP + 8)


@st.composite
def near_common(draw: st.DrawFn) -> Any:
    """A common shape, sometimes with one thing changed that may take it off the path."""
    role = draw(st.sampled_from(["user", "assistant", "tool"]))
    message: dict[Any, Any] = {"role": role, "content": draw(ascii_texts)}
    if role == "tool":
        message["tool_call_id"] = draw(st.sampled_from(["call_1", "call_2"]))
    if role == "assistant" and draw(st.booleans()):
        message["content"] = draw(st.sampled_from([None, "", "Looking."]))
        names = draw(
            st.lists(st.sampled_from(["call_1", "call_2", "call_3"]), min_size=1, max_size=3)
        )
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": "lookup", "arguments": draw(ascii_texts)},
            }
            for i in names
        ]
    if draw(st.booleans()):
        message = stamp_timestamp(message)
    if draw(st.integers(0, 2)) == 0:  # one change
        where = draw(st.sampled_from(["content", "metadata", "tool_call_id", "tool_calls", "name"]))
        value = draw(st.one_of(texts, odd_values, metadata(), calls(), ids))
        message[where] = value
    return message


@given(st.one_of(near_common(), messages()))
@settings(max_examples=800, deadline=None)
def test_the_one_look_path_stores_and_classifies_what_the_general_path_does(message: Any) -> None:
    original = copy.deepcopy(message)
    common = admit_common_shape(message, CAP)
    assert message == original  # the caller's message is never touched
    if common is None:
        return  # the general path decides
    expected = general_path(message)
    assert not isinstance(expected, Exception), (
        f"admitted what the general path refuses: {expected}"
    )
    stored, info = common
    assert stored == expected[0]
    assert info == expected[1]
    assert _shares_no_container(stored, message)


def _shares_no_container(stored: Any, given: Any) -> bool:
    if isinstance(stored, dict | list):
        if stored is given:
            return False
        if isinstance(stored, dict):
            return all(
                _shares_no_container(v, given.get(k) if isinstance(given, dict) else None)
                for k, v in stored.items()
            )
        return all(
            _shares_no_container(
                v, given[i] if isinstance(given, list) and i < len(given) else None
            )
            for i, v in enumerate(stored)
        )
    return True


COMMON = [
    {"role": "user", "content": "What is item 4?"},
    {"role": "user", "content": "<system-reminder>note</system-reminder>"},
    {"role": "assistant", "content": "Item 4 is ok."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_4", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_4", "content": "item 4: ok"},
]


@pytest.mark.parametrize("message", COMMON, ids=lambda m: m["role"])
def test_the_common_shapes_take_the_one_look_path(message: dict[str, Any]) -> None:
    stamped = stamp_timestamp(message)
    common = admit_common_shape(stamped, CAP)
    assert common is not None
    assert common == general_path(stamped)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "tool", "tool_call_id": "call_4", "content": "y" * (CAP + 1)},  # the cap
        {"role": "user", "content": "caf\u00e9"},  # not ASCII: the surrogate check
        {"role": "user", "content": "hi", "name": "ann"},  # a key it does not expect
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": None},  # mended in the view
        {"role": "tool", "tool_call_id": "", "content": "x"},  # an orphan
    ],
)
def test_anything_else_takes_the_general_path(message: dict[str, Any]) -> None:
    assert admit_common_shape(stamp_timestamp(message), CAP) is None


def test_history_admits_a_clipped_result_through_the_general_path() -> None:
    history = History(ExactCounter(), CAP)
    history.append(history.prepare(COMMON[3]))
    admission = history.prepare({"role": "tool", "tool_call_id": "call_4", "content": "y" * 500})
    assert admission.clips
    assert admission.message["content"] != "y" * 500
