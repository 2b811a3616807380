"""The counterfactual replay: every conversation, under every policy, in every window.

A conversation grows one message at a time, as `contextfold replay` grows it: a model request
before each assistant message (the view of everything before it) and one at the end. At each
request the eval records what the policy sent, measured by one ruler (exact o200k, plus the
reply priming), and where each fact of the coming step stands in it (`scoring`):

- tokens sent; the prefix shared with the previous request's view, message for message (the
  part a provider's prompt cache serves; the first request of a session has none, and its
  tokens are left out of the share as `contextfold replay` leaves them out);
- refusals (the policy sent nothing) and views over the window by the exact recount;
- the input's cost under each reference pricing (`PRICINGS`: Anthropic's multipliers with a
  five-minute cache, OpenAI's), by `contextfold.costing`'s rules: the shared prefix is read
  from the cache, the rest written (Anthropic) or sent fresh (OpenAI). The eval has no
  clock, so every request counts as within the cache's lifetime; output is left out (every
  policy answers with the same recorded replies);
- the same tokens and costs on the requests every compared policy answered
  (`answered_by_all`): a policy that refuses a request sends nothing for it, so its raw
  totals are not comparable with those of a policy that answered.

Facts are found once per conversation (`facts.find_steps`) and shared by every run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..costing import PricedRequest, request_cost
from ..errors import MessageValidationError
from ..inspection import Inspection, ViewRecorder, inspect_views
from ..prices import REFERENCE_PRICING, reference_prices
from ..tokens import ExactCounter
from .counts import ContentCounts, ExactCounts
from .facts import FactRule, Step, find_steps
from .policy import Policy, PolicySession, Refusal
from .scoring import Outcome, TextCache, found_by_search, score_fact, search_query

DEFAULT_WINDOWS: tuple[int, ...] = (4_000, 8_000, 16_000)
SEARCH_LIMIT = 5
# The pricings every request is priced with, and their names (columns, JSON keys).
PRICINGS = reference_prices()
PRICING_NAMES: tuple[str, ...] = REFERENCE_PRICING
# The fields of one request in the JSON, in order.
REQUEST_FIELDS = (
    "message_index",
    "tokens",
    "cached_tokens",
    "refused",
    "over_budget",
    *(f"cost_{name}_usd" for name in PRICING_NAMES),
    "facts",
)


class EvalInputError(ValueError):
    """A conversation a policy could not take: which one, where, and what was wrong."""

    def __init__(self, conversation: str, place: str, problem: str) -> None:
        super().__init__(f"{conversation}, {place}: {problem}")
        self.conversation = conversation
        self.place = place
        self.problem = problem


@dataclass(frozen=True)
class EvalConversation:
    """One recorded session to replay. ``places`` names each message for error messages
    (a file's line numbers); by default ``message <i>``."""

    id: str
    corpus: str
    messages: Sequence[Mapping[str, Any]]
    places: Sequence[str] | None = None

    def place(self, index: int) -> str:
        if self.places is not None and index < len(self.places):
            return self.places[index]
        return f"message {index}"


@dataclass(frozen=True)
class EvalSettings:
    """What is measured: the windows (input tokens), the fact rule, the search depth."""

    windows: tuple[int, ...] = DEFAULT_WINDOWS
    rule: FactRule = field(default_factory=FactRule)
    search_limit: int = SEARCH_LIMIT
    # Record what each request's view held, for the runs of contextfold policies (the
    # inspector page: `contextfold eval --html`).
    inspect: bool = False

    def __post_init__(self) -> None:
        windows = tuple(self.windows)
        if not windows:
            raise ValueError("windows is empty: give at least one window size in tokens")
        for window in windows:
            if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
                raise ValueError(f"a window is a positive whole number of tokens, got {window!r}")
        object.__setattr__(self, "windows", windows)
        if isinstance(self.search_limit, bool) or not isinstance(self.search_limit, int):
            raise ValueError(f"search_limit must be a whole number, got {self.search_limit!r}")
        if self.search_limit < 1:
            raise ValueError(f"search_limit must be at least 1, got {self.search_limit}")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request of a run. ``message_index`` is the assistant message it precedes (None
    for the request after the last message); ``outcomes`` one code per fact of its step."""

    message_index: int | None
    tokens: int
    cached_tokens: int
    refused: bool
    over_budget: bool
    outcomes: str
    costs: tuple[float, ...] = ()  # USD of its input under each of `PRICINGS`, in order
    # The summary requests the policy made for this request (input and output), and their
    # USD under each of `PRICINGS`: apart from ``costs``, which price the view alone.
    summary_requests: int = 0
    summary_costs: tuple[float, ...] = ()

    def to_row(self) -> list[Any]:
        return [
            self.message_index,
            self.tokens,
            self.cached_tokens,
            self.refused,
            self.over_budget,
            *(round(cost, 8) for cost in self.costs),
            self.outcomes,
        ]


@dataclass
class Run:
    """One policy over one conversation in one window."""

    corpus: str
    conversation: str
    policy: str
    window: int
    offers_search: bool
    requests: list[RequestRecord] = field(default_factory=list)
    # What each request's view held (contextfold policies, with ``EvalSettings.inspect``).
    inspection: Inspection | None = None
    trigger: int | None = None  # the compaction trigger of its last request (contextfold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "conversation": self.conversation,
            "policy": self.policy,
            "window": self.window,
            "offers_search": self.offers_search,
            "requests": [record.to_row() for record in self.requests],
        }


@dataclass
class Totals:
    """One policy over one corpus in one window, summed over its conversations."""

    corpus: str
    policy: str
    label: str
    window: int
    sessions: int = 0
    requests: int = 0
    refused: int = 0
    over_budget: int = 0
    tokens_sent: int = 0
    tokens_cached: int = 0
    # Tokens of the requests that had a previous view to share a prefix with.
    tokens_after_first: int = 0
    offers_search: bool = False
    far: dict[str, int] = field(default_factory=dict)  # outcome code -> facts
    near: dict[str, int] = field(default_factory=dict)
    costs: list[float] = field(default_factory=lambda: [0.0] * len(PRICINGS))  # USD, input
    # Summary requests (a summarizing policy's model calls), input and output: in `costs`
    # too, and here apart.
    summary_requests: int = 0
    summary_costs: list[float] = field(default_factory=lambda: [0.0] * len(PRICINGS))
    # The requests every policy of the report answered (`add_answered`): tokens and USD on
    # the same requests for every policy, so a policy that refuses (and sends nothing) is
    # not counted cheaper for it.
    answered_requests: int = 0
    answered_tokens: int = 0
    answered_costs: list[float] = field(default_factory=lambda: [0.0] * len(PRICINGS))

    def add(self, run: Run, steps: Mapping[int, Step]) -> None:
        self.sessions += 1
        self.offers_search = self.offers_search or run.offers_search
        first = True
        for record in run.requests:
            self.requests += 1
            if record.refused:
                self.refused += 1
            else:
                self.tokens_sent += record.tokens
                self.tokens_cached += record.cached_tokens
                if not first:
                    self.tokens_after_first += record.tokens
                first = False
                self.over_budget += record.over_budget
                for position, cost in enumerate(record.costs):
                    self.costs[position] += cost
            self.summary_requests += record.summary_requests
            for position, cost in enumerate(record.summary_costs):
                self.costs[position] += cost
                self.summary_costs[position] += cost
            if record.message_index is None:
                continue
            for fact, code in zip(steps[record.message_index].facts, record.outcomes, strict=True):
                tally = self.near if fact.near else self.far
                tally[code] = tally.get(code, 0) + 1

    def add_answered(self, run: Run, answered: Sequence[bool]) -> None:
        """Count ``run``'s requests that every compared policy answered (``answered``: one
        flag per request, in order; see `answered_by_all`): their tokens, and their USD with
        any summary request made for them."""
        if len(answered) != len(run.requests):
            raise ValueError(
                f"{len(answered)} flags for {len(run.requests)} requests: give one per request"
            )
        for record, every in zip(run.requests, answered, strict=True):
            if not every:
                continue
            self.answered_requests += 1
            self.answered_tokens += record.tokens
            for position, cost in enumerate(record.costs):
                self.answered_costs[position] += cost
            for position, cost in enumerate(record.summary_costs):
                self.answered_costs[position] += cost

    def answered_cost(self, pricing: str) -> float | None:
        """USD of the requests every compared policy answered, under the pricing named."""
        if pricing not in PRICING_NAMES:
            return None
        return self.answered_costs[PRICING_NAMES.index(pricing)]

    def facts(self, scope: str) -> int:
        return sum(self._tally(scope).values())

    def count(self, scope: str, category: str) -> int:
        """Facts of ``scope`` ("far" or "near") in ``category`` (see `scoring.CATEGORIES`)."""
        return sum(
            n for code, n in self._tally(scope).items() if Outcome(code).category == category
        )

    def share(self, scope: str, category: str) -> float | None:
        total = self.facts(scope)
        return self.count(scope, category) / total if total else None

    def count_outcome(self, scope: str, outcome: Outcome) -> int:
        return self._tally(scope).get(outcome.value, 0)

    def cost(self, pricing: str) -> float | None:
        """USD of the input sent (and of any summary request, input and output), under the
        pricing named (see `PRICING_NAMES`)."""
        if pricing not in PRICING_NAMES:
            return None
        return self.costs[PRICING_NAMES.index(pricing)]

    def summary_cost(self, pricing: str) -> float | None:
        """USD of the summary requests alone (part of `cost`), under the pricing named."""
        if pricing not in PRICING_NAMES:
            return None
        return self.summary_costs[PRICING_NAMES.index(pricing)]

    @property
    def cache_share(self) -> float | None:
        return self.tokens_cached / self.tokens_after_first if self.tokens_after_first else None

    def _tally(self, scope: str) -> dict[str, int]:
        if scope not in ("far", "near"):
            raise ValueError(f"scope is 'far' or 'near', got {scope!r}")
        return self.far if scope == "far" else self.near


@dataclass
class EvalReport:
    """Everything the eval measured: per request (``runs``) and per policy (``totals``)."""

    settings: EvalSettings
    policies: list[Policy]
    conversations: list[EvalConversation]
    steps: dict[tuple[str, str], list[Step]]  # (corpus, conversation id) -> its steps
    runs: list[Run]
    totals: list[Totals]

    @property
    def corpora(self) -> list[str]:
        return list(dict.fromkeys(conv.corpus for conv in self.conversations))

    def totals_for(self, corpus: str, window: int) -> list[Totals]:
        return [t for t in self.totals if t.corpus == corpus and t.window == window]

    def corpus_summary(self, corpus: str) -> dict[str, int]:
        convs = [c for c in self.conversations if c.corpus == corpus]
        steps = [s for c in convs for s in self.steps[(c.corpus, c.id)]]
        facts = [f for s in steps for f in s.facts]
        return {
            "conversations": len(convs),
            "messages": sum(len(c.messages) for c in convs),
            "requests": len(steps) + len(convs),
            "far_facts": sum(not f.near for f in facts),
            "near_facts": sum(f.near for f in facts),
        }


ProgressCallback = Callable[[int, int], None]


async def evaluate_async(
    conversations: Sequence[EvalConversation],
    policies: Sequence[Policy],
    settings: EvalSettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> EvalReport:
    """Replay every conversation under every policy in every window; see the module.

    Raises `EvalInputError` naming the conversation and the message a policy refused to
    take (contextfold validates every message), ValueError for an empty list of policies or
    conversations. ``on_progress(done, total)`` hears of every finished run.
    """
    settings = settings or EvalSettings()
    if not policies:
        raise ValueError("no policies to evaluate: give at least one")
    if not conversations:
        raise ValueError("no conversations to evaluate: give at least one")
    keys = [policy.key for policy in policies]
    if len(set(keys)) != len(keys):
        raise ValueError(f"two policies share a key: {', '.join(keys)}; give each its own")
    counter = ExactCounter("o200k_base")
    steps: dict[tuple[str, str], list[Step]] = {}
    runs: list[Run] = []
    totals = {
        (conv.corpus, policy.key, window): Totals(conv.corpus, policy.key, policy.label, window)
        for conv in conversations
        for window in settings.windows
        for policy in policies
    }
    total_runs = len(conversations) * len(policies) * len(settings.windows)
    for conv in conversations:
        conv_steps = find_steps(conv.messages, settings.rule)
        steps[(conv.corpus, conv.id)] = conv_steps
        by_index = {step.message_index: step for step in conv_steps}
        # Shared by the conversation's runs: most messages are sent as they are by them all.
        shared = _Shared(ContentCounts(counter), TextCache())
        for window in settings.windows:
            window_runs: list[Run] = []
            for policy in policies:
                run = await _replay(conv, by_index, policy, window, shared, settings)
                runs.append(run)
                window_runs.append(run)
                totals[(conv.corpus, policy.key, window)].add(run, by_index)
                if on_progress is not None:
                    on_progress(len(runs), total_runs)
            answered = answered_by_all(window_runs)
            for run in window_runs:
                totals[(conv.corpus, run.policy, window)].add_answered(run, answered)
    return EvalReport(
        settings=settings,
        policies=list(policies),
        conversations=list(conversations),
        steps=steps,
        runs=runs,
        totals=list(totals.values()),
    )


def evaluate(
    conversations: Sequence[EvalConversation],
    policies: Sequence[Policy],
    settings: EvalSettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> EvalReport:
    """`evaluate_async` from synchronous code (not from inside a running event loop)."""
    results: list[EvalReport] = []

    async def run() -> None:
        results.append(
            await evaluate_async(conversations, policies, settings, on_progress=on_progress)
        )

    asyncio.run(run())
    return results[0]


def answered_by_all(runs: Sequence[Run]) -> list[bool]:
    """Per request of one conversation in one window: whether every run (one per policy)
    answered it. Every run of a conversation makes the same requests, in the same order."""
    if not runs:
        return []
    lengths = {len(run.requests) for run in runs}
    if len(lengths) != 1:
        raise ValueError(f"runs of one conversation made different numbers of requests: {lengths}")
    return [
        not any(run.requests[position].refused for run in runs)
        for position in range(len(runs[0].requests))
    ]


@dataclass(frozen=True)
class _Shared:
    """What the runs of one conversation share: counts by content, texts by message."""

    counts: ContentCounts
    texts: TextCache


async def _replay(
    conv: EvalConversation,
    steps: Mapping[int, Step],
    policy: Policy,
    window: int,
    shared: _Shared,
    settings: EvalSettings,
) -> Run:
    counts = ExactCounts(shared.counts)
    session = policy.start(window, counts)
    run = Run(conv.corpus, conv.id, policy.key, window, bool(session.offers_search))
    scorer = _Scorer(session, counts, shared.texts, window, settings.search_limit)
    context = getattr(session, "context", None)
    recorder = None
    if settings.inspect and callable(getattr(context, "_inspected_state", None)):
        recorder = ViewRecorder(context._inspected_state())  # type: ignore[union-attr]
    admitted: list[int] = []  # messages admitted before each request
    for index, message in enumerate(conv.messages):
        step = steps.get(index)
        if step is not None:
            run.requests.append(await scorer.request(step))
            admitted.append(index)
            if recorder is not None:
                recorder.after_request(len(run.requests))
        try:
            if not isinstance(message, Mapping):
                raise ValueError(f"a message must be an object, got {type(message).__name__}")
            await session.add(message if type(message) is dict else dict(message))
        except MessageValidationError as error:
            problem = f"field '{error.field}': {error.problem}. {error.fix}"
            raise EvalInputError(conv.id, conv.place(index), problem) from None
        except (ValueError, TypeError) as error:
            raise EvalInputError(conv.id, conv.place(index), str(error)) from None
    run.requests.append(await scorer.request(None))
    admitted.append(len(conv.messages))
    if recorder is not None:
        recorder.after_request(len(run.requests))
        state = context._inspected_state()  # type: ignore[union-attr]
        run.inspection = inspect_views(state.history, recorder.passes, admitted)
        report = state.last_report
        run.trigger = report.trigger if report is not None else None
    return run


class _Scorer:
    """Measures and scores the requests of one run, in order."""

    def __init__(
        self,
        session: PolicySession,
        counts: ExactCounts,
        texts: TextCache,
        window: int,
        search_limit: int,
    ) -> None:
        self._session = session
        self._counts = counts
        self._texts = texts
        self._window = window
        self._search_limit = search_limit
        self._previous: list[Mapping[str, Any]] = []
        self._cumulative: list[int] = [0]  # running token totals of the previous view
        self._priced: PricedRequest | None = None  # the previous request, for its cache

    async def request(self, step: Step | None) -> RequestRecord:
        facts = step.facts if step is not None else ()
        index = step.message_index if step is not None else None
        try:
            view = await self._session.request()
        except Refusal:
            self._previous, self._cumulative = [], [0]  # nothing sent: nothing cached next
            self._priced = None
            nothing = (0.0,) * len(PRICINGS)
            made, summary_costs = self._summary_requests()  # made before the refusal: billed
            return RequestRecord(
                index,
                0,
                0,
                True,
                False,
                Outcome.REFUSED.value * len(facts),
                nothing,
                made,
                summary_costs,
            )
        messages = list(view.messages)
        shared = _common_prefix(self._previous, messages)
        # The shared prefix's tokens are the previous view's; only the rest is counted.
        cumulative = self._cumulative[: shared + 1]
        total = cumulative[-1]
        for message in messages[shared:]:
            total += self._counts(message)
            cumulative.append(total)
        cached = cumulative[shared]
        tokens = total + self._counts.overhead
        self._previous, self._cumulative = messages, cumulative
        priced = PricedRequest(tokens, cached)
        costs = tuple(request_cost(p, priced, self._priced).usd for p in PRICINGS)
        self._priced = priced
        outcomes = [score_fact(fact, view, self._texts) for fact in facts]
        if step is not None and self._session.offers_search:
            outcomes = await self._searched(step, outcomes)
        made, summary_costs = self._summary_requests()
        return RequestRecord(
            index,
            tokens,
            cached,
            False,
            tokens > self._window,
            "".join(outcome.value for outcome in outcomes),
            costs,
            made,
            summary_costs,
        )

    def _summary_requests(self) -> tuple[int, tuple[float, ...]]:
        """The summary requests the session made since the last request, priced each on
        its own (a transcript request shares no prefix with the conversation's)."""
        take = getattr(self._session, "summary_requests", None)
        made = take() if callable(take) else []
        costs = [0.0] * len(PRICINGS)
        for request in made:
            for position, prices in enumerate(PRICINGS):
                costs[position] += request_cost(prices, request, None).usd
        return len(made), tuple(costs)

    async def _searched(self, step: Step, outcomes: list[Outcome]) -> list[Outcome]:
        """Lost facts a search with the step's own words finds (none without a task)."""
        if not step.task_prompt.strip():
            return outcomes
        for position, (fact, outcome) in enumerate(zip(step.facts, outcomes, strict=True)):
            if outcome is not Outcome.LOST:
                continue
            query = search_query(step.task_prompt, fact.value)
            hits = await self._session.search(query, self._search_limit)
            if hits and found_by_search(fact, hits[: self._search_limit]):
                outcomes[position] = Outcome.SEARCH
        return outcomes


def _common_prefix(previous: Sequence[Any], current: Sequence[Any]) -> int:
    """Leading messages ``current`` shares with ``previous`` (C-level list comparisons: the
    usual case, the whole previous view repeated, is one of them)."""
    length = min(len(previous), len(current))
    if previous[:length] == current[:length]:
        return length
    low, high = 0, length  # the first ``low`` agree; the first difference is before ``high``
    while high - low > 1:
        middle = (low + high) // 2
        if previous[low:middle] == current[low:middle]:
            low = middle
        else:
            high = middle
    return low
