"""The in-memory search index: BM25 ranking over messages, incremental, with skips."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from contextfold.search import (
    MemorySearchIndex,
    check_query,
    searchable_text,
    snippet,
    terms,
)


def index_of(texts: list[str]) -> MemorySearchIndex:
    index = MemorySearchIndex()
    index.catch_up(enumerate(texts))
    return index


def test_the_message_holding_the_rare_words_ranks_first() -> None:
    texts = [
        "weather report: sunny, 21 degrees",
        "order ORD-4471 placed by the Berlin office, total 1,204.50 EUR",
        "order ORD-4472 placed by the Paris office, total 88.00 EUR",
        "weather report: rain, 14 degrees",
    ]
    hits = index_of(texts).search("the order total for the Berlin office")
    assert [doc for doc, _ in hits][:2] == [1, 2]
    assert hits[0][1] > hits[1][1] > 0


def test_descriptions_find_inflected_words_and_identifiers_whole() -> None:
    index = index_of(["two invoices were shipped", "nothing here", "ticket TCK-0091 reopened"])
    assert index.search("invoice shipping")[0][0] == 0
    assert index.search("tck-0091")[0][0] == 2
    assert index.search("0091")[0][0] == 2


def test_skipped_messages_never_come_back_even_when_they_are_the_best() -> None:
    texts = [f"alpha {i}" for i in range(30)] + ["alpha beta gamma"] * 5
    index = index_of(texts)
    best = [doc for doc, _ in index.search("beta gamma", limit=5)]
    assert best == [34, 33, 32, 31, 30]  # equal scores: the newer first
    hidden = set(best[:4])
    kept = index.search("alpha beta gamma", limit=5, skip=hidden.__contains__)
    assert 30 in [doc for doc, _ in kept]
    assert not hidden & {doc for doc, _ in kept}


def test_no_match_is_an_empty_list_and_a_query_of_stopwords_is_refused() -> None:
    index = index_of(["one message"])
    assert index.search("zebra") == []
    assert MemorySearchIndex().search("one") == []
    with pytest.raises(ValueError, match="no word to search by"):
        check_query("the of and", 5)


@pytest.mark.parametrize(
    ("query", "limit", "fragment"),
    [
        ("", 5, "search takes a query"),
        ("   ", 5, "search takes a query"),
        (None, 5, "search takes a query"),
        (["order"], 5, "search takes a query"),
        ("order", 0, "limit must be"),
        ("order", 51, "limit must be"),
        ("order", True, "limit must be"),
        ("order", 2.0, "limit must be"),
    ],
)
def test_bad_arguments_say_what_to_pass(query: object, limit: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        check_query(query, limit)


def test_documents_are_added_once_in_order() -> None:
    index = index_of(["a b c"])
    with pytest.raises(ValueError, match="in order"):
        index.add(5, "late")
    index.catch_up([(1, "next one")])
    assert len(index) == 2


def test_assistant_calls_are_searched_by_name_and_arguments() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "secret plan", "signature": "x"}],
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "refund", "arguments": '{"order": "ORD-9"}'},
            },
            {"id": "c2", "tool": "lookup", "arguments": {"city": "Oslo"}},
        ],
    }
    text = searchable_text(message)
    assert "refund" in text and "ORD-9" in text and "lookup" in text and "Oslo" in text
    assert "secret plan" not in text  # thinking is not what the model searches for
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "c1",
                "content": [{"type": "text", "text": "refunded"}],
            }
        ],
    }
    assert searchable_text(result) == "refunded"


def test_a_snippet_is_one_line_around_the_first_matching_word() -> None:
    text = "header\n" + "filler " * 100 + "the Berlin office ordered\nmore " + "tail " * 100
    piece = snippet(text, "Berlin order", chars=80)
    assert "Berlin" in piece and "\n" not in piece
    assert piece.startswith("...") and piece.endswith("...")
    assert snippet("short text", "zzz") == "short text"


# -- BM25 by the book, on random corpora ---------------------------------------------------

WORDS = ["apple", "berry", "cherry", "delta", "echo", "fox", "golf", "hotel", "india"]
words = st.sampled_from(WORDS)
documents = st.lists(
    st.lists(words, min_size=0, max_size=12).map(" ".join), min_size=1, max_size=30
)


def reference_bm25(texts: list[str], query: str) -> dict[int, float]:
    docs = [Counter(terms(t)) for t in texts]
    count = len(docs)
    average = sum(sum(d.values()) for d in docs) / count
    wanted = [t for t in dict.fromkeys(terms(query)) if any(t in d for d in docs)]
    rare = [t for t in wanted if sum(t in d for d in docs) * 2 <= count] or wanted
    scores: dict[int, float] = {}
    for term in rare:
        df = sum(term in d for d in docs)
        idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            if term in d:
                length = sum(d.values())
                norm = 1.2 * (1 - 0.75 + 0.75 * length / average)
                scores[i] = scores.get(i, 0.0) + idf * d[term] * 2.2 / (d[term] + norm)
    return scores


@settings(max_examples=150, deadline=None)
@given(
    documents,
    st.lists(words, min_size=1, max_size=4).map(" ".join),
    st.integers(1, 8),
    st.sets(st.integers(0, 29)),
)
@example(
    texts=[""] * 22
    + [
        "apple apple apple berry berry berry berry berry berry berry delta delta",
        "apple apple apple berry berry berry berry berry berry berry cherry cherry",
    ],
    query="apple delta berry cherry",
    limit=1,
    skipped=set(),
)
def test_results_are_the_best_by_bm25_skips_left_out(
    texts: list[str], query: str, limit: int, skipped: set[int]
) -> None:
    raw = reference_bm25(texts, query)
    best = max(raw.values(), default=0.0)
    expected = {doc: score / best for doc, score in raw.items()}  # the best match scores 1
    hits = index_of(texts).search(query, limit, skip=skipped.__contains__)
    allowed = sorted(
        ((doc, score) for doc, score in expected.items() if doc not in skipped),
        key=lambda item: (item[1], item[0]),
        reverse=True,
    )[:limit]
    # The k-th hit scores the k-th best allowed score, and that is its own score: documents
    # whose scores tie (up to rounding: equal terms summed in another order) may come in
    # either order.
    assert len(hits) == len(allowed)
    assert len({doc for doc, _ in hits}) == len(hits)
    for (doc, got), (_, want) in zip(hits, allowed, strict=True):
        assert doc not in skipped
        assert got == pytest.approx(want)
        assert expected[doc] == pytest.approx(got)
