"""The context manager: the five protocol methods, wiring history, counter, planner,
meter and events. Works as an Amplifier context module and as a plain library.

Cost model: ``add_message`` validates, caps and counts one message (O(size of that
message)); a request that needs no compaction does O(1) token arithmetic plus the
O(n) copy of a cached view list; a compaction pass is linear in n.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from .budget import BudgetDecision, derive_budget
from .cache_marks import marked_view
from .compaction import snapshot as fold_snapshot
from .compaction.floor import floor_error
from .compaction.planner import (
    PassResult,
    assemble_view,
    notice_header_cost,
    run_pass,
    view_raw_total,
)
from .compaction.summarize import (
    Summarize,
    id_ranges,
    sized_ladder,
    summary_blocks,
    summary_message,
)
from .compaction.working import FoldState
from .config import ContextConfig
from .conventions import (
    SystemPromptFactory,
    missing_retained_body_message,
    normalize_retain_contents,
    resolve_system_prompt,
    stamp_timestamp,
    system_prompt_message,
)
from .errors import ConfigError, ContextLengthError
from .events import (
    BUDGET,
    CALIBRATION,
    COMPACTION,
    INGRESS_TRUNCATED,
    REPAIRED,
    REPORT,
    SUMMARY,
    EventCallback,
    EventSink,
)
from .history import Admission, Appended, History
from .ingress import IngressClip
from .measured import measured_request_view
from .messages import Kind
from .meter import MeterStats, UsageReading, read_usage
from .recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from .recall import recall_message
from .repair import Repair
from .report import RequestReport, compaction_event
from .store.base import SessionStore
from .store.link import session_link
from .summaries import (
    InMemorySummaryStore,
    Summarizer,
    SummaryFailure,
    SummaryFolder,
    SummaryRecord,
    SummaryStore,
    covered_hash,
)
from .summaries.adoption import stored_chain
from .tokens import CalibratedCounter, TokenCounter, build_counter
from .views import detached


@dataclass(slots=True)
class SummaryStats:
    """What summarizing has cost this context so far (``context.summary_stats``)."""

    calls: int = 0  # summarizer calls made
    reused: int = 0  # spans whose summary was found in the store (no call)
    written: int = 0  # summary records written to the store
    failures: int = 0  # passes whose summary failed and fell through to the next rung


@dataclass(frozen=True, slots=True)
class _SystemPrompt:
    """A system prompt factory's text for one request, and how it changes the view."""

    message: dict[str, Any]
    raw_change: int  # its raw cost less that of the stored system messages it replaces
    hidden: set[int]  # ids of the stored system messages' view dicts it replaces


# The notice's reserve is at most this share of the budget: a small window must not spend
# most of itself telling the model what it no longer sees.
NOTICE_MAX_SHARE = 0.10

logger = logging.getLogger(__name__)


def _summary_folder(
    ladder: Sequence[Any], summarizer: Summarizer | None, store: SummaryStore | None
) -> SummaryFolder | None:
    """The folder the summarize rung's summaries go through, when the ladder has one."""
    rung = next((r for r in ladder if isinstance(r, Summarize)), None)
    if rung is None:
        return None
    if summarizer is None or not callable(summarizer):
        raise ConfigError(
            "strategies names 'summarize' but no summarizer was given: pass "
            "ContextFold(summarizer=...) (an async (messages, max_tokens) -> str callable, or "
            "contextfold.summaries.openai_summarizer / anthropic_summarizer / "
            "scripted_summarizer), or in Amplifier the 'summarizer' config."
        )
    return SummaryFolder(
        summarizer,
        max_input_tokens=rung.max_input_tokens,
        max_output_tokens=rung.max_output_tokens,
        timeout=rung.timeout,
        store=store if store is not None else InMemorySummaryStore(),
    )


