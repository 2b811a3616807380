"""A result too large for the window, once answered: cut to the form any old result has.

When the newest call group's results do not fit the budget with the required core,
`newest_results` shortens them, for the request that sends them back. Carried on like
that, such a result would stay in every later request: protection holds it as a recent
result, and a pass that could not reach its target waits for the hard limit before it runs
again (`contextfold eval`, BFCL at 16,000 tokens, when it was shortened to fill the window:
two or three more requests of some 15,700 tokens after each of 42 results of 20,000, where
naive drop-oldest refuses the one request and then sends a few hundred tokens). So once the
agent has answered it (its group is no longer the one the request sends back, nor the last
unit), the next request runs one pass (``compacted_by: oversized``; not again if it finds
nothing worth committing), and the pass first cuts the result to ``truncate_chars``, its
head and a marker naming its recall id, as old results are cut, whatever protects it; its
values go to the ledger as any shortened result's do (nothing is silently lost). The call
and its result stay paired.

A result carried this way is recognised by the view's records alone: a tool result the
view holds in another form that no rung marked shortened or stripped (the rungs that
shorten a result mark it; `newest_results` does not), so a resumed view knows it as well.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..history import History
from ..messages import Kind
from .protection import newest_current_group
from .truncate import SHAPE_HEAD, shorten_tool_result
from .working import FoldState, WorkingView

NAME = "answered_results_shortened"  # the change's name in `applied` and `changed`


def carried_results(history: History, state: FoldState) -> list[int]:
    """The tool results ``state`` carries as `newest_results` shortened them, oldest first."""
    entries = history.entries
    return sorted(
        index
        for index in state.truncated
        if index not in state.shortened
        and index not in state.stripped
        and entries[index].info.kind is Kind.TOOL_RESULT
    )


def newest_carried_unit(history: History, state: FoldState) -> int | None:
    """The unit of the newest result ``state`` carries that way, or None (kept by the
    sticky view at each commit, so a request asks `answered` without a walk)."""
    carried = carried_results(history, state)
    return history.entries[carried[-1]].unit if carried else None


def answered(history: History, unit: int | None) -> bool:
    """Whether the group ``unit`` is no longer sent back as the request's newest: a unit
    came after it and it is not the current prompt's newest call group."""
    return unit is not None and unit < len(history.units) - 1 and unit != _sent_back(history)


def cut_answered(work: WorkingView, held: Iterable[int] = ()) -> bool:
    """Cut every answered carried result to ``truncate_chars`` (the head of the message
    history holds, with its recall id), except ``held`` ones (retained or pinned: they are
    the request's own); True if any was cut. One already no larger than that stays as it
    is, counted as shortened from now on (its values taken out go to the ledger)."""
    history, state = work.history, work.state
    keep = set(held)
    required = {len(history.units) - 1, _sent_back(history)}
    cut = False
    for index in carried_results(history, state):
        entry = history.entries[index]
        if index in keep or entry.unit in required or work.is_removed(index):
            continue
        short = shorten_tool_result(
            entry.view or entry.message, work.truncate_chars, index=index, shape=SHAPE_HEAD
        )
        cost = work.counter.count_message(short) if short is not None else None
        if short is not None and cost is not None and cost < work.current(index)[1]:
            work.replace(index, short, cost, NAME)
            cut = True
        state.shortened.add(index)
    return cut


def _sent_back(history: History) -> int:
    group = newest_current_group(history)
    return -1 if group is None else group
