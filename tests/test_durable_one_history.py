"""A durable session is one history (DESIGN.md, invariant 9), through the public API on the
memory, SQLite (a real file) and PostgreSQL (a real server) stores:

- every replacement (``clear``, ``set_messages``) fences the workers that loaded before it:
  their next write (an append, a replacement, a state save) is a ConcurrentUpdateError;
- a saved state names the history it belongs to: a state of another history is refused when
  saved, and set aside (with a warning) when found on a resume;
- stored token costs name the counter that made them: another counter counts again;
- a failed state save is tried again; a cancelled append is in the store and in history, or
  in neither; other sessions' summary records are never read; a damaged row is a StoreError
  naming the session and the row.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.store import (
    ConcurrentUpdateError,
    MemoryStore,
    SessionStore,
    SqliteStore,
    StoreError,
    store_from_url,
)
from contextfold.summaries import scripted_summarizer
from contextfold.tokens import ExactCounter, HeuristicCounter
from store_support import PostgresServer
from support import SYSTEM, human, reply, tool_round

BUDGET = 8_000


@pytest.fixture(scope="module")
def postgres_server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


class Stores:
    """Stores of one backend onto one place: each worker gets its own store object (its own
    connection, as another process would), except in memory, where they share the one."""

    def __init__(self, kind: str, url: str | None) -> None:
        self.kind, self.url = kind, url
        self.memory = MemoryStore() if kind == "memory" else None
        self.opened: list[SessionStore] = []

    def new(self) -> SessionStore:
        if self.memory is not None:
            return self.memory
        assert self.url is not None
        store = store_from_url(self.url)
        self.opened.append(store)
        return store

    def worker(self, session_id: str = "s", **settings: Any) -> ContextFold:
        settings.setdefault("token_counter", "heuristic")
        return ContextFold(store=self.new(), session_id=session_id, **settings)

    async def raw(self, statement: str, *parameters: Any) -> list[tuple[Any, ...]]:
        """Run one SQL statement on the store's database directly (damage, inspection)."""
        assert self.url is not None
        if self.kind == "sqlite":
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as connection:
                return connection.execute(statement.replace("%s", "?"), parameters).fetchall()
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
            # The store's tables live in a schema of their own.
            await connection.execute("SET search_path TO contextfold")
            cursor = await connection.execute(statement, parameters)
            return await cursor.fetchall() if cursor.description else []

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


