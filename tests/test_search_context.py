"""`ContextFold.search`: ranked matches among the messages the view does not carry whole,
the same on every backend (memory, SQLite FTS5, a real PostgreSQL), incremental, durable."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextfold import ContextFold
from contextfold.search import SearchHit
from contextfold.store import open_store
from store_support import PostgresServer
from support import SYSTEM, hook_note, human, reply

CITIES = ("Oslo", "Lyon", "Porto", "Gdansk", "Bergen", "Turin", "Malmo", "Leeds")


def lookup(n: int, tool: str, arguments: dict[str, Any], output: str) -> list[dict[str, Any]]:
    call_id = f"call_{n}"
    return [
        {
            "role": "assistant",
            "content": f"Calling {tool}.",
            "tool_calls": [{"id": call_id, "tool": tool, "arguments": arguments}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def listing(seed: int, rows: int = 40) -> str:
    """Bulky tool output of look-alike records (so every window overflows)."""
    return "\n".join(
        f"SHP-{(seed * 7919 + i * 104729) % 90000 + 10000}  {CITIES[(seed + i) % len(CITIES)]}"
        f"  pallets {(seed + i) % 17}  status {'held' if (seed + i) % 3 else 'moving'}"
        for i in range(rows)
    )


def session() -> list[dict[str, Any]]:
    """Three tasks: a customs hold is found (SHP-55501), a supplier's invoice is checked,
    then today's task asks about the held shipment in other words."""
    messages: list[dict[str, Any]] = [SYSTEM]
    messages.append(human("Customs in Rotterdam stopped one of our containers. Find it."))
    n = 0
    for page in range(6):
        messages += lookup(n, "list_shipments", {"page": page}, listing(page))
        n += 1
    found = "SHP-55501 held by customs at Rotterdam, duty 812.40 EUR"
    messages += lookup(n, "get_shipment", {"id": "SHP-55501"}, found)
    n += 1
    messages.append(reply("Found it: SHP-55501 is held by customs; duty 812.40 EUR is unpaid."))
    messages.append(human("Check whether the Arkwright Tools invoice for April was paid."))
    for page in range(6):
        messages += lookup(n, "list_invoices", {"page": page}, listing(100 + page))
        n += 1
    messages.append(reply("The Arkwright Tools invoice INV-7731 was paid on 2 May."))
    messages.append(human("Pay the duty on the container stuck at the port and release it."))
    return messages


async def filled(context: ContextFold, messages: list[dict[str, Any]]) -> ContextFold:
    for message in messages:
        await context.add_message(message)
    await context.get_messages_for_request()  # compacts: the window is far smaller
    return context


QUERY = "Pay the duty on the container stuck at the port and release it."


def ids(hits: list[SearchHit]) -> list[str]:
    return [hit.recall_id for hit in hits]


async def test_the_earlier_finding_is_found_by_description_and_nothing_in_view_comes_back() -> None:
    messages = session()
    context = await filled(ContextFold(max_tokens=3000), messages)
    hits = await context.search(QUERY, limit=5)
    assert hits and all(isinstance(hit, SearchHit) for hit in hits)
    texts = [json.dumps(messages[hit.index]) for hit in hits]
    assert any("SHP-55501" in text for text in texts)  # the held container's id is found
    view = await context.get_messages_for_request()
    assert not {json.dumps(m, sort_keys=True) for m in view} & {
        json.dumps(messages[hit.index], sort_keys=True) for hit in hits
    }
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    for hit in hits:
        assert hit.recall_id == f"r{hit.index}"
        assert hit.role == messages[hit.index]["role"]
        assert hit.snippet and "\n" not in hit.snippet
        # The id reads the message back whole.
        assert await context.recall(hit.recall_id)


async def test_a_message_the_view_carries_whole_is_never_a_hit() -> None:
    messages = session()
    context = await filled(ContextFold(max_tokens=200_000), messages)  # nothing compacted
    assert await context.search(QUERY, limit=5) == []
    assert await context.search("SHP-55501 customs duty", limit=5) == []


