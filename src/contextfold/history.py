"""The canonical transcript: append-only, each message validated, capped and counted once.

Besides the messages it keeps what compaction needs without re-scanning: each message's
token cost (computed at admission), its classification, and the partition of history
into *units*. A unit is what compaction may keep or remove as a whole: a single
message, or an assistant message with tool calls together with every message up to
its last result (the results themselves and anything a hook injected between them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .ingress import IngressClip, cap_tool_result
from .messages import Kind, MessageInfo, canonical_json, inspect_message
from .tokens import TokenCounter


@dataclass(slots=True)
class Entry:
    """One admitted message with what was learned about it at admission."""

    message: dict[str, Any]
    info: MessageInfo
    cost: int  # raw tokens, from the counter, once
    unit: int


@dataclass(slots=True)
class Unit:
    """A contiguous run of entries compaction treats atomically."""

    start: int
    end: int  # exclusive
    open_calls: int = 0  # calls in this unit still waiting for their result

    @property
    def is_open(self) -> bool:
        return self.open_calls > 0


@dataclass(slots=True)
class Admission:
    """A validated, capped, counted message not yet appended (so failures leave no trace)."""

    message: dict[str, Any]
    info: MessageInfo
    cost: int
    clips: list[IngressClip]


@dataclass
class History:
    """Append-only message log with running totals."""

    counter: TokenCounter
    max_tool_result_bytes: int
    entries: list[Entry] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    pending: dict[str, int] = field(default_factory=dict)  # call id -> index of its assistant
    issued: set[str] = field(default_factory=set)
    first_human: int | None = None
    last_human: int | None = None
    raw_total: int = 0

    def __len__(self) -> int:
        return len(self.entries)

    def prepare(self, message: Any, *, index: int | None = None) -> Admission:
        """Validate, cap and count ``message`` against this history without changing it."""
        position = len(self.entries) if index is None else index
        info = inspect_message(message, index=position, pending=self.pending, issued=self.issued)
        # A private deep copy made of plain JSON types: later edits to the caller's dict
        # cannot reach history, and everything stored is known to serialise.
        stored = json.loads(canonical_json(message, index=position))
        capped, clips = cap_tool_result(stored, self.max_tool_result_bytes)
        return Admission(capped, info, self.counter.count_message(capped), clips)

    def append(self, admission: Admission) -> Entry:
        """Append a prepared message. Cannot fail: all checks happened in `prepare`."""
        index = len(self.entries)
        info = admission.info
        current = self.units[-1] if self.units else None
        if info.result_ids or (current is not None and current.is_open):
            # Results (and anything arriving before the last one) join the open call group.
            assert current is not None  # prepare() refuses results with no pending call
            current.end = index + 1
            current.open_calls -= len(info.result_ids)
            unit_index = len(self.units) - 1
        else:
            self.units.append(Unit(index, index + 1, open_calls=len(info.call_ids)))
            unit_index = len(self.units) - 1
        for call_id in info.result_ids:
            del self.pending[call_id]
        for call_id in info.call_ids:
            self.pending[call_id] = index
            self.issued.add(call_id)
        if info.kind is Kind.HUMAN:
            if self.first_human is None:
                self.first_human = index
            self.last_human = index
        entry = Entry(admission.message, info, admission.cost, unit_index)
        self.entries.append(entry)
        self.raw_total += admission.cost
        return entry

    def extend(self, messages: Iterable[Any]) -> list[IngressClip]:
        """Admit many messages; on the first refusal raise with its index (used on a fresh log)."""
        clips: list[IngressClip] = []
        for i, message in enumerate(messages):
            admission = self.prepare(message, index=i)
            self.append(admission)
            clips.extend(admission.clips)
        return clips

    def unit_cost(self, unit: Unit, replaced: Mapping[int, tuple[dict[str, Any], int]]) -> int:
        """Raw cost of a unit, counting replaced (truncated) messages at their new cost."""
        total = 0
        for i in range(unit.start, unit.end):
            swap = replaced.get(i)
            total += swap[1] if swap is not None else self.entries[i].cost
        return total
