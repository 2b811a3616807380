"""One compaction pass: run the ladder on a working copy, then assemble the view.

The planner decides nothing about *when* to compact (the manager's trigger does) and
changes nothing it was given: it returns a new FoldState for the manager to commit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..tokens import TokenCounter
from .newest_results import shorten_newest_results
from .notice import build_notice
from .protection import Protection, compute_protection
from .relaxation import Relaxation
from .rungs import DEFAULT_LADDER, Rung, TruncateToolResults
from .unitset import UnitSet
from .working import FoldState, WorkingView


@dataclass
class PassResult:
    """A candidate view state; nothing is committed yet."""

    state: FoldState
    raw_total: int  # raw tokens of the kept messages (notice excluded)
    notice: dict[str, Any] | None
    notice_cost: int
    changed: dict[str, int] = field(default_factory=dict)
    level: int = 0  # highest level of the rungs that changed something (see `Rung.level`)
    protection: Protection | None = None
    relaxation: Relaxation = Relaxation.NONE  # how far soft protection yielded

    @property
    def relaxed(self) -> list[str]:
        return self.relaxation.steps()


def view_raw_total(history: History, state: FoldState) -> int:
    """Raw tokens of the kept messages of ``state`` and its summary (a scan of the view)."""
    units = history.units
    truncated = state.truncated
    return state.summary_cost + sum(
        history.unit_cost(units[u], truncated) for u in state.kept_units(len(units))
    )


@dataclass(frozen=True, slots=True)
class PassSettings:
    """What every pass of one context runs with: its protection and its notice (from the
    configuration keys of the same names, ``compaction_notice_*`` for the notice)."""

    protected_recent: float = 0.30
    protected_tool_results: int = 5
    truncate_chars: int = 250
    notice_role: str = "user"
    notice_enabled: bool = True
    notice_verbosity: str = "normal"
    notice_min_level: int = 0


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What one pass is asked to do, in raw tokens of the view's messages.

    ``target_raw`` is where the ladder stops. ``limit_raw`` is the trigger: protection may
    leave the view above target, but a view left above the trigger would compact again on
    the very next request and lose its stable prefix, so the pass goes on to the protection
    rule's fixed point while it is above this limit and can still shrink (default: the
    target). ``budget_raw`` is the hard limit (messages and notice): while the view exceeds
    it, soft protections yield one step at a time (see `relaxation`), and the notice is
    fitted to whatever room is left (default: the larger of the two plus the notice's
    reserve). ``retained`` are entries the request must carry complete. ``sticky_raw``,
    when the caller keeps it, is the raw total of the starting state's view (what
    `view_raw_total` would find by walking it); ``header_cost``, when it keeps that, what
    `notice_header_cost` says for this counter and role.
    """

    target_raw: int
    limit_raw: int | None = None
    budget_raw: int | None = None
    notice_reserve: int = 800
    retained: Collection[int] = ()
    ladder: Sequence[Rung] = DEFAULT_LADDER
    summary_blocks: Sequence[tuple[int, ...]] = ()
    summary_free_blocks: int = 0
    sticky_raw: int | None = None
    header_cost: int | None = None
    # A deep pass (``planner: cost``, see `cost_plan`): the ladder goes on to protection's
    # fixed point whatever the limit, with `DEEP_RELAXATION` taken from the start; the
    # limit still decides whether soft protections yield further.
    deep: bool = False


# Where a deep pass starts relaxing from: the recent fraction does not hold, and the newest
# ``protected_tool_results`` results keep their call groups in the view but may be shortened
# (head and tail, with their recall id). Whole, they would set the floor the cost model
# prices every later request at: a floor of five whole results read on every request of
# the cycle costs more than the pass saves (`cost_plan`). The group being answered stays
# whole, as the required core always does.
DEEP_RELAXATION = Relaxation.RECENT_TOOL_RESULTS_SHORTENED


