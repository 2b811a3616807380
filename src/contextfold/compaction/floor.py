"""The error for a protected floor that cannot fit: the numbers, the culprit, the fix."""

from __future__ import annotations

from ..budget import BudgetDecision
from ..errors import ContextLengthError, context_length_error
from ..history import History
from .planner import PassResult


def floor_error(
    history: History, result: PassResult, decision: BudgetDecision, needed: int, model: str | None
) -> ContextLengthError:
    """ContextLengthError naming the numbers, the largest protected message and the fix."""
    kept_units = len(history.units) - len(result.state.removed_units)
    return context_length_error(
        f"context-fold: the protected content of this conversation needs about "
        f"{needed:,} tokens but the effective budget is {decision.effective_budget:,} "
        f"(source: {decision.source}; {len(history)} messages in history, {kept_units} "
        f"turns left that cannot be removed).{_largest_protected(history, result)} Raise "
        "max_tokens or use a model with a larger window, lower protected_recent / "
        "protected_tool_results, or start a new session.",
        required_tokens=needed,
        budget=decision.effective_budget,
        model=model,
    )


def _largest_protected(history: History, result: PassResult) -> str:
    protection = result.protection
    if protection is None:
        return ""
    best: tuple[int, int, str] | None = None  # (cost, index, reason)
    for index, entry in enumerate(history.entries):
        reason = protection.entry_reason(index)
        if not reason or entry.unit in result.state.removed_units:
            continue
        cost = result.state.truncated.get(index, (None, entry.cost))[1]
        if best is None or cost > best[0]:
            best = (cost, index, reason)
    if best is None:
        return ""
    cost, index, reason = best
    kind = history.entries[index].info.kind.value
    text = (
        f" The largest protected message is message {index} ({kind}, "
        f"{reason.replace('_', ' ')}) at about {cost:,} tokens."
    )
    if kind == "tool_result":
        text += (
            " Lower max_tool_result_bytes so one tool result fits the window "
            "(about 4 bytes per token)."
        )
    return text
