"""The negotiated measured-request path: the provider counts the whole request.

The context counts messages; the orchestrator adds a system prompt, overlays and tool
schemas the context never sees. With ``token_meter: actual`` the context offers a
notice-inclusive candidate view, the orchestrator's ``count_view(view)`` builds the complete
request and returns the provider's count, and the context uses that figure for both trigger
and target. Each ladder rung that changes the view is counted again (so a request costs at
most one count plus one per rung); the last counted view is returned exactly as counted, for
dispatch, with a transaction whose ``commit()`` applies the staged sticky decisions and
whose ``rollback()`` drops them.

The shapes are the reference module's (``context.measured_request_view``):

* ``count_view(view)`` returns ``{"dispatch": ..., "budget_decision": decision | None}``;
  a decision is ``{"estimated_input_tokens": int, "input_limit_tokens": int,
  "measurement": {"kind": "provider_count", "source": str, "input_tokens": int}}``.
  ``None`` (or a measurement of another kind) means the count was unavailable.
* ``fit_output(view, attempt)``, given by the orchestrator, is asked only when the last
  counted view is still over the provider's hard input limit; it returns a newly counted
  ``{"dispatch", "budget_decision", "count_calls"}`` or ``None``.

This module never imports provider or loop types: it only calls what it was handed.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from .budget import derive_budget
from .compaction.planner import PassPlan, PassResult, assemble_view, run_pass
from .conventions import normalize_retain_contents, resolve_system_prompt
from .delivery import Planned, SystemPromptView, Thresholds
from .errors import context_length_error
from .request import RequestParts
from .views import detached

CountView = Callable[[list[dict[str, Any]]], Awaitable[Mapping[str, Any]]]
FitOutput = Callable[[list[dict[str, Any]], Mapping[str, Any]], Awaitable[Any]]

NOT_NEEDED = "not_needed"
TARGET_REACHED = "target_reached"
REDUCED_OUTPUT = "reduced_output"
PROTECTED_FLOOR = "protected_floor"
MEASUREMENT_UNAVAILABLE = "measurement_unavailable"
OUTCOMES = (NOT_NEEDED, TARGET_REACHED, REDUCED_OUTPUT, PROTECTED_FLOOR, MEASUREMENT_UNAVAILABLE)


def provider_counts(provider: Any) -> bool:
    """Whether ``provider`` advertises request counting. ``None`` (the orchestrator counts
    on its own, as in the reference's tests) is trusted; a provider object must say so."""
    if provider is None:
        return True
    return bool(getattr(provider, "supports_request_count", False)) and callable(
        getattr(provider, "count_request", None)
    )


@dataclass(frozen=True, slots=True)
class Count:
    """One counted attempt: the orchestrator's envelope and what it says."""

    attempt: Mapping[str, Any]
    estimated: int  # the provider-derived hard-safe input estimate
    limit: int  # the provider's hard input limit
    measured: int | None  # the provider's raw input count; None when unavailable

    @property
    def size(self) -> int:
        """The larger of the two figures: the provider's own count is never overruled by
        its estimate, nor the estimate by a count that says less."""
        return max(self.estimated, self.measured or 0)

    @property
    def hard_over(self) -> bool:
        return self.size > self.limit


def read_count(attempt: Any) -> Count | None:
    """Validate one ``count_view`` (or ``fit_output``) envelope. ``None`` when the decision is
    missing; a TypeError when the hard-safety fields are malformed (a contract error)."""
    if not isinstance(attempt, Mapping) or "dispatch" not in attempt:
        raise TypeError(
            "context-fold: count_view must return a mapping with 'dispatch' and "
            f"'budget_decision', got {type(attempt).__name__}"
        )
    decision = attempt.get("budget_decision")
    if decision is None:
        return None
    if not isinstance(decision, Mapping):
        raise TypeError("context-fold: budget_decision must be a mapping or None")
    estimated = decision.get("estimated_input_tokens")
    limit = decision.get("input_limit_tokens")
    if not (_count(estimated) and _count(limit)):
        raise TypeError(
            "context-fold: budget_decision needs estimated_input_tokens and "
            f"input_limit_tokens as non-negative integers, got {estimated!r} and {limit!r}"
        )
    measurement = decision.get("measurement")
    measured = None
    if (
        isinstance(measurement, Mapping)
        and measurement.get("kind") == "provider_count"
        and _count(measurement.get("input_tokens"))
    ):
        measured = measurement["input_tokens"]
    return Count(attempt=attempt, estimated=estimated, limit=limit, measured=measured)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class MeasuredTransaction:
    """Staged sticky decisions of one measured request.

    ``await commit()`` applies them (True) unless the transaction was rolled back, the
    ``is_cancelled`` predicate says the dispatch was abandoned, or the sticky state moved
    since the offer (False: nothing applied). ``rollback()`` undoes what was applied or
    drops what was staged. Both are idempotent; the first terminal result stands.

    ``apply(claim)`` waits for the context's lock and, holding it, calls ``claim()`` before it
    changes anything: the claim settles the transaction as committed, and fails when a
    ``rollback()`` landed while the commit waited. So a rollback either comes first and
    nothing is applied or reported, or comes after the claim and changes nothing: never a
    False commit with its compaction applied.
    """

    def __init__(
        self,
        apply: Callable[[Callable[[], bool]], Awaitable[bool]],
        undo: Callable[[], None],
    ) -> None:
        self._apply = apply
        self._undo = undo
        self._result: bool | None = None

    @property
    def settled(self) -> bool:
        return self._result is not None

    async def commit(self, is_cancelled: Callable[[], bool] | None = None) -> bool:
        if self._result is not None:
            return self._result
        if is_cancelled is not None and is_cancelled():
            self.rollback()
            return False
        try:
            applied = await self._apply(self._claim)
        except BaseException:
            if self._result is True:  # claimed, then failed: a rollback may still undo it
                self._result = None
            raise
        if self._result is None:  # not applied, and no rollback either: settle it as such
            self._result = False
        return bool(self._result) and applied

    def _claim(self) -> bool:
        """Settle as committed, unless a rollback settled it first (then apply nothing)."""
        if self._result is not None:
            return False
        self._result = True
        return True

    def rollback(self) -> None:
        if self._result is not None:
            return
        self._result = False
        self._undo()


@dataclass(slots=True)
class _Candidate:
    """A view the provider was asked to count, and the pass that made it."""

    view: list[dict[str, Any]]
    raw: int  # raw tokens of messages, notice and request overhead
    notice_cost: int
    count: Count
    result: PassResult | None  # None: the sticky view as it stands

    @property
    def measured(self) -> int:
        """The provider's count of the view (the first offer is checked to have one, and a
        later one is a candidate only once counted)."""
        measured = self.count.measured
        assert measured is not None
        return measured


async def measured_request_view(
    parts: RequestParts,
    *,
    provider: Any,
    retain_contents: Any = (),
    count_view: CountView,
    fit_output: FitOutput | None = None,
) -> dict[str, Any]:
    """The negotiation (see the module docstring); ``ContextFold.get_measured_request_view``."""
    if not callable(count_view):
        raise TypeError("context-fold: count_view must be an async callable (view) -> envelope")
    if fit_output is not None and not callable(fit_output):
        raise TypeError("context-fold: fit_output must be an async callable or None")
    reminders = normalize_retain_contents(retain_contents)
    if parts.config.token_meter != "actual" or not provider_counts(provider):
        return await _legacy(parts, provider, reminders, count_view, calls=0)
    state = parts.state
    text = await resolve_system_prompt(state.system_prompt_factory)
    decision = await derive_budget(parts.config, provider=provider)
    async with parts.lock:
        await parts.loaded()
        decision = decision.with_refit_cap(state.refit_cap)
        prompt = parts.planner.system_prompt_view(state, text)
        negotiation = _Negotiation(parts, decision, reminders, prompt)
        first = await negotiation.offer(count_view)
    if first.count.measured is None:
        if first.count.hard_over:
            raise _hard_error(first.count, parts, "cannot fit protected content")
        # The provider could not count: the legacy meter plans this request.
        return await _legacy(parts, provider, reminders, count_view, calls=1)
    async with parts.lock:
        envelope = await negotiation.reduce(first, count_view, fit_output)
    await negotiation.emit()
    return envelope


class _Negotiation:
    """One measured request: the candidates, their counts and the staged decisions."""

    def __init__(
        self,
        parts: RequestParts,
        decision: Any,
        reminders: Sequence[str],
        system_prompt: SystemPromptView | None,
    ) -> None:
        self.parts = parts
        self.state = state = parts.state
        self.planner = planner = parts.planner
        self.decision = decision
        self.system_prompt = system_prompt
        self.calls = 0
        self.model = decision.model or state.model
        state.model = self.model
        self.ratio = planner.ratio(self.model)
        self.request_raw = planner.counter.request_overhead + (
            system_prompt.raw_change if system_prompt is not None else 0
        )
        self.set_budget(decision.effective_budget)
        self.base = state.sticky.state
        self.retained = planner.find_reminders(state, reminders)
        self.first: _Candidate | None = None
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.reason = ""  # why a pass runs (`RequestReport.compacted_by`), as on the legacy path

    def set_budget(self, budget: int) -> None:
        """Trigger and target as fractions of ``budget`` less the notice's reserve."""
        cfg = self.parts.config
        self.budget = budget
        self.reserve = self.planner.notice_reserve(budget)
        self.usable = max(0, budget - self.reserve)
        self.trigger = math.floor(cfg.compact_threshold * self.usable)
        self.target = math.floor(cfg.target_usage * self.usable)

    def delivered(self, final: _Candidate, result: PassResult | None) -> list[tuple[str, Any]]:
        """Record ``final`` as the delivered request (report, meter bookkeeping) and return
        the events to emit once the lock is released, as the legacy path does."""
        first = self.first
        assert first is not None
        reason = self.reason if result is not None else ""
        limits = Thresholds(self.trigger, self.target, self.ratio, False, "provider_count", reason)
        planned = Planned(
            [],  # no messages: the caller already holds the counted view; only bookkeeping
            final.raw,
            self.decision,
            first.count.measured or 0,
            final.count.measured or 0,
            len(first.view),
            len(final.view),
            limits,
            result,
            prices=self.planner.prices(self.state.model),
        )
        return self.planner.delivery.deliver(self.state, planned)[1]

    async def emit(self) -> None:
        events, self.events = self.events, []
        for event, data in events:
            await self.parts.events.emit(event, data)

    def public(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The view as the caller gets it (the system prompt factory's text in front)."""
        prompt = self.system_prompt
        if prompt is None:
            return [detached(m) for m in messages]
        return [dict(prompt.message)] + [
            detached(m) for m in messages if id(m) not in prompt.hidden
        ]

    async def count(self, count_view: CountView, view: list[dict[str, Any]]) -> Count | None:
        self.calls += 1
        return read_count(await count_view(view))

    async def offer(self, count_view: CountView) -> _Candidate:
        """Count the sticky view (with any retained reminder restored)."""
        history, sticky = self.state.history, self.state.sticky
        messages = sticky.current(history)
        restore = any(sticky.compacted(history, i) for i in self.retained)
        result = None
        notice_cost = sticky.notice_cost
        raw = sticky.raw + notice_cost + self.request_raw
        if restore:
            result = self.compact(ladder=(), overhead=0)
            messages = assemble_view(history, result.state, result.notice)
            notice_cost = result.notice_cost
            raw = result.raw_total + notice_cost + self.request_raw
        view = self.public(messages)
        count = await self.count(count_view, view)
        if count is None:
            count = Count(attempt={"dispatch": None}, estimated=0, limit=0, measured=None)
        return _Candidate(view, raw, notice_cost, count, result)

    def compact(self, *, ladder: Sequence[Any], overhead: int) -> PassResult:
        ratio, request_raw, planner = self.ratio, self.request_raw, self.planner

        def raw(tokens: int) -> int:
            return max(0, math.floor((tokens - overhead) / ratio) - request_raw)

        plan = PassPlan(
            target_raw=raw(self.target),
            limit_raw=raw(self.trigger),
            budget_raw=raw(self.budget),
            retained=self.retained,
            notice_reserve=self.reserve,
            ladder=ladder,
            # The identifier ledger, as on the legacy path: what a pass takes out is listed.
            values=self.state.sticky.values if self.parts.config.ledger_share > 0 else None,
            ledger_raw=math.floor(planner.ledger_room(self.budget) / ratio),
        )
        return run_pass(self.state.history, self.base, planner.counter, planner.settings, plan)

    def messages_size(self, candidate: _Candidate) -> int:
        """The measured size the trigger and target compare: the whole counted request less
        the notice, which rides on its own reserve (as on the legacy path)."""
        assert candidate.count.measured is not None
        return candidate.count.measured - math.ceil(candidate.notice_cost * self.ratio)

    async def reduce(
        self, first: _Candidate, count_view: CountView, fit_output: FitOutput | None
    ) -> dict[str, Any]:
        if first.count.limit > 0:
            # The provider counted the whole request, tool schemas and overlays included:
            # the honest budget is its own input limit (capped by max_tokens), not the
            # estimate-based one, whose safety margin is there for counts we could not make.
            cap = self.parts.config.max_tokens
            self.set_budget(min(first.count.limit, cap) if cap else first.count.limit)
        budget = self.budget
        size = self.messages_size(first)
        measured_first = first.count.measured
        assert measured_first is not None
        self.first = first
        # As on the legacy path: when protection held the last pass above its target, a
        # pass at the trigger would find the same floor and rewrite the prompt prefix for a
        # few tokens per request, so the next one waits for the hard limit.
        sticky = self.state.sticky
        missed = sticky.missed_target_at
        fires_at = self.usable if missed is not None else self.trigger
        self.reason = (
            "budget" if measured_first > budget or first.count.hard_over
            else "retained" if first.result is not None
            else "trigger" if size > fires_at
            # A result shortened to fit the window, answered since: one pass cuts it to the
            # head an old result keeps (see `compaction.oversized`), as on the legacy path.
            else "oversized" if sticky.carries_answered(self.state.history)
            else ""
        )  # fmt: skip
        if self.reason == "oversized":
            # Once: a pass that finds nothing worth committing is not asked again for it; a
            # committed or rolled back pass sets it from the view it leaves.
            sticky.carried_unit = None
        if not self.reason:
            return self.envelope(NOT_NEEDED, first, first, None)
        best = first
        outcome = PROTECTED_FLOOR
        # Summarizing needs a model call of its own: the measured ladder uses the other
        # rungs, each counted by the provider.
        ladder = [r for r in self.planner.ladder if getattr(r, "name", "") != "summarize"]
        for rung in range(1, len(ladder) + 1):
            overhead = best.measured - math.ceil(best.raw * self.ratio)
            result = self.compact(ladder=ladder[:rung], overhead=overhead)
            raw = result.raw_total + result.notice_cost + self.request_raw
            if best.result is not None and _same(result, best.result):
                continue  # this rung changed nothing more: nothing new to count
            if best.result is None and not result.changed and raw == best.raw:
                continue
            messages = assemble_view(self.state.history, result.state, result.notice)
            view = self.public(messages)
            count = await self.count(count_view, view)
            if count is None or count.measured is None:
                if best.count.hard_over or (count is not None and count.hard_over):
                    raise _hard_error(best.count, self.parts, "recount became unavailable")
                return self.envelope(MEASUREMENT_UNAVAILABLE, first, best, None)
            candidate = _Candidate(view, raw, result.notice_cost, count, result)
            if count.measured >= best.measured:
                continue  # no smaller: keep the smaller counted view
            best = candidate
            # The ladder works to the target and the ledger takes a share of the room it
            # left, as on the legacy path: the ledger's pages do not make a rung more due.
            ledger = math.ceil(result.state.ledger.cost * self.ratio)
            if self.messages_size(best) - ledger <= self.target and not count.hard_over:
                outcome = TARGET_REACHED
                break
        # The provider's count is exact: over its hard limit, the orchestrator's output
        # ladder may still let the request in; over max_tokens (the user's cap, which a
        # smaller output reserve does not move) nothing can, as on the message-only path.
        # Between the target and the budget is a protected floor, dispatched as such.
        cap = self.parts.config.max_tokens
        if cap is not None and best.count.size > cap:
            raise _cap_error(best.count, cap, self.parts)
        if best.count.hard_over:
            return await self.fit(first, best, fit_output)
        return self.envelope(outcome, first, best, self.stage(best))

    async def fit(
        self, first: _Candidate, best: _Candidate, fit_output: FitOutput | None
    ) -> dict[str, Any]:
        """Still over the hard limit after the last rung: the orchestrator's output ladder."""
        if fit_output is None or not best.count.hard_over:
            raise _hard_error(best.count, self.parts, "cannot fit protected content")
        fitted = await fit_output(best.view, best.count.attempt)
        if fitted is None:
            raise _hard_error(best.count, self.parts, "no output fit")
        count = read_count(fitted)
        calls = fitted.get("count_calls") if isinstance(fitted, Mapping) else None
        if (
            count is None
            or count.measured is None
            or count.estimated > count.limit
            or not _count(calls)
        ):
            raise TypeError(
                "context-fold: fit_output must return a newly counted envelope with a provider "
                "measurement, a hard-safe estimate and a positive count_calls, or None"
            )
        if calls <= 0:
            raise TypeError("context-fold: fit_output's count_calls must be positive")
        if count.hard_over:  # the provider's own count says no, whatever its estimate
            raise _hard_error(count, self.parts, "no output fit")
        self.calls += calls
        fitted_candidate = _Candidate(best.view, best.raw, best.notice_cost, count, best.result)
        return self.envelope(REDUCED_OUTPUT, first, fitted_candidate, self.stage(best))

    def stage(self, candidate: _Candidate) -> MeasuredTransaction | None:
        """A transaction committing ``candidate``'s pass, or None when it changes nothing."""
        result = candidate.result
        parts = self.parts
        if result is None or _same(result, _as_result(parts)):
            return None
        state = parts.state
        base = self.base
        target = self.target
        ratio = self.ratio
        overhead = candidate.measured - math.ceil(candidate.raw * ratio)
        applied: list[Any] = []

        async def apply(claim: Callable[[], bool]) -> bool:
            async with parts.lock:
                sticky = state.sticky
                if sticky.state is not base:
                    return False  # another request moved the sticky state since the offer
                if not claim():
                    return False  # rolled back while this commit waited for the lock
                before = (sticky.state, sticky.notice, sticky.notice_cost)
                missed_before = sticky.missed_target_at
                sticky.commit(state.history, result)
                state.state_dirty = True
                messages_after = math.ceil(result.raw_total * ratio) + overhead
                sticky.missed_target_at = None if messages_after <= target else messages_after
                applied.append((before, missed_before, sticky.state))
                # The report and the meter's next reading describe this view.
                events = self.delivered(candidate, result)
                await parts.persisted()
            await parts.emit(events)
            return True

        def undo() -> None:
            if not applied:
                return
            (fold_state, notice, notice_cost), missed, committed = applied.pop()
            sticky = state.sticky
            if sticky.state is committed:
                sticky.restore(state.history, fold_state, notice, notice_cost, missed)
                state.state_dirty = True

        return MeasuredTransaction(apply, undo)

    def envelope(
        self,
        outcome: str,
        first: _Candidate,
        final: _Candidate,
        transaction: MeasuredTransaction | None,
    ) -> dict[str, Any]:
        if transaction is None:  # nothing to commit: this view is delivered as it stands
            self.events = self.delivered(final, None)
        attempt = final.count.attempt
        return {
            "outcome": outcome,
            "base_view": final.view,
            "final_attempt": attempt,
            "dispatch": attempt.get("dispatch"),
            "budget_decision": attempt.get("budget_decision"),
            "measured_before": first.count.measured,
            "measured_after": final.count.measured,
            "trigger": self.trigger,
            "target": self.target,
            "budget": self.decision.effective_budget,
            "count_calls": self.calls,
            "transaction": transaction,
        }


def _same(a: PassResult, b: PassResult) -> bool:
    return (
        a.state.removed_units == b.state.removed_units
        and a.state.truncated.keys() == b.state.truncated.keys()
        and a.notice_cost == b.notice_cost
        and a.raw_total == b.raw_total
    )


def _as_result(parts: RequestParts) -> PassResult:
    sticky = parts.state.sticky
    return PassResult(
        state=sticky.state,
        raw_total=sticky.raw,
        notice=sticky.notice,
        notice_cost=sticky.notice_cost,
    )


def _hard_error(count: Count, parts: RequestParts, reason: str) -> Exception:
    return context_length_error(
        f"context-fold: the request {reason}: the provider counts {count.size:,} "
        f"input tokens over its hard limit of {count.limit:,}, and no legal reduction "
        "brings it under. Raise the model's window, lower the output reserve, or start a "
        "new session.",
        required_tokens=count.size,
        budget=count.limit,
        model=parts.state.model,
    )


def _cap_error(count: Count, cap: int, parts: RequestParts) -> Exception:
    return context_length_error(
        f"context-fold: the provider counts the request at {count.size:,} input tokens, over "
        f"max_tokens={cap:,}, after every legal reduction (what is left is the content a "
        "request cannot go without, the tool schemas and the orchestrator's instructions). "
        "Raise max_tokens, send fewer tool schemas, or start a new session.",
        required_tokens=count.size,
        budget=cap,
        model=parts.state.model,
    )


async def _legacy(
    parts: RequestParts,
    provider: Any,
    reminders: Sequence[str],
    count_view: CountView,
    *,
    calls: int,
) -> dict[str, Any]:
    """No provider count: the legacy meter plans the request (committing as it always has);
    the view is counted once for its dispatch envelope, and ``rollback()`` restores the
    sticky state it replaced."""
    state = parts.state
    sticky = state.sticky
    before = (sticky.state, sticky.notice, sticky.notice_cost, sticky.missed_target_at)
    view = await parts.serve(None, provider, False, reminders)
    after = state.sticky.state

    def undo() -> None:
        sticky = state.sticky
        if sticky.state is after and after is not before[0]:
            sticky.restore(state.history, *before)
            state.state_dirty = True

    async def apply(claim: Callable[[], bool]) -> bool:
        return claim()

    transaction = MeasuredTransaction(apply, undo)
    try:
        counted = await count_view(view)
        count = read_count(counted)
    except BaseException:
        transaction.rollback()
        raise
    if count is not None and count.hard_over:
        transaction.rollback()
        raise _hard_error(count, parts, "cannot fit protected content")
    report = state.last_report
    return {
        "outcome": MEASUREMENT_UNAVAILABLE,
        "base_view": view,
        "final_attempt": counted,
        "dispatch": counted.get("dispatch"),
        "budget_decision": counted.get("budget_decision"),
        "measured_before": None,
        "measured_after": count.measured if count is not None else None,
        "trigger": report.trigger if report is not None else None,
        "target": report.target if report is not None else None,
        "budget": report.budget if report is not None else None,
        "count_calls": calls + 1,
        "transaction": transaction,
    }


__all__ = [
    "MEASUREMENT_UNAVAILABLE",
    "NOT_NEEDED",
    "OUTCOMES",
    "PROTECTED_FLOOR",
    "REDUCED_OUTPUT",
    "TARGET_REACHED",
    "MeasuredTransaction",
    "measured_request_view",
    "provider_counts",
    "read_count",
]
