"""The negotiated measured-request path: the provider counts the whole request.

Context side first (a counting callable standing in for the orchestrator, as the reference's
own contract tests do), then real kernel sessions with ``loop-fold`` and ``provider-scripted``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.llm_errors import ContextLengthError
from amplifier_core.message_models import ChatRequest, ChatResponse
from amplifier_core.models import HookResult, ToolResult

from contextfold import ContextFold
from contextfold.amplifier.orchestrator import (
    EVENT_MEASURED_REQUEST,
    EVENT_OVERFLOW_RETRY,
    FIT_OUTPUT_RECOUNTS,
    _tool_spec,
)
from contextfold.amplifier.scripted_provider import ScriptedProvider
from contextfold.measured import (
    MEASUREMENT_UNAVAILABLE,
    NOT_NEEDED,
    PROTECTED_FLOOR,
    REDUCED_OUTPUT,
    TARGET_REACHED,
)
from contextfold.tokens import ExactCounter
from support import human, prose, reply, tool_round


def decision(count: int | None, *, estimated: int | None = None, limit: int = 10_000) -> dict:
    """A provider's budget decision for a request it counted as ``count`` tokens."""
    return {
        "estimated_input_tokens": (count or 0) if estimated is None else estimated,
        "input_limit_tokens": limit,
        "measurement": None
        if count is None
        else {"kind": "provider_count", "source": "test.count", "input_tokens": count},
    }


class Counter:
    """An orchestrator's count_view: the context's own count of the view plus a fixed
    overhead (the system prompt and tool schemas the context never sees)."""

    def __init__(self, context: ContextFold, overhead: int, *, limit: int = 10_000) -> None:
        self.context = context
        self.overhead = overhead
        self.limit = limit
        self.views: list[list[dict[str, Any]]] = []
        self.counts: list[int] = []

    async def __call__(self, view: list[dict[str, Any]]) -> dict[str, Any]:
        self.views.append(view)
        count = sum(self.context.counter.count_message(m) for m in view) + self.overhead
        self.counts.append(count)
        return {
            "dispatch": ("request", len(self.views)),
            "budget_decision": decision(count, limit=self.limit),
        }


def fold(on_event: Any = None, **settings: Any) -> ContextFold:
    base = {
        "max_tokens": 6_000,
        "token_meter": "actual",
        "token_counter": "exact",
        "compact_threshold": 0.8,
        "target_usage": 0.5,
        "protected_recent": 0.1,
        "protected_tool_results": 1,
        "compaction_notice_enabled": False,
    }
    return ContextFold({**base, **settings}, on_event=on_event)


async def filled(context: ContextFold, rounds: int = 8, chars: int = 1_600) -> ContextFold:
    await context.add_message(human("Research the harbor lanterns, please."))
    for n in range(rounds):
        for message in tool_round(n, result_chars=chars):
            await context.add_message(message)
    await context.add_message(reply("Working on it."))
    await context.add_message(human("Now write the summary."))
    return context


async def sticky(context: ContextFold) -> tuple[Any, ...]:
    sticky = context._state.sticky
    return (
        frozenset(sticky.state.removed_units),
        frozenset(sticky.state.truncated),
        sticky.notice_cost,
    )


async def test_small_request_is_not_needed_with_one_count_and_no_transaction() -> None:
    context = await filled(fold(), rounds=1)
    count = Counter(context, overhead=300)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    assert result["outcome"] == NOT_NEEDED
    assert result["count_calls"] == len(count.views) == 1
    assert result["transaction"] is None
    assert result["base_view"] is count.views[0]
    assert result["dispatch"] == ("request", 1)
    assert result["measured_before"] == result["measured_after"] == count.counts[0]


