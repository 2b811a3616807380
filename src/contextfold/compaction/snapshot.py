"""The sticky compaction state as plain JSON, so a durable session resumes where it was.

Unit and entry indexes are stable for a given history (history is append-only and its
units follow from it alone), so a snapshot taken at sequence number N restores exactly on the
same N messages: the resumed view is byte-identical to the one the crashed process would
have delivered next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..history import Unit
from ..ledger import EMPTY, Ledger
from ..summaries import SummaryRecord
from .unitset import UnitSet
from .working import FoldState

SNAPSHOT_VERSION = 1


def snapshot(
    state: FoldState,
    *,
    notice: dict[str, Any] | None,
    notice_cost: int,
    missed_target_at: int | None,
) -> dict[str, Any]:
    """The state, the notice and the storm guard as one JSON document."""
    return {
        "version": SNAPSHOT_VERSION,
        # Runs of unit indexes, not the indexes: a snapshot costs the view, not history.
        "removed_units": {"runs": state.removed_units.runs()},
        "truncated": {str(i): [m, cost] for i, (m, cost) in sorted(state.truncated.items())},
        "stripped": sorted(state.stripped),
        "shortened": sorted(state.shortened),
        "rungs_used": dict(state.rungs_used),
        "level": state.level,
        "summarized_units": {"runs": state.summarized_units.runs()},
        "removed_messages": state.removed_messages,
        "summarized_messages": state.summarized_messages,
        "summary": state.summary,
        "summary_cost": state.summary_cost,
        "summary_record": state.summary_record.to_dict() if state.summary_record else None,
        "ledger": state.ledger.to_dict() if state.ledger.pages or state.ledger.pool else None,
        "notice": notice,
        "notice_cost": notice_cost,
        "missed_target_at": missed_target_at,
    }


def restore(
    document: Mapping[str, Any], units: Sequence[Unit]
) -> tuple[FoldState, dict[str, Any] | None, int, int | None]:
    """(state, notice, notice_cost, missed_target_at) from `snapshot`'s document, taken on
    the history whose ``units`` are given.

    Raises ValueError for a document of another version or shape: the caller then plans
    afresh (a snapshot is an optimisation, history is the record). Documents written before
    the sets were stored as runs (plain index lists), or before the ledger, are read too.
    """
    if document.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"compaction snapshot version {document.get('version')!r} is unknown")
    record = document.get("summary_record")
    removed = _unit_set(document["removed_units"])
    summarized = _unit_set(document["summarized_units"])
    if any(u >= len(units) for u in (_last(removed), _last(summarized)) if u is not None):
        raise ValueError("compaction snapshot names units this history does not have")
    removed_messages = document.get("removed_messages")
    summarized_messages = document.get("summarized_messages")
    if not isinstance(removed_messages, int) or not isinstance(summarized_messages, int):
        removed_messages = sum(len(units[u].entries) for u in removed)
        summarized_messages = sum(len(units[u].entries) for u in summarized)
    ledger = document.get("ledger")
    state = FoldState(
        removed_units=removed,
        truncated={int(i): (m, int(cost)) for i, (m, cost) in document["truncated"].items()},
        stripped=set(document["stripped"]),
        shortened=set(document["shortened"]),
        rungs_used=dict(document["rungs_used"]),
        level=int(document["level"]),
        summarized_units=summarized,
        summary=document["summary"],
        summary_cost=int(document["summary_cost"]),
        summary_record=SummaryRecord.from_dict(record) if record else None,
        removed_messages=removed_messages,
        summarized_messages=summarized_messages,
        ledger=_ledger(ledger, units),
    )
    return state, document["notice"], int(document["notice_cost"]), document["missed_target_at"]


def _ledger(stored: Any, units: Sequence[Unit]) -> Ledger:
    """The stored ledger, checked to name only messages this history has."""
    if not stored:
        return EMPTY
    ledger = Ledger.from_dict(stored)
    size = sum(len(unit.entries) for unit in units)
    sources = [e.source for e in (*ledger.entries, *ledger.pool, *ledger.carried)]
    tasks = [task for task in ledger.tasks if task is not None]
    if any(not 0 <= source < size for source in (*sources, *ledger.named, *tasks)):
        raise ValueError("compaction snapshot's ledger names messages this history does not have")
    return ledger


def _unit_set(stored: Any) -> UnitSet:
    if isinstance(stored, Mapping):
        return UnitSet.from_runs((int(start), int(end)) for start, end in stored["runs"])
    return UnitSet(int(u) for u in stored)


def _last(units: UnitSet) -> int | None:
    runs = units.runs()
    return runs[-1][1] - 1 if runs else None
