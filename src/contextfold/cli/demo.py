"""The demo: one long agent task in a small window, run in the real Amplifier kernel.

Every run is a whole ``AmplifierSession`` built from a mount plan: the ``loop-fold``
orchestrator, the ``context-fold`` context module, the offline ``provider-scripted`` model and
the ``tool-doc-lookup`` tool. They differ in the context's config only (`RunSpec`):

- *without compaction*: ``compaction_enabled: false`` and a provider that serves requests over
  its window (``enforce_window: false``) so the size they would have had can be measured;
- *with context-fold*: default settings (the cost planner: compaction when the prompt
  cache's prices make a pass cheapest, `compaction.cost_plan`) and a provider that refuses
  an oversized request exactly like a real one does;
- *server-side clear_tool_uses*: what the provider offers instead: the context sends the whole
  history (``compaction_enabled: false``) and ``provider-scripted`` applies Anthropic's
  ``clear_tool_uses`` at its documented defaults (trigger 100,000 tokens scaled to the
  window, keep 3 tool uses) to every request before it measures, caches and enforces its
  window on it, as the server does (`contextfold.context_editing`);
- *threshold planner*: the defaults with ``planner: threshold``: compaction at the trigger
  down to the target, as the reference module and contextfold's defaults before the cost
  planner did;
- *summarize ladder*: the ladder with the ``summarize`` rung (`SUMMARIZE_LADDER`, the rung's
  settings left at their defaults), compacting late and deep for the prompt cache
  (`CACHE_FRIENDLY_SETTINGS`), and the session's ``provider-scripted`` as summarizer (it
  answers summary requests offline with a deterministic digest, and they are measured like
  any request). After the task every tool result is recalled by its id
  (``context.recall``, what ``tool-context-recall`` returns to a model) and compared with
  what the tool returned.

Every run's cost is computed twice from the provider's records (`run_costs`): with
Anthropic's prices and a five-minute cache, and with OpenAI's (`contextfold.costing`; a
request carrying ``cache_control`` marks, ``--cache-breakpoints``, is priced for Anthropic
as the provider billed it by the breakpoint rules).

Everything reported is measured, not predicted: request sizes, prompt-cache reads and overflow
come from the provider's own records (chat and summary requests apart), compactions from the
``context:compaction`` events, summaries from ``context.summary_stats`` and the
``context:summary`` events, the history from ``context.get_messages()`` after the run.
``bench/bench_demo_ladders.py`` runs the same task under other ladders with `run_session`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from amplifier_core import AmplifierSession
from amplifier_core.llm_errors import ContextLengthError
from amplifier_core.models import HookResult, ToolResult

from contextfold.costing import PricedRequest, billed_cost, request_cost
from contextfold.events import COMPACTION, REPORT, SUMMARY
from contextfold.inspection import Inspection, ViewRecorder, inspect_views
from contextfold.prices import REFERENCE_PRICING, Prices, reference_prices
from contextfold.recall import recall_id

DEFAULT_WINDOW = 16_000
DEFAULT_STEPS = 80
DEFAULT_RESULT_CHARS = 3_000
# A small reply reserve keeps most of a small window for input, as a real 16k model would.
DEFAULT_MAX_OUTPUT_TOKENS = 1_024
MIN_STEPS = 1

TASK = (
    "Research the topics 'topic 1' to 'topic {steps}' with the lookup tool, one lookup per "
    "topic, then say you are done."
)
FINAL_TEXT = "Done: I looked up all {steps} topics."
SYSTEM_PROMPT = (
    "You are a careful research assistant. Use the lookup tool for every topic you are asked "
    "about and keep notes short."
)


# The summarize ladder: summarize ahead of text truncation, drop oldest still the last resort.
# The rung's own settings are its defaults (the summary's size follows the budget).
SUMMARIZE_LADDER: tuple[Any, ...] = (
    "strip_thinking",
    "summarize",
    "truncate_tool_results",
    "drop_oldest",
)

# When the ladder runs, late and deep. A pass that rewrites the view after its head costs the
# prompt cache everything after the first change, however little it removes; a shallow pass
# pays that again a few requests later. So the summarize run compacts only near the budget
# and then deep (to a fifth of it), protecting just the newest exchange, so passes are few
# and the prefix stays byte-identical between them (see bench/bench_demo_ladders.py).
CACHE_FRIENDLY_SETTINGS: dict[str, Any] = {
    "planner": "threshold",  # late and deep by the thresholds below
    "compact_threshold": 0.99,
    "target_usage": 0.2,
    "protected_recent": 0.05,
    "protected_tool_results": 1,
}


class DemoDoesNotFit(Exception):
    """A run stopped because its protected content cannot fit the window, even compacted."""


# The kernel re-raises an orchestrator's exception as a RuntimeError carrying only
# "Execution failed: <type>: <message>", so the type has to be recognised by name.
_DOES_NOT_FIT = ("ContextLengthError", "WindowExceededError")


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs: a task of ``steps`` lookups in a ``window``-token model."""

    window: int = DEFAULT_WINDOW
    steps: int = DEFAULT_STEPS
    result_chars: int = DEFAULT_RESULT_CHARS
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    store: str | None = None  # keep the managed run's session in this durable store
    # With tools (N catalog tools whose schemas ride on every request), the two runs compare
    # the message-only budget with the measured request (the provider counts the whole
    # request, tool schemas included) instead of no compaction with context-fold.
    tools: int = 0
    # A run with ``planner: threshold`` (the defaults before the cost planner; not with tools).
    threshold_planner: bool = True
    summarize: bool = True  # a run with the summarize ladder (not with tools)
    server_editing: bool = True  # a run with the provider's clear_tool_uses (not with tools)
    cache_breakpoints: bool = False  # every context marks Anthropic cache breakpoints