async def test_overhead_the_context_never_sees_triggers_and_the_target_is_reached() -> None:
    context = await filled(fold())
    legacy = await context.get_messages_for_request()
    assert context.last_report is not None and not context.last_report.compacted
    own = sum(context.counter.count_message(m) for m in legacy)
    # Tool schemas and a system prompt of this size put the real request over the trigger.
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    before = await sticky(context)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    assert result["outcome"] == TARGET_REACHED
    assert result["measured_before"] == count.counts[0] > result["trigger"]
    assert result["measured_after"] == count.counts[-1]
    # The ladder reaches the target; the identifier ledger listing what it took out takes
    # a share of the room left, as on the estimate path.
    ledger = [m for m in result["base_view"] if (m.get("metadata") or {}).get("ledger")]
    assert ledger
    ledger_tokens = sum(context.counter.count_message(m) for m in ledger)
    assert result["measured_after"] - ledger_tokens <= result["target"]
    assert result["base_view"] is count.views[-1]
    assert result["dispatch"] == ("request", len(count.views))
    # Bounded: the original count plus at most one per rung.
    assert 2 <= result["count_calls"] == len(count.views) <= 1 + len(context._planner.ladder)
    # Staged, not applied: the sticky state moves only on commit.
    assert await sticky(context) == before
    assert await result["transaction"].commit() is True
    after = await sticky(context)
    assert after != before
    assert context.last_report is not None and context.last_report.compacted_by == "trigger"
    # The next request starts from the committed view.
    view = await context.get_messages_for_request()
    assert len(view) == len(result["base_view"])


async def test_rollback_leaves_sticky_state_as_it_was_and_is_idempotent() -> None:
    context = await filled(fold())
    await context.get_messages_for_request()
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    before = await sticky(context)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    transaction = result["transaction"]
    transaction.rollback()
    transaction.rollback()
    assert await transaction.commit() is False
    assert await sticky(context) == before


async def test_commit_is_idempotent_and_a_late_rollback_changes_nothing() -> None:
    context = await filled(fold())
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    transaction = result["transaction"]
    assert await transaction.commit() is True
    committed = await sticky(context)
    transaction.rollback()
    assert await transaction.commit() is True
    assert await sticky(context) == committed


async def test_cancellation_between_offer_and_commit_rolls_back() -> None:
    context = await filled(fold())
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    before = await sticky(context)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    dispatched = asyncio.Event()

    async def dispatch() -> None:
        try:
            await dispatched.wait()  # the orchestrator is cancelled before it dispatches
            await result["transaction"].commit()
        except asyncio.CancelledError:
            result["transaction"].rollback()
            raise

    task = asyncio.create_task(dispatch())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await result["transaction"].commit() is False
    assert await sticky(context) == before


async def test_a_cancelled_commit_predicate_applies_nothing() -> None:
    context = await filled(fold())
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    before = await sticky(context)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    assert await result["transaction"].commit(is_cancelled=lambda: True) is False
    assert await sticky(context) == before


async def test_cancellation_inside_count_view_propagates_with_nothing_staged() -> None:
    context = await filled(fold())
    before = await sticky(context)

    async def cancelled(_view: list[dict[str, Any]]) -> dict[str, Any]:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=cancelled
        )
    assert await sticky(context) == before


async def test_commit_after_another_request_moved_the_state_applies_nothing() -> None:
    context = await filled(fold())
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    await context.get_messages_for_request(token_budget=own // 2, hard_fit=True)
    moved = await sticky(context)
    assert await result["transaction"].commit() is False
    assert await sticky(context) == moved


async def test_protected_floor_is_reported_not_called_target_success() -> None:
    context = fold(max_tokens=2_000)
    await context.add_message(human("only a protected prompt " + prose(1, 400)))
    calls = 0

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"dispatch": calls, "budget_decision": decision(1_900)}

    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count_view
    )
    assert result["outcome"] == PROTECTED_FLOOR
    assert result["count_calls"] == calls == 1  # no rung changed anything: nothing recounted
    assert result["transaction"] is None


async def test_unavailable_first_count_falls_back_to_the_legacy_meter() -> None:
    context = await filled(fold())
    views: list[Any] = []

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        views.append(view)
        return {"dispatch": len(views), "budget_decision": None}

    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count_view
    )
    assert result["outcome"] == MEASUREMENT_UNAVAILABLE
    assert result["count_calls"] == len(views) == 2  # the offer, then the legacy view
    assert result["base_view"] is views[-1]
    assert result["transaction"] is not None


async def test_estimate_meter_and_non_counting_provider_take_the_legacy_path() -> None:
    for context, provider in (
        (await filled(fold(token_meter="estimate")), None),
        (await filled(fold()), object()),  # a provider that does not advertise counting
    ):
        views: list[Any] = []

        async def count_view(view: list[dict[str, Any]], views: list[Any] = views) -> dict:
            views.append(view)
            return {"dispatch": 1, "budget_decision": decision(100)}

        result = await context.get_measured_request_view(
            provider=provider, retain_contents=[], count_view=count_view
        )
        assert result["outcome"] == MEASUREMENT_UNAVAILABLE
        assert result["count_calls"] == len(views) == 1
        assert result["base_view"] == await context.get_messages_for_request(provider=provider)