def run_pass(
    history: History,
    sticky: FoldState,
    counter: TokenCounter,
    settings: PassSettings,
    plan: PassPlan,
) -> PassResult:
    """Compact a copy of ``sticky`` toward ``plan.target_raw`` raw tokens, protection
    permitting (see `PassPlan` for the limits)."""
    target_raw, limit_raw, budget_raw = plan.target_raw, plan.limit_raw, plan.budget_raw
    retained, ladder, header_cost = plan.retained, plan.ladder, plan.header_cost
    notice_reserve, sticky_raw = plan.notice_reserve, plan.sticky_raw
    protected_recent = settings.protected_recent
    protected_tool_results = settings.protected_tool_results
    truncate_chars = settings.truncate_chars
    notice_role, notice_enabled = settings.notice_role, settings.notice_enabled
    if limit_raw is None:
        limit_raw = target_raw
    if budget_raw is None:
        budget_raw = max(limit_raw, target_raw) + notice_reserve
    state = sticky.copy()
    # Content the request must carry complete (a retained reminder) comes back into the
    # view even if an earlier pass compacted it.
    for index in retained:
        if state.truncated.pop(index, None) is not None:
            state.stripped.discard(index)
            state.shortened.discard(index)
        unit = history.entries[index].unit
        state.restore_unit(unit, history.units[unit].entries)

    # A deep pass starts with the soft protections a cost pass does not pay for yielded (see
    # `DEEP_RELAXATION`); any other starts with all of them.
    relaxation = DEEP_RELAXATION if plan.deep else Relaxation.NONE
    # The limit the ladder stops at: a deep pass goes on to protection's fixed point.
    ladder_limit = 0 if plan.deep else limit_raw

    def protect() -> Protection:
        return compute_protection(
            history,
            state.kept_units(len(history.units)),
            protected_recent=protected_recent,
            protected_tool_results=protected_tool_results,
            retained=retained,
            relaxation=relaxation,
        )

    work = WorkingView(
        history=history,
        state=state,
        protection=protect(),
        counter=counter,
        raw_total=(
            sticky_raw
            if sticky_raw is not None and not retained
            else view_raw_total(history, state)
        ),
        truncate_chars=truncate_chars,
        limit_raw=ladder_limit,
        summary_blocks=list(plan.summary_blocks),
        summary_free_blocks=plan.summary_free_blocks,
    )
    if not notice_enabled or not history.units:
        header_cost = 0
    elif header_cost is None:
        header_cost = notice_header_cost(history, counter, truncate_chars, notice_role)
    # Soft protections yield (see `relaxation`) when the view cannot fit the budget, and
    # when a pass the trigger fired would end in the top half of the hysteresis band: a
    # view parked just under the trigger compacts again a turn or two later, rewriting the
    # prompt prefix each time. Either way they yield only as far as the middle of the band.
    room_raw = (target_raw + limit_raw) // 2
    goal_raw = max(0, min(room_raw, budget_raw - header_cost))
    started_above_limit = work.raw_total > limit_raw
    level = _run_ladder(work, ladder, target_raw, ladder_limit, protect)
    while relaxation < Relaxation.CURRENT_PROMPT_TURNS and (
        work.raw_total + header_cost > budget_raw
        or (started_above_limit and work.raw_total > room_raw)
    ):
        relaxation = Relaxation(relaxation + 1)
        work.protection = protect()
        work.limit_raw = goal_raw
        level = max(level, _run_ladder(work, ladder, goal_raw, goal_raw, protect))
    # Still over the budget with every soft protection gone: the newest group's results are
    # shortened in the view, as far as the budget needs, before the request is refused.
    if work.raw_total > budget_raw and shorten_newest_results(work, budget_raw):
        relaxation = Relaxation.NEWEST_RESULTS_SHORTENED
        level = max(level, TruncateToolResults.level)
    state.level = max(state.level, level)
    # The notice takes at most half the room left under the budget: where protection holds
    # the view near the budget, a notice filling the rest would put the next request over
    # it and compact every request. There it shrinks, or leaves (see `_fitted_notice`).
    room = max(0, budget_raw - work.raw_total) // 2
    notice, notice_cost = _fitted_notice(
        history,
        state,
        counter,
        truncate_chars,
        min(notice_reserve, room),
        notice_role,
        notice_enabled and state.level >= settings.notice_min_level,
        settings.notice_verbosity,
    )
    return PassResult(
        state=state,
        raw_total=work.raw_total,
        notice=notice,
        notice_cost=notice_cost,
        changed=dict(work.changed),
        level=level,
        protection=work.protection,
        relaxation=relaxation,
    )