@dataclass(frozen=True)
class RunSpec:
    """One run of the demo's task: what the context is configured with, and the provider."""

    key: str  # the run's name in demo.json ("unmanaged", "managed", "summarize")
    label: str
    context_config: Mapping[str, Any]
    managed: bool = True  # the provider refuses an oversized request, as a real one does
    provider_config: Mapping[str, Any] = field(default_factory=dict)  # beside the demo's own

    @property
    def summarizes(self) -> bool:
        return "summarizer" in self.context_config


def summarize_config(
    *,
    rung: Mapping[str, Any] | None = None,
    ladder: Sequence[Any] | None = None,
    **context_settings: Any,
) -> dict[str, Any]:
    """The context config of a summarize run: the session's provider-scripted summarizes.
    ``rung`` gives the summarize rung settings, ``ladder`` the whole list (``"summarize"``
    where the rung goes), ``context_settings`` further keys (compact_threshold, ...)."""
    summarize: Any = dict(rung) if rung else "summarize"
    strategies = [summarize if item == "summarize" else item for item in ladder or SUMMARIZE_LADDER]
    return {
        "report_events": "every_request",
        "strategies": strategies,
        "summarizer": {"provider": "scripted"},
        **context_settings,
    }


def demo_runs(settings: DemoSettings) -> tuple[RunSpec, ...]:
    """The runs ``contextfold demo`` makes, in order."""
    runs = [
        RunSpec(
            key,
            _label(settings, managed=managed),
            _context_config(settings, managed=managed),
            managed=managed,
        )
        for key, managed in (("unmanaged", False), ("managed", True))
    ]
    if settings.threshold_planner and not settings.tools:
        defaults = _context_config(replace(settings, store=None), managed=True)
        runs.append(RunSpec("threshold", "threshold planner", {**defaults, "planner": "threshold"}))
    if settings.summarize and not settings.tools:
        runs.append(
            RunSpec("summarize", "summarize ladder", summarize_config(**CACHE_FRIENDLY_SETTINGS))
        )
    if settings.server_editing and not settings.tools:
        runs.append(
            RunSpec(
                "clear_tool_uses",
                "server clear_tool_uses",
                {"report_events": "every_request", "compaction_enabled": False},
                provider_config={"context_editing": {"type": "clear_tool_uses"}},
            )
        )
    if settings.cache_breakpoints:
        runs = [
            replace(run, context_config={**run.context_config, "cache_breakpoints": "anthropic"})
            for run in runs
        ]
    return tuple(runs)


