"""Folding spans into summaries: chunks follow tool-call groups, nothing is cut to its tail,
one call per chunk, stored summaries are reused, incremental folds keep their size."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold.summaries import (
    InMemorySummaryStore,
    SummaryFolder,
    covered_hash,
    is_previous_summary,
    scripted_summarizer,
    tool_call_groups,
)
from contextfold.summaries.fold import chunk_groups, head_tail
from contextfold.tokens import build_counter

COUNTER = build_counter("exact")


class Recording:
    """The scripted summarizer, keeping every input it was given."""

    name = "recording-digest"

    def __init__(self) -> None:
        self.inner = scripted_summarizer(COUNTER)
        self.inputs: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.inputs.append(messages)
        return await self.inner(messages, max_tokens)


def session(steps: int, result_words: int = 120, calls_per_step: int = 1) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "TASK-7: audit every config under /etc/app and report drift."}
    ]
    for step in range(1, steps + 1):
        ids = [f"call_{step}_{k}" for k in range(calls_per_step)]
        messages.append(
            {
                "role": "assistant",
                "content": f"Reading part {step}.",
                "tool_calls": [
                    {"id": i, "tool": "read", "arguments": {"path": f"/etc/app/{i}.conf"}}
                    for i in ids
                ],
            }
        )
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": i,
                "content": f"{i}: " + " ".join(f"key{n}=v{n}" for n in range(result_words)),
            }
            for i in ids
        )
    return messages


def folder(summarizer: Any, **settings: Any) -> SummaryFolder:
    settings.setdefault("max_input_tokens", 1_500)
    settings.setdefault("max_output_tokens", 150)
    return SummaryFolder(summarizer, counter=COUNTER, **settings)


def test_tool_call_groups_keep_calls_with_their_results() -> None:
    messages = session(3, calls_per_step=2)
    assert tool_call_groups(messages) == [[0], [1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_groups_close_at_anything_but_an_answering_result() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "tool": "t"}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "user", "content": "next"},
        {"role": "tool", "tool_call_id": "a", "content": "late duplicate"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "b", "name": "t", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "x"}]},
        {"role": "tool", "tool_call_id": "zzz", "content": "orphan"},
    ]
    assert tool_call_groups(messages) == [[0, 1], [2], [3], [4, 5], [6]]


async def test_chunks_never_split_a_group_and_calls_equal_chunks() -> None:
    messages = session(8, calls_per_step=2)
    summarizer = Recording()
    result = await folder(summarizer).fold(None, messages, range(len(messages)))
    assert result.chunks > 2
    assert result.calls == result.chunks == len(summarizer.inputs)
    for sent in summarizer.inputs:
        span = [m for m in sent if not is_previous_summary(m)]
        open_ids = {c["id"] for m in span for c in m.get("tool_calls", [])}
        answered = {m["tool_call_id"] for m in span if m["role"] == "tool"}
        assert open_ids == answered  # every call's results in the same chunk, no orphans


async def test_a_long_span_is_folded_whole_never_cut_to_its_tail() -> None:
    messages = session(10)
    summarizer = Recording()
    result = await folder(summarizer).fold(None, messages, range(len(messages)))
    sent = [m for chunk in summarizer.inputs for m in chunk if not is_previous_summary(m)]
    assert sent == messages  # every message, in order, exactly once
    assert result.record is not None
    assert result.record.history_ids == tuple(range(len(messages)))
    assert "TASK-7" in result.record.text  # the task from the very start survived
    # Each call after the first carries the summary so far.
    assert all(is_previous_summary(chunk[0]) for chunk in summarizer.inputs[1:])
    assert not is_previous_summary(summarizer.inputs[0][0])


async def test_each_call_stays_within_max_input_tokens() -> None:
    messages = session(10)
    summarizer = Recording()
    settings = folder(summarizer)
    await settings.fold(None, messages, range(len(messages)))
    prompt = COUNTER.count_text(settings.prompt.text)
    from contextfold.summaries import render_transcript

    for sent in summarizer.inputs:
        assert prompt + COUNTER.count_text(render_transcript(sent)) <= settings.max_input_tokens


async def test_a_span_that_fits_takes_one_call() -> None:
    messages = session(2, result_words=10)
    result = await folder(Recording()).fold(None, messages, range(len(messages)))
    assert (result.chunks, result.calls, result.reused) == (1, 1, 0)


async def test_a_refold_of_the_same_span_reuses_every_record_without_a_call() -> None:
    messages = session(10)
    store = InMemorySummaryStore()
    first = await folder(Recording(), store=store).fold(None, messages, range(len(messages)))
    again = Recording()
    second = await folder(again, store=store).fold(None, messages, range(len(messages)))
    assert first.calls == first.chunks > 1
    assert (second.calls, second.reused, again.inputs) == (0, second.chunks, [])
    assert second.record == first.record
    assert len(await store.records()) == first.chunks  # one record per chunk, kept


async def test_records_from_another_process_are_reused_after_a_json_round_trip() -> None:
    messages = session(6)
    store = InMemorySummaryStore()
    await folder(Recording(), store=store).fold(None, messages, range(len(messages)))
    dumped = json.dumps([r.to_dict() for r in await store.records()])
    from contextfold.summaries import SummaryRecord

    restored = InMemorySummaryStore([SummaryRecord.from_dict(d) for d in json.loads(dumped)])
    calls = Recording()
    result = await folder(calls, store=restored).fold(None, messages, range(len(messages)))
    assert result.calls == 0 and calls.inputs == []


async def test_a_changed_message_is_never_served_an_old_summary() -> None:
    messages = session(6)
    store = InMemorySummaryStore()
    first = await folder(Recording(), store=store).fold(None, messages, range(len(messages)))
    edited = [dict(m) for m in messages]
    edited[0]["content"] = edited[0]["content"].replace("TASK-7", "TASK-8")
    result = await folder(Recording(), store=store).fold(None, edited, range(len(edited)))
    assert result.reused == 0 and result.calls == result.chunks
    assert result.record is not None and result.record.covered_hash != first.record.covered_hash  # type: ignore[union-attr]
    assert "TASK-8" in result.record.text


async def test_incremental_folds_stay_within_the_size_and_chain() -> None:
    messages = session(30, result_words=40)
    groups = tool_call_groups(messages)
    store = InMemorySummaryStore()
    summaries = folder(Recording(), max_output_tokens=120, store=store)
    record = None
    for start in range(0, len(groups), 3):
        ids = [i for group in groups[start : start + 3] for i in group]
        result = await summaries.fold(record, [messages[i] for i in ids], ids)
        assert result.record is not None
        assert result.record.tokens == COUNTER.count_text(result.record.text) <= 120
        if record is not None:
            assert result.record.previous_hash == record.covered_hash
            assert result.record.history_ids[: record.message_count] == record.history_ids
            expected = covered_hash([messages[i] for i in ids], previous=record)
            assert result.record.covered_hash == expected
        record = result.record
    assert record is not None and record.history_ids == tuple(range(len(messages)))


async def test_a_group_larger_than_a_chunk_is_shortened_for_the_summarizer_only() -> None:
    messages = session(1, result_words=2_000, calls_per_step=2) + session(1, result_words=5)[1:]
    summarizer = Recording()
    summaries = folder(summarizer)
    result = await summaries.fold(None, messages, range(len(messages)))
    assert result.chunks == 3  # the task, the oversized group alone, the small group
    first_input = summarizer.inputs[1]
    results = [m for m in first_input if m.get("role") == "tool"]
    assert len(results) == 2  # the group is whole
    assert all("characters left out for the summary" in m["content"] for m in results)
    assert all(m["content"].startswith(m["tool_call_id"]) for m in results)  # head kept
    assert all(m["content"].endswith("key1999=v1999") for m in results)  # tail kept
    assert result.record is not None
    # The record still stands for the messages as admitted, not the shortened copy.
    assert result.record.covered_hash != covered_hash(first_input)
    assert len(messages[2]["content"]) > 10_000  # the caller's message is whole


def test_head_tail_keeps_both_ends_within_the_limit() -> None:
    text = "START " + "middle " * 3_000 + "END"
    cut = head_tail(text, 50, COUNTER)
    assert cut.startswith("START") and cut.endswith("END")
    assert COUNTER.count_text(cut) <= 50
    assert head_tail("short", 50, COUNTER) == "short"


def test_chunk_groups_packs_greedily_in_order() -> None:
    messages = [{"n": n} for n in (4, 4, 4, 9, 1)]
    chunks = chunk_groups(messages, [[0], [1], [2], [3], [4]], lambda ms: ms[0]["n"], 8)
    assert chunks == [[[0], [1]], [[2]], [[3]], [[4]]]


async def test_bad_calls_are_refused() -> None:
    summaries = folder(Recording())
    messages = session(1)
    with pytest.raises(ValueError, match="history ids"):
        await summaries.fold(None, messages, [0])
    with pytest.raises(ValueError, match="empty"):
        await summaries.fold(None, [], [])
    first = await summaries.fold(None, messages[:1], [5])
    with pytest.raises(ValueError, match="increase"):
        await summaries.fold(first.record, messages[1:], range(1, len(messages)))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"max_input_tokens": 400, "max_output_tokens": 300}, "leaves"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        folder(Recording(), **settings)


async def test_the_same_messages_at_other_history_ids_reuse_the_text_with_the_new_ids() -> None:
    messages = session(3)
    store = InMemorySummaryStore()
    first = await folder(Recording(), store=store).fold(None, messages, range(len(messages)))
    shifted = range(10, 10 + len(messages))
    again = await folder(Recording(), store=store).fold(None, messages, shifted)
    assert again.calls == 0 and again.record is not None and first.record is not None
    assert again.record.text == first.record.text
    assert again.record.history_ids == tuple(shifted)


async def test_concurrent_folds_of_one_span_converge_on_one_record() -> None:
    import asyncio

    messages = session(6)
    store = InMemorySummaryStore()
    workers = [folder(Recording(), store=store) for _ in range(5)]
    results = await asyncio.gather(
        *(
            w.fold(None, messages, range(len(messages)), session_id=f"w{i}")
            for i, w in enumerate(workers)
        )
    )
    finals = {r.record.covered_hash for r in results if r.record is not None}
    assert len(finals) == 1
    by_hash: dict[str, list[str]] = {}
    for record in await store.records():
        by_hash.setdefault(record.covered_hash, []).append(record.text)
    assert all(len(texts) == 1 for texts in by_hash.values())  # one record per key
    assert sum(len(r.written) for r in results) == len(by_hash)
