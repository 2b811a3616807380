"""Search recall: which earlier messages match a description, ranked, with their recall ids.

A model that knows *what* it is looking for ("the order number of the Berlin customer") but
not *where* it was asks by description; `MemorySearchIndex` ranks messages by BM25 (the
ranking function of Lucene, SQLite's FTS5 and most search engines) over the words of each
message: its text, and for an assistant turn the names and arguments of its calls, so a
value is found where it was used as well as where it was read.

The index is our own, small and incremental, rather than a package: the BM25 packages on
PyPI build their index from a whole corpus at once (a rebuild whenever history grows), and
this one only ever appends. Each message is tokenized once, when the index first catches up
with it (`catch_up`), so a session that never searches pays nothing. A query walks the
postings of its own terms only; terms in more than half the messages carry almost no weight
under BM25 and are skipped when the query has rarer ones, which bounds a query's cost on a
long history (`bench/bench_search.py`).
"""

from __future__ import annotations

import heapq
import json
import math
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# BM25's usual constants: term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
SNIPPET_CHARS = 240
# A query walks all the postings of a term in at most this many messages (or a twentieth of
# them, when more); a term more common than that only adds to what rarer terms found.
COMMON_POSTINGS = 4_000
_TF_BITS = 16  # a posting packs (message << 16 | count); counts above 65,535 count as that
_TF_MAX = (1 << _TF_BITS) - 1
MAX_LIMIT = 50

# Words and numbers; an identifier such as ``ORD-4471`` gives ``ord`` and ``4471``, and the
# whole form too (see `terms`), so a search for either finds it.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+(?:[-_./:#][^\W_]+)*", re.UNICODE)
STOPWORDS = frozenset(
    (
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "earlier",
        "previous",
        "previously",
        "found",
        "find",
        "look",
        "looked",
        "please",
        "also",
        "get",
        "got",
    )
)


def _stem(word: str) -> str:
    """A light suffix strip, so that "invoices" finds "invoice" and "shipped" finds "ship":
    enough for descriptions against tool output, without a language-specific stemmer."""
    if len(word) <= 4 or word.isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + keep
    return word


def terms(text: str, stems: dict[str, str] | None = None) -> list[str]:
    """The index terms of a text: lowercased words and numbers less stopwords, lightly
    stemmed, plus each identifier whole (``ord-4471`` gives ``ord-4471``, ``ord`` and
    ``4471``). ``stems`` memoises the stemming (the words of a conversation repeat)."""
    memo = {} if stems is None else stems
    found: list[str] = []
    for token in _TOKEN.findall(text.lower()):
        if token.isalnum():
            words: tuple[str, ...] | list[str] = (token,)
        else:  # an identifier: itself, then its parts
            found.append(token)
            words = _WORD.findall(token)
        for word in words:
            stem = memo.get(word)
            if stem is None:
                stem = memo[word] = "" if word in STOPWORDS else _stem(word)
            if stem:
                found.append(stem)
    return found


def searchable_text(message: Mapping[str, Any]) -> str:
    """What a message is searched by: its text (a tool result's content text), its thinking
    left out, and an assistant's calls as their names and arguments."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        _block_texts(content, parts)
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            name = call.get("tool") or call.get("name") or function.get("name")
            arguments = call.get("arguments", function.get("arguments"))
            parts.append(f"{name} {_as_text(arguments)}")
    return "\n".join(p for p in parts if p)


def _block_texts(blocks: list[Any], parts: list[str]) -> None:
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                parts.append(inner)
            elif isinstance(inner, list):
                _block_texts(inner, parts)
        elif kind in ("tool_use", "tool_call"):
            parts.append(
                f"{block.get('name')} {_as_text(block.get('input', block.get('arguments')))}"
            )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure cannot come from JSON: nothing to search
        return ""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One match: the message's history index, its BM25 score and a snippet of its text
    around the best-matching term."""

    index: int
    score: float
    snippet: str