async def _stores(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    if kind == "memory":
        return Stores(kind, None)
    if kind == "sqlite":
        return Stores(kind, f"sqlite:///{tmp_path / 'agent.db'}")
    server = request.getfixturevalue("postgres_server")
    url = server.empty_database()
    request.addfinalizer(lambda: server.give_back(url))  # runs after the stores are closed
    return Stores(kind, url)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    opened = await _stores(request.param, request, tmp_path)
    yield opened
    await opened.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def sql_stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    opened = await _stores(request.param, request, tmp_path)
    yield opened
    await opened.close()


def agent_history(seed: int, rounds: int = 20) -> list[dict[str, Any]]:
    history = [SYSTEM, human(f"Task {seed}: look up every topic.")]
    for n in range(rounds):
        history.extend(tool_round(seed * 1000 + n, result_chars=1_500))
    return history


async def planned_afresh(messages: list[dict[str, Any]], **settings: Any) -> list[dict[str, Any]]:
    """The view a context without a store plans for ``messages``: what a resume must deliver
    when it has no state of its own that describes them."""
    settings.setdefault("token_counter", "heuristic")
    plain = ContextFold(**settings)
    await plain.set_messages(messages)
    return await plain.get_messages_for_request(token_budget=BUDGET)


# -- 2. every replacement fences the workers that loaded before it -------------------------


@pytest.mark.parametrize("replacement", ["clear", "set_messages([])", "set_messages(other)"])
async def test_a_replacement_fences_every_worker_that_loaded_before_it(
    stores: Stores, replacement: str
) -> None:
    a, b = stores.worker(), stores.worker()
    first = [SYSTEM, human("one"), reply("two"), human("three")]
    await a.set_messages(first)
    assert len(await b.get_messages()) == 4  # b has loaded the session
    if replacement == "clear":
        await a.clear()
    elif replacement == "set_messages([])":
        await a.set_messages([])
    else:
        await a.set_messages([SYSTEM, human("uno"), reply("dos"), human("tres")])
    replaced = await a.get_messages()
    with pytest.raises(ConcurrentUpdateError):
        await b.add_message(human("from b, who missed the replacement"))
    with pytest.raises(ConcurrentUpdateError):
        await b.clear()
    with pytest.raises(ConcurrentUpdateError):
        await b.set_messages([human("b's idea of the session")])
    assert [m["content"] for m in await b.get_messages()] == [
        "You are a careful research agent.",
        "one",
        "two",
        "three",
    ]
    assert await stores.worker().get_messages() == replaced  # the store holds a's history
    await a.add_message(human("a goes on"))  # the replacing worker is not stale
    assert [m["content"] for m in await stores.worker().get_messages()][-1] == "a goes on"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["add", "clear", "set", "reload"])),
        max_size=30,
    )
)
def test_a_write_succeeds_exactly_when_its_worker_saw_every_write_before_it(
    operations: list[tuple[int, str]],
) -> None:
    """Three workers on one session, any interleaving of appends, clears, replacements and
    reloads: a write succeeds if and only if its worker has seen every write before it (it
    loaded after it, or made it); a refused write changes nothing anywhere; the store's
    sequence never goes back; a fresh reader always sees the last successful writer's history.
    """

    async def run() -> None:
        store = MemoryStore()

        def new_worker() -> ContextFold:
            return ContextFold(store=store, session_id="s", token_counter="heuristic")

        workers = [new_worker() for _ in range(3)]
        seen: list[int | None] = [None, None, None]  # the write count each worker loaded at
        views: list[list[str]] = [[], [], []]
        writes = 0
        history: list[str] = []
        last_seq = 0
        for step, (index, operation) in enumerate(operations):
            if operation == "reload":
                workers[index], seen[index] = new_worker(), None
                continue
            if seen[index] is None:  # its first call loads the session as it stands
                seen[index], views[index] = writes, list(history)
            text = f"{operation} {step}"
            worker = workers[index]
            try:
                if operation == "add":
                    await worker.add_message(human(text))
                elif operation == "clear":
                    await worker.clear()
                else:
                    await worker.set_messages([human(text), reply(text)])
            except ConcurrentUpdateError:
                assert seen[index] != writes, f"step {step}: a current worker was refused"
                assert [m["content"] for m in await worker.get_messages()] == views[index]
            else:
                assert seen[index] == writes, f"step {step}: a stale worker's write was taken"
                if operation == "add":
                    history = [*history, text]
                elif operation == "clear":
                    history = []
                else:
                    history = [text, text]
                writes += 1
                seen[index], views[index] = writes, list(history)
            stored = await store.open_session("s")
            assert stored.last_seq >= last_seq  # sequence numbers never go back
            last_seq = stored.last_seq
            assert [m.message["content"] for m in stored.messages] == history

    asyncio.run(run())


# -- 3. a saved state names the history it belongs to ---------------------------------------


async def test_a_stale_workers_state_never_outlives_a_replacement(stores: Stores) -> None:
    a, b = stores.worker(), stores.worker()
    await a.set_messages(agent_history(1))
    await b.get_messages()  # b loaded the first history
    await a.set_messages(agent_history(2))  # same shape, other messages
    with pytest.raises(ConcurrentUpdateError):
        # b's pass is of a history the store no longer holds: its state save is refused.
        await b.get_messages_for_request(token_budget=BUDGET)
    resumed = stores.worker()
    view = await resumed.get_messages_for_request(token_budget=BUDGET)
    assert view == await planned_afresh(agent_history(2))
    first_texts = {json.dumps(m, sort_keys=True) for m in agent_history(1)[2:]}
    assert not any(json.dumps(m, sort_keys=True) in first_texts for m in view)


async def test_a_state_of_a_deleted_and_rewritten_session_is_refused(stores: Stores) -> None:
    # The sequence alone cannot tell these two histories apart (both end at the same seq):
    # the state's history digest does.
    a = stores.worker()
    await a.set_messages(agent_history(1))
    b = stores.worker()
    await b.get_messages()
    admin = stores.new()
    assert await admin.delete_session("s")
    await stores.worker().set_messages(agent_history(2))
    with pytest.raises(ConcurrentUpdateError, match="another history"):
        await b.get_messages_for_request(token_budget=BUDGET)
    resumed = stores.worker()
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == await planned_afresh(
        agent_history(2)
    )


