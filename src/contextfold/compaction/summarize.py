"""The ``summarize`` rung: the oldest turns leave the view and one summary stands for them.

A summary costs a model call, which the planner (synchronous, under the context's lock)
cannot make. So the rung works in two steps:

1. during the pass, `Summarize.apply` chooses the span, whole *blocks* of the oldest turns
   and call groups, marks them summarized and charges a reserve of ``max_output_tokens``
   for the summary that will stand for them;
2. after the pass, the manager folds the span into the summary record, block by block
   (`summaries.fold`), and puts the summary message in the view; if the summarizer fails,
   the pass is planned again without this rung and nothing is written as a summary.

Blocks are fixed by history alone (`summary_blocks`: consecutive turns, cut where their
size passes what one call reads), so a resumed session or another worker summarizes the same
spans and finds their records in the store. A pass takes the blocks whose records are
already stored, then at most one more: one summarizer call per pass at most.

The span is never the protected head (system prompt, first human prompt) nor a protected
turn, and never splits a call group. The summary folds in the previous one, so the view
holds one summary of everything summarized so far, and it stays byte-identical from request
to request until the next pass: provider prefix caches keep hitting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..errors import ConfigError
from ..history import History, Unit
from ..messages import NOTICE_SOURCE, Kind
from . import settings
from .working import WorkingView

SUMMARY_OPEN = '<context-summary covers="{ids}">'
SUMMARY_CLOSE = "</context-summary>"
# What the summary message adds around the summary text (tags, role): part of its reserve.
FRAMING_TOKENS = 40
# max_output_tokens left unset scales with the effective budget: this share of it, within
# these bounds. A fixed 1,000 in a 16k window reserves about what a summary saves there.
OUTPUT_BUDGET_SHARE = 0.03
MIN_SCALED_OUTPUT_TOKENS = 200
DEFAULT_MAX_OUTPUT_TOKENS = 1_000  # the scaled default's ceiling


class ScaledDefault(int):
    """``max_output_tokens`` as the user left it: an int (the size it stands at, the ceiling
    until a budget is known) that `Summarize.for_budget` may resize; any plain int the user
    gives is kept exactly."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ScaledDefault({int(self)})"


def scaled_output_tokens(budget: int) -> int:
    """The default summary size for an effective budget of ``budget`` tokens."""
    share = int(budget * OUTPUT_BUDGET_SHARE)
    return max(MIN_SCALED_OUTPUT_TOKENS, min(DEFAULT_MAX_OUTPUT_TOKENS, share))


@dataclass(frozen=True)
class Summarize:
    """Replace the oldest removable turns with one summary message (see the module).

    ``max_input_tokens`` bounds what one summarizer call reads (the span of one pass is cut
    to fit it, so a pass makes one call at most), ``max_output_tokens`` the summary,
    ``timeout`` the call, in seconds; ``min_messages`` is the smallest span worth a call.
    Left unset, ``max_output_tokens`` follows the budget (`for_budget`): 3% of it, between
    200 and 1,000 tokens.
    """

    max_input_tokens: int = 16_000
    max_output_tokens: int = ScaledDefault(DEFAULT_MAX_OUTPUT_TOKENS)
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
    def scales(self) -> bool:
        """Whether the summary size follows the budget (``max_output_tokens`` left unset)."""
        return isinstance(self.max_output_tokens, ScaledDefault)

    def for_budget(self, budget: int) -> Summarize:
        """This rung as it runs under an effective budget of ``budget`` tokens: the summary
        size the user set, exactly, or the default sized by `scaled_output_tokens`."""
        if not self.scales:
            return self
        size = scaled_output_tokens(budget)
        if size == self.max_output_tokens:
            return self
        return replace(self, max_output_tokens=ScaledDefault(size))

    @property
    def span_budget(self) -> int:
        """Raw tokens of one block: half of what one call reads once the summary so far
        and the answer are set aside, so a block always fits one call. A scaled summary
        size counts at its ceiling, so blocks stay fixed by history alone whatever the
        budget (a resumed session or another worker finds the same records)."""
        ceiling = DEFAULT_MAX_OUTPUT_TOKENS if self.scales else self.max_output_tokens
        return (self.max_input_tokens - 2 * ceiling) // 2

    @property
    def reserve(self) -> int:
        """Raw tokens the summary message may cost in the view."""
        return self.max_output_tokens + FRAMING_TOKENS

    def apply(self, work: WorkingView, target_raw: int) -> None:
        state = work.state
        history = work.history
        chosen: list[tuple[int, ...]] = []
        span_raw = 0
        # A summary only grows forward: turns before the end of what it covers (turns a
        # resumed run had dropped, not summarized) are for the other rungs.
        record = state.summary_record
        covered_to = record.history_ids[-1] if record is not None and record.history_ids else -1
        blocks = work.summary_blocks[:-1]  # a last block still grows
        free = work.summary_free_blocks
        # One summarizer call per pass, also when the ladder comes round again in the same
        # pass: the first block needing a call is the only one, and once it is taken the
        # summary grows no further.
        if free < len(blocks) and any(u in state.pending_summary for u in blocks[free]):
            return
        removed, summarized = state.removed_units, state.summarized_units
        end = next(reversed(summarized), None)  # the last turn the summary stands for
        for position, block in enumerate(blocks):
            # What of the block is still in the view (drop_oldest may have taken some).
            left = tuple(u for u in block if u not in removed)
            if not left or min(history.units[left[0]].entries) <= covered_to:
                continue
            # The summary stands for one unbroken run of turns: it never grows past a turn
            # another rung dropped (it would claim a stretch with a hole nobody is told of),
            # and a first summary never spans one.
            low = left[0] if end is None else end + 1
            if removed.count_in(low, left[-1] + 1) != summarized.count_in(low, left[-1] + 1):
                break
            if any(work.protection.unit_reason(u) for u in left):
                break  # blocks are summarized in order
            chosen.append(left)
            end = left[-1]
            span_raw += sum(history.unit_cost(history.units[u], state.truncated) for u in left)
            if position >= free:
                break  # this block needs a call: one per pass
        messages = sum(len(history.units[u].entries) for block in chosen for u in block)
        if not chosen or messages < self.min_messages:
            return
        # The new summary replaces the one in the view (if any): charge the difference.
        charge = max(0, self.reserve - state.summary_cost)
        if charge >= span_raw:
            return  # a summary as large as the turns it stands for saves nothing
        # Only when it pays, as for drop_oldest: while above the trigger, or to the target.
        reaches = work.raw_total - span_raw + charge <= target_raw
        stop_at = target_raw if reaches else max(target_raw, work.limit_raw)
        if work.raw_total <= stop_at:
            return
        work.raw_total += charge
        state.summary_cost += charge
        for block in chosen:
            for u in block:
                work.remove_unit(u, self.name)
                state.summarize_unit(u, history.units[u].entries)
                state.pending_summary.add(u)
            if work.raw_total <= stop_at:
                break