def _label(settings: DemoSettings, *, managed: bool) -> str:
    if settings.tools:
        return "measured request" if managed else "message-only budget"
    return "with context-fold" if managed else "without compaction"


@dataclass(frozen=True)
class RequestPoint:
    """One provider request of a run, as the provider measured it."""

    request: int  # 1-based
    tokens: int  # full request size (gross input + cache writes)
    cache_read_tokens: int
    messages: int
    overflowed: bool  # over the provider's input limit
    rejected: bool  # refused by the provider (only when it enforces its window)
    compacted: bool  # context-fold compacted the view it handed to this request
    output_tokens: int = 0
    prefix_tokens: int = 0  # shared with the previous served request from the start
    cache_write_tokens: int = 0  # as the provider billed it
    breakpoints: bool = False  # billed by Anthropic's breakpoint rules (cache_control marks)
    cleared_tool_uses: int = 0  # tool results the provider's context editing cleared
    cost_anthropic_usd: float = 0.0  # this request, with `REFERENCE_PRICING`'s prices
    cost_openai_usd: float = 0.0


@dataclass
class RunSummary:
    """One session of the demo, measured. ``points`` are its chat requests; the summarizer's
    requests (the summarize rung's, on the same provider) are tallied apart."""

    label: str
    managed: bool
    input_limit: int  # the provider's usable input: window minus the output reserve
    points: list[RequestPoint]
    compactions: int
    levels_used: list[int]
    rungs_used: list[str]
    budget: int | None  # context-fold's effective budget (its own estimate tokens)
    trigger: int | None  # where context-fold starts compacting (same units)
    history_messages: int
    expected_messages: int
    missing_tool_results: int  # tool runs whose result is not in the history
    final_text: str
    completed: bool  # the scripted task reached its final answer
    count_calls: int = 0  # whole-request counts the provider made (the measured path)
    key: str = ""  # the run's name in demo.json
    summarizes: bool = False  # the ladder has the summarize rung
    summary_requests: int = 0  # served summary requests, as the provider recorded them
    summary_tokens: int = 0  # their input and output: what summarizing cost
    summary_cache_read_tokens: int = 0  # of their input, what was read from a prompt cache
    summary_aligned: int = 0  # summary requests that repeated the conversation's prompt
    summary_calls: int = 0  # context.summary_stats
    summaries_written: int = 0
    summaries_reused: int = 0
    summary_failures: int = 0
    summary_event_calls: int = 0  # the calls the context:summary events report
    recall_checked: int = 0  # tool results recalled by id after the run (summarize run)
    recall_identical: int = 0  # ... and returned byte-identical to what the tool returned
    # USD of the whole run (chat and summary requests, input and output) per pricing name.
    costs: dict[str, float] = field(default_factory=dict)
    summary_costs: dict[str, float] = field(default_factory=dict)  # the summary requests'

    @property
    def requests(self) -> int:
        return len(self.points)

    @property
    def total_tokens(self) -> int:
        """Everything sent to the provider: chat input, plus summary requests in and out."""
        return self.tokens_sent + self.summary_tokens

    @property
    def largest_request(self) -> int:
        return max((p.tokens for p in self.points), default=0)

    @property
    def tokens_sent(self) -> int:
        return sum(p.tokens for p in self.points if not p.rejected)

    @property
    def cache_read_tokens(self) -> int:
        """Input tokens of served requests that the provider read from its prompt cache."""
        return sum(p.cache_read_tokens for p in self.points if not p.rejected)

    @property
    def uncached_tokens(self) -> int:
        """Input tokens processed afresh: what a prompt cache could not serve. Billed in
        full, where cache reads cost a fraction, so this is the figure to compare."""
        return self.tokens_sent - self.cache_read_tokens

    @property
    def cache_share(self) -> float:
        sent = self.tokens_sent
        return self.cache_read_tokens / sent if sent else 0.0

    @property
    def history_kept(self) -> bool:
        return self.history_messages == self.expected_messages and not self.missing_tool_results

    @property
    def overflowed(self) -> bool:
        return any(p.overflowed for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "requests": self.requests,
            "largest_request": self.largest_request,
            "tokens_sent": self.tokens_sent,
            "total_tokens": self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "uncached_tokens": self.uncached_tokens,
            "cache_share": round(self.cache_share, 4),
            "history_kept": self.history_kept,
            "overflowed": self.overflowed,
            "refused": self.refused,
        }

    @property
    def refused(self) -> int:
        """Requests the provider refused as over its input limit."""
        return sum(1 for p in self.points if p.rejected)


