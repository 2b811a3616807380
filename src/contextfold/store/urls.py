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
from contextfold.store.conninfo import scrub
from contextfold.store.memory import MemoryStore
from contextfold.store.sqlite import SqliteStore

__all__ = ["open_store", "store_from_url"]

_FORMS = (
    "memory:// (the default, lives as long as the process), "
    "sqlite:///relative/or/absolute/path.db (sqlite:////abs/path.db also works), "
    "postgresql://user:password@host:5432/database"
)


def store_from_url(url: str, *, read_only: bool = False) -> SessionStore:
    """The store a URL names, not yet opened. Raises :class:`StoreError` for a bad URL.

    ``read_only``: the store only reads (what the inspection commands use): it never
    creates, migrates or writes anything, and a missing store is an error.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"a store URL must be a non-empty string; use one of: {_FORMS}")
    if "\x00" in url:
        raise StoreError("a store URL may not contain a NUL character")
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    shown = scrub(url, url)  # a URL in a message never shows its password
    if not _:
        raise StoreError(f"{shown!r} is not a store URL; use one of: {_FORMS}")
    if scheme == "memory":
        if rest:
            raise StoreError(f"memory:// takes nothing after the scheme, got {shown!r}")
        if read_only:
            raise StoreError(
                "memory:// holds nothing outside the process that made it: there is nothing "
                "to read; give a sqlite:/// or postgresql:// URL"
            )
        return MemoryStore()
    if scheme == "sqlite":
        return SqliteStore(_sqlite_path(url, rest), read_only=read_only)
    if scheme in ("postgresql", "postgres"):
        if not _is_text(url):
            raise StoreError(
                "a postgresql:// URL must be valid text (it holds a lone surrogate, "
                "which no server can be sent)"
            )
        if importlib.util.find_spec("psycopg") is None or (
            importlib.util.find_spec("psycopg_pool") is None
        ):
            raise StoreError(
                "a postgresql:// store needs psycopg 3 and psycopg-pool: "
                "pip install 'contextfold[postgres]'"
            )
        from contextfold.store.postgres import PostgresStore

        return PostgresStore(url, read_only=read_only)
    raise StoreError(f"unknown store scheme {scheme!r} in {shown!r}; use one of: {_FORMS}")


async def open_store(url: str, *, read_only: bool = False) -> SessionStore:
    """The store a URL names, opened: connected, schema checked and migrated (only checked,
    when ``read_only``)."""
    store = store_from_url(url, read_only=read_only)
    try:
        await store.open()
    except BaseException:
        await store.close()
        raise
    return store


def _is_text(url: str) -> bool:
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
