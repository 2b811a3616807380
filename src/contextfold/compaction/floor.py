"""The error for a required core that cannot fit: the numbers, the culprit, the fix.

By the time it is raised every soft protection has yielded (see `relaxation`) and the notice
is gone: what is left is what no request may go without.
"""

from __future__ import annotations

from ..budget import BudgetDecision
from ..errors import ContextLengthError, context_length_error
from ..history import History
from .planner import PassResult


def floor_error(
    history: History, result: PassResult, decision: BudgetDecision, needed: int, model: str | None
) -> ContextLengthError:
    """ContextLengthError naming the numbers, the largest required message and the fix."""
    kept_units = len(history.units) - len(result.state.removed_units)
    return context_length_error(
        f"context-fold: the content this request cannot go without (system messages, the "
        f"first and last human prompt, retained reminders, the newest tool-call group) "
        f"needs about {needed:,} tokens but the effective budget is "
        f"{decision.effective_budget:,} (source: {decision.source}; {len(history)} messages "
        f"in history, {kept_units} turns left after compaction)."
        f"{_largest_required(history, result, needed, decision.effective_budget)} Raise "
        "max_tokens or use a model with a larger window, or start a new session.",
        required_tokens=needed,
        budget=decision.effective_budget,
        model=model,
    )


def _largest_required(history: History, result: PassResult, needed: int, budget: int) -> str:
    protection = result.protection
    if protection is None:
        return ""
    best: tuple[int, int, str] | None = None  # (cost, index, reason)
    for index, reason in sorted(protection.untouchable.items()):
        entry = history.entries[index]
        if entry.unit in result.state.removed_units:
            continue
        cost = result.state.truncated.get(index, (None, entry.cost))[1]
        if best is None or cost > best[0]:
            best = (cost, index, reason)
    if best is None:
        return ""
    cost, index, reason = best
    kind = history.entries[index].info.kind.value
    text = (
        f" The largest of it is message {index} ({kind}, {reason.replace('_', ' ')}) at "
        f"about {cost:,} tokens."
    )
    if kind == "tool_result" and needed - cost <= budget:
        # Only when this result is the cause: without it the request would fit.
        text += (
            " Lower max_tool_result_bytes so one tool result fits the window "
            "(about 4 bytes per token)."
        )
    return text
