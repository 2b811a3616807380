"""The ladder: each rung is a small object with a name and one method.

Rungs run in order, cheapest and least lossy first; each checks the running total
after every single change and stops as soon as the view is under target, so no more
is lost than the budget requires. Every rung scans the view (never all of history) once
per round: a pass costs the size of the view, however long the session.

The first rung leaves earlier turns' thinking out of the view: nearly lossless (providers
ignore earlier thinking; Anthropic does not even count it) and often the largest saving in
a run with extended thinking.

Rungs with settings are frozen dataclasses that check them when built (a `ConfigError`
naming the rung and the setting); `ladder` builds them from the ``strategies`` config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Protocol

from ..history import LONG_TEXT_CHARS
from ..messages import Kind, text_length
from . import settings
from .protection import REASON_RECENT_RESULT
from .tool_names import result_tool_names
from .truncate import (
    SHAPE_HEAD,
    SHAPES,
    shorten_prose,
    shorten_tool_result,
    strip_thinking,
)
from .working import WorkingView


class Rung(Protocol):
    """One step of the ladder. ``level`` is the compaction level it reports (the reference
    module's numbering: 1 truncate tool results, 2 truncate long text, 3 drop oldest; 0 for
    a nearly lossless step below them)."""

    @property
    def name(self) -> str: ...  # read only: a class attribute serves

    @property
    def level(self) -> int: ...

    def apply(self, work: WorkingView, target_raw: int) -> None:
        """Change the working view, oldest first, until ``work.raw_total <= target_raw``."""
        ...


@dataclass(frozen=True)
class StripEarlierThinking:
    """Leave the thinking blocks of earlier assistant turns out of the view.

    All of a message's thinking blocks go, or none (Anthropic: never edit or partly remove
    a turn's thinking); the newest call group's are protected and always go back intact.
    """

    name: ClassVar[str] = "strip_thinking"
    level: ClassVar[int] = 0

    def apply(self, work: WorkingView, target_raw: int) -> None:
        entries = work.history.entries
        for index in work.kept_among(work.history.thinking_entries):
            if work.raw_total <= target_raw:
                return
            entry = entries[index]
            if (
                not entry.info.thinking
                or index in work.state.stripped
                or work.protection.entry_reason(index)
                or work.is_removed(index)
            ):
                continue
            current, _ = work.current(index)
            short = strip_thinking(current)
            if short is None:
                continue
            work.replace(index, short, work.counter.count_message(short), self.name)
            work.state.stripped.add(index)


@dataclass(frozen=True)
class TruncateToolResults:
    """Shorten old tool results to ``chars`` characters (default: ``truncate_chars``).

    ``shape``: ``head`` keeps the start; ``head_tail`` keeps the start and the end and says
    how much of the middle was left out. ``exempt_tools`` are never shortened (a loaded
    skill, a plan the agent re-reads); ``tool_chars`` gives a tool its own budget
    (``{"read_file": 2000}``), ahead of ``chars``. A message carrying results of several
    tools (Anthropic's shape) is exempt if any of them is, and keeps the largest budget.

    A result of the current task that a later turn drew a value from (a listing the agent
    is copying ids out of) is shortened last, and only when shortening it reaches the
    target or removing what the task does not draw on cannot spare it: its head would keep
    a few rows, and the task is likely to come back for another (``contextfold eval``,
    long-horizon at 8,000 tokens: shortening such results first cost 12 of 609 near facts).
    """

    chars: int | None = None
    shape: str = SHAPE_HEAD
    exempt_tools: frozenset[str] = frozenset()
    tool_chars: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    name: ClassVar[str] = "truncate_tool_results"
    level: ClassVar[int] = 1

    def __post_init__(self) -> None:
        rung = self.name
        settings.optional_int_at_least(rung, "chars", self.chars, 0)
        settings.one_of(rung, "shape", self.shape, SHAPES)
        exempt = settings.tool_names(rung, "exempt_tools", self.exempt_tools)
        object.__setattr__(self, "exempt_tools", exempt)
        budgets = settings.chars_by_tool(rung, "tool_chars", self.tool_chars)
        object.__setattr__(self, "tool_chars", budgets)

    def apply(self, work: WorkingView, target_raw: int) -> None:
        entries = work.history.entries
        drawn_on: list[tuple[int, dict, int]] = []
        reused: list[tuple[int, dict, int]] = []
        # A deep pass holds what a later message drew a value from (see `_shorten_reused`).
        reuse_held = work.holds_reused and work.uses is not None and work.scope_start is None
        # Only text over LONG_TEXT_CHARS can be worth shortening (history lists it).
        for index in work.kept_among(work.history.long_texts):
            if work.raw_total <= target_raw:
                break
            if not _may_shorten(work, index, entries[index].info.kind, (Kind.TOOL_RESULT,)):
                continue
            shortened = self._shortened(work, index)
            if shortened is None:
                continue
            short, current_cost = shortened
            if work.held_by_current_task(index):
                drawn_on.append((index, short, current_cost))  # decided below, together
                continue
            if reuse_held and _newest_reused(work, index):
                reused.append((index, short, current_cost))  # decided below, together
                continue
            _swap_if_smaller(work, index, short, current_cost, self.name)
        if reused and work.raw_total > target_raw:
            _shorten_reused(work, reused, target_raw, self.name)
        # A pass that keeps the cached prefix (`PassPlan.edit_from`) is one option beside the
        # deep pass: it leaves the current task's working set whole.
        if not drawn_on or work.raw_total <= target_raw or work.scope_start is not None:
            return
        # What the current task draws on is shortened when that alone reaches the target
        # (shortening comes before removing anything), or when removing what it does not
        # draw on cannot spare it; otherwise it stays whole and the last rung removes the rest.
        # What a later turn drew on is shortened last (a deep pass holds the whole task).
        drawn_on.sort(key=lambda held: work.drawn_on_by_current_task(held[0]))
        costs = [(i, short, cost, work.counter.count_message(short)) for i, short, cost in drawn_on]
        saving = sum(cost - short_cost for _, _, cost, short_cost in costs if short_cost < cost)
        if work.raw_total - saving > target_raw and _current_task_keeps_what_it_draws_on(
            work, target_raw
        ):
            return
        # A deep pass (target 0) shortens what a later turn drew on only while the view is
        # above its hold.
        hold = _hold_under(work, target_raw) if work.holds_whole_task else target_raw
        for index, short, cost, short_cost in costs:
            if work.raw_total <= target_raw:
                return
            if work.raw_total <= hold and work.drawn_on_by_current_task(index):
                continue
            if short_cost < cost:
                work.replace(index, short, short_cost, self.name)
                work.state.shortened.add(index)

    def _shortened(self, work: WorkingView, index: int) -> tuple[dict, int] | None:
        """The result shortened to its budget and its current cost, or None when it is
        exempt or already near its budget."""
        keep = work.truncate_chars if self.chars is None else self.chars
        if self.exempt_tools or self.tool_chars:
            tools = result_tool_names(work.history, index)
            if tools & self.exempt_tools:
                return None
            budgets = [self.tool_chars[t] for t in tools if t in self.tool_chars]
            if budgets:
                keep = max(budgets)
        current, current_cost = work.current(index)
        # Shortening something already near `keep` saves nothing: skip it cheaply.
        if text_length(current) <= keep * 2 + LONG_TEXT_CHARS:
            return None
        short = shorten_tool_result(current, keep, index=index, shape=self.shape)
        return None if short is None else (short, current_cost)


@dataclass(frozen=True)
class TruncateLongText:
    """Shorten long old assistant replies and non-human user messages (never a human
    prompt) to ``chars`` characters (default: ``truncate_chars``)."""

    chars: int | None = None

    name: ClassVar[str] = "truncate_long_text"
    level: ClassVar[int] = 2

    def __post_init__(self) -> None:
        settings.optional_int_at_least(self.name, "chars", self.chars, 0)

    def apply(self, work: WorkingView, target_raw: int) -> None:
        keep = work.truncate_chars if self.chars is None else self.chars
        entries = work.history.entries
        # Only text over LONG_TEXT_CHARS can be worth shortening (history lists it).
        for index in work.kept_among(work.history.long_texts):
            if work.raw_total <= target_raw:
                return
            kinds = (Kind.ASSISTANT, Kind.USER)
            if not _may_shorten(work, index, entries[index].info.kind, kinds):
                continue
            current, current_cost = work.current(index)
            if text_length(current) <= keep * 4 + LONG_TEXT_CHARS:
                continue
            short = shorten_prose(current, keep, index=index)
            _swap_if_smaller(work, index, short, current_cost, self.name)


@dataclass(frozen=True)
class DropOldest:
    """Remove the oldest removable units (whole tool-call groups) from the view.

    Only removals that pay: whole turns leave while the view is above the trigger, and
    below it only if removing every removable turn would reach the target. Otherwise a
    pass would throw away many turns (every early note and call) for a small saving and
    still miss its target.
    """

    name: ClassVar[str] = "drop_oldest"
    level: ClassVar[int] = 3

    def apply(self, work: WorkingView, target_raw: int) -> None:
        units = work.history.units
        unit_cost = work.history.unit_cost
        truncated = work.state.truncated
        candidates = [u for u in work.kept_units() if not work.protection.unit_reason(u)]
        costs = [unit_cost(units[u], truncated) for u in candidates]
        reaches_target = work.raw_total - sum(costs) <= target_raw
        stop_at = target_raw if reaches_target else max(target_raw, work.limit_raw)
        # The oldest candidates leave, one after another, until the view is at `stop_at`:
        # found on the costs, then removed together.
        total = work.raw_total
        leaving = 0
        for cost in costs:
            if total <= stop_at:
                break
            total -= cost
            leaving += 1
        if leaving:
            work.remove_units(candidates[:leaving], work.raw_total - total, self.name)


@dataclass(frozen=True)
class DropLeastUsed:
    """Remove the units the conversation drew from least recently, whole.

    A unit's last use is the newest message that wrote one of its values again (the agent
    copying an id out of a listing into a call, the user naming it), or its own last message
    when nothing did: a listing the agent keeps drawing ids from stays in the view while
    the pages it never used since leave first, whatever their age. Without an index of the
    conversation's values (the ledger off) this is `DropOldest`. Removals pay as for
    `DropOldest`: above the trigger, or when they reach the target.

    The current task's units a later turn drew from leave last, and only while the view is
    above the middle of the band between target and trigger: a pass stops short of its
    target rather than take from the current task what it is still using, as naive
    drop-oldest, filling the whole window, would have kept it (``contextfold eval``,
    long-horizon: near facts in view 95% to 98% at 8,000 tokens, 99% to 100% at 16,000).
    """

    name: ClassVar[str] = "drop_least_used"
    level: ClassVar[int] = 3

    def apply(self, work: WorkingView, target_raw: int) -> None:
        units = work.history.units
        unit_cost = work.history.unit_cost
        truncated = work.state.truncated
        candidates = [u for u in work.kept_units() if not work.protection.unit_reason(u)]
        held: set[int] = set()
        drawn_on: set[int] = set()
        reused: set[int] = set()
        if work.uses is not None or work.holds_whole_task:
            held = {u for u in candidates if work.unit_held_by_current_task(u)}
            # Of what is held, what a later turn drew on leaves last (a deep pass holds the
            # whole current task).
            drawn_on = {u for u in held if work.unit_drawn_on_by_current_task(u)}
            if work.holds_reused and work.uses is not None:
                # A deep pass also holds what a later message drew a value from, in any task
                # (the ids a conversation keeps coming back to), against the same hold: it
                # would otherwise take out every message older than the current task.
                reused = {
                    u
                    for u in candidates
                    if u not in held and work.unit_last_use(u) > max(units[u].entries)
                }
            candidates.sort(
                key=lambda u: (u in held, u in drawn_on, u in reused, work.unit_last_use(u), u)
            )
        costs = [unit_cost(units[u], truncated) for u in candidates]
        reaches_target = work.raw_total - sum(costs) <= target_raw
        stop_at = target_raw if reaches_target else max(target_raw, work.limit_raw)
        total = work.raw_total
        leaving = 0
        hold_under = _hold_under(work, target_raw)
        for unit, cost in zip(candidates, costs, strict=True):
            # The held units come last, what a later turn drew on last of all: once one
            # would stay, so do the rest.
            if total <= stop_at or ((unit in held or unit in reused) and total <= hold_under):
                break
            total -= cost
            leaving += 1
        if leaving:
            work.remove_units(candidates[:leaving], work.raw_total - total, self.name)


DEFAULT_LADDER: tuple[Rung, ...] = (
    StripEarlierThinking(),
    TruncateToolResults(),
    TruncateLongText(),
    DropLeastUsed(),
)


def _hold_under(work: WorkingView, target_raw: int) -> int:
    """What the current task draws on leaves only while the view is above this: the middle
    of the band between target and trigger, so a pass still leaves half the band to grow in
    (a deep pass names the configured band's middle: its own target and limit are 0)."""
    if work.hold_raw is not None:
        return work.hold_raw
    return (target_raw + work.limit_raw) // 2


def _newest_reused(work: WorkingView, index: int) -> bool:
    """Whether the message is one of the newest results (a deep pass may shorten them,
    not remove them) and a later message drew a value from it (an id copied out of it into
    a call): what a deep pass holds against its hold, as `DropLeastUsed` holds such units."""
    uses = work.uses
    unit = work.history.entries[index].unit
    return (
        uses is not None
        and uses.last_use(index) > index
        and work.protection.unit_reason(unit) == REASON_RECENT_RESULT
    )


def _shorten_reused(
    work: WorkingView, reused: list[tuple[int, dict, int]], target_raw: int, rung: str
) -> None:
    """Shorten the results a later message drew a value from (oldest first) in a deep pass,
    only as `DropLeastUsed` removes their units: while the view is above the hold, and only
    when removing every unit that is neither held nor drawn on cannot bring it there.

    A deep pass holds such units whole against the hold when it removes (the ids the
    conversation keeps coming back to); shortening comes first in the ladder, so without
    the same hold here the pass would cut the middle out of them before it had removed
    anything, and keep their husks: a booking's history the agent had taken its id from,
    among the newest results, lost its fare class (`contextfold eval`, BFCL at 8,000
    tokens)."""
    hold = _hold_under(work, target_raw)
    if work.raw_total - _removable_cost(work, keep_drawn_on=True) <= hold:
        return
    for index, short, cost in reused:
        if work.raw_total <= max(target_raw, hold):
            return
        _swap_if_smaller(work, index, short, cost, rung)


def _current_task_keeps_what_it_draws_on(work: WorkingView, target_raw: int) -> bool:
    """Whether removing every unit the pass may remove, except those the current task draws
    on, would bring the view under `_hold_under`: then what the task draws on stays whole
    (not shortened) and the rest goes. When it would not, what the task draws on must shrink
    too, and shortening it comes before removing it, as for any result."""
    if (work.uses is None and not work.holds_whole_task) or work.history.last_human is None:
        return False
    return work.raw_total - _removable_cost(work) <= _hold_under(work, target_raw)


def _removable_cost(work: WorkingView, *, keep_drawn_on: bool = False) -> int:
    """What the kept units a pass may remove come to: neither protected nor held by the
    current task, and with ``keep_drawn_on`` none a later message drew a value from."""
    units = work.history.units
    truncated = work.state.truncated
    return sum(
        work.history.unit_cost(units[u], truncated)
        for u in work.kept_units()
        if not work.protection.unit_reason(u)
        and not work.unit_held_by_current_task(u)
        and not (keep_drawn_on and work.unit_last_use(u) > max(units[u].entries))
    )


def _may_shorten(work: WorkingView, index: int, kind: Kind, kinds: tuple[Kind, ...]) -> bool:
    """A message of one of ``kinds`` that no earlier change, protection or removal holds."""
    return not (
        kind not in kinds
        or index in work.state.shortened
        or work.protection.entry_reason(index)
        # a turn's text is edited only once its thinking is out of the view
        or (work.history.entries[index].info.thinking and index not in work.state.stripped)
        or work.is_removed(index)
    )


def _swap_if_smaller(
    work: WorkingView, index: int, short: dict | None, current_cost: int, rung: str
) -> None:
    if short is None:
        return
    cost = work.counter.count_message(short)
    if cost < current_cost:
        work.replace(index, short, cost, rung)
        work.state.shortened.add(index)
