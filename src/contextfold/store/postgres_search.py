"""The PostgreSQL store's search index: full-text search over each stored message's terms.

Every call here runs inside the store's transaction: indexing inside the append's (or the
replacement's), so a message is in the index exactly when it is stored; a search inside one
REPEATABLE READ transaction, so the statistics and the postings it reads are one snapshot.

Layout (schema version 5, `schema`): ``cf_search_docs`` holds each message's row (its
session's search key and its position, task, kind, terms) and a ``tsvector`` of its distinct
terms, each written as ``<search_key>:<term>`` and built with ``array_to_tsvector`` (the
terms are contextfold's own, never PostgreSQL's parser's), under a GIN index: a match reads
only the postings of the session's own lexemes. ``cf_search_terms`` holds each term's
document frequency per session, ``cf_search_sessions`` each session's key, message count,
terms in all and newest prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from contextfold.search import (
    CandidatesRequest,
    DocInfo,
    DocKind,
    Request,
    SessionStats,
    StatsRequest,
    TaskDocsRequest,
    rank,
    run_ranking_async,
)
from contextfold.store.search_rows import (
    SEPARATOR,
    Indexer,
    SearchRow,
    SessionIndexState,
    doc_info,
    document_frequencies,
)

__all__ = ["backfill", "forget_session", "index_message", "index_messages", "search_session"]

Connection = psycopg.AsyncConnection[Any]
_DOC_COLUMNS = "position, length, task, kind, terms"


async def _session(connection: Connection, session_id: str) -> tuple[int, SessionIndexState]:
    """The session's search key and index state, its row made if it has none; the row is
    locked until the transaction ends."""
    await connection.execute(
        "INSERT INTO cf_search_sessions (session_id) VALUES (%s) ON CONFLICT DO NOTHING",
        (session_id,),
    )
    row = await (
        await connection.execute(
            "SELECT search_key, docs, total_length, task FROM cf_search_sessions"
            " WHERE session_id = %s FOR UPDATE",
            (session_id,),
        )
    ).fetchone()
    assert row is not None
    return int(row[0]), SessionIndexState(int(row[1]), int(row[2]), int(row[3]))


def _lexemes(key: int, row: SearchRow) -> str:
    return SEPARATOR.join(f"{key}:{term}" for term in row.distinct)


# One append's indexing in one statement (one round trip): the session's row moves on (made
# if it has none) and gives the message its position and task, then the message's row and its
# terms' document frequencies are written.
_INDEX_ONE = """
WITH s AS (
  INSERT INTO cf_search_sessions AS c (session_id, docs, total_length, task)
  VALUES (%(session)s, 1, %(length)s, CASE WHEN %(prompt)s THEN 0 ELSE -1 END)
  ON CONFLICT (session_id) DO UPDATE SET
    docs = c.docs + 1,
    total_length = c.total_length + EXCLUDED.total_length,
    task = CASE WHEN %(prompt)s THEN c.docs ELSE c.task END
  RETURNING search_key, docs - 1 AS position, task
), d AS (
  INSERT INTO cf_search_docs (search_key, position, task, kind, length, terms, lexemes)
  SELECT s.search_key, s.position, s.task, %(kind)s, %(length)s, %(terms)s,
    array_to_tsvector(ARRAY(SELECT s.search_key || ':' || t FROM unnest(%(distinct)s::text[]) t))
  FROM s
)
INSERT INTO cf_search_terms (search_key, term, df)
SELECT s.search_key, t, 1 FROM s, unnest(%(distinct)s::text[]) t
ON CONFLICT (search_key, term) DO UPDATE SET df = cf_search_terms.df + 1
"""


async def index_message(
    connection: Connection, indexer: Indexer, session_id: str, message_json: str
) -> None:
    """Index the message just appended to the session (inside the append's transaction)."""
    terms, kind = indexer.document(message_json)
    await connection.execute(
        _INDEX_ONE,
        {
            "session": session_id,
            "length": len(terms),
            "prompt": kind == DocKind.PROMPT,
            "kind": int(kind),
            "terms": SEPARATOR.join(terms),
            "distinct": list(dict.fromkeys(terms)),
        },
    )


async def index_messages(
    connection: Connection,
    indexer: Indexer,
    session_id: str,
    messages_json: Sequence[str],
    *,
    replace: bool = False,
) -> None:
    """Index messages just appended to the session (inside the append's transaction); with
    ``replace``, the session's whole new history, whatever was indexed of it going first."""
    if replace:
        await forget_session(connection, session_id)
    if not messages_json and not replace:
        return
    key, state = await _session(connection, session_id)
    rows = list(indexer.rows(messages_json, state))
    if rows:
        await connection.execute(
            "INSERT INTO cf_search_docs"
            " (search_key, position, task, kind, length, terms, lexemes)"
            " SELECT %s, r.position, r.task, r.kind, r.length, r.terms,"
            " array_to_tsvector(string_to_array(r.lexemes, ' '))"
            " FROM unnest(%s::bigint[], %s::bigint[], %s::smallint[], %s::int[], %s::text[],"
            " %s::text[]) AS r(position, task, kind, length, terms, lexemes)",
            (
                key,
                [row.position for row in rows],
                [row.task for row in rows],
                [row.kind for row in rows],
                [row.length for row in rows],
                [row.text for row in rows],
                [_lexemes(key, row) for row in rows],
            ),
        )
        frequencies = document_frequencies(rows)
        if frequencies:
            await connection.execute(
                "INSERT INTO cf_search_terms (search_key, term, df)"
                " SELECT %s, t.term, t.df FROM unnest(%s::text[], %s::bigint[]) AS t(term, df)"
                " ON CONFLICT (search_key, term)"
                " DO UPDATE SET df = cf_search_terms.df + EXCLUDED.df",
                (key, list(frequencies), list(frequencies.values())),
            )
    await connection.execute(
        "UPDATE cf_search_sessions SET docs = %s, total_length = %s, task = %s"
        " WHERE search_key = %s",
        (state.docs, state.total_length, state.task, key),
    )


async def forget_session(connection: Connection, session_id: str) -> None:
    """Remove a session from the index (its rows, statistics and key)."""
    row = await (
        await connection.execute(
            "DELETE FROM cf_search_sessions WHERE session_id = %s RETURNING search_key",
            (session_id,),
        )
    ).fetchone()
    if row is None:
        return
    await connection.execute("DELETE FROM cf_search_docs WHERE search_key = %s", (row[0],))
    await connection.execute("DELETE FROM cf_search_terms WHERE search_key = %s", (row[0],))


async def backfill(connection: Connection) -> None:
    """Index every stored session (the migration to the version that added the index)."""
    indexer = Indexer()
    sessions = await (await connection.execute("SELECT session_id FROM cf_sessions")).fetchall()
    for (session_id,) in sessions:
        texts = await (
            await connection.execute(
                "SELECT message_json FROM cf_messages WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
        ).fetchall()
        await index_messages(
            connection, indexer, session_id, [text for (text,) in texts], replace=True
        )


async def search_session(
    connection: Connection,
    session_id: str,
    query: str,
    limit: int,
    skip: Callable[[int], bool] | None,
) -> list[tuple[int, float]]:
    """`contextfold.search.rank` over the session's index (call in a transaction)."""
    head = await (
        await connection.execute(
            "SELECT search_key, docs, total_length, task FROM cf_search_sessions"
            " WHERE session_id = %s",
            (session_id,),
        )
    ).fetchone()
    if head is None:
        return []
    key, docs, total, task = (int(value) for value in head)

    def infos(rows: list[tuple[Any, ...]], used: tuple[str, ...]) -> list[DocInfo]:
        return [
            doc_info(int(position), length, int(owner), kind, text, used)
            for position, length, owner, kind, text in rows
        ]

    def query_of(terms: Sequence[str]) -> str:
        # Each lexeme quoted: a term holds no quote or backslash, so it is taken as written.
        return " | ".join(f"'{key}:{term}'" for term in terms)

    async def answer(request: Request) -> Any:
        if isinstance(request, StatsRequest):
            rows = await (
                await connection.execute(
                    "SELECT term, df FROM cf_search_terms WHERE search_key = %s AND term = ANY(%s)",
                    (key, list(request.terms)),
                )
            ).fetchall()
            return SessionStats(docs, total, task, {term: int(df) for term, df in rows})
        if isinstance(request, CandidatesRequest):
            found: dict[int, tuple[Any, ...]] = {}
            if request.terms:
                rows = await (
                    await connection.execute(
                        f"SELECT {_DOC_COLUMNS} FROM cf_search_docs WHERE lexemes @@ %s::tsquery",
                        (query_of(request.terms),),
                    )
                ).fetchall()
                found.update((row[0], row) for row in rows)
            for term in request.newest:
                rows = await (
                    await connection.execute(
                        f"SELECT {_DOC_COLUMNS} FROM cf_search_docs"
                        " WHERE search_key = %s AND lexemes @@ %s::tsquery"
                        " ORDER BY position DESC LIMIT %s",
                        (key, query_of((term,)), request.cap),
                    )
                ).fetchall()
                found.update((row[0], row) for row in rows)
            return infos(list(found.values()), request.used)
        if isinstance(request, TaskDocsRequest):
            rows = await (
                await connection.execute(
                    f"SELECT d.{_DOC_COLUMNS.replace(', ', ', d.')}"
                    " FROM unnest(%s::bigint[]) AS t(task) CROSS JOIN LATERAL ("
                    f"  SELECT {_DOC_COLUMNS} FROM cf_search_docs"
                    "   WHERE search_key = %s AND task = t.task"
                    "   ORDER BY position DESC LIMIT %s) AS d",
                    (list(request.tasks), key, request.per_task),
                )
            ).fetchall()
            members: dict[int, list[DocInfo]] = {t: [] for t in request.tasks}
            for info in infos(rows, request.used):
                members[info.task].append(info)
            return members
        raise TypeError(f"unknown search request {request!r}")  # pragma: no cover

    return await run_ranking_async(rank(query, limit, skip), answer)
