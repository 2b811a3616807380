"""OpenTelemetry spans of what a context does (the ``[otel]`` extra: opentelemetry-api).

One span per operation, a child of whatever span is current when the caller calls:

- ``contextfold.request``: one `get_messages_for_request` (the view fitted and delivered);
- ``contextfold.admit``: one `add_message`;
- ``contextfold.summarize``: one summarizer call, inside the request whose pass needed it;
- ``contextfold.recall``: one `recall`;
- ``contextfold.search``: one `search` (the query's length and words, never its text);
- ``contextfold.usage``: one usage reading (`on_llm_response`), linked to the request span
  whose view that model call carried.

GenAI semantic-convention attributes (``gen_ai.*``) are set where the convention has the
concept (``gen_ai.conversation.id``, ``gen_ai.request.model``, ``gen_ai.provider.name``, and
the provider's reported ``gen_ai.usage.*`` on the usage span); contextfold's own figures
are ``contextfold.*``. The request span carries contextfold's estimates, not usage: the
model call's own span (the provider's instrumentation) and the usage span hold what was
billed, so no dashboard counts a request's input twice.

Costs: nothing is imported unless the ``opentelemetry`` package is installed (and the
``opentelemetry`` key is not ``off``); with it installed, an operation starts a span only
when one can record: a tracer provider other than the API's default no-op is set, and the
current span (if any) is sampled, as a parent-based sampler decides. Otherwise an operation
pays two attribute reads and a comparison. Observability never breaks a request: a failure
while describing a span is logged and swallowed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from .costing import PricedRequest, billed_cost, request_cost
from .meter import UsageReading
from .prices import Prices, find_prices
from .report import RequestReport

logger = logging.getLogger(__name__)

T = TypeVar("T")

REQUEST = "contextfold.request"
ADMIT = "contextfold.admit"
SUMMARIZE = "contextfold.summarize"
RECALL = "contextfold.recall"
SEARCH = "contextfold.search"
USAGE = "contextfold.usage"
INSTRUMENTATION = "contextfold"


def opentelemetry_installed() -> bool:
    """Whether the OpenTelemetry API can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def telemetry_for(
    mode: str, *, session_id: str | None = None, prices: Prices | None = None
) -> Telemetry | None:
    """The context's tracer: None when ``mode`` is ``off`` or OpenTelemetry is absent."""
    if mode == "off" or not opentelemetry_installed():
        return None
    return Telemetry(session_id=session_id, prices=prices)


def drops_every_root(provider: Any) -> bool:
    """Whether ``provider`` is the SDK's with a sampler that drops every root span: the SDK's
    ``ALWAYS_OFF``, or ``ParentBased`` over it (``DEFAULT_OFF``, ``parentbased_always_off``).
    Such a decision never changes, so it is read once per provider instead of asked of the
    sampler per span (about 5 µs); any other sampler (a ratio, one of the application's own)
    is asked every time."""
    try:
        from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler
    except ImportError:  # the API without the SDK: its provider's spans never record
        return False
    sampler = getattr(provider, "sampler", None)
    if isinstance(sampler, ParentBased):
        sampler = getattr(sampler, "_root", None)  # what decides a span without a parent
    return isinstance(sampler, StaticSampler) and getattr(sampler, "_decision", None) is (
        Decision.DROP
    )


class RequestSource(Protocol):
    """What a request span reads of the context: its last report and its model."""

    @property
    def last_report(self) -> RequestReport | None: ...
    @property
    def model(self) -> str | None: ...


