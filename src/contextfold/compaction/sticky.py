"""The sticky view: the compaction decisions every request builds on until the next pass.

Once a message is shortened or a turn removed, later requests reuse the same reduced view,
so the prompt prefix stays byte-stable between passes and provider caches keep hitting. This
object holds those decisions (a `FoldState` and its notice), the view list they give, and
the running raw total that lets a steady request skip walking the view: an admitted message
is appended to the list in place, and only a pass (`commit`) or a resume (`restore`)
assembles it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..history import Appended, History
from ..ledger import ValueIndex
from .cadence import Cadence
from .oversized import answered, newest_carried_unit
from .planner import PassResult, assemble_view, view_raw_total
from .working import FoldState


@dataclass(slots=True)
class StickyView:
    """The committed compaction state of one history and the view it gives."""

    state: FoldState
    raw: int  # raw tokens of the view's messages (notice excluded), kept on every change
    view: list[dict[str, Any]] = field(default_factory=list)
    # A message landed before the view's tail (or nothing is assembled yet): re-assemble.
    # A new history starts stale, not assembled: a resume about to restore its sticky state
    # would build a whole-history view only to replace it.
    stale: bool = True
    notice: dict[str, Any] | None = None
    notice_cost: int = 0
    removed_messages: int = 0
    # Size of the messages after the last pass when it could not reach its target
    # (protection held it up): the next pass then waits until the view has really grown,
    # instead of re-running on every request for a few tokens.
    missed_target_at: int | None = None
    cadence: Cadence = field(default_factory=Cadence)  # how often passes come
    summaries_adopted: bool = False  # a resumed history takes up its stored summary once
    # The values of the history's messages and what the agent did with them, read as
    # passes need them (for the ledger and for which results are still in use).
    values: ValueIndex = field(default_factory=ValueIndex)
    # The pins this view was planned with: a pin added since, on a message the view has
    # compacted, makes the next request plan again to bring it back.
    pins_seen: frozenset[int] = frozenset()
    # The unit of the newest result the view carries as the newest group's results are
    # shortened to fit (see `oversized`): once it is answered, the next request runs a pass.
    carried_unit: int | None = None
    # How many history entries there were when the last pass was committed: what came after
    # is the content a pass that keeps the cached prefix may edit (`PassPlan.edit_from`).
    # None before any pass in this process.
    passed_at_entry: int | None = None
    # Messages a pass that kept the cached prefix shortened without listing their values
    # (it leaves the ledger as it was): the next pass that lists takes them up. Empty after
    # a restore: a resumed view lists nothing more of them.
    unlisted_shortened: frozenset[int] = frozenset()

    @classmethod
    def fresh(cls, history: History) -> StickyView:
        """No compaction yet: the whole history is the view."""
        return cls(state=FoldState(), raw=history.raw_total)

    def admitted(self, appended: Appended) -> None:
        """A message was appended to history: the view grows with it."""
        entry = appended.entry
        if appended.reordered:
            self.stale = True
        elif entry.view is not None and not self.stale:
            self.view.append(entry.view)
        self.raw += appended.delta

    def current(self, history: History) -> list[dict[str, Any]]:
        """The view list, assembled first if a change before its tail left it stale."""
        if self.stale:
            self.view = assemble_view(history, self.state, self.notice)
            self.stale = False
        return self.view

    def commit(self, history: History, result: PassResult) -> None:
        """Make a pass's decisions the ones later requests build on."""
        self.state = result.state
        self.notice = result.notice
        self.notice_cost = result.notice_cost
        self.raw = result.raw_total
        self.view = assemble_view(history, self.state, self.notice)
        self.stale = False
        self.removed_messages = self.state.removed_messages
        self.pins_seen = frozenset(history.pins)
        self.carried_unit = newest_carried_unit(history, self.state)
        self.passed_at_entry = len(history.entries)

    def restore(
        self,
        history: History,
        state: FoldState,
        notice: dict[str, Any] | None,
        notice_cost: int,
        missed_target_at: int | None,
    ) -> None:
        """Take up decisions saved by an earlier process (or undo a staged commit)."""
        self.state = state
        self.notice, self.notice_cost = notice, notice_cost
        self.raw = view_raw_total(history, state)
        self.view = assemble_view(history, state, notice)
        self.stale = False
        self.removed_messages = state.removed_messages
        self.missed_target_at = missed_target_at
        self.summaries_adopted = state.summary_record is not None
        self.carried_unit = newest_carried_unit(history, state)
        # The saved state may predate a pin: the next request checks them all.
        self.pins_seen = frozenset()
        self.passed_at_entry = None
        self.unlisted_shortened = frozenset()

    def carries_answered(self, history: History) -> bool:
        """Whether the view carries a result shortened to fit as the newest group's that
        has been answered since (then a pass cuts it, see `oversized`)."""
        return self.carried_unit is not None and answered(history, self.carried_unit)

    def newly_pinned_out(self, history: History) -> bool:
        """Whether a message pinned since the last plan is compacted in this view (then a
        pass must bring it back); the pins are taken as seen when none is."""
        pins = history.pins
        if not pins or pins <= self.pins_seen:
            return False
        if any(self.compacted(history, i) for i in pins - self.pins_seen):
            return True
        self.pins_seen = frozenset(pins)
        return False

    def compacted(self, history: History, index: int) -> bool:
        """Whether history entry ``index`` is shortened or out of this view."""
        state = self.state
        return index in state.truncated or history.entries[index].unit in state.removed_units