def _run_ladder(
    work: WorkingView,
    ladder: Sequence[Rung],
    target_raw: int,
    limit_raw: int,
    protect: Callable[[], Protection],
) -> int:
    """Run the rungs in order until the view is under target; returns the level reached."""
    level = 0
    while True:
        removed_before = len(work.state.removed_units)
        for position, rung in enumerate(ladder, start=1):
            if work.raw_total <= target_raw:
                break
            before = sum(work.changed.values())
            rung.apply(work, target_raw)
            if sum(work.changed.values()) > before:
                level = max(level, getattr(rung, "level", position))
        # The recent window is a fraction of the view, so once the view has shrunk the same
        # rule protects fewer messages: what consecutive requests would reach one pass at a
        # time. Go on to that fixed point while the view is still over the limit.
        # Each round shrinks the view geometrically, so the rounds are O(log n).
        if work.raw_total <= limit_raw or len(work.state.removed_units) == removed_before:
            return level
        work.protection = protect()


def notice_header_cost(
    history: History, counter: TokenCounter, truncate_chars: int, role: str
) -> int:
    """Cost of the smallest notice (its header): what a compacted view needs room for.
    The same for every history with a message (the header names no count and no turn),
    so a caller may keep it per counter and role."""
    probe = FoldState(removed_units=UnitSet((0,))) if history.units else FoldState()
    notice = build_notice(
        history, probe, truncate_chars=truncate_chars, reserve_tokens=0, role=role
    )
    return counter.count_message(notice) if notice is not None else 0


def _fitted_notice(
    history: History,
    state: FoldState,
    counter: TokenCounter,
    truncate_chars: int,
    limit: int,
    role: str,
    enabled: bool,
    verbosity: str = "normal",
) -> tuple[dict[str, Any] | None, int]:
    """The notice and its cost, shrunk until the real count fits ``limit`` tokens.

    The digest is sized in characters first (cheap); dense text (CJK, numbers) can still
    count more tokens than planned, so halve the allowance until the counter agrees. The
    header alone is the smallest notice; when even that does not fit, the view goes
    without one rather than be refused.
    """
    if not enabled:
        return None, 0
    allowance = limit
    while True:
        notice = build_notice(
            history,
            state,
            truncate_chars=truncate_chars,
            reserve_tokens=allowance,
            role=role,
            verbosity=verbosity,
        )
        if notice is None:
            return None, 0
        cost = counter.count_message(notice)
        if cost <= limit:
            return notice, cost
        if allowance == 0:
            return None, 0
        allowance //= 2


def assemble_view(
    history: History, state: FoldState, notice: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The messages of the view: kept units in order, shortened messages swapped in,
    view-only results after their group, the summary where its first turn was, and the
    notice placed before the first kept unit after the first compacted spot (never inside
    a tool-call group). Walks the view's units only."""
    anchor = first_affected_unit(history, state)
    # The summary with the unit it goes before, and the notice: each until it is placed.
    summary = None
    if state.summary is not None:
        summary_at = state.summarized_units.first()
        summary = (summary_at, state.summary) if summary_at is not None else None
    view: list[dict[str, Any]] = []
    entries = history.entries
    units = history.units
    truncated = state.truncated
    for unit_index in state.kept_units(len(units)):
        if summary is not None and unit_index > summary[0]:
            view.append(summary[1])
            summary = None
        if notice is not None and unit_index >= anchor:
            view.append(notice)
            notice = None
        unit = units[unit_index]
        for i in unit.entries:
            swap = truncated.get(i)
            if swap is not None:
                view.append(swap[0])
            else:
                message = entries[i].view
                if message is not None:
                    view.append(message)
        view.extend(unit.synthetic)
    if summary is not None:
        view.append(summary[1])
    if notice is not None:
        view.append(notice)
    return view


def first_affected_unit(history: History, state: FoldState) -> int:
    """The first unit the notice speaks of: removed (not summarized), or holding a shortened
    message."""
    first_dropped = next(state.removed_units.without(state.summarized_units), None)
    candidates = [first_dropped] if first_dropped is not None else []
    if state.shortened:
        candidates.append(min(history.entries[i].unit for i in state.shortened))
    return min(candidates) if candidates else len(history.units)
