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
looked up by its id, never by reading every record of the store); version 5 added the
full-text search index of every session's messages (`contextfold.store.search_rows`): per
session its statistics (``cf_search_sessions``), each message's search terms, kind and task
(``cf_search_docs``) and each term's document frequency (``cf_search_terms``), with SQLite's
FTS5 table ``cf_search`` (external content: ``cf_search_docs``, kept in step by triggers) or a
PostgreSQL ``tsvector`` column under a GIN index. The step's SQL makes the tables; the stores
then index every message already stored, in the same transaction (`search_rows.Indexer`:
the terms come from contextfold's own tokenizer, which SQL cannot run).

Ownership (DESIGN invariant 9: contextfold never writes into a database or file it did not
create). The version lives in contextfold's own table, ``contextfold_meta`` (key
``schema_version``), never in a table of a generic name another application may also have.
A SQLite store is recognised by its file header (``PRAGMA application_id``, "cfld"), read
before anything is written; a PostgreSQL store lives in a schema of its own,
``contextfold``, and nothing outside that schema is ever written.

Stores written before ``contextfold_meta`` kept their version in a ``schema_version`` table
beside the ``cf_*`` tables (:data:`LEGACY_VERSION_TABLE`). Such a store is still ours when it
carries our application id (SQLite: every version stamped it in the transaction that
created the tables) or, on PostgreSQL, when the schema holds exactly our table set at the
version its ``schema_version`` names (:func:`legacy_version`). It is taken over on its
first read-write opening: SQLite gains ``contextfold_meta`` and keeps ``schema_version`` in
step (so an older contextfold still refuses a store newer than it); PostgreSQL's ``cf_*``
tables move into the ``contextfold`` schema and the old ``schema_version`` table is left
where it was, unread and unwritten (another application may own a table of that name).
"""

from __future__ import annotations

from contextfold.store.base import StoreSchemaError

__all__ = [
    "LEGACY_DATA_TABLES",
    "LEGACY_LAST_VERSION",
    "LEGACY_VERSION_TABLE",
    "META_TABLE",
    "META_VERSION_KEY",
    "POSTGRES_MIGRATIONS",
    "POSTGRES_SCHEMA",
    "SCHEMA_VERSION",
    "SEARCH_INDEX_VERSION",
    "SQLITE_MIGRATIONS",
    "check_version",
    "legacy_version",
    "meta_statements",
    "read_meta_version",
]

# contextfold's own table: one row per key; ``schema_version`` is the layout's version.
META_TABLE = "contextfold_meta"
META_VERSION_KEY = "schema_version"
# The PostgreSQL schema a store lives in; nothing outside it is ever written.
POSTGRES_SCHEMA = "contextfold"
# Where stores written before contextfold_meta kept their version, and the last version
# written that way.
LEGACY_VERSION_TABLE = "schema_version"
LEGACY_LAST_VERSION = 3

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
    (
        "CREATE TABLE cf_search_sessions ("
        " search_key INTEGER PRIMARY KEY AUTOINCREMENT,"
        " session_id TEXT NOT NULL UNIQUE,"
        " docs INTEGER NOT NULL DEFAULT 0,"
        " total_length INTEGER NOT NULL DEFAULT 0,"
        " task INTEGER NOT NULL DEFAULT -1)",
        # id = search_key << 32 | position: a session's messages are one rowid range, which
        # FTS5 restricts a match to without reading other sessions' postings.
        "CREATE TABLE cf_search_docs ("
        " id INTEGER PRIMARY KEY,"
        " task_key INTEGER,"
        " kind INTEGER NOT NULL,"
        " length INTEGER NOT NULL,"
        " terms TEXT NOT NULL)",
        "CREATE INDEX cf_search_docs_by_task ON cf_search_docs (task_key)"
        " WHERE task_key IS NOT NULL",
        "CREATE TABLE cf_search_terms ("
        " search_key INTEGER NOT NULL,"
        " term TEXT NOT NULL,"
        " df INTEGER NOT NULL,"
        " PRIMARY KEY (search_key, term)) WITHOUT ROWID",
        # Each term is one token: the ascii tokenizer splits on ASCII punctuation only, and
        # the separators inside an identifier are token characters here.
        "CREATE VIRTUAL TABLE cf_search USING fts5(terms, content='cf_search_docs',"
        " content_rowid='id', tokenize=\"ascii tokenchars '-_./:#'\", detail='none',"
        " columnsize=0)",
        "CREATE TRIGGER cf_search_docs_added AFTER INSERT ON cf_search_docs BEGIN"
        " INSERT INTO cf_search (rowid, terms) VALUES (new.id, new.terms); END",
        "CREATE TRIGGER cf_search_docs_removed AFTER DELETE ON cf_search_docs BEGIN"
        " INSERT INTO cf_search (cf_search, rowid, terms) VALUES ('delete', old.id, old.terms);"
        " END",
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
    (
        "CREATE TABLE cf_search_sessions ("
        " search_key BIGSERIAL PRIMARY KEY,"
        " session_id TEXT NOT NULL UNIQUE,"
        " docs BIGINT NOT NULL DEFAULT 0,"
        " total_length BIGINT NOT NULL DEFAULT 0,"
        " task BIGINT NOT NULL DEFAULT -1)",
        # lexemes: the message's distinct terms, each as '<search_key>:<term>', so a match
        # reads only this session's postings.
        "CREATE TABLE cf_search_docs ("
        " search_key BIGINT NOT NULL,"
        " position BIGINT NOT NULL,"
        " task BIGINT NOT NULL,"
        " kind SMALLINT NOT NULL,"
        " length INTEGER NOT NULL,"
        " terms TEXT NOT NULL,"
        " lexemes tsvector NOT NULL,"
        " PRIMARY KEY (search_key, position))",
        "CREATE INDEX cf_search_docs_lexemes ON cf_search_docs USING gin (lexemes)",
        "CREATE INDEX cf_search_docs_by_task ON cf_search_docs (search_key, task, position)",
        "CREATE TABLE cf_search_terms ("
        " search_key BIGINT NOT NULL,"
        " term TEXT NOT NULL,"
        " df BIGINT NOT NULL,"
        " PRIMARY KEY (search_key, term))",
    ),
)

# The version that added the search index: a store migrated from before it has its stored
# messages indexed in the migration's transaction.
SEARCH_INDEX_VERSION = 5

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


def meta_statements(version: int, placeholder: str) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """Create contextfold's own table if needed and record ``version`` in it, as
    (statement, parameters) pairs; ``placeholder`` is the driver's (``?`` or ``%s``)."""
    return (
        (
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            (),
        ),
        (f"DELETE FROM {META_TABLE} WHERE key = {placeholder}", (META_VERSION_KEY,)),
        (
            f"INSERT INTO {META_TABLE} (key, value) VALUES ({placeholder}, {placeholder})",
            (META_VERSION_KEY, str(version)),
        ),
    )


