"""`ContextFold`: the context protocol's methods, each delegating to the part that does it.

- the way in: `admission` (stamp, validate, classify, cap, repair notes, count), then
  `history` and the sticky view (`context_state`), durable first when there is a store;
- the request path: `request` (plan, pass, assemble, notice, report) and `delivery`;
- the durable session: `persistence` over `store.link`;
- usage: `usage_feed` (the meter's reading, the counter's calibration);
- summaries: `summary_pass`.

Works as an Amplifier context module and as a plain library. Cost model: ``add_message``
validates, caps and counts one message (O(size of that message)); a request that needs no
compaction does O(1) token arithmetic plus the O(n) copy of the view; a pass is linear in n.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from .admission import admit
from .compaction.summarize import Summarize
from .config import ContextConfig
from .context_lock import ContextLock
from .context_search import ContextSearch
from .context_state import ContextState
from .conventions import SystemPromptFactory, normalize_retain_contents
from .delivery import Delivery, meter_stats
from .events import CALIBRATION, EventCallback, EventSink
from .history import History
from .measured import measured_request_view
from .messages import Kind
from .meter import MeterStats
from .persistence import Persistence
from .recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from .recall import recall_id as _recall_id
from .recall import recall_message
from .repair import Repair
from .report import RequestReport
from .request import RequestParts, RequestPlanner
from .search import SearchHit, check_query
from .store.base import SessionStore
from .store.link import session_link
from .summaries import Summarizer, SummaryStore
from .summary_pass import SummaryPass, SummaryStats, summary_folder
from .telemetry import (
    ADMIT,
    RECALL,
    REQUEST,
    SEARCH,
    Telemetry,
    TracedSummarizer,
    output_tokens_of,
    telemetry_for,
)
from .tokens import CalibratedCounter, TokenCounter, build_counter
from .usage_feed import calibrate, usage_reading
from .views import detached

__all__ = ["ContextFold", "SummaryStats"]

T = TypeVar("T")


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
        self.config = config = ContextConfig.resolve(config, settings)
        self._link = link = session_link(store, session_id)
        if link is not None and summary_store is None:
            summary_store = link.store  # summaries live with the session
        self.counter: TokenCounter = counter or build_counter(
            config.token_counter, model=config.token_model
        )
        self._events = EventSink(on_event)
        # Spans when OpenTelemetry is installed (see `telemetry`); None costs nothing.
        self._telemetry = telemetry = telemetry_for(
            config.opentelemetry,
            session_id=link.session_id if link else None,
            prices=config.prices,
        )
        if telemetry is None:
            # Admission's hot path without a wrapper frame (the class method traces).
            self.add_message = self._add_message  # type: ignore[method-assign]
        elif summarizer is not None:
            summarizer = TracedSummarizer(summarizer, telemetry)
        folder = summary_folder(config.ladder, summarizer, summary_store)
        rung = next((r for r in config.ladder if isinstance(r, Summarize)), None)
        self._summaries = (
            SummaryPass(folder, rung, self.counter, link.session_id if link else None)
            if folder is not None and rung is not None
            else None
        )
        self.summary_stats = self._summaries.stats if self._summaries else SummaryStats()
        self._state = ContextState.fresh(self._new_history(), config.token_model)
        self._lock = ContextLock()
        delivery = Delivery(config, self.counter.name, self._events)
        self._planner = RequestPlanner(config, self.counter, self._summaries, delivery)
        self._persistence = (
            Persistence(link, self.counter, config.max_tool_result_bytes) if link else None
        )
        self._parts = RequestParts(
            config, self._state, self._planner, self._lock, self._events, self._persistence
        )
        self._search = ContextSearch(link)

    def _new_history(self) -> History:
        return History(self.counter, self.config.max_tool_result_bytes)

    # -- the way in ----------------------------------------------------------------------

    async def add_message(self, message: dict[str, Any]) -> None:
        """Validate, cap and admit one message. Raises `MessageValidationError` (a
        ValueError) naming the field on bad input, leaving history exactly as it was."""
        telemetry = self._telemetry
        started = telemetry.start(ADMIT) if telemetry is not None else None
        if telemetry is None or started is None:
            await self._add_message(message)
            return
        # This admission's own record for its span (the entry, its index, results clipped,
        # repairs): per call, so admissions awaiting a durable store never share it.
        notes: list[Any] = []

        def describe(span: Any, _done: None) -> None:
            telemetry.describe_admission(span, *notes)

        await telemetry.within(started, self._add_message(message, notes), describe)

    async def _add_message(self, message: dict[str, Any], notes: list[Any] | None = None) -> None:
        """`add_message` itself; with ``notes``, what its span reports is put there."""
        state = self._state
        if self._link is None and self._lock.idle():
            # Without a durable session admission never awaits, so nothing can run between
            # its steps: with the lock free and no one queued for it, taking it would
            # change nothing and cost a tenth of the admission.
            admission = admit(message, state.history.placement())
            appended = state.admitted(admission)
        else:
            async with self._lock:
                await self._parts.loaded()
                admission = admit(message, state.history.placement())
                if self._link is not None:
                    # Durable before it is acknowledged, and in history exactly when stored
                    # (even when cancelled); a lost race raises, history unchanged.
                    appended = await self._link.append(
                        admission, partial(state.admitted, admission)
                    )
                else:
                    appended = state.admitted(admission)
        if notes is not None:
            index = len(state.history.entries) - 1
            notes += (appended.entry, index, len(admission.clips), len(appended.repairs))
        if admission.clips or appended.repairs:  # nearly every admission has nothing to report
            await self._events.emit_admission(admission.clips, appended.repairs)

    async def set_messages(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Replace the history (session resume). All-or-nothing: on a bad message the
        error names its index and the current history stays as it was. Learned
        calibration survives; compaction state starts afresh."""
        if not isinstance(messages, Iterable) or isinstance(messages, str | bytes | Mapping):
            raise TypeError(
                f"set_messages takes a list of message dicts, got {type(messages).__name__}"
            )
        fresh = self._new_history()
        clips = fresh.extend(messages)
        await self._replace(fresh)
        await self._events.emit_admission(clips, fresh.repairs)

    async def clear(self) -> None:
        """Forget every message (calibration and configuration stay)."""
        await self._replace(self._new_history())

    async def _replace(self, history: History) -> None:
        async with self._lock:
            await self._parts.loaded()
            reset = partial(self._state.reset, history)
            if self._link is not None:
                await self._link.replace(history, reset)
            else:
                reset()

    # -- the request path ----------------------------------------------------------------

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
        serving = self._parts.serve(token_budget, provider, hard_fit, required_reminders)
        telemetry = self._telemetry
        started = telemetry.start(REQUEST) if telemetry is not None else None
        if telemetry is None or started is None:
            return await serving
        return await self._traced_request(telemetry, started, serving, provider)

    async def _traced_request(
        self, telemetry: Telemetry, started: Any, serving: Awaitable[T], provider: Any
    ) -> T:
        """Serve a request inside a ``contextfold.request`` span (see `telemetry`)."""
        counts = self.summary_stats.counts
        return await telemetry.requesting(started, serving, self._state, counts, provider)

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
        requesting = measured_request_view(
            self._parts,
            provider=provider,
            retain_contents=retain_contents,
            count_view=count_view,
            fit_output=fit_output,
        )
        telemetry = self._telemetry
        started = telemetry.start(REQUEST) if telemetry is not None else None
        if telemetry is None or started is None:
            return await requesting
        return await self._traced_request(telemetry, started, requesting, provider)

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
            self._state.system_prompt_factory = factory

    # -- reading ---------------------------------------------------------------------------

    async def get_messages(self) -> list[dict[str, Any]]:
        """The whole history exactly as admitted (copies: editing them changes nothing).
        Safe during a request's compaction pass (a summarizer may read the context)."""
        await self._readable()
        return [detached(e.message) for e in self._state.history.entries]

    async def recall(
        self, recall_id: str, *, max_tokens: int = DEFAULT_RECALL_TOKENS, offset: int = 0
    ) -> str:
        """The original content of a message compaction shortened, cleared or removed, by
        the id its marker or the notice names (``"r41"``), exactly as admitted, from
        ``offset`` on and capped at ``max_tokens`` (a longer text ends with a marker giving
        the offset to continue from). Raises `RecallError` (a ValueError) for an unknown id.
        Safe during a compaction pass, as `get_messages`."""
        telemetry = self._telemetry
        started = telemetry.start(RECALL) if telemetry is not None else None
        if telemetry is None or started is None:
            return await self._recall(recall_id, max_tokens, offset)

        run = self._recall(recall_id, max_tokens, offset)
        return await telemetry.recalling(started, run, recall_id, offset)

    async def _recall(self, recall_id: str, max_tokens: int, offset: int) -> str:
        await self._readable()
        history = self._state.history
        return recall_message(history, recall_id, max_tokens, self.counter, offset=offset)

    async def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """The ``limit`` messages that best match ``query`` (a few words describing what to
        find) among those the view does not carry whole (compacted away, shortened or
        cleared), best first: each a `SearchHit` with its recall id, role, score and a
        snippet. Raises ValueError for an empty query, one of stopwords only, or a limit
        outside 1-50. Safe during a compaction pass, as `get_messages`."""
        query, limit = check_query(query, limit)
        telemetry = self._telemetry
        started = telemetry.start(SEARCH) if telemetry is not None else None
        if telemetry is None or started is None:
            return await self._searched(query, limit)

        return await telemetry.searching(started, self._searched(query, limit), query, limit)

    async def _searched(self, query: str, limit: int) -> list[SearchHit]:
        await self._readable()
        return await self._search.search(self._state, query, limit)

    # -- pins --------------------------------------------------------------------------------

    async def pin(self, recall_id: str) -> None:
        """Keep the message ``recall_id`` names (``"r41"``) in the view whole from the next
        request on (brought back if compaction took it out; a tool result keeps its call
        group). Pins yield only when the view without its notice cannot otherwise fit, before
        anything the request cannot go without. Saved with a durable session; `set_messages`
        and `clear` drop pins made by id (not ``metadata.pinned``). Raises `RecallError` (a
        ValueError) for an id history does not hold, or a message never sent."""
        await self._change_pin(recall_id, True)

    async def unpin(self, recall_id: str) -> None:
        """Let the message ``recall_id`` names be compacted again (pinned by id or by its
        ``metadata.pinned``); unpinning a message that is not pinned changes nothing.
        `RecallError` as `pin`."""
        await self._change_pin(recall_id, False)

    @property
    def pins(self) -> list[str]:
        """The recall ids of the pinned messages, in history order."""
        return [_recall_id(i) for i in sorted(self._state.history.pins)]

    async def _change_pin(self, recall_id: str, pinned: bool) -> None:
        await self._readable()
        async with self._lock:
            await self._parts.loaded()
            if self._state.change_pin(recall_id, pinned):
                await self._parts.persisted()

    async def _readable(self) -> None:
        """Load a durable session on first use. History changes only in synchronous steps,
        so a read needing no load takes no lock: it sees history between two writes, and a
        summarizer reading the context during its request's pass does not wait for itself."""
        if self._link is not None and not self._state.link_loaded:
            async with self._lock:
                await self._parts.loaded()

    # -- the meter ------------------------------------------------------------------------

    async def on_llm_response(self, data: Mapping[str, Any]) -> None:
        """Record a provider's reported usage (the ``llm:response`` payload).

        Plain-library users call it after each model call with the SDK's usage object:
        ``await context.on_llm_response({"usage": response.usage, "model": model})``.
        """
        reading = usage_reading(self._state, data)
        if reading is None:
            return
        self._state.last_reading = reading
        update = calibrate(self.counter, reading)
        if self._telemetry is not None:
            ratio = self._planner.ratio(reading.model)
            self._telemetry.usage(reading, output_tokens_of(data), ratio)
        if update is not None:
            # (an update comes only from a calibrated counter: `calibrate`)
            if self._link is not None and isinstance(self.counter, CalibratedCounter):
                await self._link.save_calibration(self.counter.snapshot())
            await self._events.emit(CALIBRATION, update.to_event())

    # -- closing ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the store this context opened from a URL (``store="sqlite:///..."``), after
        any request in flight; a store object passed in stays open (its giver closes it).
        A durable context is not used after this; a second call does nothing. Also
        ``async with ContextFold(...) as context:``; Amplifier's cleanup calls it."""
        if self._link is not None:
            async with self._lock:
                await self._link.close()

    async def __aenter__(self) -> ContextFold:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- introspection -------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # The effective settings read as attributes (``context.compact_threshold``), as on
        # the reference module's mounted object; only config keys, nothing else.
        config = self.__dict__.get("config")
        if config is not None and name in ContextConfig.__dataclass_fields__:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def last_report(self) -> RequestReport | None:
        """What the last request sent and why (the ``context:report`` payload's record)."""
        return self._state.last_report

    @property
    def token_meter_stats(self) -> MeterStats | None:
        """What the meter knew when the last view was delivered; None before the first."""
        return meter_stats(self._state, self.config.token_meter)

    @property
    def last_view_estimate(self) -> int | None:
        """The size of the last view handed out, as the context estimates it now: after
        a usage reading (or an overflow's measured size) has taught the counter, whether its
        estimate covers what the provider measured. None before the first view."""
        raw, model = self._state.last_delivered_raw, self._state.model
        if raw is None:
            return None
        planner = self._planner
        return math.ceil(raw * planner.ratio(model)) + planner.fixed(model)

    @property
    def summary_store(self) -> SummaryStore | None:
        """Where summary records are kept (None without a summarize rung): give the same
        store to a resumed context or another worker and they reuse its summaries."""
        return self._summaries.folder.store if self._summaries is not None else None

    @property
    def repairs(self) -> list[Repair]:
        """Every sequence fault admitted so far and how the view mends it, in order."""
        return list(self._state.history.repairs)

    @property
    def message_count(self) -> int:
        return len(self._state.history)

    def human_prompt_indices(self) -> tuple[int | None, int | None]:
        """Indices of the first and last human prompts in history."""
        history = self._state.history
        return history.first_human, history.last_human

    def kinds(self) -> list[Kind]:
        """The classification of every message in history, in order."""
        return [e.info.kind for e in self._state.history.entries]

    # -- internal readers for `contextfold replay` (no copies; the caller only reads) ------

    async def _request_view_shared(self, provider: Any | None = None) -> list[dict[str, Any]]:
        """`get_messages_for_request` without the copies (a replay would spend half its time
        copying views it only reads). The list may be the sticky view itself: later
        ``add_message`` calls append to it in place until a request re-plans the view."""
        return await self._parts.serve(None, provider, False, (), share=True)

    async def _history_shared(self) -> list[dict[str, Any]]:
        """`get_messages` without the copies: history's own messages."""
        await self._readable()
        return [e.message for e in self._state.history.entries]

    def _newest_view_cost(self) -> tuple[dict[str, Any] | None, int]:
        """The newest message's view form (None if nothing) and its raw cost, as counted on
        admission, so a caller that counts the views it gets need not count it again."""
        entry = self._state.history.entries[-1]
        return entry.view, entry.cost

    def _inspected_state(self) -> ContextState:
        """The context's state, for `contextfold.inspection` to note each pass (read only)."""
        return self._state

    def _notice_view_cost(self) -> tuple[dict[str, Any] | None, int]:
        """The sticky view's compaction notice (None without one) and its raw cost, as the
        pass that wrote it counted it."""
        sticky = self._state.sticky
        return sticky.notice, sticky.notice_cost
