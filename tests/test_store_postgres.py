"""PostgreSQL specifics on a real server: schema versions, foreign tables, many clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from contextfold.store import SCHEMA_VERSION, StoreSchemaError, open_store
from contextfold.store.postgres import PostgresStore
from store_support import PostgresServer, start_or_skip


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    started = start_or_skip()
    yield started
    started.stop()


@pytest.mark.slow
async def test_a_schema_newer_than_the_code_is_refused_clearly(server: PostgresServer) -> None:
    url = server.fresh_database("newer")
    store = await open_store(url)
    await store.append("s", 0, '{"a":1}', 1)
    await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreSchemaError) as caught:
        await open_store(url)
    text = str(caught.value)
    assert f"version {SCHEMA_VERSION + 1}" in text and "newer" in text and "upgrade" in text
    refused = PostgresStore(url)
    for _ in range(2):  # refused on every call, not only the first
        with pytest.raises(StoreSchemaError):
            await refused.append("s", 1, '{"a":2}', 1)
    await refused.close()
    async with await psycopg.AsyncConnection.connect(url) as raw:
        rows = await (await raw.execute("SELECT count(*) FROM cf_messages")).fetchone()
    assert rows == (1,)


async def test_an_old_version_1_database_migrates_forward(server: PostgresServer) -> None:
    url = server.fresh_database("version_one")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        for statement in (
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (1)",
            "CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL,"
            " generation BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " message_json TEXT NOT NULL, cost BIGINT NOT NULL, PRIMARY KEY (session_id, seq))",
            "CREATE TABLE cf_summaries (position BIGSERIAL PRIMARY KEY,"
            " covered_hash TEXT NOT NULL UNIQUE, session_id TEXT, record_json TEXT NOT NULL)",
            "INSERT INTO cf_sessions VALUES ('old', 1, 0)",
            """INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3)""",
        ):
            await raw.execute(statement)
    store = await open_store(url)
    loaded = await store.open_session("old")
    assert [(m.seq, m.message["content"], m.cost) for m in loaded.messages] == [(1, "hi", 3)]
    await store.save_state("old", 1, {"migrated": True})
    await store.close()
    async with await psycopg.AsyncConnection.connect(url) as raw:
        versions = await (await raw.execute("SELECT version FROM schema_version")).fetchall()
    assert versions == [(SCHEMA_VERSION,)]


async def test_a_version_2_database_migrates_forward_keeping_rows_without_classification(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("version_two")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        for statement in (
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (2)",
            "CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL,"
            " generation BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " message_json TEXT NOT NULL, cost BIGINT NOT NULL, PRIMARY KEY (session_id, seq))",
            "CREATE TABLE cf_summaries (position BIGSERIAL PRIMARY KEY,"
            " covered_hash TEXT NOT NULL UNIQUE, session_id TEXT, record_json TEXT NOT NULL)",
            "CREATE TABLE cf_documents (session_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " seq BIGINT, body_json TEXT NOT NULL, PRIMARY KEY (session_id, kind))",
            "INSERT INTO cf_sessions VALUES ('old', 1, 0)",
            """INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3)""",
        ):
            await raw.execute(statement)
    store = await open_store(url)
    form = '[1,"human",[],[],0]'
    assert await store.append("old", 1, '{"role":"user","content":"more"}', 2, form) == 2
    loaded = await store.open_session("old")
    assert [(m.seq, m.cost, m.info_json) for m in loaded.messages] == [(1, 3, None), (2, 2, form)]
    await store.close()
    async with await psycopg.AsyncConnection.connect(url) as raw:
        versions = await (await raw.execute("SELECT version FROM schema_version")).fetchall()
    assert versions == [(SCHEMA_VERSION,)]


@pytest.mark.slow
async def test_another_applications_schema_version_table_is_refused(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("foreign")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE TABLE schema_version (id INT, applied_at TIMESTAMP)")
    with pytest.raises(StoreSchemaError, match="another application"):
        await open_store(url)
    async with await psycopg.AsyncConnection.connect(url) as raw:
        tables = await (
            await raw.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'public' ORDER BY 1"
            )
        ).fetchall()
    assert tables == [("schema_version",)]  # nothing of ours was created beside it


@pytest.mark.slow
async def test_many_clients_opening_a_new_database_at_once_migrate_it_once(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("stampede")
    stores = [PostgresStore(url, max_size=1) for _ in range(6)]
    await asyncio.gather(*(store.open() for store in stores))
    seqs = await asyncio.gather(
        *(store.append(f"s{n}", 0, '{"a":1}', 1) for n, store in enumerate(stores))
    )
    assert seqs == [1] * 6
    await asyncio.gather(*(store.close() for store in stores))
    async with await psycopg.AsyncConnection.connect(url) as raw:
        versions = await (await raw.execute("SELECT version FROM schema_version")).fetchall()
    assert versions == [(SCHEMA_VERSION,)]