class MemorySearchIndex:
    """An append-only BM25 index over messages numbered 0, 1, 2, ... in admission order.

    Postings are kept per term as one compact array, ascending, each entry a message number
    and the term's count in it packed into one integer (``doc << 16 | count``), so a lookup
    of one message in a term's postings is a binary search. A query scores its rarest terms
    over all their postings and its most common ones only for the messages the rarer terms
    found (`COMMON_POSTINGS`): a term in tens of thousands of messages cannot lift a
    message that matches nothing rarer into the best few, and walking it would make every
    query cost the history.
    """

    def __init__(self) -> None:
        self._postings: dict[str, array[int]] = {}  # term -> packed (message, count)
        self._lengths: array[int] = array("i")  # terms per message
        self._total_length = 0
        self._stems: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, doc: int, text: str) -> None:
        """Index message ``doc``, the next one in order (docs are added once, in order)."""
        if doc != len(self._lengths):
            raise ValueError(
                f"documents are added in order: expected {len(self._lengths)}, got {doc}"
            )
        counts = Counter(terms(text, self._stems))
        postings = self._postings
        packed = doc << _TF_BITS
        for term, tf in counts.items():
            found = postings.get(term)
            entry = packed | min(tf, _TF_MAX)
            if found is None:
                postings[term] = array("q", (entry,))
            else:
                found.append(entry)
        length = sum(counts.values())
        self._lengths.append(length)
        self._total_length += length

    def catch_up(self, texts: Iterable[tuple[int, str]]) -> None:
        """Index the messages not indexed yet (``(doc, text)`` from ``len(self)`` on)."""
        for doc, text in texts:
            self.add(doc, text)

    def search(
        self, query: str, limit: int = 5, *, skip: Callable[[int], bool] | None = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` best ``(doc, score)`` for ``query``, best first, leaving out every
        doc ``skip`` says to (those still in the view, say). Ties go to the newer message."""
        count = len(self._lengths)
        docs = self._postings
        wanted = sorted(
            (t for t in dict.fromkeys(terms(query, self._stems)) if t in docs),
            key=lambda t: len(docs[t]),
        )
        if not count or not wanted or limit <= 0:
            return []
        # A term in more than half the messages has an idf near zero: with rarer terms in
        # the query it changes nothing that matters, and is left out.
        rare = [t for t in wanted if len(docs[t]) * 2 <= count]
        used = rare or wanted
        common = max(COMMON_POSTINGS, count // 20)
        average = self._total_length / count
        lengths = self._lengths
        length_weight = K1 * B / average
        base = K1 * (1 - B)
        scores: dict[int, float] = {}
        for term in used:
            postings = docs[term]
            df = len(postings)
            idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
            gain = idf * (K1 + 1)
            if df > common and len(scores) >= limit:
                # Only the messages rarer terms found: a binary search in the postings each.
                for doc in list(scores):
                    at = bisect_left(postings, doc << _TF_BITS)
                    if at < df and postings[at] >> _TF_BITS == doc:
                        tf = postings[at] & _TF_MAX
                        scores[doc] += gain * tf / (tf + base + length_weight * lengths[doc])
                continue
            start = max(0, df - common)  # a common term alone: its newest postings
            get = scores.get
            for entry in postings[start:]:
                doc, tf = entry >> _TF_BITS, entry & _TF_MAX
                scores[doc] = get(doc, 0.0) + gain * tf / (tf + base + length_weight * lengths[doc])
        if skip is not None:
            for doc in [d for d in scores if skip(d)]:
                del scores[doc]
        return heapq.nlargest(limit, scores.items(), key=_rank)


def _rank(item: tuple[int, float]) -> tuple[float, int]:
    return item[1], item[0]


def snippet(text: str, query: str, chars: int = SNIPPET_CHARS) -> str:
    """About ``chars`` characters of ``text`` around the first word of ``query`` it holds
    (its start when none), on one line."""
    flat = " ".join(text.split())
    if len(flat) <= chars:
        return flat
    lowered = flat.lower()
    positions = [
        lowered.find(word)
        for word in _WORD.findall(query.lower())
        if word not in STOPWORDS and len(word) > 2
    ]
    found = min((p for p in positions if p >= 0), default=0)
    start = max(0, min(found - chars // 3, len(flat) - chars))
    piece = flat[start : start + chars]
    return ("..." if start else "") + piece + ("..." if start + chars < len(flat) else "")


def check_query(query: Any, limit: Any) -> tuple[str, int]:
    """A search's arguments, or a ValueError saying what to pass instead."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(
            "search takes a query: a few words describing what to find, e.g. "
            "'invoice total for the Berlin office'"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not terms(query):
        raise ValueError(
            f"the query {query[:60]!r} has no word to search by (only stopwords or "
            "punctuation): describe what to find"
        )
    return query, limit
