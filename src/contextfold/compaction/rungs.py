"""The ladder: each rung is a small object with a name and one method.

Rungs run in order, cheapest and least lossy first; each checks the running total
after every single change and stops as soon as the view is under target, so no more
is lost than the budget requires. Every rung scans the history once per pass: a pass
is linear in the number of messages.
"""

from __future__ import annotations

from typing import Protocol

from ..messages import Kind
from .truncate import shorten_prose, shorten_tool_result, text_length
from .working import WorkingView


class Rung(Protocol):
    name: str

    def apply(self, work: WorkingView, target_raw: int) -> None:
        """Change the working view, oldest first, until ``work.raw_total <= target_raw``."""
        ...


class TruncateToolResults:
    """Shorten old tool results to their first ``truncate_chars`` characters."""

    name = "truncate_tool_results"

    def apply(self, work: WorkingView, target_raw: int) -> None:
        _shorten_where(work, target_raw, self.name, kinds=(Kind.TOOL_RESULT,), tool=True)


class TruncateLongText:
    """Shorten long old assistant replies and non-human user messages (never a human prompt)."""

    name = "truncate_long_text"

    def apply(self, work: WorkingView, target_raw: int) -> None:
        _shorten_where(work, target_raw, self.name, kinds=(Kind.ASSISTANT, Kind.USER), tool=False)


class DropOldest:
    """Remove the oldest removable units (whole tool-call groups) from the view."""

    name = "drop_oldest"

    def apply(self, work: WorkingView, target_raw: int) -> None:
        removed = work.state.removed_units
        for unit_index in range(len(work.history.units)):
            if work.raw_total <= target_raw:
                return
            if unit_index in removed or work.protection.unit_reason(unit_index):
                continue
            work.remove_unit(unit_index, self.name)


DEFAULT_LADDER: tuple[Rung, ...] = (TruncateToolResults(), TruncateLongText(), DropOldest())


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
            or index in work.state.truncated
            or work.protection.entry_reason(index)
            or entry.info.signed_thinking
            or work.is_removed(index)
            or text_length(entry.message) <= worth
        ):
            continue
        short = (
            shorten_tool_result(entry.message, keep) if tool else shorten_prose(entry.message, keep)
        )
        if short is None:
            continue
        cost = work.counter.count_message(short)
        if cost < entry.cost:
            work.replace(index, short, cost, rung)
