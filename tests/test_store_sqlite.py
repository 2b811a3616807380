"""SQLite specifics: durability settings, damaged and foreign files, schema versions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from contextfold.store import SCHEMA_VERSION, SqliteStore, StoreError, StoreSchemaError
from contextfold.store.sqlite import APPLICATION_ID

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 64


def stored_versions(path: Path) -> tuple[list[tuple[str, str]], list[tuple[int]] | None]:
    """contextfold_meta's rows, and the legacy schema_version table's (None: no such table)."""
    with sqlite3.connect(path) as raw:
        meta = raw.execute("SELECT key, value FROM contextfold_meta").fetchall()
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
        legacy = None
        if "schema_version" in tables:
            legacy = raw.execute("SELECT version FROM schema_version").fetchall()
    return meta, legacy


async def filled_store(path: Path, count: int = 300) -> None:
    store = SqliteStore(path)
    seq = 0
    # Long messages so the table spans many pages and truncation cuts through real data.
    for n in range(count):
        seq = await store.append(
            "s", seq, json.dumps({"role": "user", "content": "x" * 200 + str(n)}), n
        )
    await store.save_state("s", seq, {"pass": 1})
    await store.close()  # the last connection checkpoints the WAL into the main file


async def test_wal_and_synchronous_full_are_in_force(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.append("s", 0, '{"a":1}', 1)
    pragmas = await store._run(
        lambda c: (
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA synchronous").fetchone()[0],
            c.execute("PRAGMA busy_timeout").fetchone()[0],
        )
    )
    assert pragmas == ("wal", 2, 30000)  # synchronous 2 = FULL (1 would be NORMAL)
    await store.close()
    with sqlite3.connect(tmp_path / "s.db") as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    # A new store keeps its version in its own table only.
    assert stored_versions(tmp_path / "s.db") == ([("schema_version", str(SCHEMA_VERSION))], None)


async def test_messages_survive_closing_and_reopening(tmp_path: Path) -> None:
    await filled_store(tmp_path / "s.db", count=5)
    store = SqliteStore(tmp_path / "s.db")
    loaded = await store.open_session("s")
    assert [m.cost for m in loaded.messages] == [0, 1, 2, 3, 4]
    assert loaded.state is not None and loaded.state.snapshot == {"pass": 1}
    await store.close()


async def test_a_schema_newer_than_the_code_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await filled_store(path, count=1)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE contextfold_meta SET value = ?", (str(SCHEMA_VERSION + 1),))
    store = SqliteStore(path)
    with pytest.raises(StoreSchemaError) as caught:
        await store.open_session("s")
    text = str(caught.value)
    assert f"version {SCHEMA_VERSION + 1}" in text and "newer" in text and "upgrade" in text
    with pytest.raises(StoreSchemaError):  # refused on every call, not only the first
        await store.append("s", 1, '{"a":2}', 1)
    await store.close()
    # refused means untouched
    assert stored_versions(path) == ([("schema_version", str(SCHEMA_VERSION + 1))], None)


async def test_an_old_version_1_store_migrates_forward_keeping_its_data(tmp_path: Path) -> None:
    # Built by hand as version 1 wrote it (no documents table; its version in a
    # schema_version table; our application id, stamped in the transaction that made the
    # tables), not by the code under test.
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        raw.executescript(
            """
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (1);
            CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
                                      generation INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                                      message_json TEXT NOT NULL, cost INTEGER NOT NULL,
                                      PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
            CREATE TABLE cf_summaries (position INTEGER PRIMARY KEY AUTOINCREMENT,
                                       covered_hash TEXT NOT NULL UNIQUE, session_id TEXT,
                                       record_json TEXT NOT NULL);
            INSERT INTO cf_sessions VALUES ('old', 2, 0);
            INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3);
            INSERT INTO cf_messages VALUES ('old', 2, '{"role":"assistant","content":"yo"}', 4);
            """
        )
    store = SqliteStore(path)
    loaded = await store.open_session("old")
    assert [(m.seq, m.cost) for m in loaded.messages] == [(1, 3), (2, 4)]
    await store.save_state("old", 2, {"migrated": True})  # needs version 2's table
    assert await store.append("old", 2, '{"role":"user","content":"more"}', 1) == 3
    await store.close()
    # The version moves into contextfold_meta; the old table is kept in step, so an older
    # contextfold, which reads only that one, refuses a store newer than it.
    assert stored_versions(path) == ([("schema_version", str(SCHEMA_VERSION))], [(SCHEMA_VERSION,)])
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


async def test_a_version_2_store_migrates_forward_and_resumes_by_inspecting(
    tmp_path: Path,
) -> None:
    """Version 3 stores each message's classification; a version 2 store's rows have none,
    so a resume inspects those messages as it always did and delivers the same view."""
    from contextfold import ContextFold
    from contextfold.messages import info_from_json, inspect_message
    from support import SYSTEM, human, tool_round

    current = tmp_path / "v3.db"
    context = ContextFold(store=f"sqlite:///{current}", session_id="s", token_counter="heuristic")
    await context.set_messages([SYSTEM, human("go")])
    for n in range(12):
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=6_000)
    # The same rows as version 2 wrote them, in its layout (built by hand, not migrated).
    old = tmp_path / "v2.db"
    with sqlite3.connect(old) as raw:
        raw.executescript(
            """
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (2);
            CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
                                      generation INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                                      message_json TEXT NOT NULL, cost INTEGER NOT NULL,
                                      PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
            CREATE TABLE cf_summaries (position INTEGER PRIMARY KEY AUTOINCREMENT,
                                       covered_hash TEXT NOT NULL UNIQUE, session_id TEXT,
                                       record_json TEXT NOT NULL);
            CREATE TABLE cf_documents (session_id TEXT NOT NULL, kind TEXT NOT NULL,
                                       seq INTEGER, body_json TEXT NOT NULL,
                                       PRIMARY KEY (session_id, kind)) WITHOUT ROWID;
            """
        )
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        raw.execute("ATTACH DATABASE ? AS current", (str(current),))
        raw.execute(
            "INSERT INTO cf_sessions SELECT session_id, last_seq, generation"
            " FROM current.cf_sessions"
        )
        raw.execute(
            "INSERT INTO cf_messages SELECT session_id, seq, message_json, cost"
            " FROM current.cf_messages"
        )
        raw.execute("INSERT INTO cf_documents SELECT * FROM current.cf_documents")
    resumed = ContextFold(store=f"sqlite:///{old}", session_id="s", token_counter="heuristic")
    assert await resumed.get_messages_for_request(token_budget=6_000) == view
    await resumed.add_message(human("and now?"))  # written with its classification
    store = SqliteStore(old)
    rows = (await store.open_session("s")).messages
    await store.close()
    assert all(row.info_json is None for row in rows[:-1])
    assert info_from_json(rows[-1].info_json or "") == inspect_message(rows[-1].message, index=0)
    assert stored_versions(old) == ([("schema_version", str(SCHEMA_VERSION))], [(SCHEMA_VERSION,)])


async def test_an_empty_file_becomes_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    store = SqliteStore(path)
    assert await store.append("s", 0, '{"a":1}', 1) == 1
    await store.close()


@pytest.mark.parametrize("keep", [10, 100, 1024, 4096 + 17, "half"])
async def test_a_truncated_store_is_a_clear_error_not_a_traceback(
    tmp_path: Path, keep: int | str
) -> None:
    path = tmp_path / "s.db"
    await filled_store(path)
    data = path.read_bytes()
    size = len(data) // 2 if keep == "half" else keep
    assert isinstance(size, int) and size < len(data)
    path.write_bytes(data[:size])
    store = SqliteStore(path)
    with pytest.raises(StoreError) as caught:
        await store.open()
        await store.open_session("s")
    assert str(path) in str(caught.value)
    assert "truncated" in str(caught.value) or "damaged" in str(caught.value)
    assert "backup" in str(caught.value)
    await store.close()


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (PNG, "not a SQLite database"),
        (b"just some notes, not a database\n" * 10, "not a SQLite database"),
        (b"SQLite format 3\x00" + b"\xff" * 200, "damaged or not a SQLite database"),
    ],
)
async def test_a_foreign_file_is_refused_and_left_untouched(
    tmp_path: Path, content: bytes, complaint: str
) -> None:
    path = tmp_path / "picture.db"
    path.write_bytes(content)
    store = SqliteStore(path)
    with pytest.raises(StoreError, match=complaint):
        await store.open_session("s")
    await store.close()
    assert path.read_bytes() == content
    assert (
        not (tmp_path / "picture.db-wal").exists()
        or (tmp_path / "picture.db-wal").stat().st_size == 0
    )


async def test_another_applications_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        raw.execute("INSERT INTO users VALUES (1, 'ada')")
    before = path.read_bytes()
    store = SqliteStore(path)
    with pytest.raises(StoreSchemaError, match="another application") as caught:
        await store.append("s", 0, '{"a":1}', 1)
    assert "users" in str(caught.value)
    await store.close()
    assert path.read_bytes() == before
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT name FROM users").fetchall() == [("ada",)]


async def test_a_database_marked_by_another_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "marked.db"
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA application_id = 1234")
    store = SqliteStore(path)
    with pytest.raises(StoreSchemaError, match="0x4d2"):
        await store.open()
    await store.close()


async def test_bad_locations_are_clear_errors(tmp_path: Path) -> None:
    for path, complaint in [
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "s.db", "does not exist"),
    ]:
        store = SqliteStore(path)
        with pytest.raises(StoreError, match=complaint):
            await store.open()
        await store.close()


async def test_a_write_locked_out_for_too_long_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, busy_timeout=0.05)
    await store.append("s", 0, '{"a":1}', 1)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another writer"):
            await store.append("s", 1, '{"a":2}', 1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.append("s", 1, '{"a":2}', 1) == 2  # nothing half-written
    await store.close()
