"""Schema versions of the durable stores, and the forward migrations between them.

Each backend lists its migrations as SQL steps: ``MIGRATIONS[i]`` takes a store from
version ``i`` to ``i + 1``, so a store of any older version is brought up to date by running
the steps after its version, in one transaction. A store newer than this code is refused
(:func:`check_version`): an older worker must never write into a layout it does not know.

History: version 1 held the sessions, the messages and the summary records; version 2 added
the per-session documents (compaction state, calibration, budget decision); version 3 added
each message's classification (``info_json``, NULL for rows written before it: a reader
inspects those messages again, as it always did); version 4 added the counter that made each
message's cost (``cf_messages.cost_counter``, NULL for rows written before it: a reader counts
those messages again), each session's history digest (``cf_sessions.history_sha256``, NULL
for sessions last written before it: a reader computes it from the messages, and the next
state save stores it), and an index of summary records by session (a session's records are
looked up by its id, never by reading every record of the store).
"""

from __future__ import annotations

from contextfold.store.base import StoreSchemaError

__all__ = ["POSTGRES_MIGRATIONS", "SCHEMA_VERSION", "SQLITE_MIGRATIONS", "check_version"]

SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE cf_sessions ("
        " session_id TEXT PRIMARY KEY,"
        " last_seq INTEGER NOT NULL,"
        " generation INTEGER NOT NULL DEFAULT 0)",
        # The log is ordered by (session_id, seq) alone; there is no timestamp to sort by.
        "CREATE TABLE cf_messages ("
        " session_id TEXT NOT NULL,"
        " seq INTEGER NOT NULL,"
        " message_json TEXT NOT NULL,"
        " cost INTEGER NOT NULL,"
        " PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
        # ``position`` keeps insertion order for records(); the hash is the identity.
        "CREATE TABLE cf_summaries ("
        " position INTEGER PRIMARY KEY AUTOINCREMENT,"
        " covered_hash TEXT NOT NULL UNIQUE,"
        " session_id TEXT,"
        " record_json TEXT NOT NULL)",
    ),
    (
        "CREATE TABLE cf_documents ("
        " session_id TEXT NOT NULL,"
        " kind TEXT NOT NULL,"
        " seq INTEGER,"
        " body_json TEXT NOT NULL,"
        " PRIMARY KEY (session_id, kind)) WITHOUT ROWID",
    ),
    ("ALTER TABLE cf_messages ADD COLUMN info_json TEXT",),
    (
        "ALTER TABLE cf_messages ADD COLUMN cost_counter TEXT",
        "ALTER TABLE cf_sessions ADD COLUMN history_sha256 TEXT",
        "CREATE INDEX cf_summaries_by_session ON cf_summaries (session_id, position)",
    ),
)

POSTGRES_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE cf_sessions ("
        " session_id TEXT PRIMARY KEY,"
        " last_seq BIGINT NOT NULL,"
        " generation BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE cf_messages ("
        " session_id TEXT NOT NULL,"
        " seq BIGINT NOT NULL,"
        " message_json TEXT NOT NULL,"
        " cost BIGINT NOT NULL,"
        " PRIMARY KEY (session_id, seq))",
        "CREATE TABLE cf_summaries ("
        " position BIGSERIAL PRIMARY KEY,"
        " covered_hash TEXT NOT NULL UNIQUE,"
        " session_id TEXT,"
        " record_json TEXT NOT NULL)",
    ),
    (
        "CREATE TABLE cf_documents ("
        " session_id TEXT NOT NULL,"
        " kind TEXT NOT NULL,"
        " seq BIGINT,"
        " body_json TEXT NOT NULL,"
        " PRIMARY KEY (session_id, kind))",
    ),
    ("ALTER TABLE cf_messages ADD COLUMN info_json TEXT",),
    (
        "ALTER TABLE cf_messages ADD COLUMN cost_counter TEXT",
        "ALTER TABLE cf_sessions ADD COLUMN history_sha256 TEXT",
        "CREATE INDEX cf_summaries_by_session ON cf_summaries (session_id, position)",
    ),
)

SCHEMA_VERSION = len(SQLITE_MIGRATIONS)
assert len(POSTGRES_MIGRATIONS) == SCHEMA_VERSION, "both backends share one version history"


def check_version(found: int, where: str) -> None:
    """Refuse a store written by a newer contextfold (or with a nonsensical version)."""
    if found > SCHEMA_VERSION:
        raise StoreSchemaError(
            f"{where} has store schema version {found}, newer than this contextfold "
            f"understands ({SCHEMA_VERSION}). It was written by a newer contextfold: upgrade "
            "contextfold here (pip install -U contextfold) rather than letting an older "
            "version write into it."
        )
    if found < 0:
        raise StoreSchemaError(f"{where} has an invalid store schema version {found}")
