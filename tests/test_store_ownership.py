"""A SQLite store writes only into a file contextfold created (DESIGN invariant 9).

Another application's database, whatever tables it has (a ``schema_version`` table at any
version included), in either journal mode, is refused with an error naming the file and left
byte for byte as it was, with nothing created beside it. A store an earlier contextfold wrote
(its version in ``schema_version``) is recognised by the application id it carries, even when
that mark is still only in its write-ahead log.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.store import SCHEMA_VERSION, SqliteStore, StoreSchemaError, open_store
from contextfold.store.sqlite import APPLICATION_ID
from read_only import snapshot
from support import human


def other_application(path: Path, *, version: int | None, wal: bool) -> None:
    """A database another application made: its data, and maybe a schema_version table."""
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        if wal:
            raw.execute("PRAGMA journal_mode = WAL")
        raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        raw.execute("INSERT INTO orders VALUES (1, 'lamp')")
        if version is not None:
            raw.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            raw.execute("INSERT INTO schema_version VALUES (?)", (version,))
    finally:
        raw.close()


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
@pytest.mark.parametrize("version", [None, 0, 1, 2, 3, 99])
async def test_another_applications_database_is_refused_and_left_untouched(
    tmp_path: Path, version: int | None, wal: bool
) -> None:
    path = tmp_path / "app.db"
    other_application(path, version=version, wal=wal)
    before = snapshot(tmp_path)
    context = ContextFold(store=f"sqlite:///{path}", session_id="s")
    with pytest.raises(StoreSchemaError) as caught:
        await context.add_message(human("hello"))
    text = str(caught.value)
    assert str(path) in text and "did not create" in text
    assert "newer" not in text  # a large version is not "a newer contextfold"
    with pytest.raises(StoreSchemaError):
        await open_store(f"sqlite:///{path}")
    # Byte for byte as it was, and nothing beside it (no -wal, -shm or -journal file).
    assert snapshot(tmp_path) == before


async def test_an_empty_database_of_another_application_is_refused(tmp_path: Path) -> None:
    """No tables yet, but made by someone else (its header is not blank): not ours."""
    path = tmp_path / "fresh.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 7")
    raw.close()
    before = snapshot(tmp_path)
    with pytest.raises(StoreSchemaError, match="did not create"):
        await open_store(f"sqlite:///{path}")
    assert snapshot(tmp_path) == before


async def test_a_store_whose_mark_is_still_in_its_write_ahead_log_is_ours(
    tmp_path: Path,
) -> None:
    """An earlier contextfold switched to WAL first and stamped the application id in its
    first transaction: a process killed before any checkpoint leaves the mark only in the
    log, the file's own header still 0. Read through SQLite, it is ours."""
    live = tmp_path / "live"
    live.mkdir()
    writer = sqlite3.connect(live / "old.db", isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.executescript(
        f"""
        BEGIN;
        PRAGMA application_id = {APPLICATION_ID};
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        INSERT INTO schema_version VALUES (3);
        CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
                                  generation INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                                  message_json TEXT NOT NULL, cost INTEGER NOT NULL,
                                  info_json TEXT, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
        CREATE TABLE cf_summaries (position INTEGER PRIMARY KEY AUTOINCREMENT,
                                   covered_hash TEXT NOT NULL UNIQUE, session_id TEXT,
                                   record_json TEXT NOT NULL);
        CREATE TABLE cf_documents (session_id TEXT NOT NULL, kind TEXT NOT NULL, seq INTEGER,
                                   body_json TEXT NOT NULL,
                                   PRIMARY KEY (session_id, kind)) WITHOUT ROWID;
        INSERT INTO cf_sessions VALUES ('kept', 1, 0);
        INSERT INTO cf_messages VALUES ('kept', 1, '{{"role":"user","content":"hi"}}', 2, NULL);
        COMMIT;
        """
    )
    killed = tmp_path / "killed"
    shutil.copytree(live, killed)  # the files as a SIGKILL would leave them
    writer.close()
    path = killed / "old.db"
    assert path.read_bytes()[68:72] == b"\0\0\0\0"  # the mark is only in the log
    store = SqliteStore(path)
    loaded = await store.open_session("kept")
    assert [(m.seq, m.cost) for m in loaded.messages] == [(1, 2)]
    assert await store.append("kept", 1, '{"role":"user","content":"again"}', 3) == 2
    await store.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT value FROM contextfold_meta").fetchall() == [
            (str(SCHEMA_VERSION),)
        ]
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


async def test_a_new_store_is_marked_before_it_has_any_table(tmp_path: Path) -> None:
    """The mark and the tables arrive in one transaction, before the file switches to WAL:
    a new store's header says it is contextfold's as soon as it holds anything."""
    path = tmp_path / "new.db"
    store = await open_store(f"sqlite:///{path}")
    await store.close()
    header = path.read_bytes()[:100]
    assert int.from_bytes(header[68:72], "big") == APPLICATION_ID
    assert header[18:20] == b"\x02\x02"  # WAL
    with sqlite3.connect(path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert "contextfold_meta" in tables and "schema_version" not in tables


# -- the invariant over many databases --------------------------------------------------------

TABLE_NAMES = st.sampled_from(
    ["schema_version", "cf_sessions", "cf_messages", "contextfold_meta", "users", "orders"]
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tables=st.lists(TABLE_NAMES, min_size=0, max_size=4, unique=True),
    application_id=st.one_of(st.just(0), st.integers(min_value=-(2**31), max_value=2**31 - 1)),
    wal=st.booleans(),
    rows=st.integers(min_value=0, max_value=3),
)
def test_no_database_of_another_application_is_ever_written(
    tmp_path_factory: pytest.TempPathFactory,
    tables: list[str],
    application_id: int,
    wal: bool,
    rows: int,
) -> None:
    """Whatever its tables (contextfold's own names included), its application id (other
    than contextfold's) and its journal mode: refused, and byte for byte as it was."""
    assume(application_id != APPLICATION_ID)
    folder = tmp_path_factory.mktemp("foreign")
    path = folder / "app.db"
    raw = sqlite3.connect(path, isolation_level=None)
    if wal:
        raw.execute("PRAGMA journal_mode = WAL")
    raw.execute(f"PRAGMA application_id = {application_id}")
    for table in tables:
        raw.execute(f"CREATE TABLE {table} (version INTEGER, note TEXT)")
        for n in range(rows):
            raw.execute(f"INSERT INTO {table} VALUES (?, ?)", (n, "x" * n))
    raw.close()
    assume(path.stat().st_size > 0)  # an empty file is a new store's place, not a database
    before = snapshot(folder)

    async def attempt() -> None:
        store = SqliteStore(path)
        with pytest.raises(StoreSchemaError, match="did not create"):
            await store.append("s", 0, '{"a":1}', 1)
        await store.close()

    asyncio.run(attempt())
    assert snapshot(folder) == before
