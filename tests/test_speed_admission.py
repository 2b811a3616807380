"""Admission's fast paths (issue 8 part 3) give exactly what the slow ones gave.

`private_copy` skips the JSON round trip for plain messages: it must store the same value,
share no container with the caller's message, and refuse what the round trip refuses with
the same error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.conventions import utc_timestamp
from contextfold.errors import MessageValidationError
from contextfold.messages import canonical_json, private_copy
from contextfold.views import detached

# Leaves the round trip treats specially next to plain ones: non-finite floats, lone
# surrogates, huge ints, bools, tuples (become lists) and non-string keys (become strings).
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "é\udfff", "ok"]),
)
KEYS = st.one_of(st.text(max_size=5), st.sampled_from(["\udc80", "k"]), st.integers(0, 3))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(KEYS, inner, max_size=4),
    ),
    max_leaves=12,
)


def round_trip(message: dict[str, Any]) -> Any:
    return json.loads(canonical_json(message, index=3))


def containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for item in value.values() for i in containers(item))]
    if isinstance(value, list):
        return [id(value), *(i for item in value for i in containers(item))]
    return []


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_private_copy_is_the_round_trip(message: dict[Any, Any]) -> None:
    try:
        expected = round_trip(message)
    except MessageValidationError as error:
        with pytest.raises(MessageValidationError) as raised:
            private_copy(message, index=3)
        assert str(raised.value) == str(error)
        assert (raised.value.field, raised.value.index) == (error.field, error.index)
        return
    copied = private_copy(message, index=3)
    assert copied == expected
    assert json.dumps(copied) == json.dumps(expected)  # same types too (1 vs 1.0 vs True)
    assert set(containers(copied)).isdisjoint(containers(message))


def test_nested_containers_of_a_plain_message_are_copied() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "tool_calls": [{"id": "c1", "tool": "read", "arguments": {"path": ["a", {"b": 1}]}}],
        "metadata": {"timestamp": "2026-01-01T00:00:00.000+00:00"},
    }
    copied = private_copy(message)
    assert copied == message
    assert set(containers(copied)).isdisjoint(containers(message))
    copied["tool_calls"][0]["arguments"]["path"][1]["b"] = 2
    assert message["tool_calls"][0]["arguments"]["path"][1]["b"] == 1


def test_deep_and_cyclic_messages_are_refused_as_before() -> None:
    deep: dict[str, Any] = {"role": "user", "content": "x"}
    node = deep
    for _ in range(5000):
        node["n"] = {}
        node = node["n"]
    with pytest.raises(MessageValidationError, match="nested too deeply"):
        private_copy(deep)
    cyclic: dict[str, Any] = {"role": "user", "content": "x", "metadata": {}}
    cyclic["metadata"]["self"] = cyclic
    # Whatever the round trip raises for a cycle, the copy raises too.
    with pytest.raises(Exception) as expected:
        canonical_json(cyclic, index=1)
    with pytest.raises(expected.type):
        private_copy(cyclic, index=1)


def test_stamps_are_the_reference_format_and_advance() -> None:
    first = utc_timestamp()
    assert len(first) == len("2026-02-06T10:00:00.123+00:00") and first.endswith("+00:00")
    assert utc_timestamp() >= first


def test_detached_copies_every_nested_container_and_shares_leaves() -> None:
    text = "x" * 50
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}, [1, [2, {"deep": [3]}]]],
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
        "metadata": {"timestamp": "t", "tags": ["a"]},
        "count": 3,
    }
    copied = detached(message)
    assert copied == message
    assert set(containers(copied)).isdisjoint(containers(message))
    assert copied["content"][0]["text"] is text  # strings are immutable: shared, not copied
    flat = {"role": "user", "content": "hi", "n": 1.5, "ok": True, "none": None}
    flat_copy = detached(flat)
    assert flat_copy == flat and flat_copy is not flat


METADATA = st.dictionaries(
    st.sampled_from(
        [
            "source",
            "ephemeral",
            "persisted",
            "loaded_tools",
            "kind",
            "openai:tool_search_items",
            "amplifier_public_reference_only",
        ]
    ),
    st.sampled_from([True, False, "hook", "user", "loaded_tool_state", [1], None]),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    METADATA,
    st.sampled_from(["user", "assistant", "system", "developer"]),
    st.sampled_from(["hi", "<system-reminder>x</system-reminder>", None]),
)
def test_the_admission_stamp_never_changes_a_classification(
    metadata: dict[str, Any], role: str, content: str | None
) -> None:
    """Metadata holding only the stamp is skipped by the convention checks: a message
    classifies the same with and without the stamp, whatever else its metadata says."""
    from contextfold.messages import inspect_message

    plain = {"role": role, "content": content, "metadata": metadata}
    stamped = {**plain, "metadata": {**metadata, "timestamp": utc_timestamp()}}
    assert inspect_message(stamped, index=0) == inspect_message(plain, index=0)
    bare = {"role": role, "content": content}
    if not metadata:
        assert inspect_message(stamped, index=0) == inspect_message(bare, index=0)


class _CountingList(list):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).walks += 1
        return super().__iter__()


def test_closing_a_group_with_unanswered_calls_never_walks_every_earlier_repair() -> None:
    """Each closing turn reports its group's unanswered calls once, looked up by group: a
    transcript of many such faults costs in proportion to them, not to their square."""
    from contextfold.history import History
    from contextfold.tokens import HeuristicCounter

    history = History(HeuristicCounter(), 10_000)
    history.repairs = _CountingList()
    for turn in range(300):
        history.append(
            history.prepare(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": f"c{turn}",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            )
        )
        history.provisional_repairs()  # a request while the group is open
    unanswered = [r for r in list.__iter__(history.repairs) if r.kind == "unanswered_call"]
    assert len(unanswered) == 299  # every group but the open last one, once each
    assert _CountingList.walks == 0
