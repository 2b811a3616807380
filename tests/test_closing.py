"""Closing a context: a store it opened from a URL is released; a store given to it is not.

``await context.aclose()`` (or ``async with ContextFold(...)``) closes the store contextfold
opened from ``store="sqlite:///..."`` or ``"postgresql://..."``; Amplifier's cleanup does the
same for a mounted context. A store object passed in belongs to its giver and stays open.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from amplifier_core import AmplifierSession

from contextfold import ContextFold
from contextfold.store import MemoryStore, StoreError, store_from_url
from store_support import PostgresServer, start_or_skip
from support import SYSTEM, human, reply


async def test_async_with_closes_the_store_it_opened_from_a_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    async with ContextFold(store=url, session_id="s1", max_tokens=8_000) as context:
        await context.add_message(SYSTEM)
        await context.add_message(human("hello"))
        assert len(await context.get_messages_for_request()) == 2
    with pytest.raises(StoreError, match="was closed"):
        await context.add_message(reply("too late"))
    await context.aclose()  # a second close does nothing

    again = ContextFold(store=url, session_id="s1", max_tokens=8_000)
    assert [m["role"] for m in await again.get_messages()] == ["system", "user"]
    await again.aclose()


async def test_a_store_object_given_stays_open_for_its_giver(tmp_path: Path) -> None:
    for store in (MemoryStore(), store_from_url(f"sqlite:///{tmp_path / 'given.db'}")):
        async with ContextFold(store=store, session_id="s1") as context:
            await context.add_message(human("hello"))
        # The giver still uses it: another session, and this one's message, are there.
        assert len((await store.open_session("s1")).messages) == 1
        other = ContextFold(store=store, session_id="s2")
        await other.add_message(human("another"))
        await store.close()


async def test_a_context_without_a_store_works_on_after_aclose() -> None:
    context = ContextFold(max_tokens=8_000)
    await context.add_message(human("hello"))
    await context.aclose()
    await context.add_message(reply("still here"))
    assert len(await context.get_messages_for_request()) == 2


async def test_amplifier_cleanup_closes_the_mounted_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    plan = {
        "session": {
            "orchestrator": "loop-fold",
            "context": {
                "module": "context-fold",
                "config": {"max_tokens": 30_000, "store": url},
            },
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {"script": {"steps": 2, "tool": "lookup", "argument": "topic"}},
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {}}],
    }
    async with AmplifierSession(plan) as session:
        await session.execute("Look it up.")
        context = session.coordinator.get("context")
        assert isinstance(context, ContextFold)
        stored = len(await context.get_messages())
    with pytest.raises(StoreError, match="was closed"):
        await context.add_message(human("after the session"))
    # Everything the session acknowledged is on disk for the next process.
    reader = store_from_url(url)
    (session_id,) = [s.session_id for s in await reader.list_sessions()]
    assert len((await reader.open_session(session_id)).messages) == stored
    await reader.close()


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    started = start_or_skip()
    yield started
    started.stop()


async def backends(url: str) -> int:
    """Client connections the server holds to the test database, other than this one."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        row = await (
            await raw.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
async def test_aclose_releases_the_postgresql_connections(server: PostgresServer) -> None:
    before = await backends(server.url)
    context = ContextFold(store=server.url, session_id="closing", max_tokens=8_000)
    await context.add_message(human("hello"))
    assert await backends(server.url) > before
    await context.aclose()
    assert await backends(server.url) == before
    with pytest.raises(StoreError, match="was closed"):
        await context.add_message(reply("too late"))