@dataclass
class DemoResult:
    """The demo's runs, in order (`demo_runs`), and the settings they ran with."""

    settings: DemoSettings
    runs: list[RunSummary]
    specs: tuple[RunSpec, ...] = ()
    notes: list[str] = field(default_factory=list)
    # What each request's view held, for the run with context-fold's defaults ("managed").
    inspections: dict[str, Inspection] = field(default_factory=dict, repr=False)

    def run(self, key: str) -> RunSummary | None:
        return next((run for run in self.runs if run.key == key), None)

    @property
    def unmanaged(self) -> RunSummary:
        return self.runs[0]

    @property
    def managed(self) -> RunSummary:
        return self.runs[1]

    @property
    def summarized(self) -> RunSummary | None:
        return self.run("summarize")

    @property
    def server_edited(self) -> RunSummary | None:
        return self.run("clear_tool_uses")

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": asdict(self.settings),
            "runs": {run.key: run.to_dict() for run in self.runs},
        }

    def mount_plans(self) -> dict[str, Any]:
        return {spec.key: mount_plan(self.settings, spec=spec) for spec in self.specs}


def run_costs(
    chat: Sequence[Any], summaries: Sequence[Any] = ()
) -> tuple[list[dict[str, float]], dict[str, float], dict[str, float]]:
    """What a run cost under each reference pricing, from the provider's records: per chat
    request, the run's total (chat and summary requests, input and output), and the summary
    requests' share. A refused request is not billed and leaves the cache as it was; the
    summary requests are their own cache lane, as the provider keeps them, except a
    cache-aligned one (``cache_lane == "conversation"``), priced after the chat request it
    repeats (the conversation's lane, which it leaves as it was)."""
    pricings = dict(zip(REFERENCE_PRICING, reference_prices(), strict=True))
    per_request: list[dict[str, float]] = [{} for _ in chat]
    totals = {name: 0.0 for name in pricings}
    summary_totals = {name: 0.0 for name in pricings}
    own = [r for r in summaries if getattr(r, "cache_lane", "own") != "conversation"]
    aligned = [r for r in summaries if getattr(r, "cache_lane", "own") == "conversation"]
    for name, prices in pricings.items():
        for position, cost in _lane_costs(prices, chat):
            per_request[position][name] = cost
            totals[name] += cost
        for _, cost in _lane_costs(prices, own):
            summary_totals[name] += cost
        for record in aligned:
            before = [r for r in chat if r.index < record.index and not r.rejected]
            summary_totals[name] += _record_cost(
                prices, record, _priced(before[-1]) if before else None
            )
        totals[name] += summary_totals[name]
    return per_request, totals, summary_totals


def _priced(record: Any) -> PricedRequest:
    return PricedRequest(record.request_tokens, record.prefix_tokens)


def _lane_costs(prices: Prices, records: Sequence[Any]) -> list[tuple[int, float]]:
    costs: list[tuple[int, float]] = []
    previous: PricedRequest | None = None
    for position, record in enumerate(records):
        if record.rejected:
            continue
        costs.append((position, _record_cost(prices, record, previous)))
        previous = _priced(record)
    return costs


def _record_cost(prices: Prices, record: Any, previous: PricedRequest | None) -> float:
    """One record's cost, after ``previous`` in its cache lane."""
    if record.cache_rule == "breakpoints" and prices.caching == "explicit":
        # Billed by the breakpoint rules: the provider's own reads and writes stand.
        return billed_cost(
            prices,
            fresh=record.request_tokens - record.cache_read_tokens - record.cache_write_tokens,
            cache_read=record.cache_read_tokens,
            cache_write=record.cache_write_tokens,
            output=record.output_tokens,
        )
    priced = PricedRequest(record.request_tokens, record.prefix_tokens, record.output_tokens)
    return request_cost(prices, priced, previous).usd


