"""PostgreSQL specifics on a real server: schema versions, foreign tables, many clients.

contextfold keeps its tables in a schema of its own (``contextfold``); nothing outside it is
ever written, and a schema of that name it did not make is refused untouched.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from contextfold.store import (
    SCHEMA_VERSION,
    StoreError,
    StoreSchemaError,
    open_store,
    store_from_url,
)
from contextfold.store.postgres import PostgresStore
from contextfold.summaries import SummaryRecord, covered_hash
from store_support import PostgresServer


async def contents(url: str, schema: str = "public") -> dict[str, object]:
    """Every table of ``schema``: its columns and its rows, to compare before and after."""
    async with await psycopg.AsyncConnection.connect(url) as raw:
        tables = await (
            await raw.execute(
                "SELECT table_name, array_agg(column_name::text || ' ' || data_type"
                " ORDER BY ordinal_position) FROM information_schema.columns"
                " WHERE table_schema = %s GROUP BY table_name ORDER BY 1",
                (schema,),
            )
        ).fetchall()
        found: dict[str, object] = {}
        for name, columns in tables:
            rows = await (
                await raw.execute(
                    psycopg.sql.SQL("SELECT * FROM {}.{}").format(
                        psycopg.sql.Identifier(schema), psycopg.sql.Identifier(name)
                    )
                )
            ).fetchall()
            found[name] = (columns, sorted(map(repr, rows)))
    return found


async def meta(url: str) -> list[tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(url) as raw:
        return await (
            await raw.execute("SELECT key, value FROM contextfold.contextfold_meta")
        ).fetchall()


@pytest.fixture(scope="module")
def server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


@pytest.mark.slow
async def test_a_schema_newer_than_the_code_is_refused_clearly(server: PostgresServer) -> None:
    url = server.fresh_database("newer")
    store = await open_store(url)
    await store.append("s", 0, '{"a":1}', 1)
    await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute(
            "UPDATE contextfold.contextfold_meta SET value = %s", (str(SCHEMA_VERSION + 1),)
        )
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
        rows = await (await raw.execute("SELECT count(*) FROM contextfold.cf_messages")).fetchone()
    assert rows == (1,)
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION + 1))]


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
    await store.put_if_absent(record("after the move"))  # its id sequence moved along
    await store.close()
    # The cf_* tables moved into contextfold's schema; the old version table stays where it
    # was, as it was (another application may own a table of that name).
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION))]
    assert await contents(url) == {
        "schema_version": (["version integer"], ["(1,)"]),
    }
    assert {"cf_sessions", "cf_messages", "cf_summaries", "cf_documents"} <= set(
        await contents(url, "contextfold")
    )


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
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION))]
    assert set(await contents(url)) == {"schema_version"}
    reopened = await open_store(url)  # taken over once: now an ordinary store
    assert (await reopened.open_session("old")).last_seq == 2
    await reopened.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3, 99])
async def test_another_applications_schema_version_table_is_never_written(
    server: PostgresServer, version: int
) -> None:
    """Another application's schema_version(version) table, at any version, beside its own
    data: the store lives in its own schema and the application's rows and tables stay
    exactly as they were (issue: its version row was overwritten, or a large version
    reported as written by a newer contextfold)."""
    url = server.fresh_database(f"foreign_{version}")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        await raw.execute("INSERT INTO schema_version VALUES (%s)", (version,))
        await raw.execute("CREATE TABLE invoices (id INT PRIMARY KEY, total NUMERIC)")
        await raw.execute("INSERT INTO invoices VALUES (1, 9.5)")
    before = await contents(url)
    store = await open_store(url)
    assert await store.append("s", 0, '{"a":1}', 1) == 1
    await store.close()
    assert await contents(url) == before
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION))]


async def test_a_lookalike_of_an_old_store_is_not_taken_over(server: PostgresServer) -> None:
    """Tables that share an old store's names but not its exact layout are another
    application's: nothing of them is moved or written."""
    url = server.fresh_database("lookalike")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        await raw.execute("INSERT INTO schema_version VALUES (2)")
        await raw.execute("CREATE TABLE cf_sessions (session_id TEXT, owner TEXT)")
        await raw.execute("INSERT INTO cf_sessions VALUES ('x', 'billing')")
    before = await contents(url)
    store = await open_store(url)
    assert (await store.open_session("x")).exists is False
    await store.close()
    assert await contents(url) == before


async def test_a_schema_named_contextfold_of_another_application_is_refused_untouched(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("squatted")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE SCHEMA contextfold")
        await raw.execute("CREATE TABLE contextfold.schema_version (version INTEGER)")
        await raw.execute("INSERT INTO contextfold.schema_version VALUES (2)")
        await raw.execute("CREATE TABLE contextfold.notes (body TEXT)")
    before = await contents(url, "contextfold")
    for _ in range(2):  # refused on every opening
        with pytest.raises(StoreSchemaError) as caught:
            await open_store(url)
        assert "squatted" in str(caught.value) and "did not create" in str(caught.value)
    assert await contents(url, "contextfold") == before


async def test_an_empty_schema_made_for_contextfold_is_used(server: PostgresServer) -> None:
    """A database owner who will not grant CREATE on the database makes the schema for
    contextfold's user; contextfold keeps its tables there. A user without either right
    gets an error saying what to ask for."""
    url = server.fresh_database("granted")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE ROLE worker LOGIN")
        await raw.execute("REVOKE CREATE ON DATABASE granted FROM PUBLIC")
    as_worker = url.replace("user=postgres", "user=worker")
    with pytest.raises(StoreError, match="CREATE SCHEMA contextfold AUTHORIZATION"):
        await open_store(as_worker)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        await raw.execute("CREATE SCHEMA contextfold AUTHORIZATION worker")
    store = await open_store(as_worker)
    assert await store.append("s", 0, '{"a":1}', 1) == 1
    await store.close()
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION))]


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
    assert await meta(url) == [("schema_version", str(SCHEMA_VERSION))]