class Telemetry:
    """Starts and describes one context's spans (see the module)."""

    def __init__(self, *, session_id: str | None = None, prices: Prices | None = None) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._context = context
        self._no_op = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        # The API keeps the application's provider in a module global, None until one is set
        # (`get_tracer_provider` would also look up an environment variable on every call: a
        # tenth of a steady request). A provider named by that variable is loaded now.
        self._global = hasattr(trace, "_TRACER_PROVIDER")
        if not self._global or os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"):
            trace.get_tracer_provider()
        self._provider: Any = None
        self._tracer: Any = None
        self._roots_dropped = False  # the provider's sampler drops every root span
        self._session_id = session_id
        self._prices = prices
        self._previous: PricedRequest | None = None  # the last request, for its cache
        self._last_request: Any = None  # its span context, for the usage span's link

    # -- starting and ending ------------------------------------------------------------------

    def start(self, name: str, links: Any = None) -> tuple[Any, Any] | None:
        """A recording span made current, and the token to detach it; None when nothing
        would record (the cheap path)."""
        if self._global:
            provider = self._trace._TRACER_PROVIDER
            if provider is None:
                return None  # no application provider: nothing can record
        else:
            provider = self._trace.get_tracer_provider()
        if provider is not self._provider:
            self._provider = provider
            live = not isinstance(provider, self._no_op)
            self._tracer = provider.get_tracer(INSTRUMENTATION) if live else None
            self._roots_dropped = live and drops_every_root(provider)
        tracer = self._tracer
        if tracer is None:
            return None
        parent = self._trace.get_current_span().get_span_context()
        if parent.is_valid:
            if not parent.trace_flags.sampled:
                return None  # the caller's trace is not sampled: neither is ours
        elif self._roots_dropped:
            return None  # a root span its sampler would drop: no need to ask it each time
        span = tracer.start_span(name, kind=self._trace.SpanKind.INTERNAL, links=links)
        if not span.is_recording():
            span.end()
            return None
        return span, self._context.attach(self._trace.set_span_in_context(span))

    def finish(self, started: tuple[Any, Any], error: BaseException | None = None) -> None:
        span, token = started
        self._context.detach(token)
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
            span.record_exception(error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)[:200]))
        span.end()

    async def within(
        self,
        started: tuple[Any, Any],
        run: Awaitable[T],
        describe: Callable[[Any, T], None],
        before: Callable[[Any], None] | None = None,
    ) -> T:
        """Await ``run`` inside the span `start` made current and end it;
        ``describe(span, result)`` then sets its attributes (``before(span)`` first, when
        given). An exception ends the span as an error and goes on."""
        span = started[0]
        if before is not None:
            self._safely(before, span)
        try:
            result = await run
        except BaseException as error:
            self.finish(started, error)
            raise
        self._safely(describe, span, result)
        self.finish(started)
        return result

    async def recalling(
        self, started: tuple[Any, Any], run: Awaitable[str], recall_id: str, offset: int
    ) -> str:
        """Await a recall inside its span: the id and offset asked, the characters read."""

        def before(span: Any) -> None:
            self.describe_recall(span, recall_id, offset)

        def describe(span: Any, text: str) -> None:
            span.set_attribute("contextfold.recall.chars", len(text))

        return await self.within(started, run, describe, before)

    async def searching(
        self, started: tuple[Any, Any], run: Awaitable[list[T]], query: str, limit: int
    ) -> list[T]:
        """Await a search inside its span: the query's size and limit, the hits found."""

        def before(span: Any) -> None:
            self.describe_search(span, query, limit)

        def describe(span: Any, hits: list[T]) -> None:
            span.set_attribute("contextfold.search.hits", len(hits))

        return await self.within(started, run, describe, before)

    async def requesting(
        self,
        started: tuple[Any, Any],
        run: Awaitable[T],
        state: RequestSource,
        summary_counts: Callable[[], tuple[int, int, int]],
        provider: Any,
    ) -> T:
        """Serve a request inside a ``contextfold.request`` span: what its report says, and
        the summaries (calls, written, reused) and removals this request made."""
        before = summary_counts()
        last = state.last_report
        removed = last.removed_total if last is not None else 0

        def describe(span: Any, _view: Any) -> None:
            after = summary_counts()
            done = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
            self.describe_request(span, state.last_report, state.model, provider, done, removed)

        return await self.within(started, run, describe)

    def _safely(self, describe: Callable[..., None], *args: Any) -> None:
        try:
            describe(*args)
        except Exception:
            # Invariant: observability never breaks a request.
            logger.warning("context-fold: describing a span failed; ignored", exc_info=True)

    # -- what each span says ------------------------------------------------------------------

    def common(self, span: Any, model: str | None) -> None:
        if self._session_id is not None:
            span.set_attribute("gen_ai.conversation.id", self._session_id)
        if model:
            span.set_attribute("gen_ai.request.model", model)

    def describe_request(
        self,
        span: Any,
        report: RequestReport | None,
        model: str | None,
        provider: Any,
        summaries: tuple[int, int, int],
        removed_before: int,
    ) -> None:
        """A delivered request: sizes, limits, what the pass did, cache and cost (estimated:
        the previous request's input is this one's cached prefix unless a pass rewrote it)."""
        self.common(span, model)
        name = getattr(provider, "name", None)
        if isinstance(name, str) and name:
            span.set_attribute("gen_ai.provider.name", name)
        if report is None:
            return
        calls, written, reused = summaries
        attributes: dict[str, Any] = {
            "contextfold.tokens.before": report.tokens_before,
            "contextfold.tokens.after": report.tokens_after,
            "contextfold.messages.before": report.messages_before,
            "contextfold.messages.after": report.messages_after,
            "contextfold.history.messages": report.history_messages,
            "contextfold.budget": report.budget,
            "contextfold.trigger": report.trigger,
            "contextfold.target": report.target,
            "contextfold.compacted": report.compacted,
            "contextfold.level": report.level,
            "contextfold.rungs_applied": list(report.applied),
            "contextfold.relaxed": list(report.relaxed),
            "contextfold.messages.removed": max(0, report.removed_total - removed_before),
            "contextfold.messages.removed_total": report.removed_total,
            "contextfold.messages.shortened_total": report.truncated_total,
            "contextfold.summaries.calls": calls,
            "contextfold.summaries.written": written,
            "contextfold.summaries.reused": reused,
            "contextfold.size_source": report.size_source,
            "contextfold.hard_fit": report.hard_fit,
        }
        previous = self._previous
        prefix = 0 if report.compacted or previous is None else previous.tokens
        priced = PricedRequest(report.tokens_after, min(prefix, report.tokens_after))
        attributes["contextfold.cache.prefix_tokens"] = priced.prefix_tokens
        attributes["contextfold.cache.share"] = round(
            priced.prefix_tokens / max(report.tokens_after, 1), 4
        )
        prices = self._prices or (find_prices(model) if model else None)
        if prices is not None:
            cost = request_cost(prices, priced, previous)
            attributes["contextfold.cost.usd"] = round(cost.usd, 8)
            attributes["contextfold.cost.prices"] = prices.name
        span.set_attributes(attributes)
        self._previous = priced
        self._last_request = span.get_span_context()

    def describe_admission(
        self, span: Any, entry: Any, index: int, clipped: int, repairs: int
    ) -> None:
        role = entry.message.get("role") if isinstance(entry.message, Mapping) else None
        span.set_attributes(
            {
                "contextfold.message.role": str(role),
                "contextfold.message.kind": entry.info.kind.value,
                "contextfold.message.tokens": entry.cost,
                "contextfold.message.index": index,
                "contextfold.ingress.clipped": clipped,
                "contextfold.repairs": repairs,
            }
        )
        if self._session_id is not None:
            span.set_attribute("gen_ai.conversation.id", self._session_id)

    def describe_recall(self, span: Any, recall_id: str, offset: int) -> None:
        span.set_attributes(
            {"contextfold.recall.id": recall_id, "contextfold.recall.offset": offset}
        )
        if self._session_id is not None:
            span.set_attribute("gen_ai.conversation.id", self._session_id)

    def describe_search(self, span: Any, query: str, limit: int) -> None:
        # What was searched for may be private (a user's words): only its size is recorded.
        span.set_attributes(
            {
                "contextfold.search.query_chars": len(query),
                "contextfold.search.query_words": len(query.split()),
                "contextfold.search.limit": limit,
            }
        )
        if self._session_id is not None:
            span.set_attribute("gen_ai.conversation.id", self._session_id)

    def usage(self, reading: UsageReading, output_tokens: int | None, ratio: float | None) -> None:
        """A usage reading: the provider's billed figures, as the GenAI convention names
        them, linked to the request span whose view that call carried."""
        links = None
        if self._last_request is not None:
            links = [self._trace.Link(self._last_request)]
        started = self.start(USAGE, links=links)
        if started is None:
            return
        self._safely(self._describe_usage, started[0], reading, output_tokens, ratio)
        self.finish(started)

    def _describe_usage(
        self, span: Any, reading: UsageReading, output_tokens: int | None, ratio: float | None
    ) -> None:
        self.common(span, reading.model)
        if reading.model:
            span.set_attribute("gen_ai.response.model", reading.model)
        attributes: dict[str, Any] = {
            # Gross input: cache reads and writes included, as the convention asks.
            "gen_ai.usage.input_tokens": reading.actual,
            "gen_ai.usage.cache_read.input_tokens": reading.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": reading.cache_write_tokens,
            "contextfold.cache.share": round(reading.cache_read_tokens / max(reading.actual, 1), 4),
        }
        if output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = output_tokens
        if reading.view_raw is not None:
            attributes["contextfold.view.raw_tokens"] = reading.view_raw
        if ratio is not None:
            attributes["contextfold.calibration.ratio"] = round(ratio, 4)
        prices = self._prices or (find_prices(reading.model) if reading.model else None)
        if prices is not None:
            fresh = reading.actual - reading.cache_read_tokens - reading.cache_write_tokens
            attributes["contextfold.cost.usd"] = round(
                billed_cost(
                    prices,
                    fresh=max(0, fresh),
                    cache_read=reading.cache_read_tokens,
                    cache_write=reading.cache_write_tokens,
                    output=output_tokens or 0,
                ),
                8,
            )
            attributes["contextfold.cost.prices"] = prices.name
        span.set_attributes(attributes)


