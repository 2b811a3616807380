"""What the SQLite and PostgreSQL stores index for each stored message, and how they read it
back for the ranking.

A store indexes a message in the transaction that appends it (and a replacement indexes all
of its messages in the transaction that writes them), from the stored JSON text itself: the
index can never describe another message than the one stored. Each message gets a position
(its history index: the count of the session's messages before it), its task (the position
of the last human prompt at or before it) and its kind, and its search terms
(`contextfold.search.search_document`), the very terms the memory index uses; a session
keeps its message count, its terms in all, its newest prompt and each term's document
frequency beside them. The ranking (`contextfold.search.rank`) does the arithmetic, so a
store's hits are the memory index's on the same history.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from contextfold.search import NO_TASK, DocInfo, DocKind, counts_of, search_document

# The search terms of a message are stored space-separated (a term never holds a space).
SEPARATOR = " "
_STEMS_KEPT = 200_000


@dataclass(frozen=True, slots=True)
class SearchRow:
    """One message as a store indexes it."""

    position: int
    task: int  # NO_TASK before any prompt
    kind: int
    terms: tuple[str, ...]

    @property
    def length(self) -> int:
        return len(self.terms)

    @property
    def text(self) -> str:
        """The terms as stored: space-separated, repeats kept (a term's count in the message
        is how often it occurs here)."""
        return SEPARATOR.join(self.terms)

    @property
    def distinct(self) -> list[str]:
        return list(dict.fromkeys(self.terms))


@dataclass
class SessionIndexState:
    """Where a session's index stands: its next position, terms in all, newest prompt."""

    docs: int = 0
    total_length: int = 0
    task: int = NO_TASK


class Indexer:
    """Makes `SearchRow` of stored message texts (one per store: it keeps a stemming memo)."""

    def __init__(self) -> None:
        self._stems: dict[str, str] = {}

    def document(self, message_json: str) -> tuple[tuple[str, ...], DocKind]:
        """The search terms and kind of a stored message text."""
        if len(self._stems) > _STEMS_KEPT:
            self._stems = {}
        try:
            message = json.loads(message_json)
        except ValueError:  # the store checked it; a row it cannot read has no terms
            message = None
        if not isinstance(message, dict):
            return (), DocKind.OTHER
        document = search_document(message, self._stems)
        return document.terms, document.kind

    def row(self, message_json: str, state: SessionIndexState) -> SearchRow:
        """The row of the next message of a session at ``state``, which it then moves on."""
        terms, kind = self.document(message_json)
        position = state.docs
        if kind == DocKind.PROMPT:
            state.task = position
        state.docs += 1
        state.total_length += len(terms)
        return SearchRow(position, state.task, int(kind), terms)

    def rows(self, messages_json: Iterable[str], state: SessionIndexState) -> Iterator[SearchRow]:
        for text in messages_json:
            yield self.row(text, state)


def document_frequencies(rows: Iterable[SearchRow]) -> Counter[str]:
    """How many of ``rows`` hold each term."""
    found: Counter[str] = Counter()
    for row in rows:
        found.update(set(row.terms))
    return found


def doc_info(
    position: int, length: int, task: int, kind: int, text: str, used: Sequence[str]
) -> DocInfo:
    """A stored row as the ranking reads it, with its counts of the ``used`` terms."""
    words = text.split(SEPARATOR) if text else []
    return DocInfo(position, length, task, kind, counts_of(words, used))


def fts_phrase(term: str) -> str:
    """``term`` as an FTS5 query string: quoted, so it is one token whatever it holds (a
    term never holds a double quote)."""
    return f'"{term}"'