def sized_ladder(ladder: Sequence[Any], budget: int) -> tuple[Any, ...]:
    """``ladder`` with its summarize rung sized for an effective budget of ``budget``."""
    return tuple(r.for_budget(budget) if isinstance(r, Summarize) else r for r in ladder)


def summary_blocks(history: History, span_budget: int) -> list[tuple[int, ...]]:
    """Consecutive units a summary folds one block at a time, fixed by history alone.

    Units that are never summarized (system messages, the first human prompt, loaded-tool
    state) are skipped; a block is cut where its size (as admitted) would pass
    ``span_budget``. Only history decides the cuts, so every worker and every resume of the
    same conversation summarizes the same spans and finds their records again.
    """
    blocks: list[tuple[int, ...]] = []
    current: list[int] = []
    size = 0
    for index, unit in enumerate(history.units):
        if _never_summarized(history, unit):
            continue
        cost = history.unit_cost(unit, {})
        if current and size + cost > span_budget:
            blocks.append(tuple(current))
            current, size = [], 0
        current.append(index)
        size += cost
    if current:
        blocks.append(tuple(current))
    return blocks


def _never_summarized(history: History, unit: Unit) -> bool:
    for index in unit.entries:
        info = history.entries[index].info
        if info.kind is Kind.SYSTEM or info.loaded_tool_state or index == history.first_human:
            return True
    return False


def summary_message(text: str, history_ids: Iterable[int], appendix: str = "") -> dict[str, Any]:
    """The message the view carries in place of the summarized turns: the summary, and the
    values the check found it leaves out (`ledger.check_summary`), inside one frame."""
    framed = _FRAME_TAG.sub("&lt;", f"{text}\n{appendix}" if appendix else text)
    return {
        "role": "user",
        "content": f"{SUMMARY_OPEN.format(ids=id_ranges(history_ids))}\n{framed}\n{SUMMARY_CLOSE}",
        "metadata": {"source": NOTICE_SOURCE, "summary": True},
    }


# The "<" of a context-summary tag inside a summary's text, however spelled (case, spaces,
# a slash): written "&lt;", so text from a tool result, carried into the summary, can never
# close the frame and speak as the user after it.
_FRAME_TAG = re.compile(r"<(?=\s*/?\s*context-summary)", re.IGNORECASE)


def id_ranges(history_ids: Iterable[int]) -> str:
    """``r2-r9,r12`` for the ids 2..9 and 12: which messages a summary stands for."""
    ordered = sorted(set(history_ids))
    if not ordered:
        return ""
    parts: list[str] = []
    start = previous = ordered[0]
    for index in ordered[1:]:
        if index == previous + 1:
            previous = index
        else:
            parts.append(f"r{start}" if start == previous else f"r{start}-r{previous}")
            start = previous = index
    parts.append(f"r{start}" if start == previous else f"r{start}-r{previous}")
    return ",".join(parts)