def _context_config(settings: DemoSettings, *, managed: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"report_events": "every_request"}
    if settings.tools:
        # The message-only budget (estimate) against the measured request (actual + counts).
        config["token_meter"] = "actual" if managed else "estimate"
    elif not managed:
        config["compaction_enabled"] = False
    if managed and settings.store:
        config["store"] = settings.store
    return config


def mount_plan(
    settings: DemoSettings, *, managed: bool = True, spec: RunSpec | None = None
) -> dict[str, Any]:
    """The Amplifier mount plan of one run (also written to the output folder): ``spec``'s,
    or the demo's run without compaction / with context-fold (``managed``)."""
    if spec is None:
        spec = RunSpec("", "", _context_config(settings, managed=managed), managed=managed)
    managed = spec.managed
    return {
        "session": {"orchestrator": "loop-fold", "context": "context-fold"},
        "orchestrator": {
            # One request per lookup plus the final answer, with room to spare: the cap only
            # guards against a runaway loop.
            "config": {"system_prompt": SYSTEM_PROMPT, "max_iterations": settings.steps + 10}
        },
        # The demo charts every request, so it asks for a report on each.
        "context": {"config": dict(spec.context_config)},
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {
                        "steps": settings.steps,
                        "tool": "lookup",
                        "argument": "topic",
                        "final_text": FINAL_TEXT.format(steps=settings.steps),
                    },
                    "context_window": settings.window,
                    "max_output_tokens": settings.max_output_tokens,
                    # With tools both runs are compacted, and the provider refuses what is over
                    # its limit in both; only the measured run has it count requests.
                    "enforce_window": managed or settings.tools > 0,
                }
                | ({"count_requests": managed} if settings.tools else {})
                | dict(spec.provider_config),
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": settings.result_chars}}]
        # The summarize run gives the model the way back to what it compacted, as a user of
        # the ladder would: its schema rides on every request of that run (and is billed).
        + ([{"module": "tool-context-recall"}] if spec.summarizes else []),
    }


AfterRun = Callable[[Any, Any], Awaitable[None]]


