"""The per-request report: what the view cost before and after, and what was done."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestReport:
    """One delivered view (the ``context:report`` payload); sizes are calibrated estimates."""

    tokens_before: int  # the sticky view as it stood before this request's pass
    tokens_after: int  # the delivered view, notice included
    messages_before: int
    messages_after: int
    history_messages: int
    compacted: bool  # a compaction pass ran for this request
    level: int  # 1-based rung reached by this request's pass; 0 when none ran
    applied: list[str] = field(default_factory=list)  # rungs that changed something this pass
    budget: int = 0  # effective budget
    trigger: int = 0
    target: int = 0
    hard_fit: bool = False
    size_source: str = "estimate"  # what the trigger compared: "estimate" or "actual"
    counter: str = ""
    ratio: float = 1.0  # calibration ratio applied to raw counts
    removed_total: int = 0  # messages out of the view (sticky, all passes so far)
    truncated_total: int = 0  # messages shortened in the view (sticky)
    floor_bound: bool = False  # protection holds the view above the trigger; next pass at the limit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
