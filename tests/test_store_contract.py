"""One contract, three stores: memory, SQLite (a real file) and PostgreSQL (a real server).

Every test here runs against each backend, so the three cannot drift apart: the same
sequence numbers, the same conflicts, the same errors for the same bad input.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextfold.store import (
    HISTORY_GENESIS,
    ConcurrentUpdateError,
    MemoryStore,
    SessionStore,
    SqliteStore,
    StoreError,
    append_at_end,
    history_digest,
    open_store,
    state_describes,
)
from contextfold.summaries import SummaryRecord, SummaryStore, covered_hash
from store_support import PostgresServer


@pytest.fixture(scope="module")
def postgres_server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    if request.param == "memory":
        opened: SessionStore = MemoryStore()
    elif request.param == "sqlite":
        opened = SqliteStore(tmp_path / "store.db")
    else:
        server = request.getfixturevalue("postgres_server")
        url = server.empty_database()
        opened = await open_store(url)
    await opened.open()
    yield opened
    await opened.close()
    if request.param == "postgres":
        server.give_back(url)


def message(content: str, **extra: object) -> str:
    return json.dumps({"role": "user", "content": content, **extra})


def record(text: str, span: str = "span", session: str | None = "s") -> SummaryRecord:
    return SummaryRecord(
        text=text,
        history_ids=(0, 1),
        covered_hash=covered_hash([{"role": "user", "content": span}]),
        summarizer="test",
        prompt_id="p",
        prompt_version=1,
        tokens=4,
        session_id=session,
    )


@pytest.mark.slow
async def test_every_store_speaks_both_protocols(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)
    assert isinstance(store, SummaryStore)


async def test_a_new_session_is_empty_and_appends_number_from_one(store: SessionStore) -> None:
    empty = await store.open_session("new")
    assert (empty.last_seq, empty.generation, empty.messages, empty.exists) == (0, 0, (), False)
    assert empty.state is None and empty.calibration is None and empty.budget is None
    assert await store.append("new", 0, message("a"), 3) == 1
    assert await store.append("new", 1, message("b"), 5) == 2
    loaded = await store.open_session("new")
    assert loaded.last_seq == 2 and loaded.exists
    assert [(m.seq, m.message["content"], m.cost) for m in loaded.messages] == [
        (1, "a", 3),
        (2, "b", 5),
    ]


async def test_message_text_comes_back_byte_for_byte(store: SessionStore) -> None:
    # A resume must rebuild the very same view: keep the JSON text exactly as given,
    # key order, spacing and non-ASCII characters included.
    odd = '{"role": "user",   "content": "café ✓ \\u00e9", "z": 1, "a": [1,2]}'
    await store.append("s", 0, odd, 7)
    (stored,) = (await store.open_session("s")).messages
    assert stored.message_json == odd


async def test_a_classification_is_kept_beside_its_message_as_given(store: SessionStore) -> None:
    # Opaque to the store: the JSON text of an array, returned byte for byte; None (rows
    # written without one) stays None, for the reader to inspect the message instead.
    form = '[1,"tool_result",[],["call_é \\"x\\""],0]'
    await store.append("s", 0, message("a"), 1, form)
    await store.append("s", 1, message("b"), 1)
    await append_at_end(store, "s", message("c"), 1, info_json="[2]", expected_seq=1)
    rows = (await store.open_session("s")).messages
    assert [row.info_json for row in rows] == [form, None, "[2]"]
    last = await store.append_many("s", 3, [(message("x"), 2, form), (message("y"), 3)])
    rows = (await store.open_session("s")).messages
    # Seq 4 is the replacement's own (the fence every older writer conflicts on).
    assert [(row.seq, row.cost, row.info_json) for row in rows] == [(5, 2, form), (6, 3, None)]
    assert last == 6


@pytest.mark.parametrize(
    ("info", "complaint"),
    [(b"[1]", "info_json"), ("[1,", "not valid JSON"), ('{"kind":1}', "JSON array"), (3, "info")],
)
async def test_a_bad_classification_is_refused_before_anything_is_written(
    store: SessionStore, info: object, complaint: str
) -> None:
    with pytest.raises(StoreError, match=complaint):
        await store.append("s", 0, message("a"), 1, info)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=complaint):
        await store.append_many("s", 0, [(message("a"), 1, info)])  # type: ignore[list-item]
    with pytest.raises(StoreError, match="tuples"):
        await store.append_many("s", 0, [(message("a"), 1, None, "c", "extra")])  # type: ignore[list-item]
    assert await store.list_sessions() == []


async def test_a_stale_expected_seq_is_a_clear_conflict_and_writes_nothing(
    store: SessionStore,
) -> None:
    await store.append("s", 0, message("first"), 1)
    await store.append("s", 1, message("second"), 1)
    with pytest.raises(ConcurrentUpdateError) as caught:
        await store.append("s", 1, message("late"), 1)
    error = caught.value
    assert (error.session_id, error.expected_seq, error.actual_seq) == ("s", 1, 2)
    text = str(error)
    assert "'s'" in text and "seq 1" in text and "seq 2" in text and "Reload" in text
    contents = [m.message["content"] for m in (await store.open_session("s")).messages]
    assert contents == ["first", "second"]


async def test_expected_seq_zero_on_an_existing_session_conflicts(store: SessionStore) -> None:
    await store.append("s", 0, message("a"), 1)
    with pytest.raises(ConcurrentUpdateError) as caught:
        await store.append("s", 0, message("b"), 1)
    assert caught.value.actual_seq == 1


async def test_appending_past_the_end_of_a_missing_session_conflicts(store: SessionStore) -> None:
    with pytest.raises(ConcurrentUpdateError) as caught:
        await store.append("ghost", 4, message("a"), 1)
    assert caught.value.actual_seq == 0
    assert not (await store.open_session("ghost")).exists
    assert await store.list_sessions() == []


async def test_equal_timestamps_keep_append_order_openai_agents_1900(store: SessionStore) -> None:
    # OpenAI Agents SDK #1900: messages written in the same clock tick came back out of
    # order because the session was sorted by timestamp. The store orders by seq alone.
    contents = [f"turn {n:02d}" for n in range(40, 0, -1)]  # sorts the other way by text
    seq = 0
    for content in contents:
        seq = await store.append("s", seq, message(content, metadata={"timestamp": "T"}), 1)
    stored = (await store.open_session("s")).messages
    assert [m.message["content"] for m in stored] == contents
    assert [m.seq for m in stored] == list(range(1, 41))


async def test_concurrent_first_writes_one_wins_the_rest_conflict_openai_agents_2722(
    store: SessionStore,
) -> None:
    # OpenAI Agents SDK #2722: concurrent first writes to a new session were dropped
    # silently. Here every writer is accounted for: one stored, the others told.
    results = await asyncio.gather(
        *(store.append("fresh", 0, message(f"w{n}"), 1) for n in range(12)),
        return_exceptions=True,
    )
    wins = [r for r in results if r == 1]
    conflicts = [r for r in results if isinstance(r, ConcurrentUpdateError)]
    assert len(wins) == 1 and len(conflicts) == 11
    assert all(c.actual_seq == 1 for c in conflicts)
    assert len((await store.open_session("fresh")).messages) == 1


async def test_append_at_end_retries_until_every_message_is_in(store: SessionStore) -> None:
    seqs = await asyncio.gather(
        *(append_at_end(store, "s", message(f"w{n}"), 1) for n in range(10))
    )
    assert sorted(seqs) == list(range(1, 11))
    stored = (await store.open_session("s")).messages
    assert sorted(m.message["content"] for m in stored) == sorted(f"w{n}" for n in range(10))
    assert [m.seq for m in stored] == list(range(1, 11))


async def test_append_at_end_gives_up_after_its_attempts(store: SessionStore) -> None:
    await store.append("s", 0, message("a"), 1)
    await store.append("s", 1, message("b"), 1)
    with pytest.raises(ConcurrentUpdateError):
        await append_at_end(store, "s", message("c"), 1, attempts=1)
    assert await append_at_end(store, "s", message("c"), 1, attempts=2) == 3
    with pytest.raises(ValueError):
        await append_at_end(store, "s", message("d"), 1, attempts=0)


async def test_append_many_replaces_the_session_and_seqs_never_go_back(
    store: SessionStore,
) -> None:
    for seq in range(3):
        await store.append("s", seq, message(f"old{seq}"), 1)
    await store.save_state("s", 3, {"pass": 1})
    await store.save_calibration("s", {"gpt": 1.1})
    new_last = await store.append_many("s", 3, [(message("x"), 2), (message("y"), 4)])
    assert new_last == 6  # seq 4 is the replacement's own, the messages follow it
    loaded = await store.open_session("s")
    assert [(m.seq, m.message["content"], m.cost) for m in loaded.messages] == [
        (5, "x", 2),
        (6, "y", 4),
    ]
    assert loaded.generation == 1
    assert loaded.state is None  # it described messages that are gone
    assert loaded.calibration == {"gpt": 1.1}
    with pytest.raises(ConcurrentUpdateError):  # a writer still at seq 3 cannot append
        await store.append("s", 3, message("stale"), 1)
    with pytest.raises(ConcurrentUpdateError):
        await store.append_many("s", 3, [(message("stale"), 1)])
    assert await store.append_many("s", 6, []) == 7  # a clear moves the seq too
    assert (await store.open_session("s")).generation == 2
    assert await store.append_many("other", 0, [(message("z"), 1)]) == 2


async def test_documents_round_trip_and_are_copies(store: SessionStore) -> None:
    await store.append("s", 0, message("a"), 1)
    await store.append("s", 1, message("b"), 1)
    snapshot = {"notice": "kept", "cleared": [1, 2], "nested": {"ü": None}}
    await store.save_state("s", 2, snapshot)
    await store.save_calibration("s", {"gpt-4o": {"ratio": 0.93, "samples": 4}})
    await store.save_budget("s", {"window": 128000, "reserve": 4096})
    snapshot["notice"] = "changed after saving"
    loaded = await store.open_session("s")
    assert loaded.state is not None
    assert loaded.state.seq == 2
    assert loaded.state.snapshot == {"notice": "kept", "cleared": [1, 2], "nested": {"ü": None}}
    assert loaded.calibration == {"gpt-4o": {"ratio": 0.93, "samples": 4}}
    assert loaded.budget == {"window": 128000, "reserve": 4096}
    await store.save_budget("s", {"window": 1})
    assert (await store.open_session("s")).budget == {"window": 1}


async def test_an_older_state_never_overwrites_a_newer_one(store: SessionStore) -> None:
    for seq in range(3):
        await store.append("s", seq, message("m"), 1)
    await store.save_state("s", 3, {"at": 3})
    with pytest.raises(ConcurrentUpdateError):
        await store.save_state("s", 2, {"at": 2})
    await store.save_state("s", 3, {"at": "3 again"})
    state = (await store.open_session("s")).state
    assert state is not None and state.snapshot == {"at": "3 again"}


async def test_documents_need_an_existing_session_and_plain_json(store: SessionStore) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        await store.save_state("ghost", 0, {})
    with pytest.raises(StoreError, match="does not exist"):
        await store.save_calibration("ghost", {})
    with pytest.raises(StoreError, match="does not exist"):
        await store.save_budget("ghost", {})
    await store.append("s", 0, message("a"), 1)
    with pytest.raises(StoreError, match="last seq is 1"):
        await store.save_state("s", 2, {})
    with pytest.raises(StoreError, match="plain JSON"):
        await store.save_state("s", 1, {"when": object()})
    with pytest.raises(StoreError, match="plain JSON"):
        await store.save_budget("s", {"ratio": float("nan")})
    with pytest.raises(StoreError, match="mapping"):
        await store.save_calibration("s", [1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("session_id", "expected_seq", "text", "cost", "complaint"),
    [
        ("", 0, '{"a":1}', 1, "session id"),
        (7, 0, '{"a":1}', 1, "session id"),
        ("x" * 513, 0, '{"a":1}', 1, "session id"),
        ("a\x00b", 0, '{"a":1}', 1, "NUL"),
        ("s", -1, '{"a":1}', 1, "expected_seq"),
        ("s", True, '{"a":1}', 1, "expected_seq"),
        ("s", 0, "{not json", 1, "not valid JSON"),
        ("s", 0, "[1, 2]", 1, "JSON object"),
        ("s", 0, b'{"a":1}', 1, "JSON text"),
        ("s", 0, {"a": 1}, 1, "JSON text"),
        ("s", 0, '{"a":1}', -1, "token cost"),
        ("s", 0, '{"a":1}', 1.5, "token cost"),
        ("s", 0, '{"a":1}', True, "token cost"),
    ],
)
async def test_bad_appends_are_refused_before_anything_is_written(
    store: SessionStore,
    session_id: object,
    expected_seq: object,
    text: object,
    cost: object,
    complaint: str,
) -> None:
    with pytest.raises(StoreError, match=complaint):
        await store.append(session_id, expected_seq, text, cost)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=complaint):
        await store.append_many(session_id, expected_seq, [(text, cost)])  # type: ignore[arg-type,list-item]
    assert await store.list_sessions() == []


async def test_list_and_delete_sessions(store: SessionStore) -> None:
    await store.append("b", 0, message("1"), 1)
    await store.append("b", 1, message("2"), 1)
    await store.append("a", 0, message("1"), 1)
    await store.save_budget("a", {"w": 1})
    await store.append_many("c", 0, [(message("x"), 1)])
    listed = [
        (i.session_id, i.last_seq, i.generation, i.message_count)
        for i in await store.list_sessions()
    ]
    assert listed == [("a", 1, 0, 1), ("b", 2, 0, 2), ("c", 2, 1, 1)]
    assert await store.delete_session("a") is True
    assert await store.delete_session("a") is False
    gone = await store.open_session("a")
    assert not gone.exists and gone.budget is None and gone.messages == ()
    assert [i.session_id for i in await store.list_sessions()] == ["b", "c"]
    assert await store.append("a", 0, message("again"), 1) == 1


async def test_summary_records_insert_if_absent(store: SessionStore) -> None:
    first = record("the first summary")
    assert await store.get(first.covered_hash) is None
    assert await store.put_if_absent(first) == first
    held = await store.put_if_absent(record("a later, different summary"))
    assert held == first
    other = record("another span", span="other", session="t")
    await store.put_if_absent(other)
    assert await store.get(first.covered_hash) == first
    assert await store.records() == [first, other]
    assert await store.records("t") == [other]
    assert await store.records("nobody") == []
    with pytest.raises(TypeError):
        await store.put_if_absent(first.to_dict())  # type: ignore[arg-type]


async def test_concurrent_put_if_absent_converges_on_one_record(store: SessionStore) -> None:
    candidates = [record(f"summary by worker {n}") for n in range(8)]
    held = await asyncio.gather(*(store.put_if_absent(c) for c in candidates))
    assert len({h.text for h in held}) == 1
    assert len(await store.records()) == 1


@pytest.mark.slow
async def test_a_closed_store_refuses_work(store: SessionStore) -> None:
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.open()


async def test_costs_name_their_counter_and_come_back_with_it(store: SessionStore) -> None:
    await store.append("s", 0, message("a"), 3, cost_counter="heuristic;rules=1")
    await store.append("s", 1, message("b"), 4)  # unknown: a reader counts it again
    rows = (await store.open_session("s")).messages
    assert [(r.cost, r.cost_counter) for r in rows] == [(3, "heuristic;rules=1"), (4, None)]
    await store.append_many("s", 2, [(message("x"), 5, None, "exact:o200k_base;rules=1")])
    rows = (await store.open_session("s")).messages
    assert [(r.cost, r.cost_counter) for r in rows] == [(5, "exact:o200k_base;rules=1")]
    for bad in ("", 7, "x" * 201):
        with pytest.raises(StoreError, match="cost_counter"):
            await store.append("s", 4, message("c"), 1, cost_counter=bad)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="cost_counter"):
            await store.append_many("s", 4, [(message("c"), 1, None, bad)])  # type: ignore[list-item]
    assert (await store.open_session("s")).last_seq == 4


async def test_the_history_digest_follows_every_append_and_replacement(
    store: SessionStore,
) -> None:
    assert (await store.open_session("s")).history_sha256 is None  # no session yet
    texts = [message(f"m{n}") for n in range(3)]
    for seq, text in enumerate(texts):
        await store.append("s", seq, text, 1)
        assert (await store.open_session("s")).history_sha256 == history_digest(texts[: seq + 1])
    await append_at_end(store, "s", message("late"), 1)
    assert (await store.open_session("s")).history_sha256 == history_digest(
        [*texts, message("late")]
    )
    await store.append_many("s", 4, [(texts[0], 1)])
    assert (await store.open_session("s")).history_sha256 == history_digest(texts[:1])
    await store.append_many("s", 6, [])
    assert (await store.open_session("s")).history_sha256 == HISTORY_GENESIS


async def test_a_state_is_saved_only_for_the_history_the_store_holds(store: SessionStore) -> None:
    texts = [message(f"m{n}") for n in range(3)]
    for seq, text in enumerate(texts):
        await store.append("s", seq, text, 1)
    with pytest.raises(ConcurrentUpdateError) as stale:  # a writer that missed the third
        await store.save_state("s", 2, {"at": 2}, history_sha256=history_digest(texts[:2]))
    assert (stale.value.expected_seq, stale.value.actual_seq) == (2, 3)
    with pytest.raises(ConcurrentUpdateError, match="another history"):
        await store.save_state("s", 3, {"at": 3}, history_sha256=history_digest(texts[::-1]))
    with pytest.raises(StoreError, match="64 lowercase hex"):
        await store.save_state("s", 3, {"at": 3}, history_sha256="ABC")
    assert (await store.open_session("s")).state is None  # nothing was written
    await store.save_state("s", 3, {"at": 3}, history_sha256=history_digest(texts))
    session = await store.open_session("s")
    assert session.state is not None and session.state.history_sha256 == history_digest(texts)
    assert state_describes(session)
    await store.append("s", 3, message("after"), 1)  # a state holds while history grows
    assert state_describes(await store.open_session("s"))
    await store.append_many("s", 4, [(texts[0], 1)])  # and is dropped by a replacement
    assert (await store.open_session("s")).state is None
