"""A working copy of the sticky view that rungs change during one compaction pass.

The pass edits this copy only; the manager commits it when the whole request
succeeded, so a pass that ends in ContextLengthError (or a cancelled request) leaves
the sticky state exactly as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..ledger import EMPTY, Ledger, ValueIndex
from ..tokens import TokenCounter
from .protection import Protection
from .unitset import UnitSet


@dataclass
class FoldState:
    """Sticky compaction decisions: what stays removed or truncated on every later request.

    Everything here is proportional to the view, not to history, so a pass can copy it:
    removed units are runs (`UnitSet`), and the per-message records (``truncated``,
    ``stripped``, ``shortened``) hold messages still in the view only: a unit that leaves
    takes its records with it (see `remove_unit`).
    """

    removed_units: UnitSet = field(default_factory=UnitSet)
    # entry index -> (the message as the view sends it, its raw cost)
    truncated: dict[int, tuple[dict[str, Any], int]] = field(default_factory=dict)
    stripped: set[int] = field(default_factory=set)  # earlier thinking left out
    shortened: set[int] = field(default_factory=set)  # text cut to its head
    rungs_used: dict[str, int] = field(default_factory=dict)  # rung name -> messages changed
    level: int = 0  # highest compaction level the view has been through (for the notice)
    # Removed units a summary stands for, the summary message and its raw cost, and the
    # record it came from (see `summarize`). ``pending_summary``: units this pass summarized,
    # waiting for the summarizer; never carried into a copy.
    summarized_units: UnitSet = field(default_factory=UnitSet)
    summary: dict[str, Any] | None = None
    summary_cost: int = 0
    summary_record: Any = None
    pending_summary: set[int] = field(default_factory=set)
    # Messages in the removed and in the summarized units (for reports and the notice).
    removed_messages: int = 0
    summarized_messages: int = 0
    # The identifier ledger the view carries (`contextfold.ledger`): immutable, shared.
    ledger: Ledger = EMPTY

    def __post_init__(self) -> None:
        # Accept plain collections (tests, older callers) and keep one representation.
        if not isinstance(self.removed_units, UnitSet):
            self.removed_units = UnitSet(self.removed_units)
        if not isinstance(self.summarized_units, UnitSet):
            self.summarized_units = UnitSet(self.summarized_units)

    def copy(self) -> FoldState:
        return FoldState(
            self.removed_units.copy(),
            dict(self.truncated),
            set(self.stripped),
            set(self.shortened),
            dict(self.rungs_used),
            self.level,
            self.summarized_units.copy(),
            self.summary,
            self.summary_cost,
            self.summary_record,
            removed_messages=self.removed_messages,
            summarized_messages=self.summarized_messages,
            ledger=self.ledger,
        )

    @property
    def is_empty(self) -> bool:
        return not self.removed_units and not self.truncated

    def remove_unit(self, unit_index: int, entries: list[int]) -> None:
        """The unit leaves the view; its messages' records go with it."""
        self.remove_units(((unit_index, entries),))

    def remove_units(self, removed: Sequence[tuple[int, list[int]]]) -> None:
        """``(unit index, its entries)`` leave the view with their messages' records, in
        one update of the removed set (the oldest turns of a long view leave together)."""
        leaving = [(u, entries) for u, entries in removed if u not in self.removed_units]
        self.removed_units.update(u for u, _ in leaving)
        self.removed_messages += sum(len(entries) for _, entries in leaving)
        if self.truncated or self.stripped or self.shortened:  # records go with their unit
            for _, entries in leaving:
                for index in entries:
                    self.truncated.pop(index, None)
                    self.stripped.discard(index)
                    self.shortened.discard(index)

    def summarize_unit(self, unit_index: int, entries: list[int]) -> None:
        """The unit leaves the view with the summary standing for it."""
        self.remove_unit(unit_index, entries)
        if unit_index not in self.summarized_units:
            self.summarized_units.add(unit_index)
            self.summarized_messages += len(entries)

    def restore_unit(self, unit_index: int, entries: list[int]) -> None:
        """The unit comes back into the view (a retained reminder), whole."""
        if unit_index in self.summarized_units:
            self.summarized_units.discard(unit_index)
            self.summarized_messages -= len(entries)
        if unit_index in self.removed_units:
            self.removed_units.discard(unit_index)
            self.removed_messages -= len(entries)

    def kept_units(self, unit_count: int) -> list[int]:
        """The units the view carries, in view order (cost: the view, not history)."""
        return list(self.removed_units.outside(unit_count))


