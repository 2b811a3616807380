"""The PostgreSQL session store: one database shared by a fleet of workers.

psycopg 3, async, with a connection pool (the ``contextfold[postgres]`` extra). Every
operation is one transaction on one pooled connection. An append is a compare-and-set on
the session row: ``UPDATE cf_sessions SET last_seq = last_seq + 1 WHERE session_id = $1 AND
last_seq = $expected``. Under READ COMMITTED a concurrent writer's UPDATE waits for the row
lock, then re-checks the WHERE clause against the committed row and matches nothing, so the
loser sees zero rows and gets :class:`ConcurrentUpdateError`: there is no window in which
both commit, and the (session_id, seq) primary key backs this up. A brand-new session is
created with ``INSERT ... ON CONFLICT DO NOTHING``, which makes the second of two
concurrent creators wait for the first and then lose the compare-and-set like any other
writer: concurrent first writes are never dropped (OpenAI Agents SDK #2722).

A commit returns once the server has flushed its WAL (``synchronous_commit = on``, the
server default), so acknowledged means durable on the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

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
    history_digest,
    read_record,
    record_json,
    wrap_document,
)
from contextfold.store.conninfo import display, parse, scrub
from contextfold.store.postgres_open import settle
from contextfold.store.postgres_search import (
    forget_session,
    index_message,
    index_messages,
    search_session,
)
from contextfold.store.schema import POSTGRES_SCHEMA
from contextfold.store.search_rows import Indexer
from contextfold.summaries.records import SummaryRecord

__all__ = ["PostgresStore"]

_INSERT_MESSAGE = (
    "INSERT INTO cf_messages (session_id, seq, message_json, cost, info_json, cost_counter)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
# The history digest after one append, computed by the server as
# contextfold.store.base.extend_history_digest computes it: SHA-256 over the previous
# digest's bytes and the message's UTF-8 bytes (sent as bytea, so the server's encoding
# cannot change them). A NULL digest (a session last written before digests were kept)
# stays NULL until a state save computes it.
_EXTEND_DIGEST = "encode(sha256(decode(history_sha256, 'hex') || %s::bytea), 'hex')"


class PostgresStore:
    """A :class:`~contextfold.store.base.SessionStore` in a PostgreSQL database."""

    def __init__(
        self,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        """``read_only``: never create or migrate the schema, and run every transaction
        read-only (the inspection commands' mode); a database without a store is then an
        error. A connection string the driver cannot parse is refused here."""
        try:
            self._params = parse(conninfo)
        except ValueError as error:
            raise StoreError(
                f"{display(conninfo)} is not a PostgreSQL URL the driver can use: {error}"
            ) from None
        self.conninfo = conninfo
        self.timeout = timeout
        self.read_only = read_only
        self._where = display(conninfo)
        self._schema = POSTGRES_SCHEMA
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            kwargs={"autocommit": True},
            configure=self._configure,
        )
        self._opened = False
        self._opening = asyncio.Lock()
        self._closed = False
        self._indexer = Indexer()

    @property
    def where(self) -> str:
        """The connection string without its password, for messages."""
        return self._where

    async def open(self) -> None:
        if self._closed:
            raise StoreError(f"the PostgreSQL store {self.where} was closed")
        async with self._opening:
            if not self._opened:
                await self._open_and_migrate()

    async def _open_and_migrate(self) -> None:
        # One connection first, outside the pool: a wrong password, database or host fails
        # here at once with the server's reason (a pool would retry until its timeout and
        # say only that it is incomplete). The schema is found or made on it.
        settings: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in self._params:
            settings["connect_timeout"] = max(2, round(self.timeout))
        try:
            connection = await psycopg.AsyncConnection.connect(self.conninfo, **settings)
        except psycopg.Error as error:
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.where} ({self._reason(error)}); check "
                "that the server runs and that the URL's host, port, database, user and "
                "password are right"
            ) from None
        try:
            if self.read_only:
                await connection.execute("SET default_transaction_read_only = on")
            async with connection.transaction():
                self._schema = await settle(connection, self.where, read_only=self.read_only)
        except psycopg.Error as error:
            raise StoreError(
                f"PostgreSQL store {self.where} failed: {self._scrub(error)}"
            ) from None
        finally:
            await connection.close()
        try:
            await self._pool.open(wait=True, timeout=self.timeout)
        except Exception as error:
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.where} ({self._reason(error)}); check "
                "that the server runs and that the URL's host, port, database and user are right"
            ) from None
        # Only now: a store whose schema was refused stays refused on every later call.
        self._opened = True

    async def _configure(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Each pooled connection works in the store's schema (and reads only, when
        read-only): every statement names its tables unqualified."""
        await connection.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema))
        )
        if self.read_only:
            await connection.execute("SET default_transaction_read_only = on")

    def _scrub(self, error: BaseException) -> str:
        return scrub(str(error), self.conninfo)

    def _reason(self, error: BaseException) -> str:
        """The driver's (or the server's) reason on one line, without the password."""
        return " ".join(self._scrub(error).split()).rstrip(".") or type(error).__name__

    async def close(self) -> None:
        self._closed = True
        await self._pool.close()

    def _connection(self) -> Any:
        return self._pool.connection()

    async def _ready(self) -> None:
        if self._closed or not self._opened:  # open() says a closed store was closed
            await self.open()

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, session_id: str) -> StoredSession:
        check_session_id(session_id)
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                # One snapshot for the messages and the documents.
                await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                head = await (
                    await connection.execute(
                        "SELECT last_seq, generation, history_sha256 FROM cf_sessions"
                        " WHERE session_id = %s",
                        (session_id,),
                    )
                ).fetchone()
                rows = await (
                    await connection.execute(
                        "SELECT seq, message_json, cost, info_json, cost_counter FROM cf_messages"
                        " WHERE session_id = %s ORDER BY seq",
                        (session_id,),
                    )
                ).fetchall()
                documents = await (
                    await connection.execute(
                        "SELECT kind, seq, body_json FROM cf_documents WHERE session_id = %s",
                        (session_id,),
                    )
                ).fetchall()
        except psycopg.Error as error:
            raise self._explain(error) from None
        messages = tuple(map(StoredMessage._make, rows))
        return assemble_session(
            session_id,
            head,
            messages,
            {kind: (seq, body) for kind, seq, body in documents},
        )

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
        text = message_json.encode("utf-8", "surrogatepass")
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                await self._advance(
                    connection, session_id, expected_seq, 1, False, (_EXTEND_DIGEST, text)
                )
                await connection.execute(
                    _INSERT_MESSAGE,
                    (session_id, expected_seq + 1, message_json, cost, info_json, cost_counter),
                )
                await index_message(connection, self._indexer, session_id, message_json)
        except psycopg.errors.UniqueViolation:
            # Unreachable while the compare-and-set holds; kept so a duplicate can never
            # pass as success whatever changes around it.
            raise ConcurrentUpdateError(session_id, expected_seq, expected_seq + 1) from None
        except psycopg.Error as error:
            raise self._explain(error) from None
        return expected_seq + 1

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
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                await self._advance(
                    connection, session_id, expected_seq, last - expected_seq, True, ("%s", digest)
                )
                await connection.execute(
                    "DELETE FROM cf_messages WHERE session_id = %s", (session_id,)
                )
                await connection.execute(
                    "DELETE FROM cf_documents WHERE session_id = %s AND kind = 'state'",
                    (session_id,),
                )
                async with connection.cursor() as cursor:
                    await cursor.executemany(_INSERT_MESSAGE, rows)
                await index_messages(
                    connection, self._indexer, session_id, [row[0] for row in checked], replace=True
                )
        except psycopg.Error as error:
            raise self._explain(error) from None
        return last

    @staticmethod
    async def _advance(
        connection: psycopg.AsyncConnection[Any],
        session_id: str,
        expected_seq: int,
        count: int,
        new_generation: bool,
        digest: tuple[str, object],
    ) -> None:
        """Move the session from ``expected_seq`` to ``expected_seq + count`` and set its
        history digest to ``digest`` (an SQL expression and its one parameter), or raise a
        conflict: the compare-and-set is the UPDATE's WHERE clause."""
        if expected_seq == 0:
            await connection.execute(
                "INSERT INTO cf_sessions (session_id, last_seq, generation, history_sha256)"
                " VALUES (%s, 0, 0, %s) ON CONFLICT DO NOTHING",
                (session_id, HISTORY_GENESIS),
            )
        expression, parameter = digest
        moved = await (
            await connection.execute(
                "UPDATE cf_sessions SET last_seq = last_seq + %s, generation = generation + %s,"
                f" history_sha256 = {expression}"
                " WHERE session_id = %s AND last_seq = %s RETURNING last_seq",
                (count, 1 if new_generation else 0, parameter, session_id, expected_seq),
            )
        ).fetchone()
        if moved is None:
            row = await (
                await connection.execute(
                    "SELECT last_seq FROM cf_sessions WHERE session_id = %s", (session_id,)
                )
            ).fetchone()
            raise ConcurrentUpdateError(session_id, expected_seq, row[0] if row else 0)

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
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                # FOR UPDATE: no append or replacement moves the session until this commits.
                head = await (
                    await connection.execute(
                        "SELECT last_seq, history_sha256 FROM cf_sessions"
                        " WHERE session_id = %s FOR UPDATE",
                        (session_id,),
                    )
                ).fetchone()
                if head is None:
                    raise StoreError(
                        f"session {session_id!r} does not exist: append a message first"
                    )
                last, digest = int(head[0]), head[1]
                if seq > last:
                    raise StoreError(
                        f"state for seq {seq} of session {session_id!r}, whose last seq is "
                        f"{last}: save the messages first"
                    )
                if seq < last:  # the session moved on: this state describes another history
                    raise ConcurrentUpdateError(session_id, seq, last)
                if digest is None:  # last written before digests were kept: compute it once
                    texts = await (
                        await connection.execute(
                            "SELECT message_json FROM cf_messages WHERE session_id = %s"
                            " ORDER BY seq",
                            (session_id,),
                        )
                    ).fetchall()
                    digest = history_digest(text for (text,) in texts)
                    await connection.execute(
                        "UPDATE cf_sessions SET history_sha256 = %s WHERE session_id = %s",
                        (digest, session_id),
                    )
                if history_sha256 not in (None, digest):
                    raise ConcurrentUpdateError(session_id, seq, seq, other_history=True)
                await connection.execute(
                    "INSERT INTO cf_documents VALUES (%s, 'state', %s, %s)"
                    " ON CONFLICT (session_id, kind)"
                    " DO UPDATE SET seq = EXCLUDED.seq, body_json = EXCLUDED.body_json",
                    (session_id, seq, wrap_document(body, digest)),
                )
        except psycopg.Error as error:
            raise self._explain(error) from None

    async def save_calibration(self, session_id: str, calibration: Mapping[str, Any]) -> None:
        await self._save_document(session_id, "calibration", calibration)

    async def save_budget(self, session_id: str, budget: Mapping[str, Any]) -> None:
        await self._save_document(session_id, "budget", budget)

    async def _save_document(self, session_id: str, kind: str, document: Mapping[str, Any]) -> None:
        check_session_id(session_id)
        body = wrap_document(check_document(document, kind))
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                await self._locked_last_seq(connection, session_id)
                await connection.execute(
                    "INSERT INTO cf_documents VALUES (%s, %s, NULL, %s)"
                    " ON CONFLICT (session_id, kind) DO UPDATE SET body_json = EXCLUDED.body_json",
                    (session_id, kind, body),
                )
        except psycopg.Error as error:
            raise self._explain(error) from None

    @staticmethod
    async def _locked_last_seq(connection: psycopg.AsyncConnection[Any], session_id: str) -> int:
        # FOR SHARE: a concurrent delete_session or replacement waits for this write.
        row = await (
            await connection.execute(
                "SELECT last_seq FROM cf_sessions WHERE session_id = %s FOR SHARE", (session_id,)
            )
        ).fetchone()
        if row is None:
            raise StoreError(f"session {session_id!r} does not exist: append a message first")
        return int(row[0])

    async def list_sessions(self) -> list[SessionInfo]:
        await self._ready()
        try:
            async with self._connection() as connection:
                rows = await (
                    await connection.execute(
                        "SELECT s.session_id, s.last_seq, s.generation,"
                        " (SELECT count(*) FROM cf_messages m WHERE m.session_id = s.session_id)"
                        " FROM cf_sessions s ORDER BY s.session_id"
                    )
                ).fetchall()
        except psycopg.Error as error:
            raise self._explain(error) from None
        return [SessionInfo(sid, last, gen, int(count)) for sid, last, gen, count in rows]

    async def delete_session(self, session_id: str) -> bool:
        check_session_id(session_id)
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                deleted = await connection.execute(
                    "DELETE FROM cf_sessions WHERE session_id = %s", (session_id,)
                )
                await connection.execute(
                    "DELETE FROM cf_messages WHERE session_id = %s", (session_id,)
                )
                await connection.execute(
                    "DELETE FROM cf_documents WHERE session_id = %s", (session_id,)
                )
                await forget_session(connection, session_id)
        except psycopg.Error as error:
            raise self._explain(error) from None
        return deleted.rowcount > 0

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
        await self._ready()
        try:
            async with self._connection() as connection, connection.transaction():
                # One snapshot for the statistics and the postings.
                await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return await search_session(connection, session_id, query, limit, skip)
        except psycopg.Error as error:
            raise self._explain(error) from None

    # -- summary records (contextfold.summaries.SummaryStore) -------------------------------

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        await self._ready()
        try:
            async with self._connection() as connection:
                row = await (
                    await connection.execute(
                        "SELECT record_json FROM cf_summaries WHERE covered_hash = %s",
                        (covered_hash,),
                    )
                ).fetchone()
        except psycopg.Error as error:
            raise self._explain(error) from None
        return None if row is None else read_record(row[0], covered_hash)

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        check_record(record)
        text = record_json(record)
        await self._ready()
        try:
            async with self._connection() as connection:
                # ON CONFLICT waits for a concurrent inserter of the same hash to commit;
                # the SELECT (a new statement, a new snapshot) then reads the winner.
                await connection.execute(
                    "INSERT INTO cf_summaries (covered_hash, session_id, record_json)"
                    " VALUES (%s, %s, %s) ON CONFLICT (covered_hash) DO NOTHING",
                    (record.covered_hash, record.session_id, text),
                )
                row = await (
                    await connection.execute(
                        "SELECT record_json FROM cf_summaries WHERE covered_hash = %s",
                        (record.covered_hash,),
                    )
                ).fetchone()
        except psycopg.Error as error:
            raise self._explain(error) from None
        if row is None:
            raise StoreError(f"summary record {record.covered_hash} vanished after its insert")
        return record if row[0] == text else read_record(row[0], record.covered_hash)

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        await self._ready()
        try:
            async with self._connection() as connection:
                if session_id is None:
                    cursor = await connection.execute(
                        "SELECT covered_hash, record_json FROM cf_summaries ORDER BY position"
                    )
                else:  # by the index on (session_id, position): other sessions' rows unread
                    cursor = await connection.execute(
                        "SELECT covered_hash, record_json FROM cf_summaries WHERE session_id = %s"
                        " ORDER BY position",
                        (session_id,),
                    )
                rows = await cursor.fetchall()
        except psycopg.Error as error:
            raise self._explain(error) from None
        return [read_record(text, key) for key, text in rows]

    def _explain(self, error: psycopg.Error) -> StoreError:
        if isinstance(error, psycopg.errors.ReadOnlySqlTransaction) and self.read_only:
            return StoreError(
                f"the PostgreSQL store {self.where} was opened read-only: it can be read, not "
                "written; nothing was written"
            )
        return StoreError(
            f"the PostgreSQL store {self.where} failed ({type(error).__name__}): "
            f"{self._scrub(error)}; nothing was written"
        )
