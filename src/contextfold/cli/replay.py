"""Replay a recorded conversation through context-fold and record every request it would send.

The conversation grows one message at a time, and the context manager is called the way an
orchestrator calls it: one request before each assistant message (the reply to what came
before) and one at the end (the next turn). Each request becomes a :class:`ReplayRow`: its size
before and after compaction, the level and rungs applied, and how much of it repeats the
previous request message for message (the part a provider's prompt cache could serve).
Every request is then priced (:class:`PricedReplay`): its input at Anthropic's and at
OpenAI's list prices (and at the config's ``prices`` when it names some), by
``contextfold.costing``'s rules, beside what sending the whole history would have cost.

:func:`replay_messages` is the reusable core (``bench/`` imports it); the CLI wraps it with
file reading, a table, a chart and a JSON file.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from operator import gt, itemgetter
from typing import TYPE_CHECKING, Any

from amplifier_core.models import ModelInfo, ProviderInfo

from contextfold.config import ContextConfig
from contextfold.costing import PricedRequest, price_columns, request_cost
from contextfold.errors import ConfigError, MessageValidationError
from contextfold.inspection import Inspection, ViewRecorder, inspect_views
from contextfold.manager import ContextFold
from contextfold.prices import REFERENCE_PRICING, Prices, reference_prices
from contextfold.report import RequestReport
from contextfold.summaries import scripted_summarizer
from contextfold.summaries.metered import MeteredSummarizer
from contextfold.tokens import build_counter

# The output reserve a replayed "model" declares. The budget is the window less this whole
# reserve and the margin (the provider's input limit; see `contextfold.budget`), so this only
# moves the budget.
DEFAULT_MAX_OUTPUT_TOKENS = 4096
# How often ``on_progress`` hears about admitted messages: rare enough to cost nothing.
PROGRESS_EVERY = 1000


class ReplayError(ValueError):
    """A message the context manager refused; ``place`` says which one (e.g. ``message 3``)."""

    def __init__(self, place: str, problem: str) -> None:
        super().__init__(f"{place}: {problem}")
        self.place = place
        self.problem = problem


@dataclass(frozen=True, init=False)
class ReplayRow:
    """One request the context manager delivered during the replay.

    A frozen dataclass (``dataclasses.asdict``, ``replace``, equality and ``repr`` work as
    on any), whose fields are stored together in one tuple: a million-message replay makes
    half a million rows, and filling fifteen attributes one by one was the largest part of
    a replay's own work per request.
    """

    __slots__ = ("_values",)
    if TYPE_CHECKING:  # the fields' tuple, set in __init__ (not a field of its own)
        _values: tuple[Any, ...]

    request: int  # 1-based
    history_messages: int  # messages admitted when this request was made
    history_tokens: int  # the whole conversation so far (as admitted): an unmanaged request
    tokens_before: int  # the view as it stood before this request's compaction pass
    tokens_after: int  # the view delivered
    messages_before: int
    messages_after: int
    compacted: bool
    level: int
    applied: list[str]
    budget: int
    trigger: int
    prefix_messages: int  # leading messages identical to the previous request's view
    prefix_tokens: int
    prefix_share: float  # prefix_tokens / tokens of this view (0 for the first request)

    def __init__(
        self,
        request: int,
        history_messages: int,
        history_tokens: int,
        tokens_before: int,
        tokens_after: int,
        messages_before: int,
        messages_after: int,
        compacted: bool,
        level: int,
        applied: list[str],
        budget: int,
        trigger: int,
        prefix_messages: int,
        prefix_tokens: int,
        prefix_share: float,
    ) -> None:
        _set_values(
            self,
            "_values",
            (
                request,
                history_messages,
                history_tokens,
                tokens_before,
                tokens_after,
                messages_before,
                messages_after,
                compacted,
                level,
                applied,
                budget,
                trigger,
                prefix_messages,
                prefix_tokens,
                prefix_share,
            ),
        )

    @property
    def over_budget(self) -> bool:
        values = self._values
        return values[_TOKENS_AFTER] > values[_BUDGET]

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy: rebuilt through __init__
        return (type(self), self._values)


_set_values = object.__setattr__  # a frozen dataclass sets its fields this way too
# The fields in order; each is read from the row's tuple (set after the dataclass is made,
# so the readers are not taken for defaults).
_ROW_FIELDS = tuple(ReplayRow.__dataclass_fields__)


def _field_reader(position: int) -> property:
    def read(row: ReplayRow) -> Any:
        return row._values[position]

    return property(read)


for _position, _name in enumerate(_ROW_FIELDS):
    setattr(ReplayRow, _name, _field_reader(_position))
_TOKENS_AFTER, _APPLIED, _BUDGET = (
    _ROW_FIELDS.index(name) for name in ("tokens_after", "applied", "budget")
)


def _row_columns(rows: Sequence[ReplayRow], *names: str) -> list[list[Any]]:
    """The named fields of every row, one list per name, read at C speed (for the totals
    and the chart: attribute reads of half a million rows add up)."""
    values = [row._values for row in rows]
    return [list(map(itemgetter(_ROW_FIELDS.index(name)), values)) for name in names]


def _new_row(
    values: tuple[Any, ...], _new: Any = object.__new__, _cls: Any = ReplayRow
) -> ReplayRow:
    """A row from its values in field order, without the keyword call: the replay's path."""
    row = _new(_cls)
    _set_values(row, "_values", values)
    return row


