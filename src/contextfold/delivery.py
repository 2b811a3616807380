"""Handing a planned view out: the caller's copy, the request's report, and the events to
emit once the context's lock is released (the delivery boundary: a request that fails
leaves no trace)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .budget import BudgetDecision
from .cache_marks import marked_view
from .compaction.planner import PassResult
from .config import ContextConfig
from .context_state import ContextState
from .costing import PricedRequest, request_cost
from .events import BUDGET, COMPACTION, REPAIRED, REPORT, EventSink
from .meter import MeterStats, UsageReading
from .prices import Prices
from .report import RequestReport, compaction_event
from .summaries.aligned import SentPrefix
from .views import detached

Events = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class SystemPromptView:
    """A system prompt factory's text for one request, and how it changes the view."""

    message: dict[str, Any]
    raw_change: int  # its raw cost less that of the stored system messages it replaces
    hidden: set[int]  # ids of the stored system messages' view dicts it replaces


# Built on every request: plain slotted classes (a frozen dataclass sets each field through
# object.__setattr__, a tenth of a steady request).
@dataclass(slots=True)
class Thresholds:
    """What a request was planned against, in tokens (and how its size was read)."""

    trigger: int
    target: int
    ratio: float
    hard_fit: bool
    source: str = "estimate"  # "estimate", "actual" or "provider_count"
    reason: str = ""  # why a pass ran (see `RequestReport.compacted_by`)


@dataclass(slots=True)
class Planned:
    """A view ready to hand out: its messages, sizes and what made it."""

    messages: list[dict[str, Any]]
    view_raw: int  # raw tokens of messages, notice and request overhead
    decision: BudgetDecision
    before: int  # the request's size before any pass, in tokens
    after: int  # its size as delivered
    messages_before: int
    messages_after: int
    thresholds: Thresholds
    result: PassResult | None = None  # the pass this request committed, if any
    system_prompt: SystemPromptView | None = None
    share: bool = False  # hand out the context's own list and messages (internal readers)
    # The prices the report's cost is computed with, and the view's leading tokens a pass
    # leaves as they are (what the request after a pass still reads from the cache).
    prices: Prices | None = None
    head: int = 0


