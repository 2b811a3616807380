"""The SQLite store's search index: FTS5 over each stored message's search terms.

Every call here runs inside the store's transaction on its worker thread: indexing inside the
append's (or the replacement's) write transaction, so a message is in the index exactly when
it is stored; a search inside one read transaction, so the statistics and the postings it
reads are one snapshot.

Layout (schema version 5, `schema`): ``cf_search_docs`` holds each message's row under the id
``search_key << 32 | position``, so one session's messages are one rowid range and an FTS5
match restricted to it (``rowid BETWEEN``) never reads another session's postings;
``cf_search`` is an FTS5 table over its ``terms`` (external content, ``detail=none``: it
stores which messages hold a term, nothing more), kept in step by two triggers;
``cf_search_terms`` holds each term's document frequency per session and
``cf_search_sessions`` each session's key, message count, terms in all and newest prompt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from contextfold.search import (
    NO_TASK,
    CandidatesRequest,
    DocInfo,
    Request,
    SessionStats,
    StatsRequest,
    TaskDocsRequest,
    rank,
    run_ranking,
)
from contextfold.store.search_rows import (
    Indexer,
    SearchRow,
    SessionIndexState,
    doc_info,
    document_frequencies,
    fts_phrase,
)

__all__ = ["backfill", "forget_session", "index_message", "index_session", "search_session"]

_SHIFT = 32
_POSITIONS = (1 << _SHIFT) - 1
_INSERT_DOC = (
    "INSERT INTO cf_search_docs (id, task_key, kind, length, terms) VALUES (?, ?, ?, ?, ?)"
)
_ADD_DF = (
    "INSERT INTO cf_search_terms (search_key, term, df) VALUES (?, ?, ?)"
    " ON CONFLICT (search_key, term) DO UPDATE SET df = df + excluded.df"
)
_DOC_COLUMNS = "d.id, d.length, d.task_key, d.kind, d.terms"


def _session(connection: sqlite3.Connection, session_id: str) -> tuple[int, SessionIndexState]:
    """The session's search key and index state, its row made if it has none."""
    row = connection.execute(
        "SELECT search_key, docs, total_length, task FROM cf_search_sessions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        key = connection.execute(
            "INSERT INTO cf_search_sessions (session_id) VALUES (?)", (session_id,)
        ).lastrowid
        assert key is not None
        return key, SessionIndexState()
    return row[0], SessionIndexState(row[1], row[2], row[3])


def _write(
    connection: sqlite3.Connection, key: int, rows: list[SearchRow], state: SessionIndexState
) -> None:
    base = key << _SHIFT
    connection.executemany(
        _INSERT_DOC,
        [
            (
                base | row.position,
                base | row.task if row.task != NO_TASK else None,
                row.kind,
                row.length,
                row.text,
            )
            for row in rows
        ],
    )
    frequencies = rows[0].distinct if len(rows) == 1 else None
    if frequencies is not None:
        connection.executemany(_ADD_DF, [(key, term, 1) for term in frequencies])
    else:
        connection.executemany(
            _ADD_DF, [(key, term, df) for term, df in document_frequencies(rows).items()]
        )
    connection.execute(
        "UPDATE cf_search_sessions SET docs = ?, total_length = ?, task = ? WHERE search_key = ?",
        (state.docs, state.total_length, state.task, key),
    )


def index_message(
    connection: sqlite3.Connection, indexer: Indexer, session_id: str, message_json: str
) -> None:
    """Index the message just appended to the session (inside the append's transaction)."""
    key, state = _session(connection, session_id)
    row = indexer.row(message_json, state)
    _write(connection, key, [row], state)


def index_session(
    connection: sqlite3.Connection,
    indexer: Indexer,
    session_id: str,
    messages_json: Iterable[str],
) -> None:
    """Index a session's whole history afresh (a replacement, or the migration that made
    the index): whatever was indexed of it goes first."""
    forget_session(connection, session_id)
    key, state = _session(connection, session_id)
    rows = list(indexer.rows(messages_json, state))
    if rows:
        _write(connection, key, rows, state)


