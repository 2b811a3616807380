"""The in-memory search index: append-only postings the ranking (`ranking`) reads.

The index is our own, small and incremental, rather than a package: the BM25 packages on
PyPI build their index from a whole corpus at once (a rebuild whenever history grows), and
this one only ever appends. Each message is tokenized once, when the index first catches up
with it (`catch_up`), so a session that never searches pays nothing. A query reads the
postings of its own terms only (`bench/bench_search.py`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..messages import well_formed_text
from .ranking import (
    NO_TASK,
    CandidatesRequest,
    DocInfo,
    Request,
    SessionStats,
    StatsRequest,
    TaskDocsRequest,
    rank,
    run_ranking,
)
from .text import DocKind, SearchDocument, search_document, terms

_TF_BITS = 16  # a posting packs (message << 16 | count); counts above 65,535 count as that
_TF_MAX = (1 << _TF_BITS) - 1
_STEMS_KEPT = 200_000  # the stemming memo is dropped past this many words


class MemorySearchIndex:
    """An append-only index over messages numbered 0, 1, 2, ... in admission order.

    Postings are kept per term as one compact array, ascending, each entry a message number
    and the term's count in it packed into one integer (``doc << 16 | count``), so a lookup
    of one message in a term's postings is a binary search. Beside them: each message's
    number of terms, task (the position of the last human prompt at or before it) and kind,
    and each task's messages.
    """

    def __init__(self) -> None:
        self._postings: dict[str, array[int]] = {}  # term -> packed (message, count)
        self._lengths: array[int] = array("q")  # terms per message
        self._tasks: array[int] = array("q")
        self._kinds: array[int] = array("b")
        self._members: dict[int, array[int]] = {}  # task -> its messages, ascending
        self._total_length = 0
        self._current_task = NO_TASK
        self._stems: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, doc: int, item: str | Mapping[str, Any]) -> None:
        """Index message ``doc``, the next one in order: a message (a chat dict), or a plain
        text (a document of no particular kind). Docs are added once, in order."""
        if doc != len(self._lengths):
            raise ValueError(
                f"documents are added in order: expected {len(self._lengths)}, got {doc}"
            )
        if len(self._stems) > _STEMS_KEPT:
            self._stems = {}
        if isinstance(item, str):
            document = SearchDocument(
                tuple(terms(well_formed_text(item), self._stems)), DocKind.OTHER
            )
        else:
            document = search_document(item, self._stems)
        if document.kind == DocKind.PROMPT:
            self._current_task = doc
        task = self._current_task
        counts = Counter(document.terms)
        postings = self._postings
        packed = doc << _TF_BITS
        for term, tf in counts.items():
            found = postings.get(term)
            entry = packed | min(tf, _TF_MAX)
            if found is None:
                postings[term] = array("q", (entry,))
            else:
                found.append(entry)
        length = len(document.terms)
        self._lengths.append(length)
        self._tasks.append(task)
        self._kinds.append(int(document.kind))
        self._total_length += length
        if task != NO_TASK:
            members = self._members.get(task)
            if members is None:
                self._members[task] = array("q", (doc,))
            else:
                members.append(doc)

    def catch_up(self, items: Iterable[tuple[int, str | Mapping[str, Any]]]) -> None:
        """Index the messages not indexed yet (``(doc, message)`` from ``len(self)`` on)."""
        for doc, item in items:
            self.add(doc, item)

    def search(
        self, query: str, limit: int = 5, *, skip: Callable[[int], bool] | None = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` best ``(doc, score)`` for ``query``, best first, leaving out every
        doc ``skip`` says to (those still in the view, say); see `ranking`."""
        return run_ranking(rank(query, limit, skip), self._answer)

    # -- answering the ranking's requests ---------------------------------------------------

    def _answer(self, request: Request) -> Any:
        if isinstance(request, StatsRequest):
            postings = self._postings
            return SessionStats(
                len(self._lengths),
                self._total_length,
                self._current_task,
                {t: len(postings[t]) for t in request.terms if t in postings},
            )
        if isinstance(request, CandidatesRequest):
            docs: set[int] = set()
            for term in request.terms:
                docs.update(entry >> _TF_BITS for entry in self._postings[term])
            for term in request.newest:
                docs.update(entry >> _TF_BITS for entry in self._postings[term][-request.cap :])
            return self._infos(sorted(docs), request.used)
        if isinstance(request, TaskDocsRequest):
            return {
                task: self._infos(
                    list(self._members.get(task, ())[-request.per_task :]), request.used
                )
                for task in request.tasks
            }
        raise TypeError(f"unknown search request {request!r}")  # pragma: no cover

    def _infos(self, docs: Sequence[int], used: Sequence[str]) -> list[DocInfo]:
        """`DocInfo` of ``docs`` (ascending), with their counts of ``used``."""
        counts = [[0] * len(used) for _ in docs]
        slot = {doc: i for i, doc in enumerate(docs)}
        for j, term in enumerate(used):
            postings = self._postings.get(term)
            if not postings:
                continue
            if len(postings) <= 4 * len(docs):  # walking the postings is the cheaper way
                for entry in postings:
                    i = slot.get(entry >> _TF_BITS)
                    if i is not None:
                        counts[i][j] = entry & _TF_MAX
                continue
            size = len(postings)
            for i, doc in enumerate(docs):  # a binary search in the postings per message
                at = bisect_left(postings, doc << _TF_BITS)
                if at < size and postings[at] >> _TF_BITS == doc:
                    counts[i][j] = postings[at] & _TF_MAX
        lengths, tasks, kinds = self._lengths, self._tasks, self._kinds
        return [
            DocInfo(doc, lengths[doc], tasks[doc], kinds[doc], tuple(counts[i]))
            for i, doc in enumerate(docs)
        ]
