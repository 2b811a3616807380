"""The request path: plan, pass, assemble, notice, report.

Given the budget of a request (`budget.derive_budget`), `RequestPlanner.fit` decides what
the view holds: under the trigger, the sticky view as it stands (O(1) token arithmetic on
running totals); over it, one compaction pass on a working copy (`compaction.planner`),
summaries folded in (`summary_pass`), the decisions committed to the sticky view when they
pay; then the caller's copy and the report (`delivery`). It degrades before it refuses: a
refit cap, then the safety margin, then one suspect usage reading give way before the
required core is declared too big (`ContextLengthError`, with the numbers).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .budget import BudgetDecision, derive_budget
from .compaction.cost_plan import (
    COST_PASS_TARGET,
    PassOption,
    PeakRule,
    RequestSizes,
    cheapest_option,
    plan_request,
    planner_prices,
    reached_below,
    request_growth,
    still_pays,
)
from .compaction.floor import floor_error
from .compaction.kept_prefix import kept_raw, message_costs
from .compaction.planner import (
    PassPlan,
    PassResult,
    PassSettings,
    assemble_view,
    notice_header_cost,
    run_pass,
)
from .compaction.summarize import sized_ladder
from .config import ContextConfig
from .context_lock import ContextLock
from .context_state import ContextState
from .conventions import (
    missing_retained_body_message,
    resolve_system_prompt,
    system_prompt_message,
)
from .delivery import Delivery, Events, Planned, SystemPromptView, Thresholds
from .errors import ContextLengthError
from .events import EventSink
from .meter import readings_agree
from .persistence import Persistence
from .prices import Prices
from .summary_pass import SummaryPass, without_summaries
from .tokens import CalibratedCounter, TokenCounter

logger = logging.getLogger(__name__)

# The notice's reserve is at most this share of the budget: a small window must not spend
# most of itself telling the model what it no longer sees.
NOTICE_MAX_SHARE = 0.10
# With the identifier ledger on, the ledger lists what was taken out (values and the ids of
# the messages holding them) and the notice's digest of removed turns says much the same:
# the notice takes at most this share, so the two together stay a modest part of a window.
NOTICE_MAX_SHARE_WITH_LEDGER = 0.04
NOTICE_MIN_TOKENS_WITH_LEDGER = 200
# The ledger's floor (``ledger_min_tokens``) takes at most this share of a budget.
LEDGER_FLOOR_MAX_SHARE = 0.20


def pass_settings(config: ContextConfig) -> PassSettings:
    """The configured protection and notice settings every compaction pass runs with."""
    return PassSettings(
        protected_recent=config.protected_recent,
        protected_tool_results=config.protected_tool_results,
        truncate_chars=config.truncate_chars,
        notice_role=config.compaction_notice_role,
        notice_enabled=config.compaction_notice_enabled,
        notice_verbosity=config.compaction_notice_verbosity,
        notice_min_level=config.compaction_notice_min_level,
        older_tasks_first=config.compact_older_tasks_first,
    )


class RequestPlanner:
    """Plans each request's view for one context (its settings; the state is passed in)."""

    def __init__(
        self,
        config: ContextConfig,
        counter: TokenCounter,
        summaries: SummaryPass | None,
        delivery: Delivery,
    ) -> None:
        self.config = config
        self.counter = counter
        self.ladder = config.ladder  # the rungs `strategies` names, built once
        self.settings = pass_settings(config)
        self.summaries = summaries
        self.delivery = delivery
        self.cost_planned = config.planner == "cost"
        self._prices: dict[str | None, Prices] = {}  # the cost planner's, by model
        self._rules: dict[str, PeakRule] = {}  # its rule, by the prices' name

    # -- sizes ------------------------------------------------------------------------------

    def ratio(self, model: str | None) -> float:
        counter = self.counter
        return counter.ratio(model) if isinstance(counter, CalibratedCounter) else 1.0

    def fixed(self, model: str | None) -> int:
        counter = self.counter
        return counter.fixed(model) if isinstance(counter, CalibratedCounter) else 0

    def notice_reserve(self, budget: int) -> int:
        """Tokens set aside for the notice: the configured reserve, at most a tenth of the
        budget (a 600-token window must not spend 500 of them on the notice), a
        twenty-fifth with the ledger on (it lists what the notice's digest would)."""
        cfg = self.config
        if not cfg.compaction_notice_enabled:
            return 0
        reserve = min(cfg.compaction_notice_token_reserve, math.floor(budget * NOTICE_MAX_SHARE))
        if cfg.ledger_share > 0:
            # Still room for the header and a few lines of digest in a small window.
            share = math.floor(budget * NOTICE_MAX_SHARE_WITH_LEDGER)
            reserve = min(reserve, max(share, NOTICE_MIN_TOKENS_WITH_LEDGER))
        return reserve

    def ledger_room(self, budget: int) -> int:
        """Tokens the identifier ledger may take: ``ledger_share`` of the budget, and at
        least ``ledger_min_tokens`` where that is at most a fifth of it (a small window's
        ledger still lists the values most likely needed); 0 with the ledger off."""
        cfg = self.config
        if cfg.ledger_share <= 0:
            return 0
        floor = min(cfg.ledger_min_tokens, math.floor(budget * LEDGER_FLOOR_MAX_SHARE))
        return max(math.floor(budget * cfg.ledger_share), floor)

    def header_cost(self, state: ContextState) -> int:
        """What the smallest notice costs, counted once per role (`notice_header_cost`)."""
        role = self.settings.notice_role
        if not state.history.units:
            return 0  # no notice without a message
        if state.header_cost is None or state.header_cost[0] != role:
            cost = notice_header_cost(
                state.history, self.counter, self.settings.truncate_chars, role
            )
            state.header_cost = (role, cost)
        return state.header_cost[1]

    def measure(
        self, state: ContextState, estimate: int, view_raw: int, ratio: float
    ) -> tuple[int, str]:
        """The size the trigger compares: the estimate, or in actual mode the last real
        figure plus the estimate of what changed since that request."""
        reading = state.last_reading
        if self.config.token_meter != "actual" or reading is None or reading.view_raw is None:
            return estimate, "estimate"
        return reading.actual + math.ceil((view_raw - reading.view_raw) * ratio), "actual"

    def find_reminders(self, state: ContextState, bodies: Sequence[str]) -> list[int]:
        """History indexes of the persisted reminders a request must carry complete."""
        if isinstance(bodies, str):
            bodies = [bodies]
        found: list[int] = []
        for body in bodies:
            index = state.history.reminders.get(body)
            if index is None:
                # The reference's error: naming a body that is not there is the caller's
                # mistake (a ValueError), not an overflow.
                raise ValueError(
                    f"context-fold: {missing_retained_body_message(body)}. Add it to the "
                    "context first."
                )
            found.append(index)
        return found

    def system_prompt_view(self, state: ContextState, text: str | None) -> SystemPromptView | None:
        """The factory's message and what it changes in the view's raw size."""
        if text is None:
            return None
        if state.system_prompt_cost is None or state.system_prompt_cost[0] != text:
            cost = self.counter.count_message(system_prompt_message(text))
            state.system_prompt_cost = (text, cost)
        history = state.history
        hidden = {id(history.entries[i].view) for i in history.system_prompts}
        return SystemPromptView(
            message=system_prompt_message(text),
            raw_change=state.system_prompt_cost[1] - history.system_prompt_raw,
            hidden=hidden,
        )

    # -- one request, degrading before refusing -----------------------------------------------

    async def fit(
        self,
        state: ContextState,
        decision: BudgetDecision,
        hard_fit: bool,
        required_reminders: Sequence[str],
        system_prompt: SystemPromptView | None,
        *,
        share: bool = False,
    ) -> tuple[list[dict[str, Any]], Events]:
        """The request's view and events. The refit cap is a lesson from one overflow, not a
        limit the provider stated, and the safety margin is for the estimate's error: when
        the required core cannot fit under them, try the budget itself, then the provider's
        own input limit, then without one unconfirmed usage reading, before ending the
        session (the provider refuses what it must, and the loop refits)."""
        capped = decision.with_refit_cap(state.refit_cap)
        candidate, distrusted = capped, False
        while True:
            try:
                planned = await self.plan(
                    state, candidate, hard_fit, required_reminders, system_prompt, share=share
                )
                break
            except ContextLengthError:
                looser = _looser_budget(candidate, decision)
                if looser is None:
                    # One usage reading must not lock a session out: a correction no second
                    # reading confirmed is set aside, and planning starts over.
                    if distrusted or not self.set_aside_suspect_reading(state, decision):
                        raise
                    distrusted, looser = True, capped
                candidate = looser
        if distrusted:
            logger.warning(
                "context-fold: one usage reading raised the estimate so far that this request "
                "would have been refused; that reading is set aside until another one agrees "
                "with it"
            )
        if candidate.margin_waived and not state.margin_waived:
            logger.warning(
                "context-fold: the content this request cannot go without does not fit the "
                "budget with its %d-token safety margin; fitting requests to the provider's "
                "input limit (%d tokens) instead",
                candidate.safety_margin or 0,
                candidate.effective_budget,
            )
        state.margin_waived = candidate.margin_waived
        return self.delivery.deliver(state, planned)

    def set_aside_suspect_reading(self, state: ContextState, decision: BudgetDecision) -> bool:
        """Set aside what one usage reading alone raised (a calibrated counter's unconfirmed
        correction; in actual mode the reading itself) before a request is refused on its
        word; True if anything was. The next reading confirms or drops it."""
        model = decision.model or state.model
        counter = self.counter
        calibrated = isinstance(counter, CalibratedCounter) and counter.set_aside(model)
        reading = state.last_reading
        if (
            self.config.token_meter == "actual"
            and reading is not None
            and (calibrated or not readings_agree(state.aside_reading, reading))
        ):
            # In actual mode the reading itself drives the size; it stays aside until a
            # later reading agrees with it.
            state.aside_reading, state.last_reading = reading, None
        elif not calibrated:
            return False
        return True

    # -- plan, pass, assemble ---------------------------------------------------------------

    async def plan(
        self,
        state: ContextState,
        decision: BudgetDecision,
        hard_fit: bool,
        required_reminders: Sequence[str],
        system_prompt: SystemPromptView | None,
        *,
        share: bool = False,
    ) -> Planned:
        """The view of one budget: the sticky one, or a pass's (committed when it pays).
        Raises `ContextLengthError` when even the required core cannot fit, committing
        nothing."""
        cfg = self.config
        state.summary_events = []  # a request that fails leaves no trace
        model = decision.model or state.model
        state.model = model
        ratio = self.ratio(model)
        history, sticky = state.history, state.sticky
        view = sticky.current(history)
        # Tokens every request costs beyond its kept messages, in raw units: reply priming,
        # and a system prompt factory's text in place of the stored system messages.
        request_raw = self.counter.request_overhead
        if system_prompt is not None:
            request_raw += system_prompt.raw_change
        before_raw = sticky.raw + sticky.notice_cost + request_raw
        # What the provider counts on every request beyond the messages (tool schemas, the
        # orchestrator's instructions), learned from usage: part of every size, never scaled.
        fixed = self.fixed(model)
        estimate = math.ceil(before_raw * ratio) + fixed
        messages_before = len(view)
        budget = decision.effective_budget

        prices = self.prices(model)
        if not cfg.compaction_enabled:
            limits = Thresholds(budget, budget, ratio, hard_fit)
            return Planned(
                view, before_raw, decision, estimate, estimate, messages_before,
                messages_before, limits, None, system_prompt, share, prices,
            )  # fmt: skip

        reserve = self.notice_reserve(budget)
        usable = max(0, budget - reserve)
        # The thresholds are shares of the room compaction can work in: a fixed part (tool
        # schemas) rides on every request whatever is compacted, so a share of the whole
        # budget would put the trigger under the schemas alone and compact on every request.
        room = max(0, usable - fixed)
        trigger = min(usable, fixed + math.floor(cfg.compact_threshold * room))
        target = min(usable, fixed + math.floor(cfg.target_usage * room))
        if hard_fit:
            trigger = target = usable
        measured, source = self.measure(state, estimate, before_raw, ratio)
        # The fixed part, and in actual mode whatever else the provider saw beyond us.
        overhead = fixed + max(0, measured - estimate)
        retained = self.find_reminders(state, required_reminders)
        restore = any(sticky.compacted(history, i) for i in retained)
        # A message pinned since the last plan that the view has compacted comes back now.
        repin = sticky.newly_pinned_out(history)

        # The notice rides on its own reserve (already taken out of `usable`), so the trigger
        # compares the messages alone; counting the notice too would re-trigger a view the
        # last pass left just under the trigger.
        messages_size = measured - math.ceil(sticky.notice_cost * ratio)
        # When protection held the last pass above its target, a pass at the trigger would
        # find the same floor and win a few tokens per request, rewriting the prompt prefix
        # each time: wait for the hard limit instead, the budget less the notice the view
        # carries (not its whole reserve, which a floor near the budget would leave no
        # room above).
        fires_at = (
            budget - math.ceil(sticky.notice_cost * ratio)
            if sticky.missed_target_at is not None and not hard_fit
            else trigger
        )
        result: PassResult | None = None
        delivered, delivered_raw = view, before_raw
        # Never deliver a view over the budget by either figure: an under-reporting meter
        # (one usage shape read as another) must not let the estimate overflow.
        over_budget = max(measured, estimate) > budget
        head = self.head_tokens(state, ratio, overhead)
        reason = (
            "budget" if over_budget
            else "retained" if restore
            else "pins" if repin
            else "trigger" if messages_size > fires_at
            else "oversized" if sticky.carries_answered(history)
            else ""
        )  # fmt: skip
        cost_planned = self.cost_planned and not hard_fit
        # One clock reading serves the cache watch's warm check and its delivery note.
        now = time.time() if self.cost_planned else 0.0
        if cost_planned and not reason:
            reason = self.cost_reason(state, prices, (messages_size, fires_at, target, head), now)
        # A pass the budget forces is the threshold planner's: deep would not pay there.
        cost_planned = cost_planned and reason not in ("budget", "retained", "pins", "oversized")
        if reason:

            def raw(tokens: int) -> int:
                return max(0, math.floor((tokens - overhead) / ratio) - request_raw)

            # Passes coming every few requests go deeper (see `cadence`); a cost pass as
            # deep as protection lets it (see `cost_plan`), the trigger still its limit. Where
            # passes come every few requests anyway (the window small beside what a request
            # adds), the paced pass is the threshold planner's unless the cache is cold: a deep
            # one there cost more and kept fewer of the current task's facts (`contextfold
            # eval`, long-horizon at 4,000 tokens).
            paced = target if hard_fit else sticky.cadence.target(messages_size, trigger, target)
            cost_planned = cost_planned and (paced == target or reason == "cold_cache")
            deep = COST_PASS_TARGET if cost_planned else paced
            # A pass the cost model fired under the trigger ("optimal_peak") is no pass the
            # trigger forced: its limit is the trigger, so it yields no soft protection for
            # ending high in the band, as one the trigger fired does (see `cost_plan.still_pays`).
            early = reason == "optimal_peak"
            pass_plan = PassPlan(
                target_raw=raw(deep),
                limit_raw=raw(trigger if deep == target or cost_planned or early else deep),
                budget_raw=raw(budget),
                retained=retained,
                notice_reserve=reserve,
                values=sticky.values if cfg.ledger_share > 0 else None,
                ledger_raw=math.floor(self.ledger_room(budget) / ratio),
                deep=cost_planned,
                hold_raw=raw((paced + trigger) // 2) if cost_planned else None,
                unlisted_shortened=sticky.unlisted_shortened,
            )
            result, adopted = await self._pass(state, budget, pass_plan, request_raw)
            listed = result
            if cost_planned and reason != "cold_cache" and not adopted:
                # Which pass: the deep one, or one that keeps the cached prefix, by what the
                # cycle each starts costs (a cold cache keeps no prefix: deep, always).
                sizes = PassSizes(messages_size, trigger, head, ratio, overhead)
                result, head = self.cheapest_pass(state, budget, pass_plan, result, sizes)
            # A pass the peak rule fired early is committed only if it still pays at the
            # floor it reached (see `cost_plan.still_pays`), whichever pass it is (one that
            # keeps the cached prefix rewrites only what follows it: ``head``).
            declined = (
                reason == "optimal_peak"
                and not adopted
                and not self.still_pays(
                    state, prices, (messages_size, trigger, target, head), result, ratio, overhead
                )
            )
            after_raw = result.raw_total + result.notice_cost + request_raw
            after = math.ceil(after_raw * ratio) + overhead
            if after > budget:
                # Even the required core cannot fit: fail loudly, commit nothing.
                raise floor_error(history, result, decision, after, model)
            previous = sticky.state
            changed = (
                result.changed
                or result.state.removed_units != previous.removed_units
                or result.state.truncated.keys() != previous.truncated.keys()
                or result.notice_cost != sticky.notice_cost
                # A pass that only gave the ledger's room back to the budget changed the view.
                or result.state.ledger.pages != previous.ledger.pages
            )
            if restore:
                # Retention is per request, never a pin: this request carries the reminder
                # the sticky view had compacted, and the sticky view stays as it was, so
                # the next request without it does not keep it.
                delivered = assemble_view(history, result.state, result.notice)
                delivered_raw = after_raw
            elif (
                changed
                and not declined
                and (after_raw < before_raw or over_budget or adopted or repin)
            ):
                sticky.commit(history, result)
                # What a pass that kept the cached prefix shortened waits for the next pass
                # that lists values (see `PassPlan.unlisted_shortened`).
                sticky.unlisted_shortened = (
                    frozenset()
                    if result is listed
                    else sticky.unlisted_shortened | (result.state.shortened - previous.shortened)
                )
                state.state_dirty = True
                sticky.summaries_adopted = sticky.summaries_adopted or adopted
                messages_after = math.ceil(result.raw_total * ratio) + overhead
                # A cost pass that leaves the view under the band's middle (and room for a
                # few requests under the trigger) has not missed: the next pass is the cost
                # model's again, not one the budget forces (see `cost_plan.reached_below`).
                grown = self._request_sizes(state, (messages_size, trigger, target, head))
                ledger = math.ceil(result.state.ledger.cost * ratio)
                reached = (
                    reached_below(target, trigger, request_growth(grown), ledger)
                    if cost_planned
                    else target
                )
                sticky.missed_target_at = None if messages_after <= reached else messages_after
                sticky.cadence.passed(messages_after)
            else:
                # Nothing new to commit, or a pass that would make the request bigger (a
                # notice costing more than it saved) on a view that fits as it stands.
                result = None
            if not restore:
                delivered = sticky.view
                delivered_raw = sticky.raw + sticky.notice_cost + request_raw
            if repin:
                # Planned with every pin, kept or yielded: not planned again for them.
                sticky.pins_seen = frozenset(history.pins)
            after_estimate = math.ceil(delivered_raw * ratio) + fixed
        else:
            after_estimate = estimate
        if reason == "oversized":
            # Once: a pass that found nothing worth committing is not asked again for it.
            sticky.carried_unit = None
        if result is None:
            sticky.cadence.waited()
        if self.cost_planned:
            state.cache_watch.delivered(now, result is not None)
        state.meter_inputs = (source, estimate, before_raw, measured, state.last_reading, ratio)
        state.meter_stats = None
        limits = Thresholds(
            trigger, target, ratio, hard_fit, source, reason if result is not None else ""
        )
        return Planned(
            delivered, delivered_raw, decision, estimate, after_estimate, messages_before,
            len(delivered), limits, result, system_prompt, share, prices, head,
        )  # fmt: skip

    def prices(self, model: str | None) -> Prices:
        """What requests are priced with: the configured prices, else the model's family,
        else Anthropic's reference (see `cost_plan.planner_prices`)."""
        prices = self._prices.get(model)
        if prices is None:
            prices = self._prices[model] = planner_prices(self.config.prices, model)
        return prices

    def head_tokens(self, state: ContextState, ratio: float, overhead: int) -> int:
        """The view's leading system messages and first prompt, which a pass leaves as they
        are, in tokens (with what rides on every request)."""
        history = state.history
        first = history.first_human
        head_raw = 0 if first is None else sum(e.cost for e in history.entries[: first + 1])
        return math.ceil(head_raw * ratio) + overhead

    def cost_reason(
        self, state: ContextState, prices: Prices, sizes: tuple[int, int, int, int], now: float
    ) -> str:
        """Why ``planner: cost`` compacts a view now under the hard bound ("optimal_peak",
        "cold_cache"), or "" (see `compaction.cost_plan`); ``sizes`` are the view's, the
        hard bound, the target and the head, in tokens. Runs on every request it does not
        compact, so it reads cached figures only: the rule per prices, the cadence's."""
        watch = state.cache_watch
        planned = self._request_sizes(state, sizes, watch.floor)
        warm = watch.warm(prices.cache_lifetime, now, state.last_reading)
        return plan_request(self._rule(prices), planned, warm)

    def still_pays(
        self,
        state: ContextState,
        prices: Prices,
        sizes: tuple[int, int, int, int],
        result: PassResult,
        ratio: float,
        overhead: int,
    ) -> bool:
        """Whether the pass ``result`` the peak rule fired still pays at the floor it
        reached (`cost_plan.still_pays`); ``sizes`` as for `cost_reason`, the head being
        what the pass leaves as it was."""
        reached = math.ceil(result.raw_total * ratio) + overhead
        if still_pays(self._rule(prices), self._request_sizes(state, sizes), reached):
            return True
        state.cache_watch.floor = reached
        return False

    def _rule(self, prices: Prices) -> PeakRule:
        """The peak rule for ``prices``, made once per prices' name."""
        rule = self._rules.get(prices.name)
        if rule is None:
            rule = self._rules[prices.name] = PeakRule(prices)
        return rule

    @staticmethod
    def _request_sizes(
        state: ContextState, sizes: tuple[int, int, int, int], floor: int | None = None
    ) -> RequestSizes:
        """``sizes`` (the view's, the hard bound, the target and the head) with the cadence's
        figures since the last pass, and ``floor``, what a pass since then reached."""
        cadence = state.sticky.cadence
        size, hard_bound, target, head = sizes
        return RequestSizes(size, hard_bound, target, head, cadence.after, cadence.requests, floor)

    def cheapest_pass(
        self,
        state: ContextState,
        budget: int,
        plan: PassPlan,
        deep: PassResult,
        sizes: PassSizes,
    ) -> tuple[PassResult, int]:
        """Of the deep pass and one that leaves the view as last sent alone up to what was
        admitted since the last pass (it shortens the newest results only, the ledger and the
        notice kept), the one whose cycle costs least at the planner's prices
        (`cost_plan.cheapest_option`); with the view's leading tokens it leaves as they were,
        in tokens (what the next request reads from the cache). Only where there was a pass
        in this process and no summary is in play (the other pass would ask for one again)."""
        history, sticky = state.history, state.sticky
        edit_from = sticky.passed_at_entry
        if edit_from is None or self.summaries is not None or plan.retained:
            return deep, sizes.head
        ladder = [r for r in sized_ladder(self.ladder, budget) if getattr(r, "level", 1) < 3]
        newest = run_pass(
            history,
            sticky.state,
            self.counter,
            self.settings,
            replace(
                plan,
                ladder=ladder,
                sticky_raw=sticky.raw,
                header_cost=self.header_cost(state),
                edit_from=edit_from,
                kept_notice=(sticky.notice, sticky.notice_cost),
            ),
        )
        if not newest.changed:
            return deep, sizes.head
        sent = sticky.current(history)

        def option(name: str, result: PassResult) -> PassOption:
            view = assemble_view(history, result.state, result.notice)
            costs = message_costs(history, result.state, result.notice, result.notice_cost)
            kept = kept_raw(sent, view, costs)
            return PassOption(name, sizes.tokens(result.raw_total), sizes.tokens(kept))

        options = [option("deep", deep), option("newest", newest)]
        growth = request_growth(
            self._request_sizes(state, (sizes.size, sizes.trigger, 0, sizes.head))
        )
        prices = self.prices(state.model)
        best = cheapest_option(prices, options, growth, sizes.trigger)
        chosen = deep if best is options[0] else newest
        return chosen, max(sizes.head, best.kept)

    async def _pass(
        self, state: ContextState, budget: int, plan: PassPlan, request_raw: int
    ) -> tuple[PassResult, bool]:
        """One pass from the sticky state (or from the summary a resumed history's records
        make), its summaries folded in; and whether that summary was taken up."""
        history, sticky = state.history, state.sticky
        base, adopted = sticky.state, False
        # The summarize rung's default summary size follows the budget.
        ladder = sized_ladder(self.ladder, budget)
        summaries = self.summaries
        blocks: list[tuple[int, ...]] = []
        if summaries is not None:
            summaries.size_for(ladder)
            if base.summary_record is None and not sticky.summaries_adopted:
                found = await summaries.adopted(history, base)
                if found is None:
                    sticky.summaries_adopted = True  # nothing of this history's to take up
                else:
                    base, adopted = found, True
            blocks, free = await summaries.blocks(history, base)
            plan = replace(plan, summary_blocks=blocks, summary_free_blocks=free)
        plan = replace(
            plan,
            ladder=ladder,
            # The running total, kept on every admission and commit, spares the pass a walk
            # of the view; an adopted summary state is another view: walked.
            sticky_raw=sticky.raw if base is sticky.state else None,
            header_cost=self.header_cost(state),
        )
        result = run_pass(history, base, self.counter, self.settings, plan)
        if summaries is not None and result.state.pending_summary:
            budget_raw = (plan.budget_raw or 0) - request_raw
            # The request is cache-aligned when the view as last sent holds the span.
            prefix = self.delivery.sent_prefix(state)
            folded = await summaries.fold(
                history, result, budget_raw, blocks, state.summary_events, plan.values, prefix
            )
            if folded is None:
                plan = replace(plan, ladder=without_summaries(self.ladder))
                folded = run_pass(history, base, self.counter, self.settings, plan)
            result = folded
        return result, adopted


@dataclass(frozen=True, slots=True)
class PassSizes:
    """One request's sizes as `RequestPlanner.cheapest_pass` weighs its options by: the
    view's messages, the trigger and the head in tokens, and how raw tokens of the view's
    messages become tokens (the counter's ratio, and what rides on every request)."""

    size: int
    trigger: int
    head: int
    ratio: float
    overhead: int

    def tokens(self, raw: int) -> int:
        return math.ceil(raw * self.ratio) + self.overhead


def _looser_budget(tried: BudgetDecision, decision: BudgetDecision) -> BudgetDecision | None:
    """The next budget to try after ``tried`` could not hold the required core: the derived
    budget without the refit cap, then the provider's input limit (no safety margin); None
    when there is nothing looser."""
    for looser in (decision, decision.at_input_limit()):
        if looser.effective_budget > tried.effective_budget:
            return looser
    return None


@dataclass(frozen=True, slots=True)
class RequestParts:
    """What serving a request takes: the context's state, its planner, its lock, its durable
    session (if any) and its event sink. `ContextFold` holds one; the measured path
    (`measured`) works through the same parts."""

    config: ContextConfig
    state: ContextState
    planner: RequestPlanner
    lock: ContextLock
    events: EventSink
    persistence: Persistence | None = None

    async def loaded(self) -> None:
        """Read a durable session in, on first use (the caller holds the lock)."""
        if self.persistence is not None:
            await self.persistence.loaded(self.state)

    async def persisted(self) -> None:
        """Save what a request changed to a durable session (the caller holds the lock)."""
        if self.persistence is not None:
            await self.persistence.persist(self.state)

    async def emit(self, events: Events) -> None:
        for event, data in events:
            await self.events.emit(event, data)

    async def serve(
        self,
        token_budget: int | None,
        provider: Any | None,
        hard_fit: bool,
        required_reminders: Sequence[str],
        *,
        share: bool = False,
    ) -> list[dict[str, Any]]:
        """One request: the budget, the view under the lock, the events after it."""
        state = self.state
        # Re-read every request (AGENTS.md and @mentions change); a failing factory fails
        # the request before anything is planned.
        factory = state.system_prompt_factory
        system_prompt = None if factory is None else await resolve_system_prompt(factory)
        decision = await derive_budget(self.config, token_budget=token_budget, provider=provider)
        async with self.lock:
            if hard_fit and token_budget is not None:
                # The provider refused a request we believed fit: what it allows is below
                # our estimate of the window. Keep the refit budget as a cap on later ones.
                state.refit_cap = min(token_budget, state.refit_cap or token_budget)
            persistence = self.persistence
            if persistence is not None:  # only a durable session has anything to load
                await persistence.loaded(state)
            planner = self.planner
            prompt_view = planner.system_prompt_view(state, system_prompt)
            view, events = await planner.fit(
                state, decision, hard_fit, required_reminders, prompt_view, share=share
            )
            if persistence is not None:
                await persistence.persist(state)
        for event, data in events:
            await self.events.emit(event, data)
        return view