def output_tokens_of(data: Mapping[str, Any]) -> int | None:
    """The reply's token count from an ``llm:response`` payload or an SDK usage, if given."""
    usage = data.get("usage") if isinstance(data, Mapping) else None
    if usage is None:
        return None
    for key in ("output_tokens", "completion_tokens"):
        value = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


class TracedSummarizer:
    """A summarizer whose every call is a ``contextfold.summarize`` span (the name and prompt
    records cite are the wrapped summarizer's, so stored summaries still match, and it takes
    cache-aligned requests when the wrapped one does)."""

    def __init__(self, summarizer: Any, telemetry: Telemetry) -> None:
        self._summarizer = summarizer
        self._telemetry = telemetry
        from .summaries.aligned import takes_aligned_requests
        from .summaries.summarizer import summarizer_identity

        self.name, self.prompt = summarizer_identity(summarizer)
        self.aligned_requests = takes_aligned_requests(summarizer)

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        def before(span: Any) -> None:
            span.set_attributes(
                {
                    "contextfold.summary.messages": len(messages),
                    "contextfold.summary.max_tokens": max_tokens,
                    "contextfold.summarizer": self.name,
                }
            )

        def describe(span: Any, text: Any) -> None:
            if isinstance(text, str):
                span.set_attribute("contextfold.summary.chars", len(text))

        calling = self._summarizer(messages, max_tokens)
        started = self._telemetry.start(SUMMARIZE)
        if started is None:
            return await calling
        return await self._telemetry.within(started, calling, describe, before)


__all__ = [
    "ADMIT",
    "RECALL",
    "REQUEST",
    "SEARCH",
    "SUMMARIZE",
    "USAGE",
    "Telemetry",
    "TracedSummarizer",
    "opentelemetry_installed",
    "output_tokens_of",
    "telemetry_for",
]
