"""``clear_tool_results``: an old tool result's content gives way to a short placeholder.

The call stays, and so does its answer (the result message, its ``tool_call_id``): the
model still sees what it did and with which arguments, and the placeholder names the id
that brings the output back (``[... 4,812 tokens cleared; context_recall("r41") returns
it]``). Cheaper for the model than losing the whole turn, dearer than a truncation: the
ladder runs it after the truncation rungs and before `drop_oldest`.

Its level is 2, the reference's "truncate long text": clearing is a shortening to nothing
of one message, not a removal (the message, the call and the pairing stay), and the
reference's numbering (1 truncate tool results, 2 truncate long text, 3 drop oldest) has no
whole number in between; a `compaction_notice_min_level` of 3 ("tell the model only when
turns left") therefore stays quiet for it, as for the other truncations.

``clear_at_least`` is Anthropic's context-editing setting: clearing rewrites the prompt
prefix, so a pass that would free fewer tokens than that clears nothing at all (not worth
breaking the provider's prompt cache for). ``keep_last`` results are never cleared, on top
of the protection every rung honours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..messages import Kind
from . import settings
from .tool_names import result_tool_names
from .truncate import clear_tool_result, cleared_text
from .working import WorkingView

DEFAULT_KEEP_LAST = 3  # Anthropic's default for its clear_tool_uses strategy


@dataclass(frozen=True)
class ClearToolResults:
    """Replace old tool results' content with a placeholder naming their recall id."""

    keep_last: int = DEFAULT_KEEP_LAST
    clear_at_least: int = 0
    exempt_tools: frozenset[str] = frozenset()

    name: ClassVar[str] = "clear_tool_results"
    level: ClassVar[int] = 2

    def __post_init__(self) -> None:
        settings.int_at_least(self.name, "keep_last", self.keep_last, 0)
        settings.int_at_least(self.name, "clear_at_least", self.clear_at_least, 0)
        exempt = settings.tool_names(self.name, "exempt_tools", self.exempt_tools)
        object.__setattr__(self, "exempt_tools", exempt)

    def apply(self, work: WorkingView, target_raw: int) -> None:
        history = work.history
        entries = history.entries
        results = [i for i in work.kept_entries() if entries[i].info.kind is Kind.TOOL_RESULT]
        if self.keep_last:
            results = results[: -self.keep_last]
        if work.uses is not None:
            # The results the conversation drew from least recently go first.
            uses = work.uses
            results.sort(key=lambda i: (uses.last_use(i), i))
        # Plan first, then clear: `clear_at_least` judges the whole pass, not each message.
        planned: list[tuple[int, dict, int]] = []
        freed = 0
        for index in results:
            if work.raw_total - freed <= target_raw:
                break
            if work.protection.entry_reason(index):
                continue
            if self.exempt_tools and result_tool_names(history, index) & self.exempt_tools:
                continue
            current, current_cost = work.current(index)
            placeholder = cleared_text(history.entries[index].cost, index)
            cleared = clear_tool_result(current, placeholder)
            if cleared is None or cleared == current:
                continue
            cost = work.counter.count_message(cleared)
            if cost >= current_cost:
                continue
            planned.append((index, cleared, cost))
            freed += current_cost - cost
        if not planned or freed < self.clear_at_least:
            return
        for index, cleared, cost in planned:
            work.replace(index, cleared, cost, self.name)
            work.state.shortened.add(index)
