"""Summary records: the covered hash, the JSON form and its schema version."""

from __future__ import annotations

import copy
import json

import pytest

from contextfold.summaries import (
    SCHEMA_VERSION,
    SummaryRecord,
    SummaryRecordError,
    canonical_message_json,
    covered_hash,
)

MESSAGES = [
    {"role": "user", "content": "Ship order #4411 to Zürich by 2026-12-03."},
    {
        "role": "assistant",
        "content": "Checking the order.",
        "tool_calls": [{"id": "call_1", "tool": "orders", "arguments": {"id": 4411}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4411: packed, 3 parcels"},
]


def record(**changes: object) -> SummaryRecord:
    fields: dict[str, object] = {
        "text": "- user: ship order #4411 to Zürich",
        "history_ids": (0, 1, 2),
        "covered_hash": covered_hash(MESSAGES),
        "summarizer": "scripted-digest",
        "prompt_id": "contextfold.summary",
        "prompt_version": 1,
        "tokens": 12,
    }
    fields.update(changes)
    return SummaryRecord(**fields)  # type: ignore[arg-type]


def test_hash_is_stable_and_hex() -> None:
    first = covered_hash(MESSAGES)
    assert first == covered_hash(copy.deepcopy(MESSAGES))
    assert len(first) == 64 and int(first, 16) >= 0


def test_key_order_does_not_change_the_hash() -> None:
    reordered = [dict(reversed(list(m.items()))) for m in MESSAGES]
    reordered[1]["tool_calls"] = [dict(reversed(list(MESSAGES[1]["tool_calls"][0].items())))]
    assert [list(m) for m in reordered] != [list(m) for m in MESSAGES]
    assert covered_hash(reordered) == covered_hash(MESSAGES)


def test_one_changed_byte_anywhere_changes_the_hash() -> None:
    base = covered_hash(MESSAGES)
    for index, message in enumerate(MESSAGES):
        text = canonical_message_json(message)
        for position in range(len(text)):
            if not text[position].isalnum():
                continue
            swapped = "1" if text[position] != "1" else "2"
            changed_text = text[:position] + swapped + text[position + 1 :]
            try:
                changed = json.loads(changed_text)
            except ValueError:
                continue  # the change broke the JSON, so it is no message at all
            messages = [*MESSAGES[:index], changed, *MESSAGES[index + 1 :]]
            assert covered_hash(messages) != base, (index, position)


def test_order_count_and_boundaries_of_messages_matter() -> None:
    base = covered_hash(MESSAGES)
    assert covered_hash(list(reversed(MESSAGES))) != base
    assert covered_hash(MESSAGES[:2]) != base
    assert covered_hash([*MESSAGES, MESSAGES[-1]]) != base
    # Moving text between two messages must not collide either.
    a = [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]
    b = [{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}]
    assert covered_hash(a) != covered_hash(b)


def test_the_previous_summary_is_part_of_the_hash() -> None:
    previous = record()
    other_text = record(text="- user: a different summary of the same messages")
    chained = covered_hash(MESSAGES[2:], previous=previous)
    assert chained != covered_hash(MESSAGES[2:])
    assert chained != covered_hash(MESSAGES[2:], previous=other_text)
    assert chained == covered_hash(MESSAGES[2:], previous=record())


def test_a_message_that_is_not_plain_json_is_refused() -> None:
    with pytest.raises(TypeError):
        covered_hash([{"role": "user", "content": object()}])


def test_json_round_trip_is_exact() -> None:
    original = record(previous_hash="a" * 64, session_id="s-1")
    data = json.loads(json.dumps(original.to_dict()))
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["message_count"] == 3
    assert SummaryRecord.from_dict(data) == original


def test_a_newer_schema_is_refused_with_a_clear_error() -> None:
    data = record().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SummaryRecordError, match="newer than this contextfold understands"):
        SummaryRecord.from_dict(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": None}, "no valid schema_version"),
        ({"schema_version": "1"}, "no valid schema_version"),
        ({"schema_version": True}, "no valid schema_version"),
        ({"message_count": 2}, "disagrees"),
        ({"history_ids": "0,1,2"}, "JSON array"),
        ({"history_ids": [2, 1, 0]}, "strictly increasing"),
        ({"history_ids": [0, 0, 1]}, "strictly increasing"),
        ({"history_ids": [-1, 0, 1]}, "history indexes"),
        ({"covered_hash": "ABC"}, "64 lowercase hex"),
        ({"previous_hash": "z" * 64}, "64 lowercase hex"),
        ({"text": "   "}, "non-empty text"),
        ({"tokens": -1}, "tokens"),
        ({"prompt_version": 0}, "prompt_version"),
        ({"summarizer": ""}, "summarizer"),
        ({"session_id": 7}, "session_id"),
    ],
)
def test_bad_records_are_refused(change: dict[str, object], message: str) -> None:
    data = {**record().to_dict(), **change}
    if "history_ids" in change and "message_count" not in change:
        data["message_count"] = len(change["history_ids"])  # type: ignore[arg-type]
    with pytest.raises(SummaryRecordError, match=message):
        SummaryRecord.from_dict(data)


def test_missing_fields_and_non_objects_are_refused() -> None:
    data = record().to_dict()
    del data["covered_hash"]
    with pytest.raises(SummaryRecordError, match="missing"):
        SummaryRecord.from_dict(data)
    with pytest.raises(SummaryRecordError, match="JSON object"):
        SummaryRecord.from_dict([])  # type: ignore[arg-type]


def test_a_record_must_cover_something() -> None:
    with pytest.raises(SummaryRecordError, match="at least one message"):
        record(history_ids=())
