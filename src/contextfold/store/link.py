"""A context's link to its durable session: what the manager writes, and when.

- every admitted message is appended, with its token cost, before ``add_message`` returns
  (acknowledged means durable: SQLite commits with WAL and ``synchronous=FULL``, PostgreSQL
  commits), carrying the sequence number it expects, so a worker that lost a race gets
  `ConcurrentUpdateError` instead of interleaving;
- ``set_messages`` and ``clear`` replace the session atomically;
- a committed compaction pass saves the sticky state with the sequence number it describes;
- calibration and the last budget decision are saved as they change.

On first use the history is rebuilt from the stored messages and costs (nothing is counted
again) and the sticky state is taken up when it describes exactly those messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..history import Admission, History
from ..messages import canonical_json
from ..tokens import TokenCounter
from .base import SessionStore


@dataclass
class Loaded:
    """A session as the store had it."""

    history: History
    state: Mapping[str, Any] | None  # the sticky-state document, when history still has it
    calibration: Mapping[str, Any] | None
    budget: Mapping[str, Any] | None


class SessionLink:
    """One session of one store, and the sequence number this context last saw."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.seq = 0
        self._opened = False

    async def load(self, counter: TokenCounter, max_tool_result_bytes: int) -> Loaded:
        if not self._opened:
            await self.store.open()
            self._opened = True
        stored = await self.store.open_session(self.session_id)
        history = History(counter, max_tool_result_bytes)
        for message in stored.messages:
            history.append(history.prepare(message.message, cost=message.cost))
        self.seq = stored.last_seq
        state = stored.state
        # A snapshot describes the log up to its seq; history only grows after it (a
        # replacement drops the snapshot), so it still holds for every later message.
        document = state.snapshot if state is not None and state.seq <= stored.last_seq else None
        return Loaded(history, document, stored.calibration, stored.budget)

    async def append(self, admission: Admission) -> None:
        self.seq = await self.store.append(
            self.session_id, self.seq, canonical_json(admission.message), admission.cost
        )

    async def replace(self, history: History) -> None:
        rows: Iterable[tuple[str, int]] = [
            (canonical_json(entry.message), entry.cost) for entry in history.entries
        ]
        self.seq = await self.store.append_many(self.session_id, self.seq, list(rows))

    async def save_state(self, document: Mapping[str, Any]) -> None:
        if self.seq:  # documents belong to a session that exists
            await self.store.save_state(self.session_id, self.seq, document)

    async def save_calibration(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            await self.store.save_calibration(self.session_id, document)

    async def save_budget(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            await self.store.save_budget(self.session_id, document)
