"""Which messages compaction may not touch, and why.

Protection has two strengths, computed once per compaction round:
- *untouchable* entries are neither shortened nor removed;
- *unremovable* units hold an untouchable entry (a protected result keeps its call group,
  since a group leaves whole or not at all).

The reasons fall in two classes. The **required core** is what a request cannot be sent
without: system messages (a hook's injected note is not one), the first and the last human
prompt, retained reminders, messages recording loaded-tool state, the call group whose
results the request sends back (the newest group of the current prompt, with no assistant
reply after it: its results are what the model asked for, and its signed thinking must go
back unmodified, Anthropic's rule for the turn whose tool results are sent) and the last
unit. **Soft** protections keep recent context whole on the way to the *target*, and yield,
in `RELAXATION_ORDER`, when the view cannot otherwise fit the *budget* (see `relaxation`).
Pinned messages (`History.pins`) are soft too, the last of them to yield: only when the view
without its notice still cannot fit the budget, before the required core gives anything.

Thinking of earlier assistant turns is not protected: providers need only the newest turn's
(Anthropic ignores earlier thinking and does not count it), so a rung may strip it, all of a
message's thinking blocks or none, and its turn may leave whole.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..history import History
from ..messages import Kind
from .relaxation import Relaxation

REASON_SYSTEM = "system"
REASON_FIRST_HUMAN = "first_human_prompt"
REASON_LAST_HUMAN = "last_human_prompt"
REASON_REMINDER = "retained_reminder"
REASON_TOOL_STATE = "loaded_tool_state"
REASON_CURRENT_GROUP = "newest_call_group"
REASON_CURRENT_TURN = "current_turn"
REASON_RECENT = "recent"
REASON_RECENT_RESULT = "recent_tool_result"
REASON_PINNED = "pinned"

REQUIRED_REASONS = frozenset(
    {
        REASON_SYSTEM,
        REASON_FIRST_HUMAN,
        REASON_LAST_HUMAN,
        REASON_REMINDER,
        REASON_TOOL_STATE,
        REASON_CURRENT_GROUP,
        REASON_CURRENT_TURN,
    }
)


@dataclass(slots=True)
class Protection:
    """Protection reasons of one round, for the messages and units in the view only (a
    removed unit needs none), so computing them costs the view, not history."""

    untouchable: dict[int, str]  # entry index -> reason; absent: the entry may change
    unremovable: dict[int, str]  # unit index -> reason; absent: the unit may go

    def entry_reason(self, index: int) -> str | None:
        return self.untouchable.get(index)

    def unit_reason(self, unit: int) -> str | None:
        return self.unremovable.get(unit)


def newest_current_group(history: History) -> int | None:
    """The call group whose results the next request sends back: the newest group of the
    current prompt, unless an assistant reply has come after it (then it is history)."""
    turn_start = history.last_human if history.last_human is not None else -1
    for unit_index in range(len(history.units) - 1, -1, -1):
        unit = history.units[unit_index]
        if unit.start < turn_start:
            return None
        if unit.is_group:
            return unit_index
        if history.entries[unit.start].info.kind is Kind.ASSISTANT:
            return None
    return None


def compute_protection(
    history: History,
    kept_units: Sequence[int],
    *,
    protected_recent: float,
    protected_tool_results: int,
    retained: Collection[int] = (),
    relaxation: Relaxation = Relaxation.NONE,
) -> Protection:
    """Protection over the view as it stands: ``kept_units`` are its units in view order."""
    entries = history.entries
    units = history.units
    in_view = [i for unit_index in kept_units for i in units[unit_index].entries]
    untouchable: dict[int, str] = {}

    def protect(index: int, reason: str) -> None:
        untouchable.setdefault(index, reason)

    pinned = history.pinned_entries  # system prompts and loaded-tool state, as admitted
    for i in [i for i in in_view if i in pinned] if pinned else ():
        info = entries[i].info
        if info.kind is Kind.SYSTEM:
            untouchable[i] = REASON_SYSTEM
        elif info.loaded_tool_state:
            untouchable[i] = REASON_TOOL_STATE
    for index, reason in (
        (history.first_human, REASON_FIRST_HUMAN),
        (history.last_human, REASON_LAST_HUMAN),
    ):
        if index is not None:
            protect(index, reason)
    for index in retained:
        protect(index, REASON_REMINDER)
    pins = history.pins if relaxation.keeps_pins else ()
    for i in [i for i in in_view if i in pins] if pins else ():
        protect(i, REASON_PINNED)  # its unit (a call group: whole) stays with it

    unremovable: dict[int, str] = {}
    required_units = [(len(units) - 1, REASON_CURRENT_TURN)] if units else []
    group = newest_current_group(history)
    if group is not None:
        required_units.append((group, REASON_CURRENT_GROUP))
    for unit_index, reason in required_units:
        unremovable[unit_index] = reason
        for i in units[unit_index].entries:
            protect(i, reason)

    # Soft protections, counted over the view as it stands at the start of the round so
    # that removing messages cannot shift them.
    recent = math.ceil(relaxation.recent_fraction(protected_recent) * len(in_view))
    for i in in_view[len(in_view) - recent :] if recent else ():
        protect(i, REASON_RECENT)
    results_left = protected_tool_results if relaxation.keeps_recent_result_groups else 0
    for i in reversed(in_view):
        if results_left <= 0:
            break
        if entries[i].info.kind is Kind.TOOL_RESULT:
            if relaxation.keeps_recent_results_whole:
                protect(i, REASON_RECENT_RESULT)
            else:
                unremovable.setdefault(entries[i].unit, REASON_RECENT_RESULT)
            results_left -= max(1, len(entries[i].info.result_ids))

    for unit_index in kept_units:
        if unit_index in unremovable:
            continue
        for i in units[unit_index].entries:
            held = untouchable.get(i)
            if held:
                unremovable[unit_index] = held
                break
    return Protection(untouchable, unremovable)
