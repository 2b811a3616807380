"""Store URLs: each form builds its store; anything else is a clear error."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


PASSWORDS = st.text(min_size=0, max_size=12).map(lambda text: f"Z{text}Q")


@settings(max_examples=200, deadline=None)
@given(PASSWORDS)
def test_a_password_is_never_shown_in_any_of_its_places(password: str) -> None:
    """Wherever the URL's syntax puts it, and (four characters or more: shorter ones are not
    searched for in free text, which they would garble) wherever a message repeats it. The
    skeleton has no capital Z or Q, so the password cannot hide in the rest of it."""
    from contextfold.store.conninfo import display, scrub

    encoded = quote(password, safe="")
    for url in (
        f"postgresql://worker:{encoded}@127.0.0.1:5432/agents",
        f"postgresql://127.0.0.1/agents?user=worker&password={encoded}",
        f"postgresql://worker:{encoded}@127.0.0.1/agents?password={encoded}&sslmode=x",
        f"host=127.0.0.1 user=worker password={encoded}",
    ):
        shown = [display(url), scrub(f"failed for {url}", url)]
        if len(password) >= 4:
            shown.append(scrub(f"bad token: {password!r} ({encoded})", url))
        for text in shown:
            assert password not in text and encoded not in text, (url, text)