@dataclass(frozen=True)
class ReplayTotals:
    """The replay at a glance."""

    messages: int
    requests: int
    compactions: int  # requests where compaction acted on the view
    levels_used: list[int]
    rungs_used: list[str]
    largest_history: int
    largest_after: int
    history_tokens_total: int  # what resending the full history every time would cost
    tokens_sent_total: int
    saved_share: float  # 1 - sent / history
    prefix_share: float  # token-weighted share of all sent tokens repeating the previous view
    over_budget_requests: int
    history_kept: bool  # get_messages() still holds every admitted message, in order
    budget: int
    trigger: int
    # The ingress cap's work, apart from compaction's: tool results shortened on admission
    # (history sizes above are of the admitted messages, so the cap's saving is not in them).
    ingress_clipped_results: int = 0
    ingress_bytes_removed: int = 0


@dataclass(frozen=True)
class PricedReplay:
    """A replay's input at one pricing: each request as sent, and in all beside the same
    requests carrying the whole history (append-only, so each shares all of the previous)."""

    name: str  # "anthropic", "openai", or "config" (the config's own ``prices``)
    prices: Prices
    requests: list[float]  # USD per request, as sent
    sent_usd: float
    history_usd: float
    fresh_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    # Summary requests (a ladder with ``summarize``), input and output: apart from sent_usd.
    summary_requests: int = 0
    summary_usd: float = 0.0

    @property
    def key(self) -> str:
        """The per-request field in the JSON rows."""
        return f"cost_{self.name}_usd"

    def to_dict(self) -> dict[str, Any]:
        return {
            "prices": self.prices.to_dict(),
            "sent_usd": round(self.sent_usd, 6),
            "history_usd": round(self.history_usd, 6),
            "fresh_tokens": self.fresh_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "summary_requests": self.summary_requests,
            "summary_usd": round(self.summary_usd, 6),
        }


@dataclass(frozen=True)
class ReplayResult:
    """Rows and totals of a replay, plus the settings it ran with."""

    rows: list[ReplayRow]
    totals: ReplayTotals
    window: int | None
    max_output_tokens: int
    config: dict[str, Any] = field(default_factory=dict)
    costs: tuple[PricedReplay, ...] = ()
    # What every request's view held (``inspect=True``): the inspector page's data.
    inspection: Inspection | None = None

    def to_dict(self) -> dict[str, Any]:
        rows = [_row_dict(row) for row in self.rows]
        for priced in self.costs:
            key = priced.key
            for data, usd in zip(rows, priced.requests, strict=True):
                data[key] = round(usd, 8)
        return {
            "window": self.window,
            "max_output_tokens": self.max_output_tokens,
            "config": dict(self.config),
            "totals": asdict(self.totals),
            "costs": {priced.name: priced.to_dict() for priced in self.costs},
            "rows": rows,
        }


def _row_dict(row: ReplayRow) -> dict[str, Any]:
    """``asdict(row)`` plus ``over_budget``, without asdict's recursive deep copy: a row's
    only container is its list of rung names, and a million-message replay has 500,000 rows."""
    data = dict(zip(_ROW_FIELDS, row._values, strict=True))
    data["applied"] = list(data["applied"])
    data["over_budget"] = data["tokens_after"] > data["budget"]
    return data


