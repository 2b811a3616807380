"""The sticky compaction state as plain JSON, so a durable session resumes where it was.

Unit and entry indexes are stable for a given history (history is append-only and its
units follow from it alone), so a snapshot taken at sequence number N restores exactly on the
same N messages: the resumed view is byte-identical to the one the crashed process would
have delivered next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..summaries import SummaryRecord
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
        "removed_units": sorted(state.removed_units),
        "truncated": {str(i): [m, cost] for i, (m, cost) in sorted(state.truncated.items())},
        "stripped": sorted(state.stripped),
        "shortened": sorted(state.shortened),
        "rungs_used": dict(state.rungs_used),
        "level": state.level,
        "summarized_units": sorted(state.summarized_units),
        "summary": state.summary,
        "summary_cost": state.summary_cost,
        "summary_record": state.summary_record.to_dict() if state.summary_record else None,
        "notice": notice,
        "notice_cost": notice_cost,
        "missed_target_at": missed_target_at,
    }


def restore(
    document: Mapping[str, Any],
) -> tuple[FoldState, dict[str, Any] | None, int, int | None]:
    """(state, notice, notice_cost, missed_target_at) from `snapshot`'s document.

    Raises ValueError for a document of another version or shape: the caller then plans
    afresh (a snapshot is an optimisation, history is the record).
    """
    if document.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"compaction snapshot version {document.get('version')!r} is unknown")
    record = document.get("summary_record")
    state = FoldState(
        removed_units=set(document["removed_units"]),
        truncated={int(i): (m, int(cost)) for i, (m, cost) in document["truncated"].items()},
        stripped=set(document["stripped"]),
        shortened=set(document["shortened"]),
        rungs_used=dict(document["rungs_used"]),
        level=int(document["level"]),
        summarized_units=set(document["summarized_units"]),
        summary=document["summary"],
        summary_cost=int(document["summary_cost"]),
        summary_record=SummaryRecord.from_dict(record) if record else None,
    )
    return state, document["notice"], int(document["notice_cost"]), document["missed_target_at"]
