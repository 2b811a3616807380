"""A durable session's side of a context: reading it in on first use, and saving what a
request changed (`store.link` is what talks to the store; this module decides what the
context's state takes from it and gives to it)."""

from __future__ import annotations

import logging

from .compaction import snapshot as fold_snapshot
from .context_state import ContextState
from .store.link import SessionLink
from .tokens import CalibratedCounter, TokenCounter

logger = logging.getLogger(__name__)


class Persistence:
    """Loads a session into a context's state once, and saves its changes after requests."""

    def __init__(self, link: SessionLink, counter: TokenCounter, max_tool_result_bytes: int):
        self.link = link
        self.counter = counter
        self.max_tool_result_bytes = max_tool_result_bytes

    async def loaded(self, state: ContextState) -> None:
        """On first use of a durable session: its history (costs as stored, nothing counted
        again), the sticky state when it describes exactly that history, calibration and the
        refit cap, so the next view is the one the last process would have delivered."""
        if state.link_loaded:
            return
        loaded = await self.link.load(self.counter, self.max_tool_result_bytes)
        state.link_loaded = True
        state.reset(loaded.history)
        if loaded.state is not None:
            try:
                restored = fold_snapshot.restore(loaded.state, loaded.history.units)
            except (AttributeError, KeyError, TypeError, ValueError):
                logger.warning("context-fold: stored compaction state unreadable; planning afresh")
            else:
                state.sticky.restore(loaded.history, *restored)
        if loaded.calibration and isinstance(self.counter, CalibratedCounter):
            self.counter.restore(loaded.calibration)
        if loaded.budget:
            cap = loaded.budget.get("refit_cap")
            state.refit_cap = cap if isinstance(cap, int) and cap > 0 else None

    async def persist(self, state: ContextState) -> None:
        """Save what this request changed: the sticky state after a committed pass, the
        budget (with the refit cap) when it moved."""
        link, sticky = self.link, state.sticky
        if state.state_dirty:
            await link.save_state(
                fold_snapshot.snapshot(
                    sticky.state,
                    notice=sticky.notice,
                    notice_cost=sticky.notice_cost,
                    missed_target_at=sticky.missed_target_at,
                )
            )
            state.state_dirty = False  # only once saved: a failed save is tried again
        report = state.last_report
        budget = (report.budget, state.refit_cap) if report is not None else None
        if budget is not None and budget != state.last_persisted_budget:
            await link.save_budget({"effective_budget": budget[0], "refit_cap": budget[1]})
            state.last_persisted_budget = budget
