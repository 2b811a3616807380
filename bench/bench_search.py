"""Search recall at scale: one query among 100,000 messages, and what indexing costs.

Builds a history of agent-like messages (tool results listing records with look-alike ids,
user asks, assistant calls), indexes it with `contextfold.search.MemorySearchIndex`, and times
queries by description (no value in them) against a naive baseline in the same run: a scan
that scores every message by how many query words it holds, as a search without an index
would. Then the same history in a SQLite store (FTS5) and in a PostgreSQL store (full-text
search; a throwaway server from the machine's binaries, as bench_store.py starts it),
written as one session (the store indexes it in the write's transaction: the index column
is then the write and the index per message), the same queries through the store's own
search, and single durable appends to that session (each indexed in its own transaction).
Prints medians; the goal line is a query under 50 ms at 100,000 messages on every backend.

    uv run python bench/bench_search.py [--sizes 10000,100000] [--queries 50] [--no-stores]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from contextfold.search import MemorySearchIndex, searchable_text, terms
from contextfold.store import open_store

ROOT = Path(__file__).resolve().parent.parent

NOUNS = [
    "order",
    "invoice",
    "ticket",
    "shipment",
    "refund",
    "booking",
    "payment",
    "account",
    "contract",
    "parcel",
]
STATES = ["open", "closed", "pending", "shipped", "cancelled", "overdue", "disputed", "settled"]
GOAL_MS = 50.0


def _names(rng: random.Random, count: int) -> list[str]:
    """Made-up proper names from syllables: the many rare words real tool output holds."""
    syllables = [
        "ka",
        "lo",
        "mi",
        "ren",
        "sa",
        "tor",
        "vi",
        "bel",
        "dan",
        "fen",
        "gri",
        "hol",
        "jun",
        "kes",
        "lim",
        "nor",
        "pra",
        "sel",
        "tam",
        "ul",
    ]
    return sorted(
        {
            "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))).title()
            for _ in range(count)
        }
    )


_VOCABULARY = random.Random(3)
CITIES = _names(_VOCABULARY, 300)
CUSTOMERS = _names(_VOCABULARY, 4000)


def message(rng: random.Random, n: int) -> dict:
    kind = n % 3
    if kind == 0:
        noun, city = rng.choice(NOUNS), rng.choice(CITIES)
        return {
            "role": "user",
            "content": f"Check the {noun} status for {rng.choice(CUSTOMERS)} in {city}.",
        }
    if kind == 1:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {
                        "name": f"find_{rng.choice(NOUNS)}",
                        "arguments": f'{{"city": "{rng.choice(CITIES)}", "page": {n % 7}}}',
                    },
                }
            ],
        }
    rows = [
        f"{rng.choice(NOUNS).upper()[:3]}-{rng.randrange(10**6):06d} {rng.choice(CUSTOMERS)} "
        f"{rng.choice(CITIES)} {rng.choice(STATES)} total {rng.randrange(10**5) / 100:.2f} EUR"
        for _ in range(8)
    ]
    return {"role": "tool", "tool_call_id": f"call_{n - 1}", "content": "\n".join(rows)}


def naive_search(texts: list[str], query: str, limit: int = 5) -> list[int]:
    wanted = set(terms(query))
    scored = [(len(wanted & set(terms(text))), i) for i, text in enumerate(texts)]
    return [i for score, i in sorted(scored, reverse=True)[:limit] if score]


def load_server_helper() -> ModuleType:
    """tests/store_support.py, which knows how to start a throwaway PostgreSQL."""
    spec = importlib.util.spec_from_file_location(
        "_store_support", ROOT / "tests" / "store_support.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(search: Callable[[str], Any], queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        times.append((time.perf_counter() - started) * 1000)
    return times


APPENDS = 100  # single appends timed after the bulk write


async def store_lines(
    url: str, messages: list[dict[str, Any]], queries: list[str], hidden: set[int]
) -> tuple[float, list[float], float]:
    """Write ``messages`` as one session (indexed in the write's transaction), time the
    store's own search, then single durable appends to that session, each indexed in its
    transaction: (seconds to write and index, query times in ms, append p50 in ms)."""
    store = await open_store(url)
    rows = [(json.dumps(m, ensure_ascii=False), 10) for m in messages]
    started = time.perf_counter()
    seq = await store.append_many("bench", 0, rows)
    written = time.perf_counter() - started
    await store.search("bench", queries[0], 5, skip=hidden.__contains__)  # warm the cache
    times = []
    for query in queries:
        started = time.perf_counter()
        await store.search("bench", query, 5, skip=hidden.__contains__)
        times.append((time.perf_counter() - started) * 1000)
    rng = random.Random(11)
    appends = []
    for n in range(APPENDS):
        text = json.dumps(message(rng, len(messages) + n), ensure_ascii=False)
        started = time.perf_counter()
        seq = await store.append("bench", seq, text, 10)
        appends.append((time.perf_counter() - started) * 1000)
    await store.close()
    return written, times, statistics.median(appends)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--no-stores", action="store_true", help="the memory index only")
    parser.add_argument("--no-postgres", action="store_true", help="no PostgreSQL lines")
    args = parser.parse_args()
    rng = random.Random(7)
    queries = [
        f"the {rng.choice(STATES)} {rng.choice(NOUNS)} of {rng.choice(CUSTOMERS)} in "
        f"{rng.choice(CITIES)}: what was its total?"
        for _ in range(args.queries)
    ]
    server = None
    if not args.no_stores and not args.no_postgres:
        helper = load_server_helper()
        reason = helper.postgres_unavailable()
        if reason:
            print(f"PostgreSQL skipped: {reason}")
        else:
            server = helper.PostgresServer("bench").start()
    workdir = Path(tempfile.mkdtemp(prefix="cf-bench-search-"))
    print(f"{'backend':>10} {'messages':>10} {'index, per msg':>15} {'query p50':>10} "
          f"{'query max':>10} {'naive p50':>10} {'ratio':>7} {'append p50':>11}")  # fmt: skip
    worst: dict[str, float] = {}
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            messages = [message(rng, n) for n in range(size)]
            texts = [searchable_text(m) for m in messages]
            index = MemorySearchIndex()
            started = time.perf_counter()
            index.catch_up(enumerate(messages))
            per_message_us = (time.perf_counter() - started) / size * 1e6
            hidden = set(range(size - 40, size))  # the view: the newest messages
            naive = timed(partial(naive_search, texts, limit=5), queries[:5])
            naive_p50 = statistics.median(naive)
            memory = partial(index.search, limit=5, skip=hidden.__contains__)
            lines = {"memory": (per_message_us, timed(memory, queries), None)}
            if not args.no_stores:
                urls = {"sqlite": f"sqlite:///{workdir}/search-{size}.db"}
                if server is not None:
                    urls["postgresql"] = server.fresh_database(f"search_{size}")
                for name, url in urls.items():
                    written, times, append = asyncio.run(
                        store_lines(url, messages, queries, hidden)
                    )
                    lines[name] = (written / size * 1e6, times, append)
            for name, (per_message, times, append) in lines.items():
                p50 = statistics.median(times)
                if size >= 100_000:
                    worst[name] = max(worst.get(name, 0.0), p50)
                appended = f"{append:>8.2f} ms" if append is not None else f"{'-':>11}"
                print(
                    f"{name:>10} {size:>10,} {per_message:>12.1f} µs {p50:>7.2f} ms "
                    f"{max(times):>7.2f} ms {naive_p50:>7.0f} ms {naive_p50 / p50:>6.0f}x "
                    f"{appended}"
                )
    finally:
        if server is not None:
            server.stop()
        for leftover in workdir.iterdir():
            leftover.unlink()
        workdir.rmdir()
    for name, p50 in worst.items():
        verdict = "PASS" if p50 < GOAL_MS else "FAIL"
        print(
            f"{verdict}: {name}: a search at 100,000 messages takes {p50:.1f} ms "
            f"(goal < {GOAL_MS:.0f} ms)"
        )


if __name__ == "__main__":
    main()
