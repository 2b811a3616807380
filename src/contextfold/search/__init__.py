"""Search recall: which earlier messages match a description, ranked, with their recall ids.

A model that knows *what* it is looking for ("the order number of the Berlin customer") but
not *where* it was asks by description. Every backend indexes the same terms of each message
(`text.search_document`) and ranks with the same algorithm (`ranking`): the memory index
here (`memory.MemorySearchIndex`), SQLite FTS5 and PostgreSQL full-text search in the stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..recall import recall_id as _recall_id
from .memory import MemorySearchIndex
from .ranking import (
    MAX_CANDIDATES,
    NO_TASK,
    CandidatesRequest,
    DocInfo,
    Ranking,
    Request,
    SessionStats,
    StatsRequest,
    TaskDocsRequest,
    counts_of,
    rank,
    run_ranking,
    run_ranking_async,
)
from .text import (
    MAX_LIMIT,
    SNIPPET_CHARS,
    STOPWORDS,
    DocKind,
    SearchDocument,
    check_query,
    search_document,
    searchable_text,
    snippet,
    terms,
)

__all__ = [
    "MAX_CANDIDATES",
    "MAX_LIMIT",
    "NO_TASK",
    "SNIPPET_CHARS",
    "STOPWORDS",
    "CandidatesRequest",
    "DocInfo",
    "DocKind",
    "MemorySearchIndex",
    "Ranking",
    "Request",
    "SearchDocument",
    "SearchHit",
    "SessionStats",
    "StatsRequest",
    "TaskDocsRequest",
    "check_query",
    "counts_of",
    "rank",
    "run_ranking",
    "run_ranking_async",
    "search_document",
    "searchable_text",
    "snippet",
    "terms",
]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One match: the message's history index, its role, its score (relative within one
    search: the best direct match of the words scores 1, a message its task lends a score can
    score more) and a snippet of its text around the first matching word."""

    index: int
    role: str
    score: float
    snippet: str

    @property
    def recall_id(self) -> str:
        """The id `ContextFold.recall` and ``context_recall`` take (``"r41"``)."""
        return _recall_id(self.index)
