"""The ladder: each rung is a small object with a name and one method.

Rungs run in order, cheapest and least lossy first; each checks the running total
after every single change and stops as soon as the view is under target, so no more
is lost than the budget requires. Every rung scans the history once per pass: a pass
is linear in the number of messages.

The first rung leaves earlier turns' thinking out of the view: nearly lossless (providers
ignore earlier thinking; Anthropic does not even count it) and often the largest saving in
a run with extended thinking.
"""

from __future__ import annotations

from typing import Protocol

from ..messages import Kind
from .truncate import shorten_prose, shorten_tool_result, strip_thinking, text_length
from .working import WorkingView


class Rung(Protocol):
    """One step of the ladder. ``level`` is the compaction level it reports (the reference
    module's numbering: 1 truncate tool results, 2 truncate long text, 3 drop oldest; 0 for
    a nearly lossless step below them)."""

    name: str
    level: int

    def apply(self, work: WorkingView, target_raw: int) -> None:
        """Change the working view, oldest first, until ``work.raw_total <= target_raw``."""
        ...


class StripEarlierThinking:
    """Leave the thinking blocks of earlier assistant turns out of the view.

    All of a message's thinking blocks go, or none (Anthropic: never edit or partly remove
    a turn's thinking); the newest call group's are protected and always go back intact.
    """

    name = "strip_thinking"
    level = 0

    def apply(self, work: WorkingView, target_raw: int) -> None:
        for index, entry in enumerate(work.history.entries):
            if work.raw_total <= target_raw:
                return
            if (
                not entry.info.thinking
                or index in work.state.stripped
                or work.protection.entry_reason(index)
                or work.is_removed(index)
            ):
                continue
            current, _ = work.current(index)
            short = strip_thinking(current)
            if short is None:
                continue
            work.replace(index, short, work.counter.count_message(short), self.name)
            work.state.stripped.add(index)


class TruncateToolResults:
    """Shorten old tool results to their first ``truncate_chars`` characters."""

    name = "truncate_tool_results"
    level = 1

    def apply(self, work: WorkingView, target_raw: int) -> None:
        _shorten_where(work, target_raw, self.name, kinds=(Kind.TOOL_RESULT,), tool=True)


class TruncateLongText:
    """Shorten long old assistant replies and non-human user messages (never a human prompt)."""

    name = "truncate_long_text"
    level = 2

    def apply(self, work: WorkingView, target_raw: int) -> None:
        _shorten_where(work, target_raw, self.name, kinds=(Kind.ASSISTANT, Kind.USER), tool=False)


class DropOldest:
    """Remove the oldest removable units (whole tool-call groups) from the view.

    Only removals that pay: whole turns leave while the view is above the trigger, and
    below it only if removing every removable turn would reach the target. Otherwise a
    pass would throw away many turns (every early note and call) for a small saving and
    still miss its target.
    """

    name = "drop_oldest"
    level = 3

    def apply(self, work: WorkingView, target_raw: int) -> None:
        removed = work.state.removed_units
        units = work.history.units
        candidates = [
            u for u in range(len(units)) if u not in removed and not work.protection.unit_reason(u)
        ]
        removable = sum(work.history.unit_cost(units[u], work.state.truncated) for u in candidates)
        reaches_target = work.raw_total - removable <= target_raw
        stop_at = target_raw if reaches_target else max(target_raw, work.limit_raw)
        for unit_index in candidates:
            if work.raw_total <= stop_at:
                return
            work.remove_unit(unit_index, self.name)


DEFAULT_LADDER: tuple[Rung, ...] = (
    StripEarlierThinking(),
    TruncateToolResults(),
    TruncateLongText(),
    DropOldest(),
)


def _shorten_where(
    work: WorkingView, target_raw: int, rung: str, *, kinds: tuple[Kind, ...], tool: bool
) -> None:
    keep = work.truncate_chars
    # Shortening something already near `keep` saves nothing: skip it cheaply.
    worth = keep * 2 + 200 if tool else keep * 4 + 200
    for index, entry in enumerate(work.history.entries):
        if work.raw_total <= target_raw:
            return
        if (
            entry.info.kind not in kinds
            or index in work.state.shortened
            or work.protection.entry_reason(index)
            # a turn's text is edited only once its thinking is out of the view
            or (entry.info.thinking and index not in work.state.stripped)
            or work.is_removed(index)
        ):
            continue
        current, current_cost = work.current(index)
        if text_length(current) <= worth:
            continue
        short = shorten_tool_result(current, keep) if tool else shorten_prose(current, keep)
        if short is None:
            continue
        cost = work.counter.count_message(short)
        if cost < current_cost:
            work.replace(index, short, cost, rung)
            work.state.shortened.add(index)