async def test_legacy_fallback_rollback_restores_the_state_it_replaced() -> None:
    context = await filled(fold(token_meter="estimate", max_tokens=3_000))
    before = await sticky(context)

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        return {"dispatch": 1, "budget_decision": None}

    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count_view
    )
    assert await sticky(context) != before  # the legacy meter commits as it always has
    result["transaction"].rollback()
    assert await sticky(context) == before


async def test_known_hard_oversize_without_measurement_fails_closed() -> None:
    context = await filled(fold())

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        return {"dispatch": 1, "budget_decision": decision(None, estimated=10_001)}

    with pytest.raises(ContextLengthError, match="cannot fit protected content"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view
        )


async def test_unavailable_recount_returns_the_last_counted_view_with_nothing_staged() -> None:
    context = await filled(fold())
    views: list[Any] = []

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        views.append(view)
        return {
            "dispatch": len(views),
            "budget_decision": decision(5_500) if len(views) == 1 else None,
        }

    before = await sticky(context)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count_view
    )
    assert result["outcome"] == MEASUREMENT_UNAVAILABLE
    assert result["base_view"] is views[0]
    assert result["count_calls"] == 2
    assert result["transaction"] is None
    assert await sticky(context) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("estimated_input_tokens", True),
        ("estimated_input_tokens", -1),
        ("estimated_input_tokens", None),
        ("input_limit_tokens", "1000"),
        ("input_limit_tokens", 2.5),
    ],
)
async def test_malformed_hard_safety_fields_are_contract_errors(field: str, value: Any) -> None:
    context = await filled(fold(), rounds=1)

    async def count_view(_view: list[dict[str, Any]]) -> dict[str, Any]:
        bad = decision(100)
        bad[field] = value
        return {"dispatch": 1, "budget_decision": bad}

    with pytest.raises(TypeError, match="estimated_input_tokens and"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view
        )


async def test_count_view_returning_a_non_envelope_is_a_contract_error() -> None:
    context = await filled(fold(), rounds=1)

    async def count_view(_view: list[dict[str, Any]]) -> Any:
        return 1234

    with pytest.raises(TypeError, match="count_view must return a mapping"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view
        )


async def hard_over_setup() -> tuple[ContextFold, Counter]:
    """A request whose protected floor stays over the provider's hard limit."""
    context = fold(max_tokens=20_000)
    await context.add_message(human("a long protected prompt " + prose(2, 8_000)))
    count = Counter(context, overhead=200, limit=1_500)
    return context, count


async def test_fit_output_result_is_reduced_output_and_counts_its_calls() -> None:
    context, count = await hard_over_setup()
    seen: list[tuple[Any, Any]] = []

    async def fit_output(view: list[dict[str, Any]], attempt: dict[str, Any]) -> dict:
        seen.append((view, attempt))
        size = attempt["budget_decision"]["measurement"]["input_tokens"]
        return {
            "dispatch": "smaller output cap",
            "budget_decision": decision(size, limit=size + 10),
            "count_calls": 3,
        }

    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count, fit_output=fit_output
    )
    assert result["outcome"] == REDUCED_OUTPUT
    assert seen and seen[0][0] is count.views[-1]
    assert result["dispatch"] == "smaller output cap"
    assert result["count_calls"] == len(count.views) + 3


async def test_fit_output_none_keeps_the_fail_closed_error() -> None:
    context, count = await hard_over_setup()
    before = await sticky(context)

    async def fit_output(view: list[dict[str, Any]], attempt: dict[str, Any]) -> None:
        return None

    with pytest.raises(ContextLengthError, match="no output fit"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count, fit_output=fit_output
        )
    assert await sticky(context) == before


async def test_fit_output_still_over_the_limit_is_a_contract_error() -> None:
    context, count = await hard_over_setup()

    async def fit_output(view: list[dict[str, Any]], attempt: dict[str, Any]) -> dict:
        return {"dispatch": 1, "budget_decision": decision(5_000, limit=10), "count_calls": 1}

    with pytest.raises(TypeError, match="fit_output must return"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count, fit_output=fit_output
        )


