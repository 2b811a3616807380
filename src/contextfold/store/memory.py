"""The in-memory session store: the default, lives as long as the process.

Same semantics as the durable stores (expected seqs, generations, insert-if-absent
summaries, the same errors), so code written against it behaves the same on SQLite or
PostgreSQL. Nothing awaits between a check and its write, so coroutines of one event loop
can never interleave inside an operation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextfold.store.base import (
    HISTORY_GENESIS,
    ConcurrentUpdateError,
    Row,
    SessionInfo,
    StoredMessage,
    StoredSession,
    StoredState,
    StoreError,
    check_cost,
    check_cost_counter,
    check_digest,
    check_document,
    check_info_json,
    check_message_json,
    check_record,
    check_rows,
    check_seq,
    check_session_id,
    extend_history_digest,
    history_digest,
)
from contextfold.summaries.records import SummaryRecord
from contextfold.summaries.store import InMemorySummaryStore

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    last_seq: int = 0
    generation: int = 0
    messages: list[StoredMessage] = field(default_factory=list)
    state: StoredState | None = None
    calibration: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    history_sha256: str = HISTORY_GENESIS


class MemoryStore:
    """A :class:`~contextfold.store.base.SessionStore` in dicts."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._summaries = InMemorySummaryStore()
        self._closed = False

    async def open(self) -> None:
        self._check_open()

    async def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this store was closed")

    async def open_session(self, session_id: str) -> StoredSession:
        self._check_open()
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        digest = session.history_sha256 if session is not None else None
        session = session or _Session()
        return StoredSession(
            session_id=session_id,
            last_seq=session.last_seq,
            generation=session.generation,
            messages=tuple(session.messages),
            state=session.state,
            calibration=_copy(session.calibration),
            budget=_copy(session.budget),
            history_sha256=digest,
        )

    def _writable(self, session_id: str, expected_seq: int) -> _Session:
        self._check_open()
        check_session_id(session_id)
        check_seq(expected_seq)
        session = self._sessions.get(session_id)
        actual = session.last_seq if session else 0
        if actual != expected_seq:
            raise ConcurrentUpdateError(session_id, expected_seq, actual)
        return session if session is not None else _Session()

    async def append(
        self,
        session_id: str,
        expected_seq: int,
        message_json: str,
        cost: int,
        info_json: str | None = None,
        *,
        cost_counter: str | None = None,
    ) -> int:
        check_message_json(message_json)
        check_cost(cost)
        check_info_json(info_json)
        check_cost_counter(cost_counter)
        session = self._writable(session_id, expected_seq)
        seq = expected_seq + 1
        session.messages.append(StoredMessage(seq, message_json, cost, info_json, cost_counter))
        session.last_seq = seq
        session.history_sha256 = extend_history_digest(session.history_sha256, message_json)
        self._sessions[session_id] = session
        return seq

    async def append_many(self, session_id: str, expected_seq: int, messages: Sequence[Row]) -> int:
        rows = check_rows(messages)
        session = self._writable(session_id, expected_seq)
        fence = expected_seq + 1  # the replacement's own seq: every older writer conflicts
        session.messages = [
            StoredMessage(fence + offset, text, cost, info, counter)
            for offset, (text, cost, info, counter) in enumerate(rows, start=1)
        ]
        session.last_seq = fence + len(rows)
        session.generation += 1
        session.state = None
        session.history_sha256 = history_digest(row[0] for row in rows)
        self._sessions[session_id] = session
        return session.last_seq

    def _existing(self, session_id: str) -> _Session:
        self._check_open()
        check_session_id(session_id)
        session = self._sessions.get(session_id)
        if session is None:
            raise StoreError(f"session {session_id!r} does not exist: append a message first")
        return session

    async def save_state(
        self,
        session_id: str,
        seq: int,
        snapshot: Mapping[str, Any],
        *,
        history_sha256: str | None = None,
    ) -> None:
        check_seq(seq, "seq")
        check_document(snapshot, "state snapshot")
        check_digest(history_sha256)
        session = self._existing(session_id)
        if seq > session.last_seq:
            raise StoreError(
                f"state for seq {seq} of session {session_id!r}, whose last seq is "
                f"{session.last_seq}: save the messages first"
            )
        if seq < session.last_seq:
            raise ConcurrentUpdateError(session_id, seq, session.last_seq)
        if history_sha256 not in (None, session.history_sha256):
            raise ConcurrentUpdateError(session_id, seq, seq, other_history=True)
        session.state = StoredState(seq, _copy(dict(snapshot)) or {}, session.history_sha256)

    async def save_calibration(self, session_id: str, calibration: Mapping[str, Any]) -> None:
        check_document(calibration, "calibration")
        self._existing(session_id).calibration = _copy(dict(calibration))

    async def save_budget(self, session_id: str, budget: Mapping[str, Any]) -> None:
        check_document(budget, "budget decision")
        self._existing(session_id).budget = _copy(dict(budget))

    async def list_sessions(self) -> list[SessionInfo]:
        self._check_open()
        return [
            SessionInfo(sid, s.last_seq, s.generation, len(s.messages))
            for sid, s in sorted(self._sessions.items())
        ]

    async def delete_session(self, session_id: str) -> bool:
        self._check_open()
        check_session_id(session_id)
        return self._sessions.pop(session_id, None) is not None

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        self._check_open()
        return await self._summaries.get(covered_hash)

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        self._check_open()
        return await self._summaries.put_if_absent(check_record(record))

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        self._check_open()
        return await self._summaries.records(session_id)


def _copy(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy through JSON, so a caller mutating its dict never changes the store."""
    return None if document is None else json.loads(json.dumps(document))
