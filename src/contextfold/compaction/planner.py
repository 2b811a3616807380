"""One compaction pass: run the ladder on a working copy, then assemble the view.

The planner decides nothing about *when* to compact (the manager's trigger does) and
changes nothing it was given: it returns a new FoldState for the manager to commit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..tokens import TokenCounter
from .notice import build_notice
from .protection import Protection, compute_protection
from .rungs import DEFAULT_LADDER, Rung
from .working import FoldState, WorkingView


@dataclass
class PassResult:
    """A candidate view state; nothing is committed yet."""

    state: FoldState
    raw_total: int  # raw tokens of the kept messages (notice excluded)
    notice: dict[str, Any] | None
    notice_cost: int
    changed: dict[str, int] = field(default_factory=dict)
    level: int = 0  # 1-based position of the last rung that changed something; 0 = none
    protection: Protection | None = None


def view_raw_total(history: History, state: FoldState) -> int:
    """Raw tokens of the kept messages of ``state`` (one linear scan)."""
    return sum(
        history.unit_cost(unit, state.truncated)
        for i, unit in enumerate(history.units)
        if i not in state.removed_units
    )


def run_pass(
    history: History,
    sticky: FoldState,
    *,
    counter: TokenCounter,
    target_raw: int,
    limit_raw: int | None = None,
    protected_recent: float,
    protected_tool_results: int,
    truncate_chars: int,
    retained: Collection[int] = (),
    notice_role: str = "user",
    notice_reserve: int = 800,
    notice_enabled: bool = True,
    ladder: Sequence[Rung] = DEFAULT_LADDER,
) -> PassResult:
    """Compact a copy of ``sticky`` down to ``target_raw`` raw tokens, protection permitting.

    ``limit_raw`` is the trigger in raw tokens: protection may leave the view above target,
    but a view left above the trigger would compact again on the very next request and
    lose its stable prefix, so the pass goes on to the protection rule's fixed point
    while it is above this limit and can still shrink.
    """
    if limit_raw is None:
        limit_raw = target_raw
    state = sticky.copy()
    # Content the request must carry complete (a retained reminder) comes back into the
    # view even if an earlier pass compacted it.
    for index in retained:
        state.truncated.pop(index, None)
        state.removed_units.discard(history.entries[index].unit)

    def protect() -> Protection:
        return compute_protection(
            history,
            state.removed_units,
            protected_recent=protected_recent,
            protected_tool_results=protected_tool_results,
            retained=retained,
        )

    work = WorkingView(
        history=history,
        state=state,
        protection=protect(),
        counter=counter,
        raw_total=view_raw_total(history, state),
        truncate_chars=truncate_chars,
    )
    level = 0
    while True:
        removed_before = len(state.removed_units)
        for position, rung in enumerate(ladder, start=1):
            if work.raw_total <= target_raw:
                break
            before = sum(work.changed.values())
            rung.apply(work, target_raw)
            if sum(work.changed.values()) > before:
                level = max(level, position)
        # The recent window is a fraction of the view, so once the view has shrunk the same
        # rule protects fewer messages: what consecutive requests would reach one pass at a
        # time. Go on to that fixed point while the view is still over the limit.
        # Each round shrinks the view geometrically, so the rounds are O(log n).
        if work.raw_total <= limit_raw or len(state.removed_units) == removed_before:
            break
        work.protection = protect()
    notice, notice_cost = _fitted_notice(
        history, state, counter, truncate_chars, notice_reserve, notice_role, notice_enabled
    )
    return PassResult(
        state=state,
        raw_total=work.raw_total,
        notice=notice,
        notice_cost=notice_cost,
        changed=dict(work.changed),
        level=level,
        protection=work.protection,
    )


def _fitted_notice(
    history: History,
    state: FoldState,
    counter: TokenCounter,
    truncate_chars: int,
    reserve: int,
    role: str,
    enabled: bool,
) -> tuple[dict[str, Any] | None, int]:
    """The notice and its cost, its digest shortened until the real count fits the reserve.

    The digest is sized in characters first (cheap); dense text (CJK, numbers) can still
    count more tokens than planned, so halve the allowance until the counter agrees. The
    header alone is the floor: a notice is never dropped for being too long.
    """
    if not enabled:
        return None, 0
    allowance = reserve
    while True:
        notice = build_notice(
            history, state, truncate_chars=truncate_chars, reserve_tokens=allowance, role=role
        )
        cost = counter.count_message(notice) if notice is not None else 0
        if notice is None or cost <= reserve or allowance == 0:
            return notice, cost
        allowance //= 2


def assemble_view(
    history: History, state: FoldState, notice: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The messages of the view: kept units in order, shortened messages swapped in, and
    the notice placed before the first kept unit after the first compacted spot (never
    inside a tool-call group)."""
    anchor = _first_affected_unit(history, state)
    view: list[dict[str, Any]] = []
    placed = notice is None
    for unit_index, unit in enumerate(history.units):
        if unit_index in state.removed_units:
            continue
        if not placed and unit_index >= anchor:
            view.append(notice)  # type: ignore[arg-type]
            placed = True
        for i in range(unit.start, unit.end):
            swap = state.truncated.get(i)
            view.append(swap[0] if swap is not None else history.entries[i].message)
    if not placed:
        view.append(notice)  # type: ignore[arg-type]
    return view


def _first_affected_unit(history: History, state: FoldState) -> int:
    candidates = [min(state.removed_units)] if state.removed_units else []
    if state.truncated:
        candidates.append(history.entries[min(state.truncated)].unit)
    return min(candidates) if candidates else len(history.units)
