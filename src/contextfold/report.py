"""The per-request report: what the view cost before and after, and what was done."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ContextConfig


@dataclass(frozen=True, slots=True)
class RequestReport:
    """One delivered view (the ``context:report`` payload); sizes are calibrated estimates."""

    tokens_before: int  # the sticky view as it stood before this request's pass
    tokens_after: int  # the delivered view, notice included
    messages_before: int
    messages_after: int
    history_messages: int
    compacted: bool  # a compaction pass ran for this request
    level: int  # highest level this request's pass reached (1-3, as the reference); 0 if none
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
    # The last pass could not reach its target (protection held it up): the next one waits
    # until the view has grown by the trigger-target band.
    floor_bound: bool = False
    relaxed: list[str] = field(default_factory=list)  # soft protections that yielded this pass
    repairs_total: int = 0  # sequence faults admitted and mended in the view so far
    # What this request's input costs by the cost model (`costing`), read from the cache
    # where it repeats the one before, at `prices` (the config's, else the model's family,
    # else Anthropic's reference); and why a pass ran: "trigger", "budget", "retained",
    # "oversized" (a result shortened to fit, answered since: see `compaction.oversized`),
    # "optimal_peak" or "cold_cache" (the cost planner's), "" when none did.
    cost_usd: float = 0.0
    prices: str = ""
    compacted_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        # Field by field rather than dataclasses.asdict, which deep-copies through a
        # generic walk at several times the cost; the one list is copied here.
        data = {name: getattr(self, name) for name in _FIELDS}
        data["applied"] = list(self.applied)
        data["relaxed"] = list(self.relaxed)
        return data


_FIELDS = tuple(f.name for f in fields(RequestReport))
# The manager builds reports positionally: this order is part of that call.
assert _FIELDS == (
    "tokens_before",
    "tokens_after",
    "messages_before",
    "messages_after",
    "history_messages",
    "compacted",
    "level",
    "applied",
    "budget",
    "trigger",
    "target",
    "hard_fit",
    "size_source",
    "counter",
    "ratio",
    "removed_total",
    "truncated_total",
    "floor_bound",
    "relaxed",
    "repairs_total",
    "cost_usd",
    "prices",
    "compacted_by",
)


def compaction_event(
    report: RequestReport, changed: Mapping[str, int], config: ContextConfig
) -> dict[str, Any]:
    """The ``context:compaction`` payload of a request whose pass changed the view.

    Our keys, then the reference module's (``messages_removed``, ``strategy_level``, ...)
    so dashboards and hooks written for context-simple keep working.
    """
    removed = changed.get("drop_oldest", 0)
    truncated = sum(changed.values()) - removed
    return {
        "before_tokens": report.tokens_before,
        "after_tokens": report.tokens_after,
        "before_messages": report.messages_before,
        "after_messages": report.messages_after,
        "removed": removed,
        "truncated": truncated,
        "level": report.level,
        "applied": list(changed),
        "budget": report.budget,
        "trigger": report.trigger,
        "target": report.target,
        "hard_fit": report.hard_fit,
        "ratio": report.ratio,
        "relaxed": list(report.relaxed),
        "messages_removed": removed,
        "messages_truncated": truncated,
        "strategy_level": report.level,
        "target_tokens": report.target,
        "protected_recent": config.protected_recent,
        "protected_tool_results": config.protected_tool_results,
    }
