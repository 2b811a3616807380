"""Relaxation: the order in which soft protections yield when a view cannot fit its budget.

Soft protections (the recent fraction, the last N tool results, the older turns of the
current prompt) keep recent context whole while compaction works toward its *target*. They
must never turn a request that can fit into an error: a session dies only when it must. So
when a pass, with every protection in force, still leaves the view over the *budget*, the
planner relaxes one step at a time, in this order, and re-runs the ladder after each step:

1. ``recent``: the recent fraction (``protected_recent``) no longer protects;
2. ``recent_tool_results_shortened``: the last ``protected_tool_results`` results may be
   shortened, oldest first (their call groups still stay);
3. ``current_prompt_turns``: those results' turns, the older turns of the current prompt,
   may leave whole.

Then the notice shrinks to its header, then goes (see `planner`). Pinned messages
(``metadata.pinned``, `ContextFold.pin`) come next, only when the view without a notice is
still over the budget:

4. ``pins``: pinned messages may be shortened, and their turns leave whole, oldest first, as
   far as the budget needs; a pass that has room again brings them back.

Only the required core (system messages, first and last human prompt, retained reminders,
loaded-tool state, the newest call group and the last message) is never relaxed, with one
exception:

5. ``newest_results_shortened``: when the view is still over the budget, the newest call
   group's tool results are shortened in the view, head and tail with a recall marker (see
   `newest_results`); the group stays whole and paired. The identifier ledger keeps a
   page of up to half its room here (the results give way for it); it goes only if the
   request cannot fit otherwise.

When even that does not fit, the request is refused with `ContextLengthError`.
"""

from __future__ import annotations

from enum import IntEnum


class Relaxation(IntEnum):
    """How far soft protection has yielded; each level includes the ones before it."""

    NONE = 0
    RECENT = 1
    RECENT_TOOL_RESULTS_SHORTENED = 2
    CURRENT_PROMPT_TURNS = 3
    PINS = 4
    # Not a protection that yields (`protection` never reads it): the planner's last step.
    NEWEST_RESULTS_SHORTENED = 5

    @property
    def label(self) -> str:
        return RELAXATION_LABELS[self]

    def recent_fraction(self, configured: float) -> float:
        return configured if self < Relaxation.RECENT else 0.0

    @property
    def keeps_recent_results_whole(self) -> bool:
        return self < Relaxation.RECENT_TOOL_RESULTS_SHORTENED

    @property
    def keeps_recent_result_groups(self) -> bool:
        return self < Relaxation.CURRENT_PROMPT_TURNS

    @property
    def keeps_pins(self) -> bool:
        return self < Relaxation.PINS

    def steps(self, *, pins: bool = True) -> list[str]:
        """Labels of every step taken up to this level, in order (for reports); without
        ``pins`` when no pinned message yielded (there was none in the view)."""
        return [
            level.label
            for level in Relaxation
            if Relaxation.NONE < level <= self and (pins or level is not Relaxation.PINS)
        ]


RELAXATION_LABELS = {
    Relaxation.NONE: "none",
    Relaxation.RECENT: "recent",
    Relaxation.RECENT_TOOL_RESULTS_SHORTENED: "recent_tool_results_shortened",
    Relaxation.CURRENT_PROMPT_TURNS: "current_prompt_turns",
    Relaxation.PINS: "pins",
    Relaxation.NEWEST_RESULTS_SHORTENED: "newest_results_shortened",
}

RELAXATION_ORDER = tuple(level.label for level in Relaxation if level > Relaxation.NONE)