class ContextFold:
    """Keeps the whole conversation; hands each request a fitted, honest view of it.

    ``ContextFold(config=None, *, on_event=None, counter=None, **settings)``: settings are
    the configuration keys (see `ContextConfig`), given as a mapping, as keywords, or both.
    """

    #: get_messages_for_request accepts hard_fit=True (a provider-directed forced refit).
    supports_hard_fit = True

    def __init__(
        self,
        config: ContextConfig | Mapping[str, Any] | None = None,
        *,
        on_event: EventCallback | None = None,
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        summary_store: SummaryStore | None = None,
        store: str | SessionStore | None = None,
        session_id: str | None = None,
        **settings: Any,
    ) -> None:
        self.config = ContextConfig.resolve(config, settings)
        self._link = session_link(store, session_id)
        if self._link is not None and summary_store is None:
            summary_store = self._link.store  # summaries live with the session
        self.counter: TokenCounter = counter or build_counter(
            self.config.token_counter, model=self.config.token_model
        )
        self._ladder = self.config.ladder  # the rungs `strategies` names, built once
        self._folder = _summary_folder(self._ladder, summarizer, summary_store)
        self._summarize_rung = next((r for r in self._ladder if isinstance(r, Summarize)), None)
        self.summary_stats = SummaryStats()
        self._summary_events: list[tuple[str, dict[str, Any]]] = []
        self._events = EventSink(on_event)
        self._lock = _Lock()
        self._model: str | None = self.config.token_model
        self._last_budget: BudgetDecision | None = None
        self._refit_cap: int | None = None
        self._margin_waived = False  # the last request was fitted to the input limit
        self._system_prompt_factory: SystemPromptFactory | None = None
        self._system_prompt_cost: tuple[str, int] | None = None  # last text and its raw cost
        self._header_cost: tuple[str, int] | None = None  # notice role, its header's cost
        self._link_loaded = False
        self._state_dirty = False  # a committed pass not yet saved to the durable session
        self._last_persisted_budget: tuple[int, int | None] | None = None
        self.last_report: RequestReport | None = None
        # What the meter knew at the last delivery, kept as its inputs: `token_meter_stats`
        # builds the record when read (most requests are never asked about it).
        self._meter_inputs: tuple[Any, ...] | None = None
        self._meter_stats: MeterStats | None = None
        self._reset_history(History(self.counter, self.config.max_tool_result_bytes))

    # -- state -------------------------------------------------------------------------

    def _reset_history(self, history: History) -> None:
        self._history = history
        self._state = FoldState()
        self._notice: dict[str, Any] | None = None
        self._notice_cost = 0
        # Assembled on the first request, not here: a resume about to restore its sticky
        # state would build a whole-history view only to replace it.
        self._view: list[dict[str, Any]] = []
        self._view_stale = True  # a message landed before the view's tail: re-assemble
        self._view_raw = history.raw_total
        self._removed_messages = 0
        # Size of the messages after the last pass when it could not reach its target
        # (protection held it up): the next pass then waits until the view has really
        # grown, instead of re-running on every request for a few tokens.
        self._missed_target_at: int | None = None
        self._summaries_adopted = False  # a resumed history takes up its stored summary once
        self._reminders: dict[str, int] = {}
        for index, entry in enumerate(history.entries):
            self._index_reminder(index, entry.info.reminder, entry.message)
        # The meter's last reading describes a request over the old history: forget it.
        self._last_reading: UsageReading | None = None
        self._last_delivered_raw: int | None = None

    def _index_reminder(self, index: int, is_reminder: bool, message: Mapping[str, Any]) -> None:
        if is_reminder:
            self._reminders[_plain_text(message.get("content"))] = index

    # -- the protocol --------------------------------------------------------------------

    async def add_message(self, message: dict[str, Any]) -> None:
        """Validate, cap and admit one message. Raises `MessageValidationError` (a
        ValueError) naming the field on bad input, leaving history exactly as it was."""
        # Stamped as the reference module stamps it (the CLI replays sessions by these); a
        # new dict when stamped, so the caller's is never touched.
        message = stamp_timestamp(message)
        if self._link is None and self._lock.idle():
            # Without a durable session admission never awaits, so nothing can run between
            # its steps: with the lock free and no one queued for it, taking it would
            # change nothing and cost a tenth of the admission.
            admission = self._history.prepare(message)
            appended = self._admitted(admission)
        else:
            async with self._lock:
                if self._link is not None:  # only a durable session has anything to load
                    await self._loaded()
                admission = self._history.prepare(message)
                if self._link is not None:
                    # Durable before it is acknowledged, and in history exactly when stored
                    # (even when cancelled); a lost race raises, history unchanged.
                    admitted = partial(self._admitted, admission)
                    appended = await self._link.append(admission, admitted)
                else:
                    appended = self._admitted(admission)
        if admission.clips or appended.repairs:  # nearly every admission has nothing to report
            await self._emit_admission(admission.clips, appended.repairs)

    def _admitted(self, admission: Admission) -> Appended:
        """Append a prepared message to history and to the sticky view."""
        appended = self._history.append(admission)
        entry = appended.entry
        if appended.reordered:
            self._view_stale = True
        elif entry.view is not None and not self._view_stale:
            self._view.append(entry.view)
        self._view_raw += appended.delta
        self._index_reminder(len(self._history) - 1, entry.info.reminder, entry.message)
        return appended

    def _newest_view_cost(self) -> tuple[dict[str, Any] | None, int]:
        """Internal (``contextfold replay``): the newest message's view form (what a view
        carries for it; None if nothing) and its raw cost, as counted on admission, so a
        caller that counts the views it gets need not count that message again."""
        entry = self._history.entries[-1]
        return entry.view, entry.cost

    def _notice_view_cost(self) -> tuple[dict[str, Any] | None, int]:
        """Internal (``contextfold replay``): the sticky view's compaction notice (None
        without one) and its raw cost, as the pass that wrote it counted it."""
        return self._notice, self._notice_cost

    async def get_messages_for_request(
        self,
        token_budget: int | None = None,
        provider: Any | None = None,
        *,
        hard_fit: bool = False,
        required_reminders: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """The fitted view for the next request: a new list, history untouched.

        ``token_budget`` overrides the provider-derived budget; ``hard_fit=True`` (for an
        orchestrator retrying after a provider overflow) compacts to the budget itself
        instead of ``target_usage``; ``required_reminders`` names persisted reminder
        bodies that must reach the model complete. Raises amplifier-core's
        `ContextLengthError` when the protected content alone cannot fit.
        """
        return await self._request(token_budget, provider, hard_fit, required_reminders)

    async def _request_view_shared(self, provider: Any | None = None) -> list[dict[str, Any]]:
        """Internal (``contextfold replay``): `get_messages_for_request` without the copies.

        The list and its messages are the context's own (no copy: a replay of a million
        messages would spend half its time copying views it only reads). The caller must
        never change them. While no request replaces it, the list may be the sticky view
        itself: later ``add_message`` calls append to it in place, and nothing before its
        end changes; a request that re-plans the view returns another list.
        """
        return await self._request(None, provider, False, (), share=True)

    async def _request(
        self,
        token_budget: int | None,
        provider: Any | None,
        hard_fit: bool,
        required_reminders: Sequence[str],
        *,
        share: bool = False,
    ) -> list[dict[str, Any]]:
        # Re-read every request (AGENTS.md and @mentions change); a failing factory fails
        # the request before anything is planned.
        factory = self._system_prompt_factory
        system_prompt = None if factory is None else await resolve_system_prompt(factory)
        decision = await derive_budget(self.config, token_budget=token_budget, provider=provider)
        async with self._lock:
            if hard_fit and token_budget is not None:
                # The provider refused a request we believed fit: what it allows is below our
                # estimate of the window. Keep the refit budget as a cap on later requests.
                self._refit_cap = min(token_budget, self._refit_cap or token_budget)
            if self._link is not None:  # only a durable session has anything to load
                await self._loaded()
            capped = decision.with_refit_cap(self._refit_cap)
            prompt_view = self._system_prompt_view(system_prompt)
            # Degrade before refusing. The cap is a lesson from one overflow, not a limit the
            # provider stated, and the safety margin is for the estimate's error: when the
            # required core cannot fit under them, try the budget itself, then the
            # provider's own input limit, before ending the session (the provider refuses
            # what it must, and the loop refits).
            candidate = capped
            while True:
                try:
                    view, events = await self._plan_request(
                        candidate, hard_fit, required_reminders, prompt_view, share=share
                    )
                    break
                except ContextLengthError:
                    looser = _looser_budget(candidate, decision)
                    if looser is None:
                        raise
                    candidate = looser
            if candidate.margin_waived and not self._margin_waived:
                logger.warning(
                    "context-fold: the content this request cannot go without does not fit the "
                    "budget with its %d-token safety margin; fitting requests to the "
                    "provider's input limit (%d tokens) instead",
                    self.config.safety_margin,
                    candidate.effective_budget,
                )
            self._margin_waived = candidate.margin_waived
            if self._link is not None:
                await self._persist()
        for event, data in events:
            await self._events.emit(event, data)
        return view

    async def get_measured_request_view(
        self,
        *,
        provider: Any,
        retain_contents: Iterable[str] = (),
        count_view: Callable[[list[dict[str, Any]]], Any],
        fit_output: Callable[[list[dict[str, Any]], Any], Any] | None = None,
    ) -> dict[str, Any]:
        """The negotiated measured request (``context.measured_request_view``): the
        orchestrator's ``count_view`` counts the complete request, the context fits the view
        to that count and returns the exact counted envelope, its ``outcome`` and a
        ``transaction`` to commit right before dispatch. See `contextfold.measured`."""
        return await measured_request_view(
            self,
            provider=provider,
            retain_contents=retain_contents,
            count_view=count_view,
            fit_output=fit_output,
        )

    async def get_messages_for_request_retaining(
        self,
        *,
        retain_contents: Iterable[str],
        provider: Any | None = None,
        token_budget: int | None = None,
        hard_fit: bool = False,
    ) -> list[dict[str, Any]]:
        """The reference module's request path with retention: ``retain_contents`` names
        persisted reminder bodies (exact ``content`` of user messages with metadata
        ``ephemeral=True, persisted=True``) this request must carry complete; the newest
        admitted copy of each is kept. Per request, never a pin. A body never admitted is
        a ValueError; one that cannot fit is a `ContextLengthError`, nothing committed."""
        return await self.get_messages_for_request(
            token_budget,
            provider,
            hard_fit=hard_fit,
            required_reminders=normalize_retain_contents(retain_contents),
        )

    async def set_system_prompt_factory(self, factory: SystemPromptFactory | None) -> None:
        """Have every request start with the text ``factory()`` returns (sync or async),
        read afresh each time, in place of the stored system messages (hook notes stay).
        Amplifier's foundation calls this so AGENTS.md and @mentions never go stale. The
        text is counted and never compacted; it is not stored in history. ``None`` unsets."""
        if factory is not None and not callable(factory):
            raise TypeError(
                f"set_system_prompt_factory takes a callable returning the system prompt "
                f"text, or None; got {type(factory).__name__}"
            )
        async with self._lock:
            self._system_prompt_factory = factory

    async def get_messages(self) -> list[dict[str, Any]]:
        """The whole history exactly as admitted (copies: editing them changes nothing).
        Safe during a request's compaction pass (a summarizer may read the context)."""
        await self._readable()
        return [detached(e.message) for e in self._history.entries]

    async def _readable(self) -> None:
        """Load a durable session on first use. History changes only in synchronous steps
        (never across an await), so a read that needs no loading takes no lock: it sees
        the history between two writes, and a summarizer reading the context while the
        request that called it holds the lock does not wait for itself."""
        if self._link is not None and not self._link_loaded:
            async with self._lock:
                await self._loaded()

    async def _history_shared(self) -> list[dict[str, Any]]:
        """Internal (``contextfold replay``): `get_messages` without the copies. The messages
        are history's own: the caller must only read them (a million-message replay would
        otherwise copy its whole history once more to check it)."""
        await self._readable()
        return [e.message for e in self._history.entries]

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        """Replace the history (session resume). All-or-nothing: on a bad message the
        error names its index and the current history stays as it was. Learned
        calibration survives; compaction state starts afresh."""
        if not isinstance(messages, Iterable) or isinstance(messages, str | bytes | Mapping):
            raise TypeError(
                f"set_messages takes a list of message dicts, got {type(messages).__name__}"
            )
        fresh = History(self.counter, self.config.max_tool_result_bytes)
        clips = fresh.extend(messages)
        async with self._lock:
            await self._loaded()
            if self._link is not None:
                await self._link.replace(fresh, partial(self._reset_history, fresh))
            else:
                self._reset_history(fresh)
        await self._emit_admission(clips, fresh.repairs)

    async def recall(
        self, recall_id: str, *, max_tokens: int = DEFAULT_RECALL_TOKENS, offset: int = 0
    ) -> str:
        """The original content of a message compaction shortened, cleared or removed, by
        the id its marker or the notice names (``"r41"``), exactly as admitted, from
        ``offset`` on and capped at ``max_tokens`` (a longer text ends with a marker giving
        the offset to continue from). Raises `RecallError` (a ValueError) for an unknown id.
        Safe during a compaction pass, as `get_messages`."""
        await self._readable()
        return recall_message(self._history, recall_id, max_tokens, self.counter, offset=offset)

    async def clear(self) -> None:
        """Forget every message (calibration and configuration stay)."""
        async with self._lock:
            await self._loaded()
            empty = History(self.counter, self.config.max_tool_result_bytes)
            if self._link is not None:
                await self._link.replace(empty, partial(self._reset_history, empty))
            else:
                self._reset_history(empty)

    # -- the meter -----------------------------------------------------------------------

    async def on_llm_response(self, data: Mapping[str, Any]) -> None:
        """Record a provider's reported usage (the ``llm:response`` payload).

        Plain-library users call it after each model call with the SDK's usage object:
        ``await context.on_llm_response({"usage": response.usage, "model": model})``.
        """
        if isinstance(data, Mapping) and data.get("purpose") == "summary":
            return  # a summarizer's own call: not a request this context estimated
        parsed = read_usage(data)
        if parsed is None:
            return
        actual, cache_read, cache_write, model = parsed
        model = model or self._model
        # Before any view was delivered (a loop that sent the history itself), the reading
        # describes the history as it stands: it still drives the trigger.
        view_raw = self._last_delivered_raw
        if view_raw is None:
            view_raw = self._view_raw + self._notice_cost
        reading = UsageReading(
            actual=actual,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            model=model,
            view_raw=view_raw,
        )
        self._last_reading = reading
        # A zero reading (an error response, a cached no-op) teaches nothing about the ratio.
        if isinstance(self.counter, CalibratedCounter) and reading.view_raw and reading.actual > 0:
            update = self.counter.observe(model, reading.view_raw, reading.actual)
            if self._link is not None:
                await self._link.save_calibration(self.counter.snapshot())
            await self._events.emit(CALIBRATION, update.to_event())

    # -- the request path ------------------------------------------------------------------

    def _ratio(self, model: str | None) -> float:
        if isinstance(self.counter, CalibratedCounter):
            return self.counter.ratio(model)
        return 1.0

    def _fixed(self, model: str | None) -> int:
        if isinstance(self.counter, CalibratedCounter):
            return self.counter.fixed(model)
        return 0

    def __getattr__(self, name: str) -> Any:
        # The effective settings read as attributes (``context.compact_threshold``), as on
        # the reference module's mounted object; only config keys, nothing else.
        config = self.__dict__.get("config")
        if config is not None and name in ContextConfig.__dataclass_fields__:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _system_prompt_view(self, text: str | None) -> _SystemPrompt | None:
        """The factory's message and what it changes in the view's raw size."""
        if text is None:
            return None
        if self._system_prompt_cost is None or self._system_prompt_cost[0] != text:
            self._system_prompt_cost = (
                text,
                self.counter.count_message(system_prompt_message(text)),
            )
        hidden = {id(self._history.entries[i].view) for i in self._history.system_prompts}
        return _SystemPrompt(
            message=system_prompt_message(text),
            raw_change=self._system_prompt_cost[1] - self._history.system_prompt_raw,
            hidden=hidden,
        )

    async def _plan_request(
        self,
        decision: BudgetDecision,
        hard_fit: bool,
        required_reminders: Sequence[str],
        system_prompt: _SystemPrompt | None = None,
        *,
        share: bool = False,
    ) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
        cfg = self.config
        self._summary_events = []  # a request that fails leaves no trace
        model = decision.model or self._model
        self._model = model
        ratio = self._ratio(model)
        history = self._history
        if self._view_stale:
            self._view = assemble_view(history, self._state, self._notice)
            self._view_stale = False
        # Tokens every request costs beyond its kept messages, in raw units: reply priming,
        # and a system prompt factory's text in place of the stored system messages.
        request_raw = self.counter.request_overhead
        if system_prompt is not None:
            request_raw += system_prompt.raw_change
        before_raw = self._view_raw + self._notice_cost + request_raw
        # What the provider counts on every request beyond the messages (tool schemas, the
        # orchestrator's instructions), learned from usage: part of every size, never scaled.
        fixed = self._fixed(model)
        estimate = math.ceil(before_raw * ratio) + fixed
        messages_before = len(self._view)
        budget = decision.effective_budget

        if not cfg.compaction_enabled:
            report = self._report(
                decision,
                estimate,
                estimate,
                messages_before,
                messages_before,
                ratio=ratio,
                trigger=budget,
                target=budget,
                hard_fit=hard_fit,
            )
            return self._deliver(
                self._view, before_raw, decision, report, None, system_prompt, share=share
            )

        reserve = self._notice_reserve(budget)
        usable = max(0, budget - reserve)
        # The thresholds are shares of the room compaction can work in: a fixed part (tool
        # schemas) rides on every request whatever is compacted, so a share of the whole
        # budget would put the trigger under the schemas alone and compact on every request.
        room = max(0, usable - fixed)
        trigger = min(usable, fixed + math.floor(cfg.compact_threshold * room))
        target = min(usable, fixed + math.floor(cfg.target_usage * room))
        if hard_fit:
            trigger = target = usable
        measured, source = self._measure(estimate, before_raw, ratio)
        # The fixed part, and in actual mode whatever else the provider saw beyond us.
        overhead = fixed + max(0, measured - estimate)
        retained = self._find_reminders(required_reminders, decision)
        restore = any(
            i in self._state.truncated or history.entries[i].unit in self._state.removed_units
            for i in retained
        )

        # The notice rides on its own reserve (already taken out of `usable`), so the trigger
        # compares the messages alone; counting the notice too would re-trigger a view the
        # last pass left just under the trigger.
        messages_size = measured - math.ceil(self._notice_cost * ratio)
        # When protection held the last pass above its target, a pass at the trigger would
        # find the same floor and win a few tokens per request, rewriting the prompt prefix
        # each time: wait for the hard limit instead (still inside the budget).
        fires_at = usable if self._missed_target_at is not None and not hard_fit else trigger
        result: PassResult | None = None
        delivered, delivered_raw = self._view, before_raw
        # Never deliver a view over the budget by either figure: an under-reporting meter
        # (one usage shape read as another) must not let the estimate overflow.
        over_budget = max(measured, estimate) > budget
        if messages_size > fires_at or restore or over_budget:

            def raw(tokens: int) -> int:
                return max(0, math.floor((tokens - overhead) / ratio) - request_raw)

            base, adopted = self._state, False
            blocks: list[tuple[int, ...]] = []
            free = 0
            # The summarize rung's default summary size follows the budget (and decides
            # which stored records fit: sized before any is taken up).
            ladder = sized_ladder(self._ladder, budget)
            if self._folder is not None:
                sized = next(r for r in ladder if isinstance(r, Summarize))
                self._folder.max_output_tokens = sized.max_output_tokens
                if base.summary_record is None and not self._summaries_adopted:
                    found = await self._adopted_summaries(base, self._folder.store)
                    base, adopted = (found, True) if found is not None else (base, False)
                blocks, free = await self._summary_blocks(base)
            compact = partial(
                run_pass,
                history,
                base,
                counter=self.counter,
                target_raw=raw(target),
                limit_raw=raw(trigger),
                budget_raw=raw(budget),
                retained=retained,
                notice_reserve=reserve,
                **self._pass_settings(),
                summary_blocks=blocks,
                summary_free_blocks=free,
                # The running total, kept on every admission and commit, spares the pass a
                # walk of the view; an adopted summary state is another view: walked.
                sticky_raw=self._view_raw if base is self._state else None,
                header_cost=self._notice_header_cost(),
            )
            result = compact(ladder=ladder)
            if result.state.pending_summary:
                result = await self._summarized(
                    result, compact, raw(budget) - request_raw, base.summary_record, blocks
                )
            after_raw = result.raw_total + result.notice_cost + request_raw
            after = math.ceil(after_raw * ratio) + overhead
            if after > budget:
                # Even the required core cannot fit: fail loudly, commit nothing.
                raise floor_error(self._history, result, decision, after, model)
            changed = (
                result.changed
                or result.state.removed_units != self._state.removed_units
                or result.state.truncated.keys() != self._state.truncated.keys()
                or result.notice_cost != self._notice_cost
            )
            if restore:
                # Retention is per request, never a pin: this request carries the reminder
                # the sticky view had compacted, and the sticky view stays as it was, so
                # the next request without it does not keep it.
                delivered = assemble_view(history, result.state, result.notice)
                delivered_raw = after_raw
            elif changed and (after_raw < before_raw or over_budget or adopted):
                self._commit(result)
                self._summaries_adopted = self._summaries_adopted or adopted
                messages_after = math.ceil(result.raw_total * ratio) + overhead
                self._missed_target_at = None if messages_after <= target else messages_after
            else:
                # Nothing new to commit, or a pass that would make the request bigger (a
                # notice costing more than it saved) on a view that fits as it stands.
                result = None
            if not restore:
                delivered = self._view
                delivered_raw = self._view_raw + self._notice_cost + request_raw
            after_estimate = math.ceil(delivered_raw * ratio) + fixed
        else:
            after_estimate = estimate

        report = self._report(
            decision,
            estimate,
            after_estimate,
            messages_before,
            len(delivered),
            ratio=ratio,
            trigger=trigger,
            target=target,
            hard_fit=hard_fit,
            result=result,
            source=source,
        )
        self._meter_inputs = (source, estimate, before_raw, measured, self._last_reading, ratio)
        self._meter_stats = None
        return self._deliver(
            delivered, delivered_raw, decision, report, result, system_prompt, share=share
        )

    async def _summarized(
        self,
        result: PassResult,
        compact: Callable[..., PassResult],
        budget_raw: int,
        record: SummaryRecord | None,
        blocks: Sequence[tuple[int, ...]],
    ) -> PassResult:
        """Fold the turns the pass summarized into the summary the view carries; if the
        summarizer fails (or its summary would not fit), plan the pass again without the
        summarize rung. Nothing is ever written as a summary from a failure."""
        history = self._history
        state = result.state
        pending = state.pending_summary
        ids: list[int] = []
        calls = reused = written = 0
        failed: SummaryFailure | None = None
        for block in blocks:
            block_ids = [i for u in block if u in pending for i in history.units[u].entries]
            if not block_ids:
                continue
            ids.extend(block_ids)
            fold = await self._folder.fold(
                record,
                [history.entries[i].message for i in block_ids],
                block_ids,
                session_id=self._link.session_id if self._link is not None else None,
            )
            calls, reused, written = (
                calls + fold.calls,
                reused + fold.reused,
                written + len(fold.written),
            )
            if fold.record is None:
                failed = fold.failure
                break
            record = fold.record
        self.summary_stats.calls += calls
        self.summary_stats.reused += reused
        self.summary_stats.written += written
        event: dict[str, Any] = {
            "covers": len(ids),
            "calls": calls,
            "reused": reused,
            "written": written,
        }
        if failed is None and record is not None:
            message = summary_message(record.text, record.history_ids)
            cost = self.counter.count_message(message)
            raw_total = result.raw_total + cost - state.summary_cost
            if raw_total + result.notice_cost <= budget_raw:
                state.summary, state.summary_record = message, record
                state.summary_cost = cost
                state.pending_summary.clear()
                result.raw_total = raw_total
                self._summary_events.append(
                    (SUMMARY, {**event, "tokens": cost, "ids": id_ranges(record.history_ids)})
                )
                return result
            failure = {"reason": "does_not_fit", "detail": f"{cost} tokens"}
        else:
            assert failed is not None
            failure = {"reason": failed.reason, "detail": failed.detail}
        self.summary_stats.failures += 1
        self._summary_events.append((SUMMARY, {**event, "failure": failure}))
        logger.warning(
            "context-fold: summary failed (%s: %s); compacting without it",
            failure["reason"],
            failure["detail"],
        )
        return compact(ladder=tuple(r for r in self._ladder if not isinstance(r, Summarize)))

    async def _summary_blocks(self, state: FoldState) -> tuple[list[tuple[int, ...]], int]:
        """History's summary blocks, and the index of the first one that would need a
        summarizer call (those before it are summarized or have a record in the store)."""
        rung, folder = self._summarize_rung, self._folder
        assert rung is not None and folder is not None
        history = self._history
        blocks = summary_blocks(history, rung.span_budget)
        removed = state.removed_units  # summarized units are among them
        previous = state.summary_record
        for position, block in enumerate(blocks[:-1]):
            left = [u for u in block if u not in removed]
            if not left:
                continue
            messages = [history.entries[i].message for u in left for i in history.units[u].entries]
            found = await folder.store.get(covered_hash(messages, previous=previous))
            if found is None or not folder.fits(found):
                return blocks, position
            previous = found
        return blocks, len(blocks)

    async def _loaded(self) -> None:
        """On first use of a durable session: its history (costs as stored, nothing counted
        again), the sticky state when it describes exactly that history, calibration and
        the refit cap, so the next view is the one the last process would have delivered."""
        link = self._link
        if link is None or self._link_loaded:
            return
        loaded = await link.load(self.counter, self.config.max_tool_result_bytes)
        self._link_loaded = True
        self._reset_history(loaded.history)
        if loaded.state is not None:
            try:
                restored = fold_snapshot.restore(loaded.state, loaded.history.units)
            except (AttributeError, KeyError, TypeError, ValueError):
                logger.warning("context-fold: stored compaction state unreadable; planning afresh")
            else:
                self._commit_restored(*restored)
        if loaded.calibration and isinstance(self.counter, CalibratedCounter):
            self.counter.restore(loaded.calibration)
        if loaded.budget:
            cap = loaded.budget.get("refit_cap")
            self._refit_cap = cap if isinstance(cap, int) and cap > 0 else None

    def _commit_restored(
        self,
        state: FoldState,
        notice: dict[str, Any] | None,
        notice_cost: int,
        missed_target_at: int | None,
    ) -> None:
        history = self._history
        self._state = state
        self._notice, self._notice_cost = notice, notice_cost
        self._view_raw = view_raw_total(history, state)
        self._view = assemble_view(history, state, notice)
        self._view_stale = False
        self._removed_messages = state.removed_messages
        self._missed_target_at = missed_target_at
        self._summaries_adopted = state.summary_record is not None

    async def _persist(self) -> None:
        """Save what this request changed: the sticky state after a committed pass, the
        budget (with the refit cap) when it moved."""
        link = self._link
        assert link is not None
        if self._state_dirty:
            await link.save_state(
                fold_snapshot.snapshot(
                    self._state,
                    notice=self._notice,
                    notice_cost=self._notice_cost,
                    missed_target_at=self._missed_target_at,
                )
            )
            self._state_dirty = False  # only once saved: a failed save is tried again
        budget = (self.last_report.budget, self._refit_cap) if self.last_report else None
        if budget is not None and budget != self._last_persisted_budget:
            await link.save_budget({"effective_budget": budget[0], "refit_cap": budget[1]})
            self._last_persisted_budget = budget

    async def _adopted_summaries(self, base: FoldState, store: SummaryStore) -> FoldState | None:
        """A resumed history (or another worker's) takes up the summary its records already
        make: the longest chain of stored records, from the first, whose covered messages
        still hash the same here. Its turns leave the view with the summary standing for
        them, with no summarizer call; turns the original run dropped stay until a pass
        decides about them. Returns the state to plan from, or None (nothing to take up)."""
        history = self._history
        assert self._summarize_rung is not None
        blocks = summary_blocks(history, self._summarize_rung.span_budget)[:-1]
        # Looked up by key (this session's records, each block's hash), never by reading
        # every record of a store other sessions share.
        chain, links = await stored_chain(
            store,
            [entry.message for entry in history.entries],
            session_id=self._link.session_id if self._link is not None else None,
            blocks=[[i for u in block for i in history.units[u].entries] for block in blocks],
        )
        if chain is not None and self._folder is not None and not self._folder.fits(chain):
            chain = None  # made for a larger summary size: it would crowd out the turns
        units = {history.entries[i].unit for i in chain.history_ids} if chain else set()
        covered = set(chain.history_ids) if chain else set()
        if chain is None or any(i not in covered for u in units for i in history.units[u].entries):
            self._summaries_adopted = True  # nothing (of this history's) to take up
            return None
        state = base.copy()
        for unit in sorted(units):
            state.summarize_unit(unit, history.units[unit].entries)
        state.summary = summary_message(chain.text, chain.history_ids)
        state.summary_cost = self.counter.count_message(state.summary)
        state.summary_record = chain
        self.summary_stats.reused += links
        return state

    def _pass_settings(self) -> dict[str, Any]:
        """The configured protection and notice settings every compaction pass runs with."""
        cfg = self.config
        return {
            "protected_recent": cfg.protected_recent,
            "protected_tool_results": cfg.protected_tool_results,
            "truncate_chars": cfg.truncate_chars,
            "notice_role": cfg.compaction_notice_role,
            "notice_enabled": cfg.compaction_notice_enabled,
            "notice_verbosity": cfg.compaction_notice_verbosity,
            "notice_min_level": cfg.compaction_notice_min_level,
        }

    def _notice_header_cost(self) -> int:
        """What the smallest notice costs, counted once per role (`notice_header_cost`)."""
        cfg = self.config
        role = cfg.compaction_notice_role
        if not self._history.units:
            return 0  # no notice without a message
        if self._header_cost is None or self._header_cost[0] != role:
            cost = notice_header_cost(self._history, self.counter, cfg.truncate_chars, role)
            self._header_cost = (role, cost)
        return self._header_cost[1]

    def _notice_reserve(self, budget: int) -> int:
        """Tokens set aside for the notice: the configured reserve, at most a tenth of the
        budget (a 600-token window must not spend 500 of them on the notice)."""
        cfg = self.config
        if not cfg.compaction_notice_enabled:
            return 0
        return min(cfg.compaction_notice_token_reserve, math.floor(budget * NOTICE_MAX_SHARE))

    def _measure(self, estimate: int, view_raw: int, ratio: float) -> tuple[int, str]:
        """The size the trigger compares: the estimate, or in actual mode the last real
        figure plus the estimate of what changed since that request."""
        reading = self._last_reading
        if self.config.token_meter != "actual" or reading is None or reading.view_raw is None:
            return estimate, "estimate"
        return reading.actual + math.ceil((view_raw - reading.view_raw) * ratio), "actual"

    @property
    def token_meter_stats(self) -> MeterStats | None:
        """What the meter knew when the last view was delivered; None before the first."""
        if self._meter_stats is None and self._meter_inputs is not None:
            source, estimate, raw_estimate, measured, reading, ratio = self._meter_inputs
            self._meter_stats = MeterStats(
                mode=self.config.token_meter,
                source=source,
                estimate=estimate,
                raw_estimate=raw_estimate,
                measured=measured if source == "actual" else None,
                last_actual=reading.actual if reading else None,
                drift=_drift(reading),
                ratio=ratio,
            )
        return self._meter_stats

    def _find_reminders(self, bodies: Sequence[str], decision: BudgetDecision) -> list[int]:
        if isinstance(bodies, str):
            bodies = [bodies]
        found: list[int] = []
        for body in bodies:
            index = self._reminders.get(body)
            if index is None:
                # The reference's error: naming a body that is not there is the caller's
                # mistake (a ValueError), not an overflow.
                raise ValueError(
                    f"context-fold: {missing_retained_body_message(body)}. Add it to the "
                    "context first."
                )
            found.append(index)
        return found

    def _commit(self, result: PassResult) -> None:
        self._state_dirty = True
        self._state = result.state
        self._notice = result.notice
        self._notice_cost = result.notice_cost
        self._view_raw = result.raw_total
        self._view = assemble_view(self._history, self._state, self._notice)
        self._removed_messages = self._state.removed_messages

    def _report(
        self,
        decision: BudgetDecision,
        before: int,
        after: int,
        messages_before: int,
        messages_after: int,
        *,
        ratio: float,
        trigger: int,
        target: int,
        hard_fit: bool,
        result: PassResult | None = None,
        source: str = "estimate",
    ) -> RequestReport:
        # Positional, in field order (keywords cost a third more on every request).
        return RequestReport(
            before,
            after,
            messages_before,
            messages_after,
            len(self._history.entries),
            result is not None,  # compacted
            result.level if result else 0,
            list(result.changed) if result else [],  # applied
            decision.effective_budget,
            trigger,
            target,
            hard_fit,
            source,  # size_source
            self.counter.name,
            round(ratio, 4),
            self._removed_messages,  # removed_total
            len(self._state.truncated),  # truncated_total
            self._missed_target_at is not None,  # floor_bound
            result.relaxed if result else [],
            len(self._history.repairs),  # repairs_total
        )

    def _deliver(
        self,
        messages: list[dict[str, Any]],
        view_raw: int,
        decision: BudgetDecision,
        report: RequestReport,
        result: PassResult | None,
        system_prompt: _SystemPrompt | None = None,
        *,
        share: bool = False,
    ) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
        """The view to hand out, and the events to emit once the lock is released.

        The caller gets its own copy of every message (containers copied, strings shared):
        marking a block for prompt caching or editing a message in place can never reach
        history or the sticky view. Only with ``share`` (`_request_view_shared`, for a
        caller that never writes) are the context's own list and messages handed out.
        """
        if system_prompt is None:
            view = messages if share else [detached(message) for message in messages]
        else:
            hidden = system_prompt.hidden
            view = [dict(system_prompt.message)]
            copy = _shared if share else detached
            view.extend(copy(m) for m in messages if id(m) not in hidden)
        if not share and self.config.cache_breakpoints != "off":
            view = marked_view(view, self.config.cache_breakpoints)  # on the copies only
        self._last_delivered_raw = view_raw
        self.last_report = report
        events: list[tuple[str, dict[str, Any]]] = [
            (REPAIRED, repair.to_event()) for repair in self._history.provisional_repairs()
        ]
        events.extend(self._summary_events)
        self._summary_events = []
        if not self._events.connected:
            return view, events  # nobody listens: build no payloads on the hot path
        budget_changed = decision != self._last_budget
        if budget_changed:
            self._last_budget = decision
            events.append((BUDGET, decision.to_event()))
        if result is not None:
            events.append((COMPACTION, compaction_event(report, result.changed, self.config)))
        if budget_changed or result is not None or self.config.report_events == "every_request":
            events.append((REPORT, report.to_dict()))
        return view, events

    async def _emit_admission(self, clips: list[IngressClip], repairs: list[Repair]) -> None:
        for clip in clips:
            await self._events.emit(INGRESS_TRUNCATED, clip.to_event())
        for repair in repairs:
            await self._events.emit(REPAIRED, repair.to_event())

    # -- introspection -------------------------------------------------------------------

    @property
    def summary_store(self) -> SummaryStore | None:
        """Where summary records are kept (None without a summarize rung): give the same
        store to a resumed context or another worker and they reuse its summaries."""
        return self._folder.store if self._folder is not None else None

    @property
    def last_view_estimate(self) -> int | None:
        """The size of the last view handed out, as the context estimates it now: after
        a usage reading (or an overflow's measured size) has taught the counter, whether its
        estimate covers what the provider measured. None before the first view."""
        raw = self._last_delivered_raw
        if raw is None:
            return None
        return math.ceil(raw * self._ratio(self._model)) + self._fixed(self._model)

    @property
    def repairs(self) -> list[Repair]:
        """Every sequence fault admitted so far and how the view mends it, in order."""
        return list(self._history.repairs)

    @property
    def message_count(self) -> int:
        return len(self._history)

    def human_prompt_indices(self) -> tuple[int | None, int | None]:
        """Indices of the first and last human prompts in history."""
        return self._history.first_human, self._history.last_human

    def kinds(self) -> list[Kind]:
        """The classification of every message in history, in order."""
        return [e.info.kind for e in self._history.entries]


def _shared(message: dict[str, Any]) -> dict[str, Any]:
    return message


class _Lock(asyncio.Lock):
    """The context's lock, which can tell that no one holds it or waits for it, and refuses
    the task holding it (a summarizer or handler awaited inside a request) instead of
    letting it wait for itself."""

    _holder: asyncio.Task[Any] | None = None

    async def acquire(self) -> Literal[True]:
        task = asyncio.current_task()
        if task is not None and self._holder is task:
            raise RuntimeError(
                "context-fold: this call came from inside a request the same context is "
                "still serving (a summarizer, hook or event handler awaited during it) and "
                "would wait for itself. Reading is safe there (get_messages, recall); add "
                "messages or ask for another view after the request returns."
            )
        await super().acquire()
        self._holder = task
        return True

    def release(self) -> None:
        self._holder = None
        super().release()

    def idle(self) -> bool:
        # asyncio.Lock's own state (CPython 3.11-3.13); if a later version names it
        # otherwise, say "not idle" and every caller takes the lock as usual.
        waiters = getattr(self, "_waiters", ())
        return getattr(self, "_locked", True) is False and not waiters


def _drift(reading: UsageReading | None) -> float | None:
    """The last reading's actual over the raw estimate of the view it answered."""
    if reading is None or not reading.view_raw:
        return None
    return round(reading.actual / reading.view_raw, 4)


def _looser_budget(tried: BudgetDecision, decision: BudgetDecision) -> BudgetDecision | None:
    """The next budget to try after ``tried`` could not hold the required core: the derived
    budget without the refit cap, then the provider's input limit (no safety margin); None
    when there is nothing looser."""
    for looser in (decision, decision.at_input_limit()):
        if looser.effective_budget > tried.effective_budget:
            return looser
    return None


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""
