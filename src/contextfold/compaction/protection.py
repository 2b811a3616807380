"""Which messages compaction may not touch, and why.

Two strengths of protection, computed once per compaction pass:
- *untouchable* entries are neither truncated nor removed: system messages, the first
  and last human prompt, retained reminders, messages recording loaded-tool state, any
  message carrying signed thinking (its bytes must reach the provider unchanged), the
  last ``protected_recent`` fraction of the view, the last ``protected_tool_results``
  tool results, and the current turn (the last unit);
- *unremovable* units hold an untouchable entry (a protected sibling keeps its whole
  call group), or signed thinking of the current agentic turn (after the last human
  prompt), which the provider requires back verbatim while that turn's tools run.
Signed thinking of earlier turns may leave the view with its whole unit (providers
drop it from context anyway); it is never edited.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from ..history import History
from ..messages import Kind

REASON_SYSTEM = "system"
REASON_FIRST_HUMAN = "first_human_prompt"
REASON_LAST_HUMAN = "last_human_prompt"
REASON_REMINDER = "retained_reminder"
REASON_TOOL_STATE = "loaded_tool_state"
REASON_THINKING = "signed_thinking"
REASON_RECENT = "recent"
REASON_RECENT_RESULT = "recent_tool_result"
REASON_CURRENT_TURN = "current_turn"


@dataclass(slots=True)
class Protection:
    """Per-entry and per-unit protection flags for one pass, with the first reason found."""

    untouchable: list[str | None]  # by entry index: reason, or None if the entry may change
    unremovable: list[str | None]  # by unit index: reason, or None if the unit may go

    def entry_reason(self, index: int) -> str | None:
        return self.untouchable[index]

    def unit_reason(self, unit: int) -> str | None:
        return self.unremovable[unit]


def compute_protection(
    history: History,
    removed_units: Collection[int],
    *,
    protected_recent: float,
    protected_tool_results: int,
    retained: Collection[int] = (),
) -> Protection:
    """Protection flags over ``history`` as it stands in the view (removed units skipped)."""
    entries = history.entries
    untouchable: list[str | None] = [None] * len(entries)

    for i, entry in enumerate(entries):
        info = entry.info
        if info.kind is Kind.SYSTEM:
            untouchable[i] = REASON_SYSTEM
        elif info.loaded_tool_state:
            untouchable[i] = REASON_TOOL_STATE
        elif info.signed_thinking:
            untouchable[i] = REASON_THINKING
    for index, reason in (
        (history.first_human, REASON_FIRST_HUMAN),
        (history.last_human, REASON_LAST_HUMAN),
    ):
        if index is not None:
            untouchable[index] = untouchable[index] or reason
    for index in retained:
        untouchable[index] = untouchable[index] or REASON_REMINDER

    # The recent window and the recent tool results are counted over the view as it
    # stands at the start of the pass, so removing messages cannot shift them.
    in_view = [
        i
        for unit_index, unit in enumerate(history.units)
        if unit_index not in removed_units
        for i in range(unit.start, unit.end)
    ]
    recent = math.ceil(protected_recent * len(in_view))
    for i in in_view[len(in_view) - recent :] if recent else ():
        untouchable[i] = untouchable[i] or REASON_RECENT
    results_left = protected_tool_results
    for i in reversed(in_view):
        if results_left <= 0:
            break
        if entries[i].info.kind is Kind.TOOL_RESULT:
            untouchable[i] = untouchable[i] or REASON_RECENT_RESULT
            results_left -= max(1, len(entries[i].info.result_ids))

    unremovable: list[str | None] = [None] * len(history.units)
    if history.units:
        last = history.units[-1]
        unremovable[-1] = REASON_CURRENT_TURN
        for i in range(last.start, last.end):
            untouchable[i] = untouchable[i] or REASON_CURRENT_TURN
    turn_start = history.last_human if history.last_human is not None else 0
    for unit_index, unit in enumerate(history.units):
        if unremovable[unit_index]:
            continue
        for i in range(unit.start, unit.end):
            if untouchable[i] and untouchable[i] != REASON_THINKING:
                unremovable[unit_index] = untouchable[i]
                break
            if untouchable[i] == REASON_THINKING and i > turn_start:
                unremovable[unit_index] = REASON_THINKING
                break
    return Protection(untouchable, unremovable)