async def test_without_fit_output_a_hard_oversize_fails_closed() -> None:
    context, count = await hard_over_setup()
    with pytest.raises(ContextLengthError):
        await context.get_measured_request_view(provider=None, retain_contents=[], count_view=count)


# -- real kernel sessions: loop-fold, context-fold, provider-scripted ---------------------


class CatalogTool:
    """One of many mounted tools with a sizeable schema (a catalog query), as agents with
    large toolsets carry: its schema is sent with every request; the script never calls it."""

    def __init__(self, index: int) -> None:
        self.index = index

    @property
    def name(self) -> str:
        return f"catalog_{self.index}"

    @property
    def description(self) -> str:
        return f"Query catalog section {self.index}: " + prose(self.index, 160)

    @property
    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                f"field_{k}": {"type": "string", "description": prose(self.index * 7 + k, 70)}
                for k in range(3)
            },
            "required": ["field_0"],
        }

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        return ToolResult(success=True, output=f"catalog {self.index}: nothing found")


def session_plan(
    *,
    steps: int,
    context: dict[str, Any],
    provider: dict[str, Any],
    result_chars: int = 1_500,
) -> dict[str, Any]:
    script = {"steps": steps, "tool": "lookup", "argument": "topic", "final_text": "Done."}
    return {
        "session": {
            "orchestrator": {"module": "loop-fold", "config": {}},
            "context": {"module": "context-fold", "config": context},
        },
        "providers": [{"module": "provider-scripted", "config": {"script": script, **provider}}],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": result_chars}}],
        "hooks": [],
    }


async def run_session(
    plan: dict[str, Any], *, catalog_tools: int = 0, provider: ScriptedProvider | None = None
) -> tuple[str, ScriptedProvider, list[tuple[str, dict[str, Any]]]]:
    session = AmplifierSession(plan)
    await session.initialize()
    events: list[tuple[str, dict[str, Any]]] = []

    async def record(event: str, data: dict[str, Any]) -> HookResult:
        events.append((event, dict(data)))
        return HookResult()

    for event in (EVENT_MEASURED_REQUEST, EVENT_OVERFLOW_RETRY):
        session.coordinator.hooks.register(event, record, priority=100, name=f"rec-{event}")
    try:
        for index in range(catalog_tools):
            tool = CatalogTool(index)
            await session.coordinator.mount("tools", tool, name=tool.name)
        if provider is not None:
            await session.coordinator.mount("providers", provider, name="scripted")
        answer = await session.execute("Research the lanterns, one topic at a time.")
        return answer, session.coordinator.get("providers")["scripted"], events
    finally:
        await session.cleanup()


def chat(records: list[Any]) -> list[Any]:
    return [r for r in records if r.purpose == "chat"]


SMALL_MODEL = {"context_window": 16_000, "max_output_tokens": 2_000}
FOLD = {
    "token_meter": "actual",
    "token_counter": "exact",
    "compaction_notice_enabled": False,
    "protected_tool_results": 1,
}