@dataclass
class WorkingView:
    """History + a candidate FoldState + its running raw total, for the rungs to edit."""

    history: History
    state: FoldState
    protection: Protection
    counter: TokenCounter
    raw_total: int
    truncate_chars: int
    # The trigger in raw tokens: whole turns leave only while the view is above it, or when
    # removing them reaches the target (a removal that pays).
    limit_raw: int = 0
    # For the summarize rung: history's summary blocks, and how many of them (from the
    # first not yet summarized) already have a record in the store, so cost no call.
    summary_blocks: list[tuple[int, ...]] = field(default_factory=list)
    summary_free_blocks: int = 0
    # What the conversation shows about its values (which messages the agent drew from
    # last), when the context keeps an index of them; None: rungs go by position alone.
    uses: ValueIndex | None = None
    # While set, the rungs work on the messages before this history index only (the older
    # tasks, before the current human prompt); None: on the whole view.
    scope_end: int | None = None
    # While set, the rungs work on the messages from this history index on only (a pass
    # that leaves the view as last sent alone up to the content admitted since the last
    # pass, see `PassPlan.edit_from`); None: from the start.
    scope_start: int | None = None
    # What the current task draws on leaves only while the view is above this many raw
    # tokens; None: the middle of the band between the rungs' target and ``limit_raw``. A
    # deep pass, whose target and limit are 0, sets it to the configured band's middle.
    hold_raw: int | None = None
    # A deep pass holds the whole current task when it fits under the hold, not only what
    # a later turn drew on: its floor would otherwise leave out the result the task reads
    # next (see `held_by_current_task`).
    holds_whole_task: bool = False
    # A deep pass holds, against the same hold, the units of earlier tasks a later message
    # drew a value from (see `rungs.DropLeastUsed`).
    holds_reused: bool = False
    changed: dict[str, int] = field(default_factory=dict)  # rung name -> changes this pass
    _kept_entries: tuple[tuple[int, int, int | None, int | None], list[int]] | None = field(
        default=None, init=False, repr=False
    )

    def is_removed(self, entry_index: int) -> bool:
        return self.history.entries[entry_index].unit in self.state.removed_units

    def current(self, entry_index: int) -> tuple[dict[str, Any], int]:
        """The message as the view holds it now, and its raw cost."""
        swap = self.state.truncated.get(entry_index)
        if swap is not None:
            return swap
        entry = self.history.entries[entry_index]
        return entry.view or entry.message, entry.cost

    def replace(self, entry_index: int, message: dict[str, Any], cost: int, rung: str) -> None:
        _, old_cost = self.current(entry_index)
        self.state.truncated[entry_index] = (message, cost)
        self.raw_total += cost - old_cost
        self._count(rung)

    def remove_unit(self, unit_index: int, rung: str) -> int:
        """Remove a whole unit; returns how many messages left the view."""
        unit = self.history.units[unit_index]
        self.raw_total -= self.history.unit_cost(unit, self.state.truncated)
        self.state.remove_unit(unit_index, unit.entries)
        self._count(rung, len(unit.entries))
        return len(unit.entries)

    def remove_units(self, unit_indexes: Sequence[int], raw_cost: int, rung: str) -> None:
        """Remove whole units at once; ``raw_cost`` is what they cost in the view now."""
        units = self.history.units
        removed = [(u, units[u].entries) for u in unit_indexes]
        self.raw_total -= raw_cost
        self.state.remove_units(removed)
        self._count(rung, sum(len(entries) for _, entries in removed))

    def kept_units(self) -> list[int]:
        kept = self.state.kept_units(len(self.history.units))
        start, end = self.scope_start, self.scope_end
        if end is None and start is None:
            return kept
        units = self.history.units
        if end is not None:
            kept = [u for u in kept if units[u].start < end]
        if start is not None:
            kept = [u for u in kept if units[u].start >= start]
        return kept

    def unit_last_use(self, unit_index: int) -> int:
        """The newest message that drew a value from the unit (its last message if none)."""
        entries = self.history.units[unit_index].entries
        uses = self.uses
        if uses is None:
            return max(entries)
        return max(uses.last_use(i) for i in entries)

    def drawn_on_by_current_task(self, entry_index: int) -> bool:
        """Whether the message is in the current task (after its human prompt) and a later
        turn drew a value from it: a listing the agent is copying ids out of, one by one.
        The task is likely to need more of it (the next id, the item it was looking for),
        so the rungs do not shorten it, and remove it last (see `rungs.DropLeastUsed`).
        False without an index of the conversation's values (the ledger off) or a human
        prompt."""
        task = self.history.last_human
        uses = self.uses
        return (
            uses is not None
            and task is not None
            and entry_index > task
            and uses.last_use(entry_index) > entry_index
        )

    def unit_drawn_on_by_current_task(self, unit_index: int) -> bool:
        """`drawn_on_by_current_task` for a unit: it is in the current task and a turn after
        it drew a value from one of its messages."""
        task = self.history.last_human
        unit = self.history.units[unit_index]
        return (
            self.uses is not None
            and task is not None
            and unit.start > task
            and self.unit_last_use(unit_index) > max(unit.entries)
        )

    def held_by_current_task(self, entry_index: int) -> bool:
        """Whether the rungs hold the message for the current task: shorten it last, remove
        it last and only above the hold (see `rungs`). What a later turn drew on, and in a
        deep pass every message of the current task (the task's working set: a result it
        has not drawn on yet is the one it reads next), what it drew on last of all."""
        if self.holds_whole_task:
            task = self.history.last_human
            return task is not None and entry_index > task
        return self.drawn_on_by_current_task(entry_index)

    def unit_held_by_current_task(self, unit_index: int) -> bool:
        """`held_by_current_task` for a unit."""
        if self.holds_whole_task:
            task = self.history.last_human
            return task is not None and self.history.units[unit_index].start > task
        return self.unit_drawn_on_by_current_task(unit_index)

    def kept_entries(self) -> list[int]:
        """Entry indexes of the kept units, oldest first (history order)."""
        # Rungs that only shorten leave the kept units as they are, so the rungs of one
        # round share the list until a unit leaves (the removed set only grows in a pass).
        key = (
            len(self.state.removed_units),
            len(self.history.units),
            self.scope_end,
            self.scope_start,
        )
        if self._kept_entries is None or self._kept_entries[0] != key:
            units = self.history.units
            # Nearly sorted already (view order differs only around a reordered group), so
            # the sort is linear in practice.
            kept = sorted(i for u in self.kept_units() for i in units[u].entries)
            self._kept_entries = (key, kept)
        return self._kept_entries[1]

    def kept_among(self, indexes: set[int]) -> list[int]:
        """The kept entries among ``indexes``, oldest first, walking whichever is smaller:
        the listed entries or the view (a long session may list more than the view holds)."""
        if not indexes:
            return []
        removed = self.state.removed_units
        if len(indexes) <= len(self.history.units) - len(removed):
            entries = self.history.entries
            end = len(entries) if self.scope_end is None else self.scope_end
            start = self.scope_start or 0
            units = self.history.units
            return sorted(
                i
                for i in indexes
                if entries[i].unit not in removed and start <= units[entries[i].unit].start < end
            )
        return [i for i in self.kept_entries() if i in indexes]

    def _count(self, rung: str, n: int = 1) -> None:
        self.changed[rung] = self.changed.get(rung, 0) + n
        self.state.rungs_used[rung] = self.state.rungs_used.get(rung, 0) + n
