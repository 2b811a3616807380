"""The summary store: one record per covered hash, whoever writes first."""

from __future__ import annotations

import asyncio

import pytest

from contextfold.summaries import (
    InMemorySummaryStore,
    SummaryRecord,
    SummaryStore,
    covered_hash,
)


def make(text: str, content: str = "same span", session: str | None = None) -> SummaryRecord:
    return SummaryRecord(
        text=text,
        history_ids=(0,),
        covered_hash=covered_hash([{"role": "user", "content": content}]),
        summarizer="test",
        prompt_id="p",
        prompt_version=1,
        tokens=3,
        session_id=session,
    )


def test_in_memory_store_speaks_the_protocol() -> None:
    assert isinstance(InMemorySummaryStore(), SummaryStore)


async def test_get_and_put_if_absent() -> None:
    store = InMemorySummaryStore()
    first = make("first")
    assert await store.get(first.covered_hash) is None
    assert await store.put_if_absent(first) is first
    assert await store.put_if_absent(make("second")) is first
    assert await store.get(first.covered_hash) is first
    assert len(store) == 1


async def test_many_concurrent_writers_converge_on_one_record() -> None:
    store = InMemorySummaryStore()
    candidates = [make(f"writer {i}") for i in range(64)]

    async def write(record: SummaryRecord) -> SummaryRecord:
        await asyncio.sleep(0)  # interleave the writers
        return await store.put_if_absent(record)

    winners = await asyncio.gather(*(write(r) for r in candidates))
    assert len({id(w) for w in winners}) == 1
    assert winners[0] in candidates
    assert await store.records() == [winners[0]]


async def test_records_in_insertion_order_and_by_session() -> None:
    store = InMemorySummaryStore()
    a = make("a", "span a", session="s1")
    b = make("b", "span b", session="s2")
    c = make("c", "span c", session="s1")
    for r in (a, b, c):
        await store.put_if_absent(r)
    assert await store.records() == [a, b, c]
    assert await store.records("s1") == [a, c]
    assert await store.records("nobody") == []


async def test_a_store_seeded_with_records_serves_them() -> None:
    seeded = make("kept")
    store = InMemorySummaryStore([seeded, make("duplicate key, dropped")])
    assert await store.records() == [seeded]


async def test_only_records_are_accepted() -> None:
    with pytest.raises(TypeError, match="SummaryRecord"):
        await InMemorySummaryStore().put_if_absent({"text": "x"})  # type: ignore[arg-type]
