"""The ``summarize`` rung: the oldest turns leave the view and one summary stands for them.

A summary costs a model call, which the planner (synchronous, under the context's lock)
cannot make. So the rung works in two steps:

1. during the pass, `Summarize.apply` chooses the span, the oldest removable turns and call
   groups, whole, as `drop_oldest` would, marks them summarized and charges a reserve of
   ``max_output_tokens`` for the summary that will stand for them;
2. after the pass, the manager folds the span into a summary record (`summaries.fold`,
   one summarizer call: the span is bounded to what one call reads) and puts the summary
   message in the view; if the summarizer fails, the pass is planned again without this
   rung and nothing is written as a summary.

The span is never the protected head (system prompt, first human prompt) nor a protected
turn, and never splits a call group. The summary folds in the previous one, so the view
holds one summary of everything summarized so far, and it stays byte-identical from request
to request until the next pass: provider prefix caches keep hitting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError
from ..messages import NOTICE_SOURCE
from . import settings
from .working import WorkingView

SUMMARY_OPEN = '<context-summary covers="{ids}">'
SUMMARY_CLOSE = "</context-summary>"
# What the summary message adds around the summary text (tags, role): part of its reserve.
FRAMING_TOKENS = 40


@dataclass(frozen=True)
class Summarize:
    """Replace the oldest removable turns with one summary message (see the module).

    ``max_input_tokens`` bounds what one summarizer call reads (the span of one pass is cut
    to fit it, so a pass makes one call at most), ``max_output_tokens`` the summary,
    ``timeout`` the call, in seconds; ``min_messages`` is the smallest span worth a call.
    """

    max_input_tokens: int = 16_000
    max_output_tokens: int = 1_000
    timeout: float = 60.0
    min_messages: int = 4

    name: ClassVar[str] = "summarize"
    level: ClassVar[int] = 3  # whole turns leave the view, as with drop_oldest

    def __post_init__(self) -> None:
        rung = self.name
        settings.int_at_least(rung, "max_input_tokens", self.max_input_tokens, 1_000)
        settings.int_at_least(rung, "max_output_tokens", self.max_output_tokens, 50)
        settings.int_at_least(rung, "min_messages", self.min_messages, 1)
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(
                f"{rung}: setting 'timeout' must be a positive number of seconds, got {timeout!r}."
            )
        if self.max_output_tokens * 2 > self.max_input_tokens:
            raise ConfigError(
                f"{rung}: max_input_tokens ({self.max_input_tokens}) must be at least twice "
                f"max_output_tokens ({self.max_output_tokens}): a call reads the summary so "
                "far besides the new turns."
            )

    @property
    def span_budget(self) -> int:
        """Raw tokens of turns one pass may summarize: what one call reads, less the
        summary so far, the answer it writes and the prompt."""
        return self.max_input_tokens - 2 * self.max_output_tokens - 500

    @property
    def reserve(self) -> int:
        """Raw tokens the summary message may cost in the view."""
        return self.max_output_tokens + FRAMING_TOKENS

    def apply(self, work: WorkingView, target_raw: int) -> None:
        state = work.state
        units = work.history.units
        candidates = [
            u
            for u in range(len(units))
            if u not in state.removed_units and not work.protection.unit_reason(u)
        ]
        span: list[int] = []
        span_raw = 0
        for u in candidates:
            cost = work.history.unit_cost(units[u], state.truncated)
            if span and span_raw + cost > self.span_budget:
                break
            span.append(u)
            span_raw += cost
        messages = sum(len(units[u].entries) for u in span)
        if not span or messages < self.min_messages:
            return
        # The new summary replaces the one in the view (if any): charge the difference.
        charge = max(0, self.reserve - state.summary_cost)
        if work.raw_total - span_raw + charge >= work.raw_total:
            return  # a summary as large as the turns it stands for saves nothing
        # Only when it pays, as for drop_oldest: while above the trigger, or to the target.
        reaches = work.raw_total - span_raw + charge <= target_raw
        stop_at = target_raw if reaches else max(target_raw, work.limit_raw)
        if work.raw_total <= stop_at:
            return
        work.raw_total += charge
        state.summary_cost += charge
        for u in span:
            work.remove_unit(u, self.name)
            state.summarized_units.add(u)
            state.pending_summary.add(u)
            if work.raw_total <= stop_at:
                break


def summary_message(text: str, history_ids: Iterable[int]) -> dict[str, Any]:
    """The message the view carries in place of the summarized turns."""
    return {
        "role": "user",
        "content": f"{SUMMARY_OPEN.format(ids=id_ranges(history_ids))}\n{text}\n{SUMMARY_CLOSE}",
        "metadata": {"source": NOTICE_SOURCE, "summary": True},
    }


def id_ranges(history_ids: Iterable[int]) -> str:
    """``r2-r9,r12`` for the ids 2..9 and 12: which messages a summary stands for."""
    ordered = sorted(set(history_ids))
    parts: list[str] = []
    start = previous = None
    for index in ordered:
        if start is None:
            start = previous = index
        elif index == previous + 1:
            previous = index
        else:
            parts.append(f"r{start}" if start == previous else f"r{start}-r{previous}")
            start = previous = index
    if start is not None:
        parts.append(f"r{start}" if start == previous else f"r{start}-r{previous}")
    return ",".join(parts)
