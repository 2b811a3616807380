"""Durable sessions: the store interface and its three implementations.

- :mod:`~contextfold.store.base`: :class:`SessionStore`, the stored shapes, the errors
  (:class:`StoreError`, :class:`ConcurrentUpdateError`, :class:`StoreSchemaError`) and
  :func:`append_at_end` (reload-and-retry for independent appends), and the history digest
  (:func:`history_digest`, :func:`state_describes`) a saved state is checked against.
- :mod:`~contextfold.store.memory`: :class:`MemoryStore`, the default.
- :mod:`~contextfold.store.sqlite`: :class:`SqliteStore`, one file, WAL + synchronous=FULL;
  :mod:`~contextfold.store.sqlite_open` recognises the file as contextfold's before anything
  is written to it, and opens a store that cannot be written for reading.
- ``contextfold.store.postgres``: ``PostgresStore`` for a fleet of workers (needs the
  ``contextfold[postgres]`` extra; imported only when used); ``postgres_open`` finds or makes
  its own ``contextfold`` schema, :mod:`~contextfold.store.conninfo` keeps passwords out of
  messages.
- :mod:`~contextfold.store.schema`: the tables, their versions and migrations, in one place.
- :mod:`~contextfold.store.urls`: :func:`store_from_url` / :func:`open_store`.

Every store is also a :class:`contextfold.summaries.SummaryStore`.
"""

from __future__ import annotations

from contextfold.store.base import (
    HISTORY_GENESIS,
    ConcurrentUpdateError,
    SessionInfo,
    SessionStore,
    StoredMessage,
    StoredSession,
    StoredState,
    StoreError,
    StoreSchemaError,
    append_at_end,
    history_digest,
    state_describes,
)
from contextfold.store.memory import MemoryStore
from contextfold.store.schema import SCHEMA_VERSION
from contextfold.store.sqlite import SqliteStore
from contextfold.store.urls import open_store, store_from_url

__all__ = [
    "HISTORY_GENESIS",
    "SCHEMA_VERSION",
    "ConcurrentUpdateError",
    "MemoryStore",
    "SessionInfo",
    "SessionStore",
    "SqliteStore",
    "StoreError",
    "StoreSchemaError",
    "StoredMessage",
    "StoredSession",
    "StoredState",
    "append_at_end",
    "history_digest",
    "open_store",
    "state_describes",
    "store_from_url",
]
