"""Search over one context's history: which index answers, what the view already holds, and
the hits a caller (or the model, through ``context_recall``) gets back.

A durable session whose store keeps a full-text index (SQLite FTS5, PostgreSQL full-text
search: `store.base.SearchableStore`) is searched there: the index was written with each
message, so a resumed session searches at once. Otherwise the context keeps its own
`MemorySearchIndex`, caught up with history on each search (each message is tokenized once,
the first time a search comes after it) and built afresh for a replaced history.

Every backend ranks with the same algorithm (`search.ranking`); the view decides what is
left out: a message the view carries whole is never a hit (the model has it already), while
one it shortened, cleared or removed is.
"""

from __future__ import annotations

from collections.abc import Callable

from .context_state import ContextState
from .history import History
from .messages import well_formed_text
from .search import MemorySearchIndex, SearchHit, check_query, searchable_text, snippet
from .store.base import SearchableStore
from .store.link import SessionLink


class ContextSearch:
    """The search side of one context."""

    def __init__(self, link: SessionLink | None) -> None:
        store = link.store if link is not None else None
        self._store = store if isinstance(store, SearchableStore) else None
        self._session_id = link.session_id if link is not None else None
        self._index: MemorySearchIndex | None = None
        self._indexed: History | None = None  # the history the memory index describes

    async def search(self, state: ContextState, query: str, limit: int) -> list[SearchHit]:
        """The ``limit`` best hits for ``query`` among messages the view does not carry
        whole, best first. ValueError for a bad query or limit."""
        query, limit = check_query(query, limit)
        history = state.history
        skip = _carried(state)
        if self._store is not None and self._session_id is not None:
            found = await self._store.search(self._session_id, query, limit, skip=skip)
        else:
            found = self._memory_index(history).search(query, limit, skip=skip)
        return [_hit(history, doc, score, query) for doc, score in found]

    def _memory_index(self, history: History) -> MemorySearchIndex:
        index = self._index
        if index is None or self._indexed is not history:
            index = self._index = MemorySearchIndex()
            self._indexed = history
        entries = history.entries
        if len(index) < len(entries):
            index.catch_up((i, entries[i].message) for i in range(len(index), len(entries)))
        return index


def _carried(state: ContextState) -> Callable[[int], bool]:
    """Whether the view carries history entry ``i`` whole (then it is no hit); an entry the
    history does not hold (another worker's newer message in a shared store) is left out.
    A frozen set, read on the store's thread while this one may admit more: the view's
    entries, found by walking its units (the cost of the view, not of history)."""
    history, sticky = state.history, state.sticky
    entries, units = history.entries, history.units
    fold = sticky.state
    truncated = fold.truncated
    carried = frozenset(
        i
        for u in fold.kept_units(len(units))
        for i in units[u].entries
        if i not in truncated and entries[i].view is not None
    )
    size = len(entries)

    def skip(index: int) -> bool:
        return index >= size or index in carried

    return skip


def _hit(history: History, index: int, score: float, query: str) -> SearchHit:
    message = history.entries[index].message
    role = message.get("role")
    text = well_formed_text(searchable_text(message))
    return SearchHit(
        index, role if isinstance(role, str) else str(role), score, snippet(text, query)
    )
