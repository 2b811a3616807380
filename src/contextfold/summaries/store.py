"""Where summary records live: one small interface, an in-memory implementation.

The interface is three coroutines so a database can implement it directly: ``get`` is a
primary-key lookup, ``put_if_absent`` an ``INSERT ... ON CONFLICT DO NOTHING`` followed by a
read of the winner, ``records`` a scan with an optional ``WHERE session_id = ?`` (a lookup by
an index on the session: a context reads its own session's records, never every record).
"""

from __future__ import annotations

import asyncio
from typing import Protocol, runtime_checkable

from contextfold.summaries.records import SummaryRecord

__all__ = ["InMemorySummaryStore", "SummaryStore"]


@runtime_checkable
class SummaryStore(Protocol):
    """Summary records keyed by ``covered_hash``; a key, once written, never changes."""

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        """The record for this exact covered span, or None."""
        ...

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        """Insert ``record`` unless its key exists; return the record the store now holds.

        Two writers racing on one key both get the same record back (the first one in), so
        every reader converges on one summary for a span, and the loser's text is dropped.
        """
        ...

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        """All records in insertion order, or only those written for ``session_id``."""
        ...


class InMemorySummaryStore:
    """A :class:`SummaryStore` in a dict: lives as long as the process."""

    def __init__(self, records: list[SummaryRecord] | None = None) -> None:
        self._by_hash: dict[str, SummaryRecord] = {}
        # Each session's records in insertion order: a session's lookup never walks others'.
        self._by_session: dict[str | None, list[SummaryRecord]] = {}
        # The check and the insert never straddle an await today, so the lock is not
        # strictly needed; it keeps the method safe if a future version awaits in between.
        self._lock = asyncio.Lock()
        for record in records or []:
            self._insert(record)

    def _insert(self, record: SummaryRecord) -> SummaryRecord:
        held = self._by_hash.setdefault(record.covered_hash, record)
        if held is record:
            self._by_session.setdefault(record.session_id, []).append(record)
        return held

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        return self._by_hash.get(covered_hash)

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        if not isinstance(record, SummaryRecord):
            raise TypeError(f"expected a SummaryRecord, got {type(record).__name__}")
        async with self._lock:
            return self._insert(record)

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        if session_id is None:
            return list(self._by_hash.values())
        return list(self._by_session.get(session_id, ()))

    def __len__(self) -> int:
        return len(self._by_hash)