@pytest.mark.slow
async def test_tool_schemas_the_message_budget_misses_overflow_and_the_measured_path_fits() -> None:
    schemas = ExactCounter("o200k_base").count_tools(
        [_tool_spec(CatalogTool(i)).model_dump(exclude_none=True) for i in range(40)]
    )
    assert 2_500 < schemas < 8_000  # a few thousand tokens of schemas on every request

    # The message-only budget: the estimate meter counts the messages the context holds.
    fold_ = {**FOLD, "compact_threshold": 0.95, "protected_recent": 0.05}
    legacy_answer, legacy, legacy_events = await run_session(
        session_plan(steps=40, context={**fold_, "token_meter": "estimate"}, provider=SMALL_MODEL),
        catalog_tools=40,
    )
    refused = [r for r in chat(legacy.records) if r.overflowed]
    assert refused, "the message-only budget should have let a request overflow"
    assert [d["budget_source"] for e, d in legacy_events if e == EVENT_OVERFLOW_RETRY]
    assert legacy.count_calls == 0
    assert not [e for e, _ in legacy_events if e == EVENT_MEASURED_REQUEST]

    answer, measured, events = await run_session(
        session_plan(steps=40, context=fold_, provider=SMALL_MODEL), catalog_tools=40
    )
    assert answer == legacy_answer == "Done."
    assert not [r for r in chat(measured.records) if r.overflowed]
    assert not [e for e, _ in events if e == EVENT_OVERFLOW_RETRY]
    outcomes = [d for e, d in events if e == EVENT_MEASURED_REQUEST]
    assert len(outcomes) == len(chat(measured.records))
    # Trigger and target are fractions of the provider's own limit (the count covers the
    # schemas): most requests need nothing, and a pass reports what it reached.
    kinds = {d["outcome"] for d in outcomes}
    assert NOT_NEEDED in kinds and kinds <= {NOT_NEEDED, TARGET_REACHED, PROTECTED_FLOOR}
    # No compaction storm: a pass is the exception, not every request.
    assert sum(d["outcome"] != NOT_NEEDED for d in outcomes) <= len(outcomes) // 4
    # Count calls per request: the original plus at most one per rung.
    assert all(1 <= d["count_calls"] <= 1 + 8 for d in outcomes)
    assert measured.count_calls == sum(d["count_calls"] for d in outcomes)
    # Every dispatched request is the one the provider counted: its size is what it billed.
    for record, outcome in zip(chat(measured.records), outcomes, strict=True):
        assert record.request_tokens == outcome["measured_after"]


async def test_provider_without_counting_keeps_the_plain_request_path() -> None:
    answer, provider, events = await run_session(
        session_plan(steps=3, context=FOLD, provider={"count_requests": False})
    )
    assert answer == "Done."
    assert provider.count_calls == 0
    assert not events


async def test_estimate_meter_registers_no_capability_and_the_loop_uses_the_plain_path() -> None:
    plan = session_plan(steps=3, context={**FOLD, "token_meter": "estimate"}, provider={})
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        assert session.coordinator.get_capability("context.measured_request_view") is None
    finally:
        await session.cleanup()
    answer, provider, events = await run_session(plan)
    assert answer == "Done."
    assert provider.count_calls == 0 and not events


async def test_a_protected_prompt_over_the_limit_is_dispatched_with_a_reduced_output_cap() -> None:
    model = {"context_window": 16_000, "max_output_tokens": 8_000}  # input limit 8,000
    plan = session_plan(steps=0, context=FOLD, provider=model)
    session = AmplifierSession(plan)
    await session.initialize()
    events: list[dict[str, Any]] = []

    async def record(event: str, data: dict[str, Any]) -> HookResult:
        events.append(dict(data))
        return HookResult()

    session.coordinator.hooks.register(EVENT_MEASURED_REQUEST, record, name="rec-measured")
    try:
        # About 10,000 tokens of prompt, which no rung may touch: only a smaller output
        # reserve (a larger input allowance) lets it through.
        answer = await session.execute("Read this: " + prose(5, 52_000))
        provider = session.coordinator.get("providers")["scripted"]
    finally:
        await session.cleanup()
    assert answer == "Done."
    assert [e["outcome"] for e in events] == [REDUCED_OUTPUT]
    assert events[0]["max_output_tokens"] < 8_000
    (record_,) = chat(provider.records)
    assert not record_.overflowed and 8_000 < record_.request_tokens <= record_.window
    assert events[0]["count_calls"] <= 1 + 8 + FIT_OUTPUT_RECOUNTS


async def test_a_prompt_no_output_cap_can_fit_fails_closed() -> None:
    model = {"context_window": 16_000, "max_output_tokens": 8_000}
    plan = session_plan(steps=0, context=FOLD, provider=model)
    session = AmplifierSession(plan)
    await session.initialize()
    retries: list[dict[str, Any]] = []

    async def record(event: str, data: dict[str, Any]) -> HookResult:
        retries.append(dict(data))
        return HookResult()

    session.coordinator.hooks.register(EVENT_OVERFLOW_RETRY, record, name="rec-retry")
    try:
        with pytest.raises(Exception, match="ContextLengthError"):
            await session.execute("Read this: " + prose(6, 90_000))
        provider = session.coordinator.get("providers")["scripted"]
        assert not chat(provider.records)  # nothing over the window was ever sent
        assert not retries  # the context's own refusal is final: no refit retry
        assert provider.count_calls <= 1 + 8 + FIT_OUTPUT_RECOUNTS
        assert await session.coordinator.get("context").get_messages()
    finally:
        await session.cleanup()


