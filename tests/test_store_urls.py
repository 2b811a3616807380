"""Store URLs: each form builds its store; anything else is a clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from contextfold.store import MemoryStore, SqliteStore, StoreError, open_store, store_from_url


def test_memory_url() -> None:
    assert isinstance(store_from_url("memory://"), MemoryStore)
    with pytest.raises(StoreError, match="takes nothing"):
        store_from_url("memory://somewhere")


def test_sqlite_urls_relative_and_absolute() -> None:
    relative = store_from_url("sqlite:///agent.db")
    assert isinstance(relative, SqliteStore) and relative.path == Path("agent.db")
    absolute = store_from_url("sqlite:////var/lib/agent/agent.db")
    assert isinstance(absolute, SqliteStore)
    assert absolute.path == Path("/var/lib/agent/agent.db")
    spaced = store_from_url("sqlite:///my%20agent.db")
    assert isinstance(spaced, SqliteStore) and spaced.path == Path("my agent.db")


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("sqlite:///:memory:", "use memory://"),
        ("sqlite:///file::memory:?cache=shared", "query"),
        ("sqlite:///file:agent.db", "use memory://"),
        ("sqlite://", "three slashes"),
        ("sqlite://host/agent.db", "three slashes"),
        ("sqlite:///", "names no file"),
        ("sqlite:///agent.db?mode=ro", "no \\?query"),
        ("mysql://db/agent", "unknown store scheme 'mysql'"),
        ("agent.db", "not a store URL"),
        ("", "non-empty"),
        ("   ", "non-empty"),
    ],
)
def test_bad_urls_are_clear_errors(url: str, complaint: str) -> None:
    with pytest.raises(StoreError, match=complaint) as caught:
        store_from_url(url)
    if "scheme" in complaint or "URL" in complaint:
        assert "sqlite:///" in str(caught.value)  # the message lists the forms that work


def test_a_non_string_url_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="non-empty string"):
        store_from_url(None)  # type: ignore[arg-type]


def test_postgresql_url_builds_a_pool_without_connecting() -> None:
    from contextfold.store.postgres import PostgresStore

    store = store_from_url("postgresql://worker:s3cret@db.example:5432/agents")
    assert isinstance(store, PostgresStore)
    assert "s3cret" not in store.where and "worker:***@" in store.where
    assert isinstance(store_from_url("postgres://db.example/agents"), PostgresStore)


def test_postgresql_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_psycopg(name: str, *args: object) -> object:
        return None if name.startswith("psycopg") else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_psycopg)
    with pytest.raises(StoreError, match=r"pip install 'contextfold\[postgres\]'"):
        store_from_url("postgresql://db.example/agents")


async def test_open_store_opens_at_once(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/agent.db")
    assert (tmp_path / "agent.db").exists()
    await store.close()
    (tmp_path / "picture.db").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    with pytest.raises(StoreError, match="not a SQLite database"):
        await open_store(f"sqlite:///{tmp_path}/picture.db")


@pytest.mark.slow
async def test_an_unreachable_postgresql_server_is_a_clear_error(tmp_path: Path) -> None:
    # A socket directory with no server in it: refused at once, no TCP, no waiting.
    from contextfold.store.postgres import PostgresStore

    store = PostgresStore(f"postgresql:///nothing?host={tmp_path}", timeout=2)
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        await store.open()
    await store.close()