async def test_a_message_added_after_a_search_is_found_by_the_next() -> None:
    messages = session()
    context = await filled(ContextFold(max_tokens=3000), messages[:3])
    assert await context.search("kestrel ferry manifest", limit=5) == []
    late = hook_note("Note: the kestrel ferry manifest is MAN-4410.")
    await context.add_message(late)
    rest = [m for m in messages[3:]]
    await filled(context, rest)  # the note leaves the view
    hits = await context.search("kestrel ferry manifest", limit=3)
    assert hits and hits[0].index == 3 and "MAN-4410" in hits[0].snippet


@pytest.mark.parametrize(
    ("query", "limit", "fragment"),
    [
        ("", 5, "search takes a query"),
        (None, 5, "search takes a query"),
        ("the of and", 5, "no word to search by"),
        ("duty", 0, "limit must be"),
        ("duty", 51, "limit must be"),
        ("duty", "5", "limit must be"),
    ],
)
async def test_a_bad_query_or_limit_is_a_clear_value_error(
    query: object, limit: object, fragment: str
) -> None:
    context = await filled(ContextFold(max_tokens=3000), session())
    with pytest.raises(ValueError, match=fragment):
        await context.search(query, limit=limit)  # type: ignore[arg-type]


async def test_a_snippet_carries_a_lone_surrogate_as_the_replacement_character() -> None:
    messages = session()
    messages.insert(2, hook_note("raw bytes of the tachograph: \udcff\udcfe end"))
    context = await filled(ContextFold(max_tokens=3000), messages)
    hits = await context.search("tachograph raw bytes", limit=1)
    assert hits[0].index == 2
    assert "\ufffd" in hits[0].snippet and "\udcff" not in hits[0].snippet
    # Recall still returns it as admitted.
    assert "\udcff" in await context.recall(hits[0].recall_id)


async def test_a_replaced_history_is_searched_afresh() -> None:
    messages = session()
    context = await filled(ContextFold(max_tokens=3000), messages)
    assert await context.search(QUERY, limit=5)
    other = [SYSTEM, human("Plan the picnic."), reply("Sandwiches " * 400), human("And drinks?")]
    await context.set_messages(other)
    await context.get_messages_for_request()
    assert await context.search(QUERY, limit=5) == []
    assert ids(await context.search("sandwiches", limit=5)) in ([], ["r2"])
    await context.clear()
    assert await context.search("sandwiches", limit=5) == []


async def test_a_store_without_an_index_is_searched_through_the_memory_index() -> None:
    plain = await filled(ContextFold(max_tokens=3000), session())
    stored = await filled(
        ContextFold(max_tokens=3000, store="memory://", session_id="m"), session()
    )
    assert ids(await stored.search(QUERY, limit=5)) == ids(await plain.search(QUERY, limit=5))


# -- the same hits on every backend ------------------------------------------------------


@pytest.fixture(scope="module")
def server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


QUERIES = (
    QUERY,
    "Rotterdam customs container",
    "SHP-55501",
    "which invoice was paid",
    "moving pallets Oslo",
    "status held",
)


async def backends(tmp_path: Path, url: str) -> list[ContextFold]:
    return [
        ContextFold(max_tokens=3000),
        ContextFold(max_tokens=3000, store=f"sqlite:///{tmp_path / 's.db'}", session_id="s"),
        ContextFold(max_tokens=3000, store=url, session_id="s"),
    ]


@pytest.mark.slow
async def test_memory_sqlite_and_postgresql_give_the_same_hits(
    tmp_path: Path, server: PostgresServer
) -> None:
    contexts = await backends(tmp_path, server.fresh_database("same_hits"))
    for context in contexts:
        await filled(context, session())
    for query in QUERIES:
        for limit in (1, 5, 20):
            found = [await context.search(query, limit=limit) for context in contexts]
            assert ids(found[0]) == ids(found[1]) == ids(found[2]), query
            for a, b, c in zip(*found, strict=True):
                assert a.score == pytest.approx(b.score) == pytest.approx(c.score)
                assert a.snippet == b.snippet == c.snippet