def read_meta_version(value: object, where: str) -> int:
    """The version ``contextfold_meta`` holds (its text form), or a clear error."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise StoreSchemaError(
        f"{where}: its {META_TABLE} table holds no valid schema version ({value!r:.40}); "
        "the store is damaged: restore it from a backup"
    )


# The columns of the cf_* tables at each version of the layout that kept its version in
# ``schema_version``: how such a store is recognised as ours by its tables alone.
_LEGACY_TABLES: dict[str, tuple[str, ...]] = {
    "cf_sessions": ("session_id", "last_seq", "generation"),
    "cf_messages": ("session_id", "seq", "message_json", "cost"),
    "cf_summaries": ("position", "covered_hash", "session_id", "record_json"),
}
_LEGACY_DOCUMENTS = ("session_id", "kind", "seq", "body_json")
LEGACY_DATA_TABLES = ("cf_sessions", "cf_messages", "cf_summaries", "cf_documents")


def legacy_version(columns: dict[str, tuple[str, ...]], stored: object) -> int | None:
    """The version of a store written before ``contextfold_meta``, or None when these tables
    are not one (``columns``: table name -> its columns in order; ``stored``: the largest
    version its ``schema_version`` holds).

    Recognised only when the version is one such a store could have (1 to 3) and the cf_*
    tables are exactly those of that version: a table of another application that merely
    shares a name never passes.
    """
    if columns.get(LEGACY_VERSION_TABLE) != ("version",):
        return None
    if isinstance(stored, bool) or not isinstance(stored, int):
        return None
    if not 1 <= stored <= LEGACY_LAST_VERSION:
        return None
    expected = dict(_LEGACY_TABLES)
    if stored >= 2:
        expected["cf_documents"] = _LEGACY_DOCUMENTS
    if stored >= 3:
        expected["cf_messages"] = (*expected["cf_messages"], "info_json")
    found = {name: cols for name, cols in columns.items() if name in LEGACY_DATA_TABLES}
    return stored if found == expected else None