async def test_a_state_that_does_not_describe_the_stored_history_is_set_aside(
    sql_stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    # Rows copied between sessions (a restore gone wrong): session t gets s's state.
    s, t = sql_stores.worker("s"), sql_stores.worker("t")
    await s.set_messages(agent_history(1))
    await s.get_messages_for_request(token_budget=BUDGET)
    await t.set_messages(agent_history(2))
    await sql_stores.raw("DELETE FROM cf_documents WHERE session_id = 't' AND kind = 'state'")
    await sql_stores.raw(
        "INSERT INTO cf_documents SELECT 't', kind, seq, body_json FROM cf_documents"
        " WHERE session_id = 's' AND kind = 'state'"
    )
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        view = await sql_stores.worker("t").get_messages_for_request(token_budget=BUDGET)
    assert "does not describe the history the store holds" in caplog.text
    assert view == await planned_afresh(agent_history(2))


# -- 4. stored token costs name the counter that made them --------------------------------


def exact_size(view: list[dict[str, Any]]) -> int:
    exact = ExactCounter("o200k_base")
    return sum(exact.count_message(m) for m in view) + exact.request_overhead


@pytest.mark.parametrize(("writer", "reader"), [("heuristic", None), (None, "heuristic")])
async def test_costs_made_by_another_counter_are_counted_again(
    stores: Stores, writer: str | None, reader: str | None
) -> None:
    written = stores.worker(token_counter=writer or "calibrated")
    await written.set_messages([SYSTEM, human("Look up every topic.")])
    for n in range(30):
        for message in tool_round(n, result_chars=1_500):
            await written.add_message(message)
        await written.get_messages_for_request(token_budget=BUDGET)
    resumed = stores.worker(token_counter=reader or "calibrated")  # the default: o200k
    view = await resumed.get_messages_for_request(token_budget=BUDGET)
    assert resumed.last_report is not None
    if reader is None:  # counted exactly: the report is the delivered view's exact size
        assert resumed.last_report.tokens_after == exact_size(view) <= BUDGET
    else:
        heuristic = HeuristicCounter()
        size = sum(heuristic.count_message(m) for m in view) + heuristic.request_overhead
        assert resumed.last_report.tokens_after == size <= BUDGET
    # The same counter again reuses the costs and the sticky state: the very same view.
    again = stores.worker(token_counter=reader or "calibrated")
    assert await again.get_messages_for_request(token_budget=BUDGET) == view


# -- 7. a failed state save is tried again ------------------------------------------------


async def run_rounds(context: ContextFold, rounds: range) -> list[dict[str, Any]]:
    view: list[dict[str, Any]] = []
    for n in rounds:
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=BUDGET)
    return view


async def test_a_state_save_that_failed_is_tried_again(sql_stores: Stores) -> None:
    if sql_stores.kind == "sqlite":
        path = sql_stores.url.removeprefix("sqlite:///")  # type: ignore[union-attr]
        store: SessionStore = SqliteStore(path, busy_timeout=0.2)
        blocker = sqlite3.connect(path, isolation_level=None)
        lock, unlock = "BEGIN IMMEDIATE", "ROLLBACK"
    else:
        from contextfold.store.postgres import PostgresStore

        # The store's statements give up after 200 ms waiting for a lock.
        store = PostgresStore(f"{sql_stores.url}&options=-c%20lock_timeout%3D200")
        import psycopg

        blocker = psycopg.connect(sql_stores.url)  # type: ignore[assignment]
        lock, unlock = "LOCK TABLE contextfold.cf_documents IN ACCESS EXCLUSIVE MODE", "ROLLBACK"
    sql_stores.opened.append(store)
    context = ContextFold(store=store, session_id="s", token_counter="heuristic")
    await context.set_messages([SYSTEM, human("Look up every topic.")])
    await run_rounds(context, range(12))  # passes whose states are saved
    failed = False
    for n in range(12, 40):  # until a pass's state save meets a transient store error
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        blocker.execute(lock)
        try:
            await context.get_messages_for_request(token_budget=BUDGET)
        except StoreError:
            failed = True
            break
        finally:
            blocker.execute(unlock)
    blocker.close()
    assert failed
    await context.add_message(human("And one more thing."))
    view = await context.get_messages_for_request(token_budget=BUDGET)  # saves it now
    assert context.last_report is not None and not context.last_report.compacted
    resumed = sql_stores.worker()
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == view


# -- 8. a cancelled append is in both or in neither ---------------------------------------


async def test_a_cancelled_add_message_is_in_the_store_and_history_or_in_neither(
    sql_stores: Stores,
) -> None:
    context = sql_stores.worker()
    await context.set_messages([SYSTEM, human("go")])
    if sql_stores.kind == "sqlite":
        blocker: Any = sqlite3.connect(
            sql_stores.url.removeprefix("sqlite:///"),  # type: ignore[union-attr]
            isolation_level=None,
        )
        blocker.execute("BEGIN IMMEDIATE")  # the append waits for the write lock
    else:
        import psycopg

        blocker = psycopg.connect(sql_stores.url)  # type: ignore[arg-type]
        blocker.execute("SELECT 1 FROM contextfold.cf_sessions WHERE session_id = 's' FOR UPDATE")
    adding = asyncio.create_task(context.add_message(human("cancelled mid-write")))
    await asyncio.sleep(0.3)  # the store is writing it (waiting for the lock)
    adding.cancel()  # a turn timeout, Ctrl-C
    await asyncio.sleep(0.05)
    blocker.execute("ROLLBACK")  # the write can go on now
    blocker.close()
    with pytest.raises(asyncio.CancelledError):
        await adding
    history = await context.get_messages()
    assert await sql_stores.worker().get_messages() == history  # both or neither
    # The write had started, so it was let finish: both.
    assert history[-1]["content"] == "cancelled mid-write"
    await context.add_message(human("the session goes on"))  # not wedged
    assert await sql_stores.worker().get_messages() == await context.get_messages()