class Delivery:
    """Builds the report and the caller's view, and gathers the request's events."""

    def __init__(self, config: ContextConfig, counter_name: str, events: EventSink) -> None:
        self.config = config
        self.counter_name = counter_name
        self.events = events

    def report(self, state: ContextState, planned: Planned) -> RequestReport:
        result, decision, limits = planned.result, planned.decision, planned.thresholds
        sticky = state.sticky
        cost, prices = 0.0, planned.prices
        if prices is not None:
            previous = state.last_priced
            if previous is None or result is not None:
                prefix = planned.head if previous is not None else 0
            else:
                prefix = min(previous.tokens, planned.after)
            priced = PricedRequest(planned.after, prefix)
            cost = round(request_cost(prices, priced, previous).usd, 6)
            state.last_priced = priced
        # Positional, in field order (keywords cost a third more on every request).
        return RequestReport(
            planned.before,
            planned.after,
            planned.messages_before,
            planned.messages_after,
            len(state.history.entries),
            result is not None,  # compacted
            result.level if result else 0,
            list(result.changed) if result else [],  # applied
            decision.effective_budget,
            limits.trigger,
            limits.target,
            limits.hard_fit,
            limits.source,  # size_source
            self.counter_name,
            round(limits.ratio, 4),
            sticky.removed_messages,  # removed_total
            len(sticky.state.truncated),  # truncated_total
            sticky.missed_target_at is not None,  # floor_bound
            result.relaxed if result else [],
            len(state.history.repairs),  # repairs_total
            cost,  # cost_usd
            prices.name if prices is not None else "",
            limits.reason,  # compacted_by
        )

    def deliver(self, state: ContextState, planned: Planned) -> tuple[list[dict[str, Any]], Events]:
        """The view to hand out, and the events to emit once the lock is released.

        The caller gets its own copy of every message (containers copied, strings shared):
        marking a block for prompt caching or editing a message in place can never reach
        history or the sticky view. Only with ``share`` (for a caller that never writes) are
        the context's own list and messages handed out.
        """
        messages, share, system_prompt = planned.messages, planned.share, planned.system_prompt
        view = self._copies(messages, system_prompt, share)
        # What was sent, kept as the list it came from and its length (no copy): a summary
        # request sends it again (`sent_prefix`) while no pass has replaced that list.
        state.last_sent = (messages, len(messages), system_prompt)
        report = self.report(state, planned)
        state.last_delivered_raw = planned.view_raw
        state.last_report = report
        events: Events = [
            (REPAIRED, repair.to_event()) for repair in state.history.provisional_repairs()
        ]
        events.extend(state.summary_events)
        state.summary_events = []
        if not self.events.connected:
            return view, events  # nobody listens: build no payloads on the hot path
        decision, result = planned.decision, planned.result
        budget_changed = decision != state.last_budget
        if budget_changed:
            state.last_budget = decision
            events.append((BUDGET, decision.to_event()))
        if result is not None:
            events.append((COMPACTION, compaction_event(report, result.changed, self.config)))
        if budget_changed or result is not None or self.config.report_events == "every_request":
            events.append((REPORT, report.to_dict()))
        return view, events

    def _copies(
        self,
        messages: list[dict[str, Any]],
        system_prompt: SystemPromptView | None,
        share: bool,
    ) -> list[dict[str, Any]]:
        if system_prompt is None:
            view = messages if share else [detached(message) for message in messages]
        else:
            hidden = system_prompt.hidden
            view = [dict(system_prompt.message)]
            copy = _shared if share else detached
            view.extend(copy(m) for m in messages if id(m) not in hidden)
        if not share and self.config.cache_breakpoints != "off":
            view = marked_view(view, self.config.cache_breakpoints)  # on the copies only
        return view

    def sent_prefix(self, state: ContextState) -> SentPrefix | None:
        """The view as the last request sent it, byte for byte, with the position of every
        history message in it: the prefix of a cache-aligned summary request. None when
        nothing was sent yet, or a pass (or a re-assembly) has replaced that view since."""
        last = state.last_sent
        sticky = state.sticky
        if last is None or last[0] is not sticky.view:
            return None
        messages, count, system_prompt = last
        sent = messages[:count]
        copies = self._copies(sent, system_prompt, share=False)
        offset = 0 if system_prompt is None else 1
        hidden = set() if system_prompt is None else system_prompt.hidden
        at: dict[int, int] = {}
        for message in sent:
            if id(message) not in hidden:
                at[id(message)] = offset
                offset += 1
        fold_state = sticky.state
        positions: dict[int, int] = {}
        for index, entry in enumerate(state.history.entries):
            swap = fold_state.truncated.get(index)
            shown = swap[0] if swap is not None else entry.view
            if shown is not None and id(shown) in at:
                positions[index] = at[id(shown)]
        summary = fold_state.summary
        return SentPrefix(
            copies,
            positions,
            fold_state.summary_record,
            at.get(id(summary)) if summary is not None else None,
        )


def meter_stats(state: ContextState, mode: str) -> MeterStats | None:
    """What the meter knew when the last view was delivered; None before the first."""
    if state.meter_stats is None and state.meter_inputs is not None:
        source, estimate, raw_estimate, measured, reading, ratio = state.meter_inputs
        state.meter_stats = MeterStats(
            mode=mode,
            source=source,
            estimate=estimate,
            raw_estimate=raw_estimate,
            measured=measured if source == "actual" else None,
            last_actual=reading.actual if reading else None,
            drift=_drift(reading),
            ratio=ratio,
        )
    return state.meter_stats


def _drift(reading: UsageReading | None) -> float | None:
    """The last reading's actual over the raw estimate of the view it answered."""
    if reading is None or not reading.view_raw:
        return None
    return round(reading.actual / reading.view_raw, 4)


def _shared(message: dict[str, Any]) -> dict[str, Any]:
    return message