class LimitOnlyProvider(ScriptedProvider):
    """A provider whose overflow error names only its limit, not what it measured (as many
    vendors word it): the loop cannot know by how much the context under-counted."""

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        try:
            return await super().complete(request, **kwargs)
        except ContextLengthError as error:
            raise ContextLengthError(
                f"prompt is too long, limit {error.limit} tokens",  # type: ignore[attr-defined]
                provider="scripted",
                retryable=False,
            ) from None


BILLS_DOUBLE = {
    "model": "house-model-no-public-tokenizer",
    "context_window": 24_000,
    "max_output_tokens": 2_000,
    "usage_ratio": 2.0,
    "count_requests": False,
}


@pytest.mark.parametrize("limit_only", [False, True])
async def test_a_provider_billing_twice_the_estimate_overflows_once_then_finishes(
    limit_only: bool,
) -> None:
    context = {"token_counter": "heuristic", "compaction_notice_enabled": False}
    plan = session_plan(steps=40, context=context, provider=BILLS_DOUBLE, result_chars=3_000)
    provider = LimitOnlyProvider(plan["providers"][0]["config"]) if limit_only else None
    answer, used, events = await run_session(plan, provider=provider)
    assert answer == "Done."
    records = chat(used.records)
    first = next(i for i, r in enumerate(records) if r.overflowed)
    assert not [r for r in records[first + 1 :] if r.overflowed]
    retries = [d for e, d in events if e == EVENT_OVERFLOW_RETRY]
    assert [d["budget_source"] for d in retries] == [
        "error_doubled" if limit_only else "error_scaled"
    ]


async def test_commit_reports_the_pass_with_the_provider_count_and_emits_its_events() -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    async def on_event(event: str, data: dict[str, Any]) -> None:
        events.append((event, data))

    context = await filled(fold(on_event=on_event))
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    events.clear()
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    assert not [e for e, _ in events if e == "context:compaction"]  # staged, not applied
    await result["transaction"].commit()
    assert [e for e, _ in events if e == "context:compaction"]
    report = context.last_report
    assert report is not None and report.compacted and report.size_source == "provider_count"
    assert (report.tokens_before, report.tokens_after) == (
        result["measured_before"],
        result["measured_after"],
    )


# -- issue 18, item 5: the measured budget is min(provider input limit, max_tokens) ----------


async def test_a_count_over_max_tokens_that_no_rung_can_lower_fails_closed() -> None:
    # 20,000 tokens of tool schemas and max_tokens 6,000: the counted request cannot get under
    # the cap, and a smaller output reserve does not move max_tokens. It used to be returned
    # for dispatch as a protected floor of 20,000-odd tokens.
    context = fold(max_tokens=6_000)
    await context.add_message(human("hi"))
    count = Counter(context, overhead=20_000, limit=190_000)
    fits: list[Any] = []

    async def fit_output(view: list[dict[str, Any]], attempt: dict[str, Any]) -> None:
        fits.append(attempt)  # never asked: the provider's limit is not what binds

    before = await sticky(context)
    with pytest.raises(ContextLengthError, match="over max_tokens=6,000") as raised:
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count, fit_output=fit_output
        )
    assert raised.value.budget == 6_000 and raised.value.required_tokens > 20_000
    assert not fits and await sticky(context) == before


async def test_a_count_under_max_tokens_after_the_rungs_is_dispatched() -> None:
    # The same cap with schemas that leave room: the rungs bring the request under it.
    context = await filled(fold(max_tokens=6_000), rounds=10)
    count = Counter(context, overhead=2_000, limit=190_000)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    assert result["measured_before"] > 6_000 >= result["measured_after"]
    assert result["outcome"] in (TARGET_REACHED, PROTECTED_FLOOR)