def record(text: str) -> SummaryRecord:
    return SummaryRecord(
        text=text,
        history_ids=(0,),
        covered_hash=covered_hash([{"role": "user", "content": text}]),
        summarizer="test",
        prompt_id="p",
        prompt_version=1,
        tokens=3,
        session_id="old",
    )


# -- bad URLs fail at once, with the server's reason and without the password ------------------


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("postgresql:///no_such_db?host={root}&user=postgres&password=hunter22", "no_such_db"),
        ("postgresql://ghost:hunter22@/contextfold_test?host={root}", 'role "ghost"'),
        ("postgresql:///contextfold_test?host={root}&user=ghost&password=hunter22", "ghost"),
    ],
)
async def test_a_wrong_database_or_user_fails_at_once_with_the_servers_reason(
    server: PostgresServer, template: str, reason: str
) -> None:
    """Not after the pool's 30 s timeout with only "pool initialization incomplete": the
    first connection's own error, and the password never shown."""
    url = template.format(root=server.root)
    store = store_from_url(url)
    with pytest.raises(StoreError) as caught:
        await store.open()
    await store.close()
    text = str(caught.value)
    assert reason in text and "does not exist" in text, text
    assert "hunter22" not in text and "incomplete" not in text


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://worker:hunter22@127.0.0.1:notaport/agents",
        "postgresql://worker:hun%zzter22@127.0.0.1/agents",
        "postgresql://127.0.0.1/agents?password=hunter22&sslmode=sometimes",
        "postgresql://127.0.0.1/agents?password=hunter22&no_such_option=1",
    ],
)
async def test_a_url_the_driver_cannot_use_never_shows_its_password(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        await open_store(url)
    text = str(caught.value)
    assert "hunter22" not in text and "hun%zzter22" not in text, text
    assert "127.0.0.1" in text


# -- read-only: the inspection commands' opening ------------------------------------------------


async def test_opening_to_read_creates_nothing_in_a_database_without_a_store(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("nothing_here")
    with pytest.raises(StoreError, match="holds no contextfold store"):
        await open_store(url, read_only=True)
    async with await psycopg.AsyncConnection.connect(url) as raw:
        schemas = await (
            await raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'contextfold'")
        ).fetchall()
    assert schemas == [] and await contents(url) == {}


async def test_opening_to_read_reads_and_never_writes(server: PostgresServer) -> None:
    url = server.fresh_database("read_me")
    store = await open_store(url)
    await store.append("s", 0, '{"a":1}', 1)
    await store.close()
    before = await contents(url, "contextfold")
    reader = await open_store(url, read_only=True)
    assert [s.session_id for s in await reader.list_sessions()] == ["s"]
    with pytest.raises(StoreError, match="read-only"):
        await reader.append("s", 1, '{"a":2}', 1)
    await reader.close()
    assert await contents(url, "contextfold") == before


async def test_opening_to_read_never_migrates_an_older_store(server: PostgresServer) -> None:
    url = server.fresh_database("old_unread")
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
        ):
            await raw.execute(statement)
    before = await contents(url)
    with pytest.raises(StoreSchemaError, match="older") as caught:
        await open_store(url, read_only=True)
    assert "migrate" in str(caught.value)
    assert await contents(url) == before


async def test_opening_to_read_an_older_store_of_the_old_layout_is_refused_untouched(
    server: PostgresServer,
) -> None:
    """A version 3 store an earlier contextfold wrote in ``public`` (its version in
    schema_version) needs a migration (version 4 names each cost's counter), which opening to
    read never does: a clear error, and nothing moved or written."""
    url = server.fresh_database("old_layout_read")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        for statement in (
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (3)",
            "CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL,"
            " generation BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " message_json TEXT NOT NULL, cost BIGINT NOT NULL, info_json TEXT,"
            " PRIMARY KEY (session_id, seq))",
            "CREATE TABLE cf_summaries (position BIGSERIAL PRIMARY KEY,"
            " covered_hash TEXT NOT NULL UNIQUE, session_id TEXT, record_json TEXT NOT NULL)",
            "CREATE TABLE cf_documents (session_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " seq BIGINT, body_json TEXT NOT NULL, PRIMARY KEY (session_id, kind))",
            "INSERT INTO cf_sessions VALUES ('old', 1, 0)",
            """INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3)""",
        ):
            await raw.execute(statement)
    before = await contents(url)
    with pytest.raises(StoreSchemaError, match="open it once read-write"):
        await open_store(url, read_only=True)
    assert await contents(url) == before
