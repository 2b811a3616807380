"""How much of the view as last sent a pass leaves as it was, from its start: what the next
request still reads from the prompt cache (a pass rewrites everything after its first
change). The cost planner weighs its options by it (`cost_plan.cheapest_option`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..history import History
from .working import FoldState


def message_costs(
    history: History, state: FoldState, notice: Mapping[str, Any] | None, notice_cost: int
) -> dict[int, int]:
    """The raw cost of every message a view of ``state`` holds, by the message object's id:
    the kept messages as the view holds them (shortened or whole), the ledger's pages, the
    summary and the notice. One walk of the view's units."""
    costs: dict[int, int] = {}
    entries, units, truncated = history.entries, history.units, state.truncated
    for unit in state.kept_units(len(units)):
        for index in units[unit].entries:
            swap = truncated.get(index)
            if swap is not None:
                costs[id(swap[0])] = swap[1]
            else:
                entry = entries[index]
                if entry.view is not None:
                    costs[id(entry.view)] = entry.cost
    ledger = state.ledger
    for page, cost in zip(ledger.pages, ledger.costs, strict=False):
        costs[id(page)] = cost
    if state.summary is not None:
        costs[id(state.summary)] = state.summary_cost
    if notice is not None:
        costs[id(notice)] = notice_cost
    return costs


def kept_raw(
    sent: Sequence[Mapping[str, Any]],
    candidate: Sequence[Mapping[str, Any]],
    costs: Mapping[int, int],
) -> int:
    """Raw tokens of the leading messages ``candidate`` shares with ``sent``, the same
    objects in the same places (a message a pass changed is a new dict), priced by
    ``costs`` (`message_costs` of the candidate's state)."""
    total = 0
    for before, after in zip(sent, candidate, strict=False):
        if before is not after:
            break
        total += costs.get(id(after), 0)
    return total