async def test_the_providers_own_count_over_its_limit_is_refused_whatever_its_estimate() -> None:
    # The provider estimates 900 tokens (under its limit of 1,000) but counts 1,500.
    context = await filled(fold(), rounds=1)

    async def count_view(_view: list[dict[str, Any]]) -> dict[str, Any]:
        return {"dispatch": 1, "budget_decision": decision(1_500, estimated=900, limit=1_000)}

    with pytest.raises(ContextLengthError, match="counts 1,500 input tokens over its hard limit"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view
        )

    # With an output fit, the orchestrator's smaller output cap is asked for; an answer whose
    # own count is still over its limit is no fit either.
    async def still_over(view: list[dict[str, Any]], attempt: dict[str, Any]) -> dict:
        return {
            "dispatch": 2,
            "budget_decision": decision(1_500, estimated=900, limit=1_200),
            "count_calls": 1,
        }

    with pytest.raises(ContextLengthError, match="no output fit"):
        await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view, fit_output=still_over
        )

    async def fits(view: list[dict[str, Any]], attempt: dict[str, Any]) -> dict:
        return {"dispatch": 3, "budget_decision": decision(1_500, limit=1_600), "count_calls": 1}

    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count_view, fit_output=fits
    )
    assert (result["outcome"], result["dispatch"]) == (REDUCED_OUTPUT, 3)


async def test_a_session_whose_schemas_alone_are_over_max_tokens_sends_nothing() -> None:
    # Under loop-fold and provider-scripted (window 200,000): about 20,000 tokens of tool
    # schemas against max_tokens 6,000. Nothing is dispatched over the cap; the session ends
    # with the context's own ContextLengthError.
    tools = 300
    schemas = ExactCounter("o200k_base").count_tools(
        [_tool_spec(CatalogTool(i)).model_dump(exclude_none=True) for i in range(tools)]
    )
    assert schemas > 15_000
    plan = session_plan(
        steps=3, context={**FOLD, "max_tokens": 6_000}, provider={"max_output_tokens": 8_000}
    )
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        for index in range(tools):
            tool = CatalogTool(index)
            await session.coordinator.mount("tools", tool, name=tool.name)
        with pytest.raises(Exception, match="over max_tokens=6,000"):
            await session.execute("Research the lanterns, one topic at a time.")
        provider = session.coordinator.get("providers")["scripted"]
        assert provider.count_calls >= 1 and not chat(provider.records)
    finally:
        await session.cleanup()


# -- issue 18, item 12: a rollback that lands while commit() waits for the lock --------------


async def test_a_rollback_while_commit_waits_for_the_lock_wins_and_nothing_is_applied() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    context = await filled(fold(on_event=lambda e, d: events.append((e, d))))
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    transaction = result["transaction"]
    assert transaction is not None
    before = await sticky(context)
    events.clear()

    # Another request holds the context's lock while its count is under way.
    counting, release = asyncio.Event(), asyncio.Event()

    async def slow_count(_view: list[dict[str, Any]]) -> dict[str, Any]:
        counting.set()
        await release.wait()
        return {"dispatch": "other", "budget_decision": decision(100)}

    other = asyncio.create_task(
        context.get_measured_request_view(provider=None, retain_contents=[], count_view=slow_count)
    )
    await counting.wait()
    commit = asyncio.create_task(transaction.commit())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not commit.done()  # waiting for the lock
    transaction.rollback()  # the dispatch was abandoned meanwhile
    release.set()
    assert await commit is False
    await other
    assert await sticky(context) == before  # rollback won: nothing applied...
    assert not [e for e, _ in events if e == "context:compaction"]  # ...nor reported
    assert await transaction.commit() is False


async def test_a_rollback_after_the_commit_took_the_lock_changes_nothing() -> None:
    pending: list[Any] = []  # the transaction, once there is one
    rolled_back: list[bool] = []

    async def on_event(event: str, data: dict[str, Any]) -> None:
        # The commit's own events are emitted after it applied: a rollback there is late.
        if event == "context:compaction" and pending and not rolled_back:
            pending[0].rollback()
            rolled_back.append(True)

    context = await filled(fold(on_event=on_event))
    own = sum(context.counter.count_message(m) for m in await context.get_messages_for_request())
    count = Counter(context, overhead=context.last_report.trigger - own + 500)
    result = await context.get_measured_request_view(
        provider=None, retain_contents=[], count_view=count
    )
    transaction = result["transaction"]
    pending.append(transaction)
    assert await transaction.commit() is True
    assert rolled_back
    committed = await sticky(context)
    assert committed != (frozenset(), frozenset(), 0)
    view = await context.get_messages_for_request()
    assert len(view) == len(result["base_view"])  # the committed view stands