def forget_session(connection: sqlite3.Connection, session_id: str) -> None:
    """Remove a session from the index (its rows, statistics and key)."""
    row = connection.execute(
        "SELECT search_key FROM cf_search_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None:
        return
    key = row[0]
    connection.execute(
        "DELETE FROM cf_search_docs WHERE id BETWEEN ? AND ?",
        (key << _SHIFT, (key << _SHIFT) | _POSITIONS),
    )
    connection.execute("DELETE FROM cf_search_terms WHERE search_key = ?", (key,))
    connection.execute("DELETE FROM cf_search_sessions WHERE search_key = ?", (key,))


def backfill(connection: sqlite3.Connection) -> None:
    """Index every stored session (the migration to the version that added the index)."""
    indexer = Indexer()
    sessions = [row[0] for row in connection.execute("SELECT session_id FROM cf_sessions")]
    for session_id in sessions:
        texts = (
            text
            for (text,) in connection.execute(
                "SELECT message_json FROM cf_messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            )
        )
        index_session(connection, indexer, session_id, list(texts))


def search_session(
    connection: sqlite3.Connection,
    session_id: str,
    query: str,
    limit: int,
    skip: Callable[[int], bool] | None,
) -> list[tuple[int, float]]:
    """`contextfold.search.rank` over the session's index (call in a read transaction)."""
    head = connection.execute(
        "SELECT search_key, docs, total_length, task FROM cf_search_sessions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    if head is None:
        return []
    key, docs, total, task = head
    low, high = key << _SHIFT, (key << _SHIFT) | _POSITIONS

    def info(row: tuple[Any, ...], used: tuple[str, ...]) -> DocInfo:
        doc_id, length, task_key, kind, text = row
        owner = task_key & _POSITIONS if task_key is not None else NO_TASK
        return doc_info(doc_id & _POSITIONS, length, owner, kind, text, used)

    def answer(request: Request) -> Any:
        if isinstance(request, StatsRequest):
            df: dict[str, int] = {}
            if request.terms:
                marks = ",".join("?" * len(request.terms))
                df = dict(
                    connection.execute(
                        f"SELECT term, df FROM cf_search_terms WHERE search_key = ?"
                        f" AND term IN ({marks})",
                        (key, *request.terms),
                    ).fetchall()
                )
            return SessionStats(docs, total, task, df)
        if isinstance(request, CandidatesRequest):
            found: dict[int, tuple[Any, ...]] = {}
            match = (
                f"SELECT {_DOC_COLUMNS} FROM cf_search JOIN cf_search_docs d"
                " ON d.id = cf_search.rowid WHERE cf_search MATCH ?"
                " AND cf_search.rowid BETWEEN ? AND ?"
            )
            if request.terms:
                expression = " OR ".join(fts_phrase(t) for t in request.terms)
                for row in connection.execute(match, (expression, low, high)):
                    found[row[0]] = row
            for term in request.newest:
                newest = connection.execute(
                    match + " ORDER BY cf_search.rowid DESC LIMIT ?",
                    (fts_phrase(term), low, high, request.cap),
                )
                for row in newest:
                    found[row[0]] = row
            return [info(row, request.used) for row in found.values()]
        if isinstance(request, TaskDocsRequest):
            members: dict[int, list[DocInfo]] = {}
            for task_position in request.tasks:
                rows = connection.execute(
                    f"SELECT {_DOC_COLUMNS} FROM cf_search_docs d WHERE d.task_key = ?"
                    " ORDER BY d.id DESC LIMIT ?",
                    ((key << _SHIFT) | task_position, request.per_task),
                )
                members[task_position] = [info(row, request.used) for row in rows]
            return members
        raise TypeError(f"unknown search request {request!r}")  # pragma: no cover

    return run_ranking(rank(query, limit, skip), answer)