# -- 11. other sessions' summary records are never read -----------------------------------

SUMMARY_LADDER = [
    "strip_thinking",
    "truncate_tool_results",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "drop_oldest",
]


async def test_an_unreadable_record_of_another_session_never_fails_this_one(
    sql_stores: Stores,
) -> None:
    other = sql_stores.worker("other", summarizer=scripted_summarizer(), strategies=SUMMARY_LADDER)
    await other.set_messages([SYSTEM, human("go")])
    await run_rounds(other, range(25))
    assert other.summary_stats.written > 0
    await sql_stores.raw(
        "INSERT INTO cf_summaries (covered_hash, session_id, record_json) VALUES (%s, %s, %s)",
        "f" * 64,
        "other",
        '{"schema_version": 1, "text": "damaged',
    )
    context = sql_stores.worker("mine", summarizer=scripted_summarizer(), strategies=SUMMARY_LADDER)
    await context.set_messages([SYSTEM, human("go")])
    view = await run_rounds(context, range(25))
    assert context.last_report is not None and context.last_report.removed_total > 0
    assert [m for m in view if (m.get("metadata") or {}).get("summary")]


# -- 23. a damaged row is a StoreError naming the session and the row ---------------------


async def written_session(stores: Stores, counter: str = "heuristic") -> None:
    context = stores.worker(token_counter=counter)
    await context.set_messages([SYSTEM, human("go")])
    await run_rounds(context, range(20))
    await context.on_llm_response({"usage": {"input_tokens": 3_000}, "model": "m"})


@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        ('UPDATE cf_messages SET message_json = \'{"role": "us\' WHERE seq = 5', "seq 5.*not JSON"),
        ("UPDATE cf_messages SET message_json = '[1, 2]' WHERE seq = 6", "seq 6.*JSON object"),
        (
            'UPDATE cf_documents SET body_json = \'{"version": 1, "body": {"m": 3}}\''
            " WHERE kind = 'calibration'",
            "entry for 'm'",
        ),
        ("UPDATE cf_documents SET body_json = '[1]' WHERE kind = 'calibration'", "calibration"),
    ],
)
async def test_a_damaged_row_is_a_store_error_naming_session_and_row(
    sql_stores: Stores, damage: str, complaint: str
) -> None:
    await written_session(sql_stores, counter="calibrated")  # with a calibration document
    await sql_stores.raw(damage)
    with pytest.raises(StoreError, match=f"session 's'.*{complaint}|{complaint}.*session 's'"):
        await sql_stores.worker().get_messages()


@pytest.mark.parametrize("cost", ["'many'", "2.5", "-3"])
async def test_a_cost_that_is_not_a_count_is_a_store_error(tmp_path: Path, cost: str) -> None:
    # SQLite only: a PostgreSQL BIGINT column cannot hold the first two, and the store
    # never writes a negative one.
    stores = Stores("sqlite", f"sqlite:///{tmp_path / 'agent.db'}")
    await written_session(stores)
    await stores.raw(f"UPDATE cf_messages SET cost = {cost} WHERE seq = 7")
    with pytest.raises(StoreError, match="session 's', seq 7 is damaged: its token cost"):
        await stores.worker().get_messages()
    await stores.close()


async def test_a_damaged_classification_or_state_is_read_around(
    sql_stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    # Derived rows: a classification is taken again from the message, a state planned anew.
    await written_session(sql_stores)
    history = await sql_stores.worker().get_messages()
    await sql_stores.raw("UPDATE cf_messages SET info_json = '{\"no\": 1}' WHERE seq = 4")
    body = (await sql_stores.raw("SELECT body_json FROM cf_documents WHERE kind = 'state'"))[0][0]
    envelope = json.loads(body)
    envelope["body"]["truncated"] = [1, 2]
    await sql_stores.raw(
        "UPDATE cf_documents SET body_json = %s WHERE kind = 'state'", json.dumps(envelope)
    )
    resumed = sql_stores.worker()
    assert await resumed.get_messages() == history
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        view = await resumed.get_messages_for_request(token_budget=BUDGET)
    assert "unreadable" in caplog.text
    assert view == await planned_afresh(history)