@pytest.mark.slow
async def test_a_query_of_thousands_of_words_is_searched_by_its_first_terms(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'long.db'}"
    stored = await filled(ContextFold(max_tokens=3000, store=url, session_id="s"), session())
    plain = await filled(ContextFold(max_tokens=3000), session())
    pasted = QUERY + " " + " ".join(f"filler{i}" for i in range(300_000))
    assert ids(await stored.search(pasted)) == ids(await plain.search(pasted))
    assert ids(await plain.search(pasted)) == ids(await plain.search(QUERY))


@pytest.mark.slow
async def test_a_resumed_durable_session_searches_its_stored_index_at_once(
    tmp_path: Path, server: PostgresServer
) -> None:
    urls = [f"sqlite:///{tmp_path / 'r.db'}", server.fresh_database("resumed")]
    for url in urls:
        first = await filled(ContextFold(max_tokens=3000, store=url, session_id="s"), session())
        expected = ids(await first.search(QUERY, limit=5))
        # The store's index answers before any context reads the session back.
        store = await open_store(url)
        stored = await store.search("s", QUERY, 5)
        assert any("SHP-55501" in json.dumps(session()[doc]) for doc, _ in stored)
        assert await store.search("no-such-session", QUERY, 5) == []
        await store.close()
        resumed = ContextFold(max_tokens=3000, store=url, session_id="s")
        assert ids(await resumed.search(QUERY, limit=5)) == expected
        # A replacement re-indexes the session in the same transaction; a clear empties it.
        await resumed.set_messages([SYSTEM, human("Plan the picnic."), reply("Sandwiches " * 900)])
        await resumed.add_message(human("And drinks? " + "lemonade " * 900))
        await resumed.get_messages_for_request()
        assert await resumed.search(QUERY, limit=5) == []
        assert ids(await resumed.search("sandwiches", limit=5)) == ["r2"]
        await resumed.clear()
        assert await resumed.search("sandwiches", limit=5) == []


@pytest.mark.slow
async def test_another_writers_newer_message_is_not_a_hit_until_this_context_has_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    writer = await filled(ContextFold(max_tokens=3000, store=url, session_id="s"), session())
    reader = ContextFold(max_tokens=3000, store=url, session_id="s")
    before = ids(await reader.search("kestrel ferry manifest", limit=5))
    await writer.add_message(hook_note("The kestrel ferry manifest is MAN-4410."))
    assert ids(await reader.search("kestrel ferry manifest", limit=5)) == before == []


# -- a store written before the index existed --------------------------------------------


def downgrade_sqlite(path: Path) -> None:
    """Make a current store look like one written by the version before the search index."""
    connection = sqlite3.connect(path, isolation_level=None)
    for table in ("cf_search",):
        connection.execute(f"DROP TABLE {table}")
    for table in ("cf_search_docs", "cf_search_terms", "cf_search_sessions"):
        connection.execute(f"DROP TABLE {table}")
    connection.execute("UPDATE contextfold_meta SET value = '4' WHERE key = 'schema_version'")
    connection.close()


async def test_a_sqlite_store_of_the_previous_version_has_its_messages_indexed_on_opening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    context = await filled(ContextFold(max_tokens=3000, store=url, session_id="s"), session())
    expected = ids(await context.search(QUERY, limit=5))
    assert expected
    downgrade_sqlite(path)
    store = await open_store(url)  # migrates: the index is built from the stored messages
    assert [doc for doc, _ in await store.search("s", QUERY, 5)]
    await store.close()
    resumed = ContextFold(max_tokens=3000, store=url, session_id="s")
    assert ids(await resumed.search(QUERY, limit=5)) == expected


@pytest.mark.slow
async def test_a_postgresql_store_of_the_previous_version_has_its_messages_indexed_on_opening(
    server: PostgresServer,
) -> None:
    url = server.fresh_database("previous")
    context = await filled(ContextFold(max_tokens=3000, store=url, session_id="s"), session())
    expected = ids(await context.search(QUERY, limit=5))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as raw:
        for table in ("cf_search_docs", "cf_search_terms", "cf_search_sessions"):
            await raw.execute(f"DROP TABLE contextfold.{table}")
        await raw.execute(
            "UPDATE contextfold.contextfold_meta SET value = '4' WHERE key = 'schema_version'"
        )
    resumed = ContextFold(max_tokens=3000, store=url, session_id="s")
    assert ids(await resumed.search(QUERY, limit=5)) == expected