class ReplayModel:
    """What a replay knows of the model: its window. Offered where a provider would be.

    The context manager derives its budget from ``get_model_info()`` exactly as it does for a
    live provider, so a replay at ``--window 128000`` runs on the budget a real 128k model
    would get. It never completes a request: a replay has no model to ask.
    """

    def __init__(self, context_window: int, max_output_tokens: int) -> None:
        if max_output_tokens >= context_window:
            raise ValueError(
                f"max output tokens ({max_output_tokens}) must be below the window "
                f"({context_window}), or no input would fit"
            )
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        # Built once: the context asks on every request, and validating a Pydantic model
        # each time is a replay's largest per-request cost after the context's own.
        self._model_info = ModelInfo(
            id="replay",
            display_name="contextfold replay",
            context_window=context_window,
            max_output_tokens=max_output_tokens,
        )

    @property
    def name(self) -> str:
        return "replay"

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(
            id="replay",
            display_name="contextfold replay",
            defaults={
                "context_window": self.context_window,
                "max_output_tokens": self.max_output_tokens,
            },
        )

    def get_model_info(self) -> ModelInfo:
        return self._model_info


def replay_messages(
    messages: Sequence[Mapping[str, Any]],
    config: ContextConfig | Mapping[str, Any] | None = None,
    window: int | None = None,
    *,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    places: Sequence[str] | None = None,
    on_request: Callable[[ReplayRow], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    inspect: bool = False,
) -> ReplayResult:
    """Replay ``messages`` through a fresh ``ContextFold`` (synchronous wrapper).

    ``window`` is the model's context window in tokens; ``None`` leaves the budget to the
    config (``max_tokens``, else ``max_tokens_fallback``). Raises ``ConfigError`` for a bad
    config, :class:`ReplayError` for a refused message (naming ``places[i]`` or
    ``message i``) and ``ContextLengthError`` when protected content alone cannot fit.
    ``on_request`` sees every row as it is made; ``on_progress(n)`` is told how many messages
    have been admitted, every :data:`PROGRESS_EVERY` messages and at the end. With
    ``inspect`` the result also holds what each request's view held (``inspection``: the
    passes, recorded at O(1) per request, and the admitted messages).
    Use :func:`replay_messages_async` from inside a running event loop.
    """
    results: list[ReplayResult] = []

    async def replay() -> None:
        # The result is handed over outside the task: asyncio.run restores the SIGINT handler
        # through signal's enum lookup, whose failure message is built with the repr of its
        # handler, which names the task with its result. A replay's result is every row:
        # two reprs of it took seconds after a million-message replay.
        results.append(
            await replay_messages_async(
                messages,
                config,
                window,
                max_output_tokens=max_output_tokens,
                places=places,
                on_request=on_request,
                on_progress=on_progress,
                inspect=inspect,
            )
        )

    asyncio.run(replay())
    return results[0]


async def replay_messages_async(
    messages: Sequence[Mapping[str, Any]],
    config: ContextConfig | Mapping[str, Any] | None = None,
    window: int | None = None,
    *,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    places: Sequence[str] | None = None,
    on_request: Callable[[ReplayRow], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    inspect: bool = False,
) -> ReplayResult:
    """The replay itself; see :func:`replay_messages`.

    Its own cost per request is one comparison of the view with the previous one (C-level
    list equality, a pointer check for an unchanged message: the order of the context
    manager's own copy of the view) plus a token count of the messages new in the view.
    Nothing is re-serialised, and a message is counted again only when compaction changed
    the view before it. The history's size comes from the reports, so no message admitted
    is counted twice either.
    """
    settings = config.to_dict() if isinstance(config, ContextConfig) else dict(config or {})
    model = ReplayModel(window, max_output_tokens) if window is not None else None
    summarizer = _offline_summarizer(config if isinstance(config, ContextConfig) else settings)
    # A replay's requests are simulated: no OpenTelemetry spans of them (nor their cost).
    context = ContextFold(
        config if isinstance(config, ContextConfig) else settings,
        summarizer=summarizer,
        opentelemetry="off",
    )
    admitted = _AdmittedCosts(context)
    prefix = _PrefixTracker(admitted.count)
    rows: list[ReplayRow] = []
    recorder: ViewRecorder | None = None
    if inspect:
        # Told of each row after it is made (the hot path is unchanged without --html).
        recorder = ViewRecorder(context._inspected_state())
        on_request = _chained(recorder, on_request)
    # What an unmanaged request would cost, grown by what each admission added to the view.
    history = _HistorySize()

    # Bound once: the closure below runs once per request (half of all messages, or more).
    request_view = context._request_view_shared
    grow_history = history.update
    advance_prefix = prefix.advance
    forget_admitted = admitted.clear
    append_row = rows.append

    async def request(history_messages: int) -> None:
        # The context's own view, not a copy: the replay only reads it (see `_PrefixTracker`).
        view = await request_view(provider=model)
        report = context.last_report
        assert report is not None  # every delivered view sets it
        history_tokens = grow_history(report)
        shared, prefix_tokens = advance_prefix(view)
        forget_admitted()  # what this view did not carry is counted if a later one does
        tokens_after = report.tokens_after
        row = _new_row(
            (
                len(rows) + 1,
                history_messages,
                history_tokens,
                report.tokens_before,
                tokens_after,
                report.messages_before,
                report.messages_after,
                report.compacted,
                report.level,
                list(report.applied),
                report.budget,
                report.trigger,
                shared,
                prefix_tokens,
                min(prefix_tokens / max(tokens_after, 1), 1.0) if rows else 0.0,
            )
        )
        append_row(row)
        if on_request is not None:
            on_request(row)

    with _collector_kept_young():
        await _replay_all(messages, context, admitted, request, places, on_progress)
    await request(len(messages))
    if on_progress is not None:
        on_progress(len(messages))

    stored = await context._history_shared()  # only read, by `_totals`
    inspection = None
    if recorder is not None:
        counts = _row_columns(rows, "history_messages")[0]
        inspection = inspect_views(context._inspected_state().history, recorder.passes, counts)
    return ReplayResult(
        rows=rows,
        totals=_totals(rows, messages, stored),
        window=window,
        max_output_tokens=max_output_tokens,
        config=settings,
        costs=replay_costs(
            rows,
            messages,
            context.config.prices,
            summaries=summarizer.take() if summarizer is not None else (),
        ),
        inspection=inspection,
    )


def _offline_summarizer(config: ContextConfig | Mapping[str, Any]) -> MeteredSummarizer | None:
    """A ladder with the ``summarize`` rung summarizes offline, as the eval does (a replay
    has no model to ask), each call measured as the transcript request it stands for."""
    known = config if isinstance(config, ContextConfig) else ContextConfig.from_mapping(config)
    if not any(rung.name == "summarize" for rung in known.ladder):
        return None
    counter = build_counter("exact")

    def request_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
        return sum(counter.count_message(m) for m in messages) + counter.request_overhead

    return MeteredSummarizer(scripted_summarizer(counter), request_tokens, counter.count_text)


def _chained(
    recorder: ViewRecorder, on_request: Callable[[ReplayRow], None] | None
) -> Callable[[ReplayRow], None]:
    after_request = recorder.after_request

    def noted(row: ReplayRow) -> None:
        after_request(row.request)
        if on_request is not None:
            on_request(row)

    return noted


def replay_costs(
    rows: Sequence[ReplayRow],
    messages: Sequence[Mapping[str, Any]],
    configured: Prices | None = None,
    *,
    summaries: Sequence[PricedRequest] = (),
) -> tuple[PricedReplay, ...]:
    """Each request's input priced at the reference pricings (and ``configured``), the
    request's time read from the last message before it (``metadata.timestamp``, when the
    conversation has them: a gap beyond the cache's lifetime finds it cold); and the
    ``summaries`` (summary requests, input and output), each priced on its own, apart."""
    if not rows:
        return ()
    sent, prefix, history, admitted = _row_columns(
        rows, "tokens_after", "prefix_tokens", "history_tokens", "history_messages"
    )
    # An unmanaged request is the whole history, which repeats all of the previous one.
    history_prefix = [0, *history[:-1]]
    times = _request_times(messages, admitted)
    pricings = list(zip(REFERENCE_PRICING, reference_prices(), strict=True))
    if configured is not None:
        pricings.append(("config", configured))
    priced = []
    for name, prices in pricings:
        columns = price_columns(prices, sent, prefix, times)
        unmanaged = price_columns(prices, history, history_prefix, times)
        priced.append(
            PricedReplay(
                name=name,
                prices=prices,
                requests=columns.usd,
                sent_usd=columns.total_usd,
                history_usd=unmanaged.total_usd,
                fresh_tokens=columns.fresh_tokens,
                cache_read_tokens=columns.cache_read_tokens,
                cache_write_tokens=columns.cache_write_tokens,
                summary_requests=len(summaries),
                summary_usd=sum(request_cost(prices, request, None).usd for request in summaries),
            )
        )
    return tuple(priced)


def _request_times(
    messages: Sequence[Mapping[str, Any]], admitted: Sequence[int]
) -> list[float | None] | None:
    """Seconds (POSIX time) of each request: its last message's timestamp; None when the
    conversation carries no timestamps at all (every request then counts as in time)."""
    times = [_timestamp(messages[count - 1]) if count > 0 else None for count in admitted]
    return times if any(moment is not None for moment in times) else None


def _timestamp(message: Any) -> float | None:
    metadata = message.get("metadata") if isinstance(message, Mapping) else None
    stamp = metadata.get("timestamp") if isinstance(metadata, Mapping) else None
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def _replay_all(
    messages: Sequence[Mapping[str, Any]],
    context: ContextFold,
    admitted: _AdmittedCosts,
    request: Callable[[int], Awaitable[None]],
    places: Sequence[str] | None,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Admit every message, with a request before each assistant message."""
    add_message = context.add_message
    note = admitted.note
    for index, message in enumerate(messages):
        # The model answers what came before it: that is a request, unless nothing came before.
        if message.get("role") == "assistant" and index > 0:
            await request(index)
        try:
            # The context never changes the dict it is given (it stores a private copy), so a
            # plain dict is handed over as it is; any other mapping becomes one.
            await add_message(message if type(message) is dict else dict(message))
            note()
        except MessageValidationError as error:
            place = places[index] if places is not None else f"message {index}"
            raise ReplayError(
                place, f"field '{error.field}': {error.problem}. {error.fix}"
            ) from None
        except (ValueError, TypeError, RecursionError) as error:
            place = places[index] if places is not None else f"message {index}"
            problem = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            raise ReplayError(place, problem) from None
        if (index + 1) % PROGRESS_EVERY == 0:
            if on_progress is not None:
                on_progress(index + 1)
            _age_survivors()


# Whether `_collector_kept_young` froze objects (it does only when nothing else had).
_freezing = False


@contextmanager
def _collector_kept_young() -> Iterator[None]:
    """Keep the garbage collector to what is young during a replay.

    A replay builds a history that lives until its end. Left alone, the collector walks that
    growing history again at every full collection: about a fifth of a million-message
    replay. So every `PROGRESS_EVERY` messages what survived so far is moved out of its reach
    (`gc.freeze`: a list splice); new cycles are still collected as they are made, and at
    the end everything is handed back (`gc.unfreeze`). Skipped when the application froze
    objects of its own (a pre-fork server, say), which unfreezing would release.
    """
    global _freezing
    own = gc.isenabled() and gc.get_freeze_count() == 0 and not _freezing
    if not own:  # the collector is off, or someone (maybe an outer replay) froze objects
        yield
        return
    _freezing = True
    try:
        yield
    finally:
        _freezing = False
        gc.unfreeze()


def _age_survivors() -> None:
    if _freezing:
        gc.freeze()


class _HistorySize:
    """The size of the whole history, as context-fold counts it, at each request.

    Between two requests the view only grows by the messages admitted in between, so their
    cost is this request's ``tokens_before`` minus the previous request's ``tokens_after``.
    The sizes are the admitted messages' (after the ingress cap), so a replay's saving is
    what compaction did; what the cap removed is reported on its own (:class:`IngressClips`).
    Two report fields per request: no message is counted twice.
    """

    def __init__(self) -> None:
        self.tokens = 0
        self._delivered: int | None = None

    def update(self, report: RequestReport) -> int:
        grown = report.tokens_before - (self._delivered or 0)
        self.tokens += grown
        self._delivered = report.tokens_after
        return self.tokens


class _AdmittedCosts:
    """The costs of the messages admitted since the last request, as the context counted
    them on admission: a view's new messages are nearly always these very objects, so the
    prefix measurement reads their cost instead of counting each message a second time.

    Keyed by identity, holding each message (so an id cannot be reused while it is here),
    and cleared after every request: it never holds more than one request's new messages.
    """

    def __init__(self, context: ContextFold) -> None:
        self._context = context
        self._count = context.counter.count_message
        self._known: dict[int, tuple[Mapping[str, Any], int]] = {}

    def note(self) -> None:
        """Remember the message just admitted (its view form and cost)."""
        view, cost = self._context._newest_view_cost()
        if view is not None:
            self._known[id(view)] = (view, cost)

    def count(self, message: Mapping[str, Any]) -> int:
        """The message's raw tokens: as counted on admission if it is one of those messages,
        the notice as its pass counted it, else counted now (a message compaction
        shortened, a view-only result)."""
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        notice, cost = self._context._notice_view_cost()
        if message is notice:  # new after every pass, and counted by it
            return cost
        return self._count(message)

    def clear(self) -> None:
        self._known.clear()


class _PrefixTracker:
    """How much of each view repeats the previous one, computed incrementally.

    Keeps the previous view and the running token total of its first ``i`` messages
    (``cumulative[i]``). The views are the context's own lists (`_request_view_shared`): while
    no request re-plans it, the view is the same list, grown in place by the messages admitted
    since, so a request that gets the list it got last time shares all of the previous view
    without comparing anything, and only the newly appended messages are counted. That keeps
    a replay's own work per request proportional to the new messages, not to the view.

    Any other list is compared with the previous view (list equality runs in C, and an
    unchanged message is the same object or an equal one) and the prefix's tokens are read off
    ``cumulative``. After a compaction the rest of the view is mostly runs of the previous
    view's messages (the oldest dropped, a few shortened): each run is found with C-level
    searches and takes its costs from the previous view, so only the messages compaction
    changed, and the new ones, are counted.
    """

    def __init__(self, count: Callable[[Mapping[str, Any]], int]) -> None:
        self._count = count
        self._previous: list[dict[str, Any]] = []
        self._length = 0  # how long the previous view was when it was delivered
        self._cumulative: list[int] = [0]

    def advance(self, view: list[dict[str, Any]]) -> tuple[int, int]:
        """``(shared messages, their tokens)`` against the previous view; then remember this one."""
        before = self._cumulative
        if view is self._previous and len(view) >= self._length:
            # The same list: only appended to since (the context's sticky view).
            shared = self._length
        else:
            # The previous list may have grown since it was delivered: compare what it was.
            previous = self._previous
            if len(previous) != self._length:
                previous = self._previous = previous[: self._length]
            shared = _common_prefix(previous, view)
        prefix_tokens = before[shared]
        if shared == self._length:  # nothing changed: count the appended messages only
            total = prefix_tokens
            for message in view[shared:]:
                total += self._count(message)
                before.append(total)
        else:
            self._cumulative = self._realign(view, shared)
        self._previous, self._length = view, len(view)
        return shared, prefix_tokens

    def _realign(self, view: list[dict[str, Any]], shared: int) -> list[int]:
        """Running totals of a view that changed after ``shared`` messages.

        Equal messages cost the same, so any message found in the previous view takes its
        cost from there. The next expected position is tried first (a message compaction
        shortened stands where its original stood); a full C-level search, the way past a
        dropped stretch, is tried a bounded number of times per request.
        """
        previous, before = self._previous, self._cumulative
        cumulative = before[: shared + 1]
        total = cumulative[-1]
        searches = _MAX_SEARCHES
        index, expected = shared, shared
        while index < len(view):
            message = view[index]
            found: int | None = None
            if expected < len(previous) and previous[expected] == message:
                found = expected
            elif searches > 0:
                searches -= 1
                found = _find(previous, message, expected)
            if found is None:
                total += self._count(message)
                cumulative.append(total)
                index += 1
                expected += 1  # most likely it replaced the message that stood here
                continue
            # A run of the previous view's messages: their costs are already known.
            run = max(_common_prefix(previous[found:], view[index:]), 1)
            for position in range(found, found + run):
                total += before[position + 1] - before[position]
                cumulative.append(total)
            index += run
            expected = found + run
        return cumulative


# Full searches of the previous view per changed request: enough to step over the stretches
# compaction dropped, never a search per message of a long view.
_MAX_SEARCHES = 16


def _find(
    messages: Sequence[Mapping[str, Any]], message: Mapping[str, Any], start: int
) -> int | None:
    """Where ``message`` next occurs in ``messages`` from ``start`` (a C-level search)."""
    try:
        return messages.index(message, start)
    except ValueError:
        return None


def _common_prefix(previous: Sequence[Any], current: Sequence[Any]) -> int:
    """Leading messages ``current`` shares with ``previous``.

    Only C-level list comparisons (each element compared by identity first, then by value):
    the usual case, the whole previous view repeated, is one of them; a view that changed is
    bisected down to its first difference, which costs about two comparisons of its length.
    """
    length = min(len(previous), len(current))
    if previous[:length] == current[:length]:
        return length
    # Invariant: the first ``low`` messages agree; the first difference is before ``high``.
    low, high = 0, length
    while high - low > 1:
        middle = (low + high) // 2
        if previous[low:middle] == current[low:middle]:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class IngressClips:
    """Tool results the ingress cap shortened when they were admitted."""

    results: int = 0
    bytes_removed: int = 0  # UTF-8 bytes of tool text, as given minus as stored


def _totals(
    rows: list[ReplayRow],
    messages: Sequence[Mapping[str, Any]],
    stored: Sequence[Mapping[str, Any]],
) -> ReplayTotals:
    history_tokens, tokens_after, compacted, level, applied, budget, prefix_tokens = _row_columns(
        rows,
        "history_tokens",
        "tokens_after",
        "compacted",
        "level",
        "applied",
        "budget",
        "prefix_tokens",
    )
    before = sum(history_tokens)
    sent = sum(tokens_after)
    # Prefix reuse is undefined for the first request; weigh the rest by their size.
    later_sent = sent - tokens_after[0]
    last = rows[-1]
    clips = _ingress_clips(messages, stored)
    return ReplayTotals(
        messages=len(messages),
        requests=len(rows),
        compactions=sum(map(bool, compacted)),
        levels_used=sorted(value for value in set(level) if value > 0),
        rungs_used=sorted({rung for rungs in applied for rung in rungs}),
        largest_history=max(history_tokens),
        largest_after=max(tokens_after),
        history_tokens_total=before,
        tokens_sent_total=sent,
        saved_share=1 - sent / before if before else 0.0,
        prefix_share=sum(prefix_tokens[1:]) / later_sent if later_sent else 0.0,
        over_budget_requests=sum(map(gt, tokens_after, budget)),
        history_kept=_same_history(messages, stored),
        budget=last.budget,
        trigger=last.trigger,
        ingress_clipped_results=clips.results,
        ingress_bytes_removed=clips.bytes_removed,
    )


def _ingress_clips(
    messages: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]]
) -> IngressClips:
    """Tool results stored shorter than they were given: the ingress cap's work.

    Found by comparing what was given with what history holds (one pass at the end) rather
    than by listening to ``context:tool_result_ingress_truncated``: a listener makes the
    context build every event payload on every request, which would double a replay's time.
    """
    results = removed = 0
    for given, kept in zip(messages, stored, strict=False):
        if given is kept or not _carries_tool_output(given):
            continue
        shrunk = _text_bytes(given.get("content")) - _text_bytes(kept.get("content"))
        if shrunk > 0:
            results += 1
            removed += shrunk
    return IngressClips(results=results, bytes_removed=removed)


def _carries_tool_output(message: Mapping[str, Any]) -> bool:
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") == "tool_result" for block in content
    )


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of every string inside ``value`` (content: a string or nested blocks)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, Mapping):
        return sum(_text_bytes(item) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(_text_bytes(item) for item in value)
    return 0


def _same_history(
    messages: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
) -> bool:
    """History keeps every message in order. The ingress cap may shorten a huge tool result's
    text on admission (by contract), so messages are matched by role and tool-call id."""
    if len(messages) != len(history):
        return False
    return all(
        a.get("role") == b.get("role") and a.get("tool_call_id") == b.get("tool_call_id")
        for a, b in zip(messages, history, strict=True)
    )


__all__ = [
    "PROGRESS_EVERY",
    "ConfigError",
    "IngressClips",
    "PricedReplay",
    "ReplayError",
    "ReplayModel",
    "ReplayResult",
    "ReplayRow",
    "ReplayTotals",
    "replay_costs",
    "replay_messages",
    "replay_messages_async",
]
