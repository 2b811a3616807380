"""Stores by URL: ``memory://``, ``sqlite:///path/to/file.db``, ``postgresql://...``.

``store_from_url`` builds the store without touching the disk or the network (so a
synchronous constructor can take a URL); the first operation opens it. ``open_store`` also
opens it, so a bad file or an unreachable server fails at once.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import unquote, urlsplit

from contextfold.store.base import SessionStore, StoreError
from contextfold.store.memory import MemoryStore
from contextfold.store.sqlite import SqliteStore

__all__ = ["open_store", "store_from_url"]

_FORMS = (
    "memory:// (the default, lives as long as the process), "
    "sqlite:///relative/or/absolute/path.db (sqlite:////abs/path.db also works), "
    "postgresql://user:password@host:5432/database"
)


def store_from_url(url: str) -> SessionStore:
    """The store a URL names, not yet opened. Raises :class:`StoreError` for a bad URL."""
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"a store URL must be a non-empty string; use one of: {_FORMS}")
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if not _:
        raise StoreError(f"{url!r} is not a store URL; use one of: {_FORMS}")
    if scheme == "memory":
        if rest:
            raise StoreError(f"memory:// takes nothing after the scheme, got {url!r}")
        return MemoryStore()
    if scheme == "sqlite":
        return SqliteStore(_sqlite_path(url, rest))
    if scheme in ("postgresql", "postgres"):
        if importlib.util.find_spec("psycopg") is None or (
            importlib.util.find_spec("psycopg_pool") is None
        ):
            raise StoreError(
                "a postgresql:// store needs psycopg 3 and psycopg-pool: "
                "pip install 'contextfold[postgres]'"
            )
        from contextfold.store.postgres import PostgresStore

        return PostgresStore(url)
    raise StoreError(f"unknown store scheme {scheme!r} in {url!r}; use one of: {_FORMS}")


async def open_store(url: str) -> SessionStore:
    """The store a URL names, opened: connected, schema checked and migrated."""
    store = store_from_url(url)
    await store.open()
    return store


def _sqlite_path(url: str, rest: str) -> Path:
    # sqlite:///agent.db -> "agent.db" (relative); sqlite:////var/db/agent.db -> absolute,
    # as in SQLAlchemy. A host part (sqlite://host/x) has no meaning for a local file.
    if not rest.startswith("/"):
        raise StoreError(
            f"{url!r}: a SQLite URL has three slashes before its path (sqlite:///agent.db)"
        )
    split = urlsplit(url)
    if split.query or split.fragment:
        raise StoreError(f"{url!r}: a SQLite store URL takes no ?query or #fragment")
    path = unquote(rest[1:])
    if not path:
        raise StoreError(f"{url!r} names no file; use sqlite:///path/to/file.db")
    if path == ":memory:" or path.startswith("file:"):
        raise StoreError(
            f"{url!r}: an in-memory SQLite database is neither durable nor shared between "
            "processes; use memory:// for a store that lives as long as the process"
        )
    return Path(path)