async def run_session(
    settings: DemoSettings,
    spec: RunSpec | None = None,
    *,
    managed: bool = True,
    on_request: Callable[[], None] | None = None,
    after_run: AfterRun | None = None,
    inspections: dict[str, Inspection] | None = None,
) -> RunSummary:
    """Run one session of the demo's task and measure it: ``spec``'s, or the demo's run
    without compaction / with context-fold (``managed``). ``on_request`` fires per model
    request; ``after_run(context, provider)`` is awaited once the task is done, before the
    session closes (the bench resumes the transcript there). With ``inspections``, the views of
    the run with context-fold's defaults are recorded there under its key (the page)."""
    if spec is None:
        spec = demo_runs(settings)[1 if managed else 0]
    session = AmplifierSession(mount_plan(settings, spec=spec))
    compactions: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    summary_events: list[dict[str, Any]] = []
    tool_outputs: dict[str, Any] = {}  # call id -> the output the tool returned
    user_messages = 0

    async def on_compaction(_event: str, data: dict[str, Any]) -> HookResult:
        compactions.append(dict(data))
        return HookResult()

    async def on_report(_event: str, data: dict[str, Any]) -> HookResult:
        reports.append(dict(data))
        return HookResult()

    async def on_summary(_event: str, data: dict[str, Any]) -> HookResult:
        summary_events.append(dict(data))
        return HookResult()

    async def on_tool_post(_event: str, data: dict[str, Any]) -> HookResult:
        result = data.get("tool_result")
        output = result.get("output") if isinstance(result, Mapping) else None
        tool_outputs[str(data.get("tool_call_id"))] = output
        return HookResult()

    async def on_prompt(_event: str, _data: dict[str, Any]) -> HookResult:
        nonlocal user_messages
        user_messages += 1
        return HookResult()

    recorder: ViewRecorder | None = None
    request_messages: list[int] = []  # history length at each chat request

    async def on_provider_request(_event: str, _data: dict[str, Any]) -> HookResult:
        if on_request is not None:
            on_request()
        if recorder is not None:
            # The view of this request was just delivered: note its pass, if it made one.
            request_messages.append(len(recorder.state.history.entries))
            recorder.after_request(len(request_messages))
        return HookResult()

    recalled = (0, 0)
    try:
        await session.initialize()
        provider = _mounted(session, "providers", "scripted")
        _mounted(session, "tools", "lookup")
        for index in range(settings.tools):
            tool = CatalogTool(index)
            await session.coordinator.mount("tools", tool, name=tool.name)
        hooks = session.coordinator.hooks
        hooks.register(COMPACTION, on_compaction, name="contextfold-demo-compaction")
        hooks.register(REPORT, on_report, name="contextfold-demo-report")
        hooks.register(SUMMARY, on_summary, name="contextfold-demo-summary")
        hooks.register("tool:post", on_tool_post, name="contextfold-demo-tools")
        hooks.register("prompt:submit", on_prompt, name="contextfold-demo-prompt")
        hooks.register("llm:request", on_provider_request, name="contextfold-demo-progress")
        inspected = session.coordinator.get("context")
        if inspections is not None and spec.key == "managed":
            recorder = ViewRecorder(inspected._inspected_state())

        try:
            final_text = await session.execute(TASK.format(steps=settings.steps))
        except (ContextLengthError, RuntimeError) as error:
            if isinstance(error, ContextLengthError) or any(
                f"{name}:" in str(error) for name in _DOES_NOT_FIT
            ):
                text = str(error).removeprefix("Execution failed: ")
                raise DemoDoesNotFit(text) from error
            raise
        context = session.coordinator.get("context")
        history = await context.get_messages()
        stats = getattr(context, "summary_stats", None)
        if spec.summarizes:
            recalled = await _recall_every_result(context, history, tool_outputs)
        if after_run is not None:
            await after_run(context, provider)
        if recorder is not None and inspections is not None:
            inspections[spec.key] = inspect_views(
                recorder.state.history, recorder.passes, request_messages
            )
    finally:
        await session.cleanup()

    # Compaction state is sticky: a report after the first compaction shows the folded view
    # as it stands, so "compacted" marks the requests where a pass actually ran.
    compacted_flags = [bool(r.get("compacted")) for r in reports]
    chat = [r for r in provider.records if r.purpose == "chat"]
    summaries = [r for r in provider.records if r.purpose == "summary" and not r.rejected]
    served = [r for r in chat if not r.rejected]
    per_request, costs, summary_costs = run_costs(chat, summaries)
    points = [
        RequestPoint(
            request=i + 1,
            tokens=record.request_tokens,
            cache_read_tokens=record.cache_read_tokens,
            messages=record.message_count,
            overflowed=record.overflowed,
            rejected=record.rejected,
            compacted=compacted_flags[i] if i < len(compacted_flags) else False,
            output_tokens=record.output_tokens,
            prefix_tokens=record.prefix_tokens,
            cache_write_tokens=record.cache_write_tokens,
            breakpoints=record.cache_rule == "breakpoints",
            cleared_tool_uses=record.cleared_tool_uses,
            cost_anthropic_usd=round(per_request[i].get("anthropic", 0.0), 8),
            cost_openai_usd=round(per_request[i].get("openai", 0.0), 8),
        )
        for i, record in enumerate(chat)
    ]
    # Every message the session produced: the system prompt, each user prompt, one assistant
    # message per served request, one tool message per tool run.
    expected = 1 + user_messages + len(served) + len(tool_outputs)
    # And each tool run's result is there under its own call id, not just some message.
    kept_ids = {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
    last = reports[-1] if reports else {}
    return RunSummary(
        label=spec.label,
        managed=spec.managed,
        input_limit=provider.config.window,
        points=points,
        compactions=len(compactions),
        levels_used=sorted({int(c.get("level", 0)) for c in compactions} - {0}),
        rungs_used=sorted({str(rung) for c in compactions for rung in c.get("applied", [])}),
        budget=last.get("budget"),
        trigger=last.get("trigger"),
        history_messages=len(history),
        expected_messages=expected,
        missing_tool_results=len(set(tool_outputs) - kept_ids),
        final_text=final_text,
        completed=final_text == FINAL_TEXT.format(steps=settings.steps),
        count_calls=provider.count_calls,
        key=spec.key,
        summarizes=spec.summarizes,
        summary_requests=len(summaries),
        summary_tokens=sum(r.request_tokens + r.output_tokens for r in summaries),
        summary_cache_read_tokens=sum(r.cache_read_tokens for r in summaries),
        summary_aligned=sum(1 for r in summaries if r.cache_lane == "conversation"),
        summary_calls=stats.calls if stats else 0,
        summaries_written=stats.written if stats else 0,
        summaries_reused=stats.reused if stats else 0,
        summary_failures=stats.failures if stats else 0,
        summary_event_calls=sum(int(e.get("calls", 0)) for e in summary_events),
        recall_checked=recalled[0],
        recall_identical=recalled[1],
        costs={name: round(usd, 6) for name, usd in costs.items()},
        summary_costs={name: round(usd, 6) for name, usd in summary_costs.items()},
    )


async def _recall_every_result(
    context: Any, history: Sequence[Mapping[str, Any]], outputs: Mapping[str, Any]
) -> tuple[int, int]:
    """Recall every tool result by its id, as ``context_recall`` does for a model: how many
    were asked for, and how many came back byte-identical to what the tool returned."""
    checked = identical = 0
    for index, message in enumerate(history):
        if message.get("role") != "tool":
            continue
        checked += 1
        text = await context.recall(recall_id(index))
        if text == outputs.get(str(message.get("tool_call_id"))):
            identical += 1
    return checked, identical


class CatalogTool:
    """One of many mounted tools with a sizeable schema (a catalog query), as agents with large
    toolsets carry: its schema rides on every request; the scripted task never calls it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"catalog_{index}"
        self.description = (
            f"Query section {index} of the product catalog. Matches entries by name, family, "
            "region, price band, supplier and free-text notes; returns each match with its "
            "stock on hand per warehouse, the lead time for a reorder, the supplier's contact, "
            "the last three price changes and any open quality notice. Use it before quoting "
            "a customer, never for entries outside this section."
        )
        fields = {
            "name": "Product name or a prefix of it; case-insensitive.",
            "family": "Product family, as listed in the catalog's table of contents.",
            "region": "Sales region code (EMEA, AMER, APAC) the stock should be counted in.",
            "price_band": "Price band from A (lowest) to F (highest) to restrict matches to.",
            "supplier": "Supplier name or number, when only one supplier's items are wanted.",
            "notes": "Free text matched against the entry's notes and quality notices.",
        }
        self.input_schema = {
            "type": "object",
            "properties": {
                field: {"type": "string", "description": f"{text} (section {index})"}
                for field, text in fields.items()
            },
            "required": ["name"],
        }

    def get_schema(self) -> dict[str, Any]:
        return self.input_schema

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(success=True, output=f"catalog section {self.index}: nothing found")


def _mounted(session: AmplifierSession, mount_point: str, name: str) -> Any:
    """The named module, or a clear error: the kernel only logs a module that failed to load."""
    modules = session.coordinator.get(mount_point) or {}
    if name not in modules:
        raise RuntimeError(
            f"the {mount_point} module {name!r} did not mount (see the log above); "
            "is contextfold installed (uv sync)?"
        )
    return modules[name]


async def run_demo(
    settings: DemoSettings, *, on_request: Callable[[str], None] | None = None
) -> DemoResult:
    """Run the task under each of `demo_runs`, in order. ``on_request(key)`` per model
    request, for progress bars."""

    def progress(key: str) -> Callable[[], None] | None:
        if on_request is None:
            return None
        return lambda: on_request(key)

    specs = demo_runs(settings)
    inspections: dict[str, Inspection] = {}
    runs: list[RunSummary] = []
    notes: list[str] = []
    for spec in specs:
        try:
            runs.append(
                await run_session(
                    settings, spec, on_request=progress(spec.key), inspections=inspections
                )
            )
        except DemoDoesNotFit as error:
            if spec.key != "clear_tool_uses":
                raise
            # The provider's own feature not fitting the window is a finding, not a failure
            # of the demo: said beside the table, without the column.
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            notes.append(f"{spec.label}: the task did not fit the window ({first})")
    ran = {run.key for run in runs}
    return DemoResult(
        settings=settings,
        runs=runs,
        specs=tuple(spec for spec in specs if spec.key in ran),
        notes=notes,
        inspections=inspections,
    )
