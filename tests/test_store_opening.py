"""What a store is given is checked when it is given, and a store that cannot be written
can still be read.

- A session id holding a lone surrogate, a store path holding a NUL (``%00``), a store that
  is not a store (``store: 5``): a ``ConfigError`` from the constructor (or at mount),
  naming what is wrong, never a bare ``UnicodeEncodeError``, ``ValueError`` or
  ``AttributeError`` at the first message.
- A store on a read-only medium (a mounted backup) is opened for reading: a resumed session's
  messages come back, a write says the store is read-only, and nothing beside it changes.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from amplifier_core.testing import MockCoordinator

from contextfold import ConfigError, ContextFold
from contextfold.amplifier import mount
from contextfold.store import SqliteStore, StoreError, open_store, store_from_url
from contextfold.store.sqlite import APPLICATION_ID
from read_only import read_only, snapshot
from support import SYSTEM, human, tool_round

# -- checked at construction -----------------------------------------------------------------


@pytest.mark.parametrize("session_id", ["bad\udcffid", "\ud800", "nul\x00id"])
def test_a_session_id_no_store_can_hold_is_refused_by_the_constructor(
    tmp_path: Path, session_id: str
) -> None:
    with pytest.raises(ConfigError, match="session id"):
        ContextFold(store=f"sqlite:///{tmp_path}/s.db", session_id=session_id)
    assert not (tmp_path / "s.db").exists()


async def test_every_store_refuses_such_a_session_id_with_a_store_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    for session_id in ("bad\udcffid", "nul\x00id"):
        with pytest.raises(StoreError, match="session id"):
            await store.append(session_id, 0, '{"a":1}', 1)
        with pytest.raises(StoreError, match="session id"):
            await store.open_session(session_id)
    await store.close()


@pytest.mark.parametrize(
    "url",
    ["sqlite:///agent%00.db", "sqlite:///dir%00/agent.db", "sqlite:///a\x00b.db"],
)
def test_a_store_path_holding_a_nul_is_refused_by_the_constructor(url: str) -> None:
    with pytest.raises(ConfigError, match="NUL"):
        ContextFold(store=url, session_id="s")
    with pytest.raises(StoreError, match="NUL"):
        store_from_url(url)


def test_a_sqlite_store_built_directly_checks_its_path() -> None:
    with pytest.raises(StoreError, match="NUL"):
        SqliteStore("agent\x00.db")
    with pytest.raises(StoreError, match="not text"):
        SqliteStore("\ud800.db")


def test_a_postgresql_url_that_is_not_text_is_refused_at_once() -> None:
    with pytest.raises(StoreError, match="lone surrogate"):
        store_from_url("postgresql://db.example/agents\udcff")


@pytest.mark.parametrize("store", [5, 3.5, True, object(), ["sqlite:///x.db"], {"url": "x"}])
def test_a_store_that_is_not_a_store_is_refused_by_the_constructor(store: object) -> None:
    with pytest.raises(ConfigError, match="store must be a store URL"):
        ContextFold(store=store, session_id="s")  # type: ignore[arg-type]


async def test_a_store_that_is_not_a_store_is_refused_at_mount() -> None:
    coordinator = MockCoordinator()
    with pytest.raises(ConfigError, match="store must be a store URL"):
        await mount(coordinator, {"store": 5})
    assert coordinator.get("context") is None


# -- a store that cannot be written ---------------------------------------------------------


async def stored_session(folder: Path, session_id: str = "backup") -> list[dict]:
    """A compacted session in ``folder/agent.db``, its writer closed (as a backup is made)."""
    store = SqliteStore(folder / "agent.db")
    context = ContextFold(store=store, session_id=session_id, token_counter="heuristic")
    await context.set_messages([SYSTEM, human("go")])
    for n in range(6):
        for message in tool_round(n, result_chars=800):
            await context.add_message(message)
        await context.get_messages_for_request(token_budget=3_000)
    messages = await context.get_messages()
    await store.close()
    return messages


async def test_a_resumed_session_is_read_from_a_read_only_store(tmp_path: Path) -> None:
    folder = tmp_path / "backup"
    folder.mkdir()
    messages = await stored_session(folder)
    url = f"sqlite:///{folder / 'agent.db'}"
    before = snapshot(folder)
    with read_only(folder):
        resumed = ContextFold(store=url, session_id="backup", token_counter="heuristic")
        assert await resumed.get_messages() == messages
        with pytest.raises(StoreError, match="read-only") as caught:
            await resumed.add_message(human("more"))
        assert "nothing was written" in str(caught.value)
        assert await resumed.get_messages() == messages
        store = await open_store(url)
        assert [s.session_id for s in await store.list_sessions()] == ["backup"]
        with pytest.raises(StoreError, match="read-only"):
            await store.append("other", 0, '{"a":1}', 1)
        await store.close()
    assert snapshot(folder) == before


async def test_an_older_store_on_a_read_only_medium_is_read_through_a_migrated_copy(
    tmp_path: Path,
) -> None:
    """A backup of a store an earlier contextfold wrote (version 2, its version in
    schema_version): readable without migrating the file itself."""
    folder = tmp_path / "backup"
    folder.mkdir()
    path = folder / "old.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
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
            INSERT INTO cf_sessions VALUES ('old', 2, 0);
            INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3);
            INSERT INTO cf_messages VALUES ('old', 2, '{"role":"assistant","content":"yo"}', 4);
            """
        )
    before = snapshot(folder)
    with read_only(folder):
        resumed = ContextFold(store=f"sqlite:///{path}", session_id="old")
        assert [m["content"] for m in await resumed.get_messages()] == ["hi", "yo"]
        with pytest.raises(StoreError, match="read-only"):
            await resumed.add_message(human("more"))
    assert snapshot(folder) == before


async def test_asked_to_read_only_a_writable_store_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "live"
    folder.mkdir()
    await stored_session(folder)
    before = snapshot(folder)
    store = await open_store(f"sqlite:///{folder / 'agent.db'}", read_only=True)
    assert (await store.open_session("backup")).exists
    with pytest.raises(StoreError, match="read-only"):
        await store.append("backup", 1, '{"a":1}', 1)
    await store.close()
    assert snapshot(folder) == before
    with pytest.raises(StoreError, match="no such file"):
        await open_store(f"sqlite:///{folder / 'typo.db'}", read_only=True)
    with pytest.raises(StoreError, match="nothing to read"):
        store_from_url("memory://", read_only=True)
    assert snapshot(folder) == before


async def test_a_backup_taken_while_the_writer_ran_is_read_with_its_log(tmp_path: Path) -> None:
    """Copied with its -wal and -shm files while a worker was writing, the backup's last
    messages are only in the write-ahead log: read-only, they are read from there."""
    live = tmp_path / "live"
    live.mkdir()
    writer = sqlite3.connect(live / "agent.db", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    store = SqliteStore(live / "agent.db")
    context = ContextFold(store=store, session_id="s", token_counter="heuristic")
    await context.set_messages([SYSTEM, human("go")])
    for n in range(4):
        for message in tool_round(n, result_chars=300):
            await context.add_message(message)
    messages = await context.get_messages()
    backup = tmp_path / "backup"
    shutil.copytree(live, backup)  # the -wal and -shm files too, mid-run
    await store.close()
    writer.close()
    assert (backup / "agent.db-wal").stat().st_size > 0
    before = snapshot(backup)
    with read_only(backup):
        resumed = ContextFold(store=f"sqlite:///{backup / 'agent.db'}", session_id="s")
        assert await resumed.get_messages() == messages
    assert snapshot(backup) == before
