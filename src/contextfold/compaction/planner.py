"""One compaction pass: run the ladder on a working copy, then assemble the view.

The planner decides nothing about *when* to compact (the manager's trigger does) and
changes nothing it was given: it returns a new FoldState for the manager to commit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..ledger import MAX_HOLDERS, LedgerPlan, ValueIndex, extend, shrunk, taken_values
from ..messages import content_text
from ..recall import recall_hint
from ..tokens import TokenCounter
from .newest_results import RESULTS_SHARE, shorten_newest_results
from .notice import build_notice
from .oversized import cut_answered
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
    pins_yielded: bool = False  # pinned messages were in the view when pins yielded

    @property
    def relaxed(self) -> list[str]:
        return self.relaxation.steps(pins=self.pins_yielded)


def view_raw_total(history: History, state: FoldState) -> int:
    """Raw tokens of the kept messages of ``state`` and its summary (a scan of the view)."""
    units = history.units
    truncated = state.truncated
    return (
        state.summary_cost
        + state.ledger.cost
        + sum(history.unit_cost(units[u], truncated) for u in state.kept_units(len(units)))
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
    # Compact the turns before the current human prompt first (see `run_pass`).
    older_tasks_first: bool = True


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
    # The identifier ledger: the index of the conversation's values (kept by the caller
    # across passes) and the ledger's room in raw tokens (0: no ledger).
    values: ValueIndex | None = None
    ledger_raw: int = 0
    # A deep pass (``planner: cost``, see `cost_plan`): the ladder goes on to protection's
    # fixed point whatever the limit, with `DEEP_RELAXATION` taken from the start; the
    # limit still decides whether soft protections yield further.
    deep: bool = False
    # A deep pass's hold, as its own target is 0: the current task's messages (what a later
    # turn drew on last) leave only while the view is above this, the middle of the band
    # the configured target (paced, see `cadence`) and trigger make, as in any other pass
    # (see `rungs.DropLeastUsed`). Ignored by any other pass: its own band decides.
    hold_raw: int | None = None
    # A pass that leaves the view as last sent alone before this history index (the content
    # admitted since the last pass): its rungs work from there on, and the ledger's pages
    # and the notice stay as they were (``kept_notice``), so the next request still reads
    # everything before its first change from the cache (see `cost_plan.cheapest_option`).
    # What it shortens names its recall id in the view. None: a pass over the whole view.
    edit_from: int | None = None
    kept_notice: tuple[dict[str, Any] | None, int] = (None, 0)
    # Messages an earlier pass shortened without listing their values (one that kept the
    # cached prefix): a pass that lists takes their values up as if it had shortened them.
    unlisted_shortened: Collection[int] = ()


# Where a deep pass starts relaxing from: the recent fraction does not hold, and the newest
# ``protected_tool_results`` results keep their call groups in the view but may be shortened
# (head and tail, with their recall id). Whole, they would set the floor the cost model
# prices every later request at: a floor of five whole results read on every request of
# the cycle costs more than the pass saves (`cost_plan`). The group being answered stays
# whole, as the required core always does. The current task's working set is held as in any
# other pass, against the configured band (`PassPlan.hold_raw`): what a later turn drew on,
# and the whole task while it fits there (`contextfold eval`, long-horizon: near facts in
# view 72% to 99% at 8,000 tokens, 80% to 100% at 16,000, still the cheapest).
DEEP_RELAXATION = Relaxation.RECENT_TOOL_RESULTS_SHORTENED


# When the newest results must be shortened anyway, the ledger keeps at most this share
# of its room (a page naming the messages taken out) and the results give way for it.
LEDGER_KEPT_DIVISOR = 2


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
    if sticky.ledger.cost:
        # The ledger rides on top of the target, as the notice on its reserve: what it lists
        # must not cost the current task its messages (`contextfold eval`, long-horizon at
        # 8,000 tokens: 95% of the near facts in view instead of 93%, at the same cost).
        target_raw = min(target_raw + sticky.ledger.cost, limit_raw)
    state = sticky.copy()
    # Content the request must carry complete (a retained reminder), and pinned messages
    # (an earlier pass compacted them, or they yielded to the budget: they get another
    # chance), come back into the view, whole, with their call group.
    restored = False
    for index in (*retained, *history.pins):
        if state.truncated.pop(index, None) is not None:
            state.stripped.discard(index)
            state.shortened.discard(index)
            restored = True
        unit = history.entries[index].unit
        if unit in state.removed_units:
            state.restore_unit(unit, history.units[unit].entries)
            restored = True

    # A deep pass starts with the soft protections a cost pass does not pay for yielded (see
    # `DEEP_RELAXATION`); any other starts with all of them.
    relaxation = DEEP_RELAXATION if plan.deep else Relaxation.NONE
    # The limit the ladder stops at: a deep pass goes on to protection's fixed point.
    ladder_limit = 0 if plan.deep else limit_raw
    deep_hold = _deep_hold(plan, state.ledger.cost)
    uses = plan.values
    if uses is not None:
        # Read what was admitted since the last pass; forget what committed passes took out.
        uses.forget(history, sticky.removed_units)
        uses.catch_up(history, state.kept_units(len(history.units)))

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
            if sticky_raw is not None and not restored
            else view_raw_total(history, state)
        ),
        truncate_chars=truncate_chars,
        limit_raw=ladder_limit,
        hold_raw=deep_hold,
        holds_whole_task=plan.deep and _task_fits(history, plan.hold_raw),
        summary_blocks=list(plan.summary_blocks),
        summary_free_blocks=plan.summary_free_blocks,
        uses=uses,
        scope_start=plan.edit_from,
        holds_reused=plan.deep,
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
    if deep_hold is not None:
        room_raw = deep_hold  # the configured band's middle: a deep target is 0
    goal_raw = max(0, min(room_raw, budget_raw - header_cost))
    # A result shortened to fit while its group was the newest, answered since, is cut
    # first, whatever protects it (see `oversized`).
    level = TruncateToolResults.level if cut_answered(work, (*retained, *history.pins)) else 0
    started_above_limit = work.raw_total > limit_raw
    current_task = history.last_human
    if settings.older_tasks_first and current_task is not None:
        # What costs the model nothing (earlier turns' thinking, level 0) goes first, from
        # the whole view; then the older tasks (everything before the current human
        # prompt) are compacted with the whole ladder, before anything of the current task
        # is shortened or removed; then the whole view.
        lossless = [rung for rung in ladder if getattr(rung, "level", 1) == 0]
        level = _run_ladder(work, lossless, target_raw, ladder_limit, protect)
        work.scope_end = current_task
        level = max(level, _run_ladder(work, ladder, target_raw, ladder_limit, protect))
        work.scope_end = None
    level = max(level, _run_ladder(work, ladder, target_raw, ladder_limit, protect))
    while relaxation < Relaxation.CURRENT_PROMPT_TURNS and (
        work.raw_total + header_cost > budget_raw
        or (started_above_limit and work.raw_total > room_raw)
    ):
        relaxation = Relaxation(relaxation + 1)
        work.protection = protect()
        work.limit_raw, work.hold_raw, work.holds_whole_task = goal_raw, None, False
        level = max(level, _run_ladder(work, ladder, goal_raw, goal_raw, protect))
    # Still over the budget with every soft protection gone: the ledger gives way first (it
    # must never cost a request).
    excess = work.raw_total + header_cost - budget_raw
    if excess > 0 and state.ledger.cost:
        keep = 0
        pins_in_view = bool(history.pins) and bool(work.kept_among(history.pins))
        if excess > state.ledger.cost and not pins_in_view:
            # Even without the ledger the view is over the budget: the newest results will
            # be shortened anyway. They are shortened a little further instead, so the view
            # keeps a page naming what was taken out (nothing is lost silently, and the next
            # requests, which wait for the budget before another pass, are not left blind).
            keep = min(state.ledger.cost, plan.ledger_raw // LEDGER_KEPT_DIVISOR)
        _set_ledger(
            work,
            shrunk(
                state.ledger, history, max(keep, state.ledger.cost - excess), notice_role, counter
            ),
        )
    # Pinned messages yield last, and only to the budget itself: the notice can go instead,
    # so they give way only when the messages alone are over it, and only as far as it.
    pins_yielded = False
    if work.raw_total > budget_raw and history.pins:
        pins_yielded = bool(work.kept_among(history.pins))
        relaxation = Relaxation.PINS
        work.protection = protect()
        work.limit_raw = budget_raw
        level = max(level, _run_ladder(work, ladder, budget_raw, budget_raw, protect))
    # Still over the budget: the newest group's results are shortened in the view, as far
    # as the budget needs and to their share of it (see `newest_results`), before the
    # request is refused.
    results_raw = math.floor(budget_raw * RESULTS_SHARE)
    if work.raw_total > budget_raw and shorten_newest_results(work, budget_raw, results_raw):
        relaxation = Relaxation.NEWEST_RESULTS_SHORTENED
        level = max(level, TruncateToolResults.level)
    if work.raw_total > budget_raw and state.ledger.cost:
        # The ledger's page kept above must never cost the request: it goes as well.
        _set_ledger(
            work,
            shrunk(
                state.ledger,
                history,
                state.ledger.cost - (work.raw_total - budget_raw),
                notice_role,
                counter,
            ),
        )
        if work.raw_total > budget_raw and shorten_newest_results(work, budget_raw):
            relaxation = Relaxation.NEWEST_RESULTS_SHORTENED
            level = max(level, TruncateToolResults.level)
    state.level = max(state.level, level)
    if uses is not None and plan.ledger_raw > 0 and plan.edit_from is None:
        # What this pass took out of the view goes to the ledger, within its share of the
        # budget and never past half the room the pass left.
        taken = _taken_out(history, sticky, state)
        if plan.unlisted_shortened:
            taken = sorted({*taken, *plan.unlisted_shortened})
        fresh = taken_values(uses, history, taken, _shown_by(work), state.ledger.listed)
        room = max(0, budget_raw - work.raw_total - header_cost) // 2
        capacity = plan.ledger_raw
        if deep_hold is not None:
            # A deep pass goes below the band's middle, where any other pass would stop:
            # half of the room it frees there goes to the ledger, up to its share again
            # (more values taken out, in more passes, compete for it).
            freed = max(0, deep_hold - work.raw_total - header_cost) // 2
            capacity += min(freed, plan.ledger_raw)
        ledger_plan = LedgerPlan(capacity, min(room, capacity), notice_role, _named_by_view(work))
        _set_ledger(work, extend(state.ledger, history, fresh, ledger_plan, counter))
    # The notice takes at most half the room left under the budget: where protection holds
    # the view near the budget, a notice filling the rest would put the next request over
    # it and compact every request. There it shrinks, or leaves (see `_fitted_notice`).
    room = max(0, budget_raw - work.raw_total) // 2
    if plan.edit_from is not None:
        notice, notice_cost = plan.kept_notice
    else:
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
        pins_yielded=pins_yielded,
    )


def _deep_hold(plan: PassPlan, ledger_cost: int) -> int | None:
    """What a deep pass holds the current task's working set (and what a later message
    drew on) against: the configured band's middle (`PassPlan.hold_raw`) with half the
    ledger on top; None for any other pass.

    Any other pass lets the ledger ride on its target (`run_pass`), so its hold, the middle
    of the band from ``target + ledger`` to the trigger, has half the ledger on top of the
    band's middle. The view a pass weighs against its hold counts the ledger: a deep pass
    held against the band's middle alone paid for the ledger's page with the task's own
    results (a listing the task's next steps copied ids out of, shortened to bring the view
    12 tokens under its hold, the room then given to the ledger: ``contextfold eval
    --corpus long-horizon --seed 7`` at 4,000 tokens, near facts in view 437 of 589 for the
    defaults, 432 for the cost planner, 461 with this hold)."""
    if not plan.deep or plan.hold_raw is None:
        return None
    return plan.hold_raw + ledger_cost // 2


def _task_fits(history: History, hold_raw: int | None) -> bool:
    """Whether the current task, whole as history holds it, comes to no more than
    ``hold_raw``: then a deep pass holds all of it (its working set: the result it reads
    next is among them, drawn on or not yet). A task larger than that (a long agent run
    after one prompt) keeps what a later turn drew on, as any pass does, and the rest may
    go. Walks the task from its newest unit, and stops once past the hold."""
    task = history.last_human
    if task is None or hold_raw is None:
        return False
    no_swaps: dict[int, tuple[dict[str, Any], int]] = {}
    task_raw = 0
    for unit in reversed(history.units):
        if unit.start <= task:
            return True
        task_raw += history.unit_cost(unit, no_swaps)
        if task_raw > hold_raw:
            return False
    return True


def _named_by_view(work: WorkingView) -> frozenset[int]:
    """The shortened or cleared messages still in the view whose marker names their
    recall id (``context_recall("r7") returns it``, or with an offset where the middle was
    cut): the view itself says where their values are."""
    named: set[int] = set()
    for index in work.state.shortened:  # messages still in the view only (`FoldState`)
        message, _cost = work.current(index)
        # The hint without its closing parenthesis: a marker may add an offset.
        if recall_hint(index)[:-1] in content_text(message.get("content"), " "):
            named.add(index)
    return frozenset(named)


def _set_ledger(work: WorkingView, ledger: Any) -> None:
    work.raw_total += ledger.cost - work.state.ledger.cost
    work.state.ledger = ledger


def _taken_out(history: History, sticky: FoldState, state: FoldState) -> list[int]:
    """Messages the pass took out of the view (their units removed, not summarized: a
    summary is checked against its own span), or shortened or cleared in it."""
    units = history.units
    taken: list[int] = []
    removed, summarized = state.removed_units, state.summarized_units
    for unit in sticky.kept_units(len(units)):
        if unit in removed and unit not in summarized:
            taken.extend(units[unit].entries)
    taken.extend(i for i in state.shortened if i not in sticky.shortened)
    return taken


def _shown_by(work: WorkingView) -> Callable[[str], bool]:
    """Whether the view as the pass leaves it still shows a value: a message in it holds
    the value (a shortened one in the text it kept), or the value is too common to track."""
    uses = work.uses
    assert uses is not None
    state, entries = work.state, work.history.entries
    removed, truncated = state.removed_units, state.truncated
    texts: dict[int, str] = {}
    # The view does not change while the pass asks: each value is answered once (a value in
    # many messages taken out is asked once per message), and the holders newest first (a
    # holder still in the view is most often a recent one: the answer comes at the first).
    answers: dict[str, bool] = {}

    def shows(value: str) -> bool:
        answer = answers.get(value)
        if answer is None:
            answer = answers[value] = _shows(value)
        return answer

    def _shows(value: str) -> bool:
        holders = uses.holders(value)
        if len(holders) > MAX_HOLDERS:
            return True
        for holder in reversed(holders):
            if entries[holder].unit in removed:
                continue
            swap = truncated.get(holder)
            if swap is None or holder not in state.shortened:
                return True
            text = texts.get(holder)
            if text is None:
                text = texts[holder] = _text_of(swap[0])
            if value in text:
                return True
        return False

    return shows


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return repr(content)


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
    ledger's pages and the notice placed before the first kept unit after the first
    compacted spot (never inside a tool-call group). Walks the view's units only."""
    anchor = first_affected_unit(history, state)
    # The summary with the unit it goes before, and the notice: each until it is placed.
    summary = None
    if state.summary is not None:
        summary_at = state.summarized_units.first()
        summary = (summary_at, state.summary) if summary_at is not None else None
    view: list[dict[str, Any]] = []
    placed = notice is None and not state.ledger.pages
    entries = history.entries
    units = history.units
    truncated = state.truncated
    pages = state.ledger.pages
    for unit_index in state.kept_units(len(units)):
        if summary is not None and unit_index > summary[0]:
            view.append(summary[1])
            summary = None
        if not placed and unit_index >= anchor:
            # The ledger's pages, then the notice: the pages change only when one is added,
            # so the prefix up to the notice stays as it was between passes.
            view.extend(pages)
            if notice is not None:
                view.append(notice)
            placed = True
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
    if not placed:
        view.extend(pages)
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
