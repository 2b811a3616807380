"""A durable session's side of a context: reading it in on first use, and saving what a
request changed (`store.link` is what talks to the store; this module decides what the
context's state takes from it and gives to it)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .compaction import snapshot as fold_snapshot
from .context_state import ContextState
from .history import History
from .store.link import PINS_KEY, SessionLink
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
        if loaded.pins is not None:
            _take_pins(loaded.history, loaded.pins)
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
            document = fold_snapshot.snapshot(
                sticky.state,
                notice=sticky.notice,
                notice_cost=sticky.notice_cost,
                missed_target_at=sticky.missed_target_at,
            )
            history = state.history
            # The pins as they stand, and how much of history they speak for: a message
            # admitted after this save keeps the pin its metadata asks for.
            document[PINS_KEY] = {"ids": sorted(history.pins), "through": len(history)}
            await link.save_state(document)
            state.state_dirty = False  # only once saved: a failed save is tried again
        report = state.last_report
        budget = (report.budget, state.refit_cap) if report is not None else None
        if budget is not None and budget != state.last_persisted_budget:
            await link.save_budget({"effective_budget": budget[0], "refit_cap": budget[1]})
            state.last_persisted_budget = budget


def _take_pins(history: History, saved: Mapping[str, Any]) -> None:
    """The pins saved with the state, in place of those the messages up to ``through`` ask
    for (a pin added or removed by id outlives the process); later messages keep their own.
    A saved form this code cannot read is set aside with a warning."""
    ids, through = saved.get("ids"), saved.get("through")
    size = len(history)
    if (
        not isinstance(ids, list)
        or isinstance(through, bool)
        or not isinstance(through, int)
        or not 0 <= through <= size
        or not all(type(i) is int and 0 <= i < through for i in ids)
    ):
        logger.warning("context-fold: the saved pins cannot be read; keeping the messages' own")
        return
    entries = history.entries
    kept = {i for i in ids if entries[i].view is not None}
    later = {i for i in history.pins if i >= through}
    history.pins = kept | later
