"""The SQLite session store: durable sessions in one file, no server.

One connection per store, used only from one worker thread (SQLite calls block, so they
never run on the event loop); each operation is one transaction in one call to that
thread, so coroutines sharing a store never interleave inside an operation. Several
processes may open the same file: writers take the write lock with ``BEGIN IMMEDIATE`` and
wait up to ``busy_timeout`` for it, and every append checks the seq it expects inside that
transaction.

Durability settings, from SQLite's own documentation (pragma.html#pragma_synchronous and
wal.html):

- ``journal_mode=WAL``: a commit appends to the write-ahead log; readers never block the
  writer. A process killed with SIGKILL loses nothing it committed in any synchronous mode,
  because the committed frames are already in the operating system's cache and the next
  opener recovers the WAL.
- ``synchronous=FULL``, not ``NORMAL``: with NORMAL, WAL mode syncs only at checkpoints, so
  "a transaction committed in WAL mode with synchronous=NORMAL might roll back following a
  power loss or system crash". FULL syncs the WAL at every commit, so once ``append``
  returns, the message survives a power loss as well as a ``kill -9``: acknowledged means
  durable. It costs one fsync per append, which the bench reports.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from contextfold.store.base import (
    HISTORY_GENESIS,
    ConcurrentUpdateError,
    Row,
    SessionInfo,
    StoredMessage,
    StoredSession,
    StoreError,
    assemble_session,
    check_cost,
    check_cost_counter,
    check_digest,
    check_document,
    check_info_json,
    check_message_json,
    check_record,
    check_rows,
    check_seq,
    check_session_id,
    extend_history_digest,
    history_digest,
    read_record,
    record_json,
    wrap_document,
)
from contextfold.store.search_rows import Indexer
from contextfold.store.sqlite_open import APPLICATION_ID, Opened, check_path, open_file
from contextfold.store.sqlite_search import (
    forget_session,
    index_message,
    index_session,
    search_session,
)
from contextfold.summaries.records import SummaryRecord

__all__ = ["APPLICATION_ID", "SqliteStore"]

_T = TypeVar("_T")
_INSERT_MESSAGE = (
    "INSERT INTO cf_messages (session_id, seq, message_json, cost, info_json, cost_counter)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)


class SqliteStore:
    """A :class:`~contextfold.store.base.SessionStore` in one SQLite file."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 30.0, read_only: bool = False
    ) -> None:
        """``read_only``: never create, migrate or write the file (the inspection commands'
        mode); a missing file is then an error. A store whose file or folder cannot be
        written (a mounted backup) is opened read-only whatever this says."""
        self.path = check_path(path)
        self.busy_timeout = busy_timeout
        self.read_only = read_only
        self._executor: ThreadPoolExecutor | None = None
        self._connection: sqlite3.Connection | None = None
        self._opened: Opened | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        self._indexer = Indexer()  # used on the worker thread only

    # -- plumbing ------------------------------------------------------------------------

    async def open(self) -> None:
        if self._closed:
            raise StoreError(f"the SQLite store {self.path} was closed")
        async with self._opening:
            if self._connection is not None:
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="contextfold-sqlite")
            loop = asyncio.get_running_loop()
            self._connection = await loop.run_in_executor(self._executor, self._connect)

    async def close(self) -> None:
        self._closed = True
        if self._executor is None:
            return
        connection, self._connection = self._connection, None
        if connection is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, connection.close)
        self._executor.shutdown(wait=True)
        self._executor = None
        if self._opened is not None:
            self._opened.discard_copy()

    async def _run(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._connection is None:
            await self.open()
        assert self._executor is not None and self._connection is not None
        connection = self._connection
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, operation, connection)

    def _guarded(
        self, operation: Callable[[sqlite3.Connection], _T], connection: sqlite3.Connection
    ) -> _T:
        try:
            return operation(connection)
        except sqlite3.Error as error:
            raise self._explain(error) from error

    def _explain(self, error: sqlite3.Error) -> StoreError:
        text = str(error)
        read_only = self._opened.read_only if self._opened is not None else None
        if read_only is not None and "readonly" in text:
            return StoreError(
                f"the SQLite store {self.path} is read-only ({read_only}): it can be read, "
                "not written; nothing was written"
            )
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the SQLite store {self.path} stayed locked by another writer for more than "
                f"{self.busy_timeout:g} s ({text}); nothing was written. Retry, or raise "
                "busy_timeout."
            )
        if isinstance(error, sqlite3.DatabaseError) and (
            "malformed" in text or "not a database" in text or "file is" in text
        ):
            return StoreError(
                f"{self.path} is damaged or not a SQLite database ({text}). Restore it from a "
                "backup or point the store at another file; contextfold will not write into it."
            )
        return StoreError(f"the SQLite store {self.path} failed: {text}")

    @staticmethod
    def _transaction(
        connection: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]
    ) -> _T:
        # BEGIN IMMEDIATE takes the write lock now, so the seq we check cannot move before
        # our insert: the check and the write are one atomic step across processes.
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = body(connection)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return result

    def _connect(self) -> sqlite3.Connection:
        # Two processes opening a new file at once: switching it to WAL and creating the
        # schema take locks SQLite reports as busy at once, without its busy handler. Retry
        # the opening itself for up to busy_timeout.
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.01
        while True:
            try:
                self._opened = open_file(
                    self.path, self.busy_timeout, read_only=self.read_only, explain=self._explain
                )
                return self._opened.connection
            except StoreError as error:
                locked = isinstance(error.__cause__, sqlite3.OperationalError) and any(
                    word in str(error.__cause__).lower() for word in ("locked", "busy")
                )
                if not locked or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, session_id: str) -> StoredSession:
        check_session_id(session_id)

        def read(connection: sqlite3.Connection) -> StoredSession:
            # One read transaction: messages and documents come from the same snapshot.
            connection.execute("BEGIN")
            try:
                return _read_session(connection, session_id)
            finally:
                connection.execute("COMMIT")

        return await self._run(read)

    async def append(
        self,
        session_id: str,
        expected_seq: int,
        message_json: str,
        cost: int,
        info_json: str | None = None,
        *,
        cost_counter: str | None = None,
    ) -> int:
        check_session_id(session_id)
        check_seq(expected_seq)
        check_message_json(message_json)
        check_cost(cost)
        check_info_json(info_json)
        check_cost_counter(cost_counter)
        row = (session_id, expected_seq + 1, message_json, cost, info_json, cost_counter)

        def digest(previous: str | None) -> str | None:
            # A session last written before digests were kept keeps none until a state
            # save computes it from its messages.
            return None if previous is None else extend_history_digest(previous, message_json)

        def write(connection: sqlite3.Connection) -> int:
            _advance(connection, session_id, expected_seq, 1, digest, new_generation=False)
            connection.execute(_INSERT_MESSAGE, row)
            index_message(connection, self._indexer, session_id, message_json)
            return expected_seq + 1

        return await self._run(lambda connection: self._transaction(connection, write))

    async def append_many(self, session_id: str, expected_seq: int, messages: Sequence[Row]) -> int:
        check_session_id(session_id)
        check_seq(expected_seq)
        checked = check_rows(messages)
        fence = expected_seq + 1  # the replacement's own seq: every older writer conflicts
        rows = [
            (session_id, fence + offset, text, cost, info, counter)
            for offset, (text, cost, info, counter) in enumerate(checked, start=1)
        ]
        digest = history_digest(row[0] for row in checked)
        last = fence + len(rows)

        def write(connection: sqlite3.Connection) -> int:
            _advance(
                connection,
                session_id,
                expected_seq,
                last - expected_seq,
                lambda _: digest,
                new_generation=True,
            )
            connection.execute("DELETE FROM cf_messages WHERE session_id = ?", (session_id,))
            connection.execute(
                "DELETE FROM cf_documents WHERE session_id = ? AND kind = 'state'", (session_id,)
            )
            connection.executemany(_INSERT_MESSAGE, rows)
            index_session(connection, self._indexer, session_id, [row[0] for row in checked])
            return last

        return await self._run(lambda connection: self._transaction(connection, write))

    async def save_state(
        self,
        session_id: str,
        seq: int,
        snapshot: Mapping[str, Any],
        *,
        history_sha256: str | None = None,
    ) -> None:
        check_session_id(session_id)
        check_seq(seq, "seq")
        body = check_document(snapshot, "state snapshot")
        check_digest(history_sha256)

        def write(connection: sqlite3.Connection) -> None:
            head = connection.execute(
                "SELECT last_seq, history_sha256 FROM cf_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if head is None:
                raise StoreError(f"session {session_id!r} does not exist: append a message first")
            last, digest = head
            if seq > last:
                raise StoreError(
                    f"state for seq {seq} of session {session_id!r}, whose last seq is {last}: "
                    "save the messages first"
                )
            if seq < last:  # the session moved on: this state describes another history
                raise ConcurrentUpdateError(session_id, seq, last)
            if digest is None:  # last written before digests were kept: compute it once
                digest = history_digest(
                    text
                    for (text,) in connection.execute(
                        "SELECT message_json FROM cf_messages WHERE session_id = ? ORDER BY seq",
                        (session_id,),
                    )
                )
                connection.execute(
                    "UPDATE cf_sessions SET history_sha256 = ? WHERE session_id = ?",
                    (digest, session_id),
                )
            if history_sha256 not in (None, digest):
                raise ConcurrentUpdateError(session_id, seq, seq, other_history=True)
            connection.execute(
                "INSERT OR REPLACE INTO cf_documents VALUES (?, 'state', ?, ?)",
                (session_id, seq, wrap_document(body, digest)),
            )

        await self._run(lambda connection: self._transaction(connection, write))

    async def save_calibration(self, session_id: str, calibration: Mapping[str, Any]) -> None:
        await self._save_document(session_id, "calibration", calibration)

    async def save_budget(self, session_id: str, budget: Mapping[str, Any]) -> None:
        await self._save_document(session_id, "budget", budget)

    async def _save_document(self, session_id: str, kind: str, document: Mapping[str, Any]) -> None:
        check_session_id(session_id)
        body = wrap_document(check_document(document, kind))

        def write(connection: sqlite3.Connection) -> None:
            if _last_seq(connection, session_id) is None:
                raise StoreError(f"session {session_id!r} does not exist: append a message first")
            connection.execute(
                "INSERT OR REPLACE INTO cf_documents VALUES (?, ?, NULL, ?)",
                (session_id, kind, body),
            )

        await self._run(lambda connection: self._transaction(connection, write))

    async def list_sessions(self) -> list[SessionInfo]:
        def read(connection: sqlite3.Connection) -> list[SessionInfo]:
            rows = connection.execute(
                "SELECT s.session_id, s.last_seq, s.generation,"
                " (SELECT count(*) FROM cf_messages m WHERE m.session_id = s.session_id)"
                " FROM cf_sessions s ORDER BY s.session_id"
            ).fetchall()
            return [SessionInfo(*row) for row in rows]

        return await self._run(read)

    async def delete_session(self, session_id: str) -> bool:
        check_session_id(session_id)

        def write(connection: sqlite3.Connection) -> bool:
            deleted = connection.execute(
                "DELETE FROM cf_sessions WHERE session_id = ?", (session_id,)
            ).rowcount
            connection.execute("DELETE FROM cf_messages WHERE session_id = ?", (session_id,))
            connection.execute("DELETE FROM cf_documents WHERE session_id = ?", (session_id,))
            forget_session(connection, session_id)
            return deleted > 0

        return await self._run(lambda connection: self._transaction(connection, write))

    # -- search (contextfold.store.base.SearchableStore) -----------------------------------

    async def search(
        self,
        session_id: str,
        query: str,
        limit: int,
        *,
        skip: Callable[[int], bool] | None = None,
    ) -> list[tuple[int, float]]:
        check_session_id(session_id)

        def read(connection: sqlite3.Connection) -> list[tuple[int, float]]:
            # One read transaction: the statistics and the postings are one snapshot.
            connection.execute("BEGIN")
            try:
                return search_session(connection, session_id, query, limit, skip)
            finally:
                connection.execute("COMMIT")

        return await self._run(read)

    # -- summary records (contextfold.summaries.SummaryStore) -------------------------------

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        def read(connection: sqlite3.Connection) -> SummaryRecord | None:
            row = connection.execute(
                "SELECT record_json FROM cf_summaries WHERE covered_hash = ?", (covered_hash,)
            ).fetchone()
            return None if row is None else read_record(row[0], covered_hash)

        return await self._run(read)

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        check_record(record)
        text = record_json(record)

        def write(connection: sqlite3.Connection) -> SummaryRecord:
            connection.execute(
                "INSERT INTO cf_summaries (covered_hash, session_id, record_json)"
                " VALUES (?, ?, ?) ON CONFLICT (covered_hash) DO NOTHING",
                (record.covered_hash, record.session_id, text),
            )
            row = connection.execute(
                "SELECT record_json FROM cf_summaries WHERE covered_hash = ?",
                (record.covered_hash,),
            ).fetchone()
            return record if row[0] == text else read_record(row[0], record.covered_hash)

        return await self._run(lambda connection: self._transaction(connection, write))

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        def read(connection: sqlite3.Connection) -> list[SummaryRecord]:
            if session_id is None:
                rows = connection.execute(
                    "SELECT covered_hash, record_json FROM cf_summaries ORDER BY position"
                ).fetchall()
            else:  # by the index on (session_id, position): other sessions' rows are not read
                rows = connection.execute(
                    "SELECT covered_hash, record_json FROM cf_summaries WHERE session_id = ?"
                    " ORDER BY position",
                    (session_id,),
                ).fetchall()
            return [read_record(text, key) for key, text in rows]

        return await self._run(read)


def _last_seq(connection: sqlite3.Connection, session_id: str) -> int | None:
    row = connection.execute(
        "SELECT last_seq FROM cf_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else row[0]


def _advance(
    connection: sqlite3.Connection,
    session_id: str,
    expected_seq: int,
    count: int,
    digest: Callable[[str | None], str | None],
    *,
    new_generation: bool,
) -> None:
    """Move the session from ``expected_seq`` to ``expected_seq + count``, and its history
    digest from what it was to ``digest(it)``, or raise a conflict.

    Inside the caller's write transaction (``BEGIN IMMEDIATE``): no other writer can move
    the session between the read of its seq and the update.
    """
    head = connection.execute(
        "SELECT last_seq, history_sha256 FROM cf_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if head is None:
        if expected_seq != 0:
            raise ConcurrentUpdateError(session_id, expected_seq, 0)
        connection.execute(
            "INSERT INTO cf_sessions (session_id, last_seq, generation, history_sha256)"
            " VALUES (?, 0, 0, ?)",
            (session_id, HISTORY_GENESIS),
        )
        head = (0, HISTORY_GENESIS)
    if head[0] != expected_seq:
        raise ConcurrentUpdateError(session_id, expected_seq, head[0])
    connection.execute(
        "UPDATE cf_sessions SET last_seq = ?, generation = generation + ?, history_sha256 = ?"
        " WHERE session_id = ?",
        (expected_seq + count, 1 if new_generation else 0, digest(head[1]), session_id),
    )


def _read_session(connection: sqlite3.Connection, session_id: str) -> StoredSession:
    head = connection.execute(
        "SELECT last_seq, generation, history_sha256 FROM cf_sessions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    rows = connection.execute(
        "SELECT seq, message_json, cost, info_json, cost_counter FROM cf_messages"
        " WHERE session_id = ? ORDER BY seq",
        (session_id,),
    )
    messages = tuple(map(StoredMessage._make, rows))
    documents = {
        kind: (seq, body)
        for kind, seq, body in connection.execute(
            "SELECT kind, seq, body_json FROM cf_documents WHERE session_id = ?", (session_id,)
        )
    }
    return assemble_session(session_id, head, messages, documents)
