"""A working copy of the sticky view that rungs change during one compaction pass.

The pass edits this copy only; the manager commits it when the whole request
succeeded, so a pass that ends in ContextLengthError (or a cancelled request) leaves
the sticky state exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..tokens import TokenCounter
from .protection import Protection


@dataclass
class FoldState:
    """Sticky compaction decisions: what stays removed or truncated on every later request."""

    removed_units: set[int] = field(default_factory=set)
    truncated: dict[int, tuple[dict[str, Any], int]] = field(default_factory=dict)
    rungs_used: dict[str, int] = field(default_factory=dict)  # rung name -> messages changed

    def copy(self) -> FoldState:
        return FoldState(set(self.removed_units), dict(self.truncated), dict(self.rungs_used))

    @property
    def is_empty(self) -> bool:
        return not self.removed_units and not self.truncated


@dataclass
class WorkingView:
    """History + a candidate FoldState + its running raw total, for the rungs to edit."""

    history: History
    state: FoldState
    protection: Protection
    counter: TokenCounter
    raw_total: int
    truncate_chars: int
    changed: dict[str, int] = field(default_factory=dict)  # rung name -> changes this pass

    def is_removed(self, entry_index: int) -> bool:
        return self.history.entries[entry_index].unit in self.state.removed_units

    def current(self, entry_index: int) -> tuple[dict[str, Any], int]:
        """The message as the view holds it now, and its raw cost."""
        swap = self.state.truncated.get(entry_index)
        if swap is not None:
            return swap
        entry = self.history.entries[entry_index]
        return entry.message, entry.cost

    def replace(self, entry_index: int, message: dict[str, Any], cost: int, rung: str) -> None:
        _, old_cost = self.current(entry_index)
        self.state.truncated[entry_index] = (message, cost)
        self.raw_total += cost - old_cost
        self._count(rung)

    def remove_unit(self, unit_index: int, rung: str) -> int:
        """Remove a whole unit; returns how many messages left the view."""
        unit = self.history.units[unit_index]
        self.raw_total -= self.history.unit_cost(unit, self.state.truncated)
        self.state.removed_units.add(unit_index)
        self._count(rung, unit.end - unit.start)
        return unit.end - unit.start

    def _count(self, rung: str, n: int = 1) -> None:
        self.changed[rung] = self.changed.get(rung, 0) + n
        self.state.rungs_used[rung] = self.state.rungs_used.get(rung, 0) + n
