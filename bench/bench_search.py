"""Search recall at scale: one query among 100,000 messages, and what indexing costs.

Builds a history of agent-like messages (tool results listing records with look-alike ids,
user asks, assistant calls), indexes it with `contextfold.search.MemorySearchIndex`, and times
queries by description (no value in them) against a naive baseline in the same run: a scan
that scores every message by how many query words it holds, as a search without an index
would. Prints medians; the goal line is a query under 50 ms at 100,000 messages.

    uv run python bench/bench_search.py [--sizes 10000,100000] [--queries 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from contextfold.search import MemorySearchIndex, searchable_text, terms

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


def naive_search(texts: list[str], query: str, limit: int) -> list[int]:
    wanted = set(terms(query))
    scored = [(len(wanted & set(terms(text))), i) for i, text in enumerate(texts)]
    return [i for score, i in sorted(scored, reverse=True)[:limit] if score]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(7)
    queries = [
        f"the {rng.choice(STATES)} {rng.choice(NOUNS)} of {rng.choice(CUSTOMERS)} in "
        f"{rng.choice(CITIES)}: what was its total?"
        for _ in range(args.queries)
    ]
    print(f"{'messages':>10} {'index, per msg':>15} {'query p50':>10} {'query max':>10} "
          f"{'naive p50':>10} {'ratio':>7}")  # fmt: skip
    worst = 0.0
    for size in (int(s) for s in args.sizes.split(",")):
        texts = [searchable_text(message(rng, n)) for n in range(size)]
        index = MemorySearchIndex()
        started = time.perf_counter()
        index.catch_up(enumerate(texts))
        per_message_us = (time.perf_counter() - started) / size * 1e6
        hidden = set(range(size - 40, size))  # the view: the newest messages
        times = []
        for query in queries:
            started = time.perf_counter()
            index.search(query, 5, skip=hidden.__contains__)
            times.append((time.perf_counter() - started) * 1000)
        naive = []
        for query in queries[:5]:
            started = time.perf_counter()
            naive_search(texts, query, 5)
            naive.append((time.perf_counter() - started) * 1000)
        p50, naive_p50 = statistics.median(times), statistics.median(naive)
        worst = max(worst, p50) if size >= 100_000 else worst
        print(
            f"{size:>10,} {per_message_us:>12.1f} µs {p50:>7.2f} ms {max(times):>7.2f} ms "
            f"{naive_p50:>7.0f} ms {naive_p50 / p50:>6.0f}x"
        )
    if worst:
        verdict = "PASS" if worst < GOAL_MS else "FAIL"
        print(
            f"\n{verdict}: a search at 100,000 messages takes {worst:.1f} ms "
            f"(goal < {GOAL_MS:.0f} ms)"
        )


if __name__ == "__main__":
    main()
