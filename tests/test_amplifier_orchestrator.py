"""Whole agent sessions in the real amplifier-core kernel: loop-fold + context-fold +
provider-scripted + tool-doc-lookup, all resolved through the ``amplifier.modules`` entry points."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.llm_errors import (
    AuthenticationError,
    ContextLengthError,
    ProviderUnavailableError,
    RateLimitError,
)
from amplifier_core.message_models import ChatRequest, ChatResponse
from amplifier_core.models import HookResult
from amplifier_core.testing import MockContextManager
from amplifier_core.validation import OrchestratorValidator

from contextfold import REPORT, ContextFold
from contextfold.amplifier.doc_tool import DocLookupTool, render_document
from contextfold.amplifier.orchestrator import (
    EVENT_MAX_ITERATIONS,
    EVENT_MEASURED_REQUEST,
    EVENT_OVERFLOW_RETRY,
    FoldLoop,
    LoopConfig,
    _budget_from_error,
)
from contextfold.amplifier.scripted_provider import EXHAUSTED_TEXT, ScriptedProvider

WATCHED = (
    "prompt:submit",
    "provider:request",
    "provider:response",
    "provider:error",
    "provider:retry",
    "llm:request",
    "llm:response",
    "tool:pre",
    "tool:post",
    "tool:error",
    "orchestrator:complete",
    EVENT_OVERFLOW_RETRY,
    EVENT_MAX_ITERATIONS,
    REPORT,
)


def lookup(topic: str) -> dict[str, Any]:
    return {"name": "lookup", "arguments": {"topic": topic}}


def mount_plan(
    script: Any,
    *,
    provider: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    result_chars: int = 1_500,
) -> dict[str, Any]:
    return {
        "session": {
            "orchestrator": {"module": "loop-fold", "config": loop or {}},
            "context": {"module": "context-fold", "config": context or {}},
        },
        "providers": [
            {"module": "provider-scripted", "config": {"script": script, **(provider or {})}}
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": result_chars}}],
        "hooks": [],
    }


class Recorder:
    """Every watched event the kernel dispatched, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, event: str, data: dict[str, Any]) -> HookResult:
        self.events.append((event, dict(data)))
        return HookResult()

    def names(self, *only: str) -> list[str]:
        return [e for e, _ in self.events if not only or e in only]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [d for e, d in self.events if e == name]


@asynccontextmanager
async def open_session(plan: dict[str, Any]) -> AsyncIterator[tuple[AmplifierSession, Recorder]]:
    session = AmplifierSession(plan)
    await session.initialize()
    recorder = Recorder()
    for event in WATCHED:
        # Late priority: the recorder sees what tests' own hooks let through.
        session.coordinator.hooks.register(event, recorder, priority=100, name=f"rec-{event}")
    try:
        yield session, recorder
    finally:
        await session.cleanup()


def parts(session: AmplifierSession) -> tuple[Any, ScriptedProvider]:
    return session.coordinator.get("context"), session.coordinator.get("providers")["scripted"]


def hook(
    session: AmplifierSession,
    event: str,
    handler: Callable[[str, dict[str, Any]], Awaitable[HookResult]],
) -> None:
    session.coordinator.hooks.register(event, handler, priority=10, name=f"test-{event}")


def assert_tool_groups_intact(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered by the tool messages right after it, in order."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") or []
        if not calls:
            continue
        following = messages[i + 1 : i + 1 + len(calls)]
        assert [m["role"] for m in following] == ["tool"] * len(calls), messages
        assert [m["tool_call_id"] for m in following] == [c["id"] for c in calls]


# -- the whole session ---------------------------------------------------------------------


async def test_whole_session_runs_in_the_real_kernel() -> None:
    plan = mount_plan(
        {"steps": 3, "final_text": "Here is what I found."},
        loop={"system_prompt": "You answer from looked-up documents."},
    )
    async with open_session(plan) as (session, recorder):
        answer = await session.execute("Research three topics.")
        context, provider = parts(session)
        messages = await context.get_messages()
        contributed = await session.coordinator.collect_contributions("observability.events")

    assert answer == "Here is what I found."
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "tool"] * 3 + [
        "assistant"
    ]
    assert messages[1]["content"] == "Research three topics."
    assert messages[1]["metadata"]["source"] == "user"
    assert messages[2]["tool_calls"] == [
        {"id": "call_0001", "tool": "lookup", "arguments": {"topic": "topic 1"}}
    ]
    assert messages[3]["content"].startswith("# Topic 1")
    assert_tool_groups_intact(messages)

    # Four model calls; nothing was compacted in a 200k window, so each request's cached
    # prefix is exactly the whole previous request.
    assert len(provider.records) == 4
    assert [r.message_count for r in provider.records] == [2, 4, 6, 8]
    for before, after in zip(provider.records, provider.records[1:], strict=False):
        assert after.cache_read_tokens == before.request_tokens
        assert not after.overflowed

    per_call = ["provider:request", "llm:request", "llm:response", "provider:response"]
    tool = ["tool:pre", "tool:post"]
    assert recorder.names(*per_call, *tool, "prompt:submit", "orchestrator:complete") == (
        ["prompt:submit"] + (per_call + tool) * 3 + per_call + ["orchestrator:complete"]
    )
    assert recorder.of("orchestrator:complete")[0]["status"] == "success"
    assert recorder.of("tool:post")[0]["tool_result"]["success"] is True
    assert [EVENT_OVERFLOW_RETRY, EVENT_MAX_ITERATIONS, EVENT_MEASURED_REQUEST] in contributed


async def test_second_execute_continues_the_same_conversation() -> None:
    plan = mount_plan([{"tool_calls": [lookup("tides")]}, {"text": "One."}, {"text": "Two."}])
    async with open_session(plan) as (session, _):
        assert await session.execute("First question.") == "One."
        assert await session.execute("Second question.") == "Two."
        context, provider = parts(session)
        messages = await context.get_messages()
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert provider.records[2].cache_read_tokens == provider.records[1].request_tokens


# -- hooks -------------------------------------------------------------------------------


async def test_tool_pre_deny_skips_the_tool_and_records_an_error_result() -> None:
    async def deny_topic_2(event: str, data: dict[str, Any]) -> HookResult:
        if data["tool_input"].get("topic") == "topic 2":
            return HookResult(action="deny", reason="topic 2 is off limits")
        return HookResult()

    async with open_session(mount_plan({"steps": 3})) as (session, recorder):
        hook(session, "tool:pre", deny_topic_2)
        assert await session.execute("Go.") == "Done."
        context, _ = parts(session)
        messages = await context.get_messages()

    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert results["call_0002"] == "Tool 'lookup' was not run: topic 2 is off limits"
    assert results["call_0001"].startswith("# Topic 1")
    assert results["call_0003"].startswith("# Topic 3")
    # The denied call never executed: no tool:post (nor tool:error) for it.
    assert [d["tool_call_id"] for d in recorder.of("tool:post")] == ["call_0001", "call_0003"]
    assert recorder.of("tool:error") == []
    assert_tool_groups_intact(messages)


async def test_tool_pre_modify_changes_the_input_the_tool_gets() -> None:
    async def redirect(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="modify", data={**data, "tool_input": {"topic": "ocean tides"}})

    async with open_session(mount_plan({"steps": 1})) as (session, recorder):
        hook(session, "tool:pre", redirect)
        await session.execute("Go.")
        context, _ = parts(session)
        messages = await context.get_messages()

    assert messages[1]["tool_calls"][0]["arguments"] == {"topic": "topic 1"}  # what the model asked
    assert messages[2]["content"].startswith("# Ocean Tides")  # what the tool was given
    assert recorder.of("tool:post")[0]["tool_input"] == {"topic": "ocean tides"}


async def test_tool_pre_injection_lands_after_the_whole_tool_group() -> None:
    async def remind(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(
            action="inject_context",
            context_injection=f"Cite {data['tool_input']['topic']}.",
            context_injection_role="user",
        )

    script = [{"tool_calls": [lookup("a"), lookup("b")]}, {"text": "Cited."}]
    async with open_session(mount_plan(script)) as (session, _):
        hook(session, "tool:pre", remind)
        assert await session.execute("Go.") == "Cited."
        context, provider = parts(session)
        messages = await context.get_messages()

    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
    ]
    injected = messages[4:6]
    assert [m["content"] for m in injected] == ["Cite a.", "Cite b."]
    for message in injected:
        assert message["metadata"]["source"] == "hook"
        assert message["metadata"]["event"] == "tool:pre"
    assert_tool_groups_intact(messages)
    assert provider.records[1].message_count == 6  # the model saw the injections


def roles_and_sources(messages: list[dict[str, Any]]) -> list[str]:
    return [
        f"{m['role']}:{m['metadata']['source']}"
        if m["role"] in ("user", "system") and "metadata" in m
        else m["role"]
        for m in messages
    ]


@pytest.mark.parametrize("injections", ["deferred", "immediate"])
async def test_injection_mode_decides_where_a_tool_post_note_is_stored(injections: str) -> None:
    script = [{"tool_calls": [lookup("a"), lookup("b")]}, {"text": "Noted."}]
    plan = mount_plan(script, loop={"injections": injections})
    plan["hooks"] = [{"module": "hooks-context-inject", "config": {"chars": 60}}]
    async with open_session(plan) as (session, _):
        assert await session.execute("Go.") == "Noted."
        context, _ = parts(session)
        messages = await context.get_messages()

    if injections == "deferred":  # after the whole group: calls and results stay together
        expected = ["user:user", "assistant", "tool", "tool", "system:hook", "system:hook"]
        assert_tool_groups_intact(messages)
    else:  # the moment the hook returns, as Amplifier's kernel and loop-basic store it;
        # tool:post fires before the loop stores the result, so each note precedes its result
        expected = ["user:user", "assistant", "system:hook", "tool", "system:hook", "tool"]
    assert roles_and_sources(messages) == [*expected, "assistant"]
    notes = [m for m in messages if m["role"] == "system"]
    assert all(m["metadata"]["event"] == "tool:post" for m in notes)
    assert [len(m["content"]) for m in notes] == [60, 60]
    if injections == "immediate":
        # Stored by the kernel itself (its provenance keys), not by the loop.
        assert all(m["metadata"].get("persisted") is True for m in notes)


async def test_immediate_injection_without_a_kernel_is_stored_at_once_too() -> None:
    context = ContextFold({"token_counter": "heuristic"})
    provider = ScriptedProvider({"script": [{"tool_calls": [lookup("a")]}, {"text": "Ok."}]})

    class Hooks:
        async def emit(self, event: str, data: dict[str, Any]) -> HookResult:
            if event == "tool:post":
                return HookResult(action="inject_context", context_injection="Note.")
            return HookResult()

    loop = FoldLoop({"injections": "immediate"})
    tools = {"lookup": DocLookupTool(result_chars=300)}
    assert await loop.execute("Go.", context, {"scripted": provider}, tools, Hooks()) == "Ok."
    roles = [m["role"] for m in await context.get_messages()]
    # tool:post fires before the loop stores the result: the note precedes it.
    assert roles == ["user", "assistant", "system", "tool", "assistant"]


async def test_ephemeral_injection_rides_one_request_and_is_not_stored() -> None:
    sent = 0

    async def todo_reminder(event: str, data: dict[str, Any]) -> HookResult:
        nonlocal sent
        sent += 1
        if sent > 1:
            return HookResult()
        return HookResult(
            action="inject_context", context_injection="Todo: 1 open.", ephemeral=True
        )

    async with open_session(mount_plan({"steps": 1})) as (session, _):
        hook(session, "provider:request", todo_reminder)
        await session.execute("Go.")
        context, provider = parts(session)
        messages = await context.get_messages()

    assert all("Todo" not in str(m["content"]) for m in messages)
    assert [r.message_count for r in provider.records] == [2, 3]  # 1 stored + 1 ephemeral, then 3


async def test_a_failing_hook_is_isolated_by_the_kernel() -> None:
    async def broken(event: str, data: dict[str, Any]) -> HookResult:
        raise RuntimeError("hook bug")

    async with open_session(mount_plan({"steps": 2})) as (session, recorder):
        hook(session, "tool:pre", broken)
        hook(session, "tool:post", broken)
        # The kernel logs the handler's error and goes on with the next handler and the
        # default action, so the loop runs as if the hook were absent.
        assert await session.execute("Go.") == "Done."
        context, _ = parts(session)
        messages = await context.get_messages()

    assert len(recorder.of("tool:pre")) == 2 and len(recorder.of("tool:post")) == 2
    assert all(m["content"].startswith("# Topic") for m in messages if m["role"] == "tool")


async def test_prompt_submit_deny_and_modify() -> None:
    async def gate(event: str, data: dict[str, Any]) -> HookResult:
        if "secret" in data["prompt"]:
            return HookResult(action="deny", reason="no secrets")
        return HookResult(action="modify", data={**data, "prompt": data["prompt"].upper()})

    async with open_session(mount_plan([{"text": "Fine."}])) as (session, _):
        hook(session, "prompt:submit", gate)
        assert await session.execute("tell me the secret") == "Prompt denied: no secrets"
        context, provider = parts(session)
        assert await context.get_messages() == []
        assert provider.records == []
        assert await session.execute("hello") == "Fine."
        messages = await context.get_messages()
    assert messages[0]["content"] == "HELLO"


async def test_ask_user_without_an_approval_system_falls_back_to_its_default() -> None:
    async def ask(event: str, data: dict[str, Any]) -> HookResult:
        return HookResult(action="ask_user", approval_prompt="Run lookup?", approval_default="deny")

    async with open_session(mount_plan({"steps": 1})) as (session, recorder):
        hook(session, "tool:pre", ask)
        await session.execute("Go.")
        context, _ = parts(session)
        messages = await context.get_messages()
    assert messages[2]["content"].startswith("Tool 'lookup' was not run")
    assert recorder.of("tool:post") == []


# -- limits and odd replies ---------------------------------------------------------------


async def test_max_iterations_ends_the_loop_with_a_clear_message() -> None:
    async with open_session(mount_plan({"steps": 5}, loop={"max_iterations": 2})) as (
        session,
        recorder,
    ):
        answer = await session.execute("Go.")
        context, provider = parts(session)
        messages = await context.get_messages()
    assert "max_iterations" in answer and "2 model calls" in answer
    assert len(provider.records) == 2
    assert recorder.of(EVENT_MAX_ITERATIONS)[0]["max_iterations"] == 2
    assert recorder.of("orchestrator:complete")[0]["status"] == "max_iterations"
    assert_tool_groups_intact(messages)


async def test_unknown_tool_becomes_an_error_result() -> None:
    script = [{"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]}, {"text": "Sorry."}]
    async with open_session(mount_plan(script)) as (session, recorder):
        assert await session.execute("Go.") == "Sorry."
        context, _ = parts(session)
        messages = await context.get_messages()
    assert messages[2]["metadata"]["timestamp"]  # stamped at admission, as the reference does
    assert {k: v for k, v in messages[2].items() if k != "metadata"} == {
        "role": "tool",
        "tool_call_id": "call_0001",
        "content": "Unknown tool 'search'. Available tools: lookup.",
    }
    assert recorder.of("tool:error")[0]["error"]["type"] == "unknown_tool"


async def test_tool_input_errors_reach_the_model() -> None:
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"subject": "x"}}]},
        {"text": "Oops."},
    ]
    async with open_session(mount_plan(script)) as (session, recorder):
        await session.execute("Go.")
        context, _ = parts(session)
        messages = await context.get_messages()
    assert "needs a 'topic'" in messages[2]["content"]
    assert recorder.of("tool:post")[0]["tool_result"]["success"] is False


async def test_script_exhaustion_ends_the_session_politely() -> None:
    async with open_session(mount_plan([{"tool_calls": [lookup("a")]}])) as (session, _):
        assert await session.execute("Go.") == EXHAUSTED_TEXT


async def test_cancellation_stops_before_the_next_model_call() -> None:
    async with open_session(mount_plan({"steps": 3})) as (session, recorder):

        async def cancel(event: str, data: dict[str, Any]) -> HookResult:
            await session.coordinator.request_cancel()
            return HookResult()

        hook(session, "tool:post", cancel)
        assert await session.execute("Go.") == "Execution cancelled."
        _, provider = parts(session)
    assert len(provider.records) == 1
    assert recorder.of("orchestrator:complete")[0]["status"] == "cancelled"


# -- provider errors ------------------------------------------------------------------------


class FlakyProvider(ScriptedProvider):
    """The scripted provider behind a connection that fails a given number of times first."""

    def __init__(self, failures: list[Exception], **config: Any) -> None:
        super().__init__(config)
        self.failures = list(failures)

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        if self.failures:
            raise self.failures.pop(0)
        return await super().complete(request, **kwargs)


def raised_through_kernel(error: type[Exception], text: str = "") -> Any:
    """The Rust session re-raises an orchestrator's exception as ``RuntimeError("Execution
    failed: <Type>: <message>")`` (verified on amplifier-core 2.0.2): match on that."""
    return pytest.raises(RuntimeError, match=f"Execution failed: {error.__name__}: {text}")


async def swap_provider(session: AmplifierSession, provider: ScriptedProvider) -> None:
    await session.coordinator.mount("providers", provider, name="scripted")


async def test_retryable_errors_are_retried_a_bounded_number_of_times() -> None:
    plan = mount_plan([], loop={"retry_backoff": 0, "provider_retries": 2})
    async with open_session(plan) as (session, recorder):
        flaky = FlakyProvider(
            [RateLimitError("slow down"), ProviderUnavailableError("503")],
            script=[{"text": "Made it."}],
        )
        await swap_provider(session, flaky)
        assert await session.execute("Go.") == "Made it."
        assert [d["attempt"] for d in recorder.of("provider:retry")] == [1, 2]
        assert recorder.of("provider:error") == []

        flaky.failures = [ProviderUnavailableError("503")] * 3
        with raised_through_kernel(ProviderUnavailableError):
            await session.execute("Again.")
    (error,) = recorder.of("provider:error")
    assert error["error_type"] == "ProviderUnavailableError" and error["retryable"] is True


async def test_non_retryable_errors_are_recorded_and_raised() -> None:
    async with open_session(mount_plan([], loop={"retry_backoff": 0})) as (session, recorder):
        await swap_provider(session, FlakyProvider([AuthenticationError("bad key")]))
        with raised_through_kernel(AuthenticationError, "bad key"):
            await session.execute("Go.")
    assert recorder.of("provider:retry") == []
    assert recorder.of("provider:error")[0]["error_type"] == "AuthenticationError"


# -- context overflow -----------------------------------------------------------------------

# The provider's tokenizer counts twice what the context's exact o200k counter sees
# (usage_ratio 2.0; no calibration), so the view the context believes fits overflows the
# provider's 14,000-token window once the conversation has grown: a realistic mismatch.
OVERFLOW_PROVIDER = {"context_window": 16_000, "max_output_tokens": 2_000, "usage_ratio": 2.0}
OVERFLOW_CONTEXT = {"token_counter": "exact"}


async def test_overflow_triggers_one_forced_refit_and_the_retry_succeeds() -> None:
    plan = mount_plan(
        {"steps": 14}, provider=OVERFLOW_PROVIDER, context=OVERFLOW_CONTEXT, result_chars=3_000
    )
    async with open_session(plan) as (session, recorder):
        assert await session.execute("Go.") == "Done."
        context, provider = parts(session)
        history = await context.get_messages()

    rejected = [r for r in provider.records if r.rejected]
    assert len(rejected) == 1
    refused = rejected[0]
    retry = provider.records[refused.index + 1]
    assert not retry.rejected and retry.request_tokens <= retry.window
    assert retry.request_tokens < refused.request_tokens

    (error,) = recorder.of("provider:error")
    assert error["error_type"] == "ContextLengthError" and "limit 14000" in error["error"]
    (refit,) = recorder.of(EVENT_OVERFLOW_RETRY)
    assert refit["hard_fit"] is True
    # The limit came from the error, scaled by how much the provider out-counted the context.
    assert refit["budget_source"] == "error_scaled"
    # The view carried half the tokens the provider counted (less, given the tool specs).
    assert refit["budget"] <= 14_000 * 0.95 / 2
    # History is whole: the refit shaped the view, never the transcript.
    assert len(history) == 1 + 2 * 14 + 1
    assert_tool_groups_intact(history)
    assert all(m["content"].startswith("# Topic") for m in history if m["role"] == "tool")


class SilentUsageProvider(ScriptedProvider):
    """The scripted provider with no usage on ``llm:response`` (some providers report none):
    the context learns how far it under-counts only from an overflow's measured size."""

    async def _emit(self, event: str, data: dict[str, Any]) -> None:
        if event == "llm:response":
            data = {key: value for key, value in data.items() if key != "usage"}
        await super()._emit(event, data)


@pytest.mark.parametrize(("usage_ratio", "source"), [(2.0, "error_learned"), (5.0, "error_scaled")])
async def test_a_calibrating_context_learns_the_overflow_and_the_session_goes_on(
    usage_ratio: float, source: str
) -> None:
    """The default (calibrating) context learns the refused request's measured size as a
    reading. At 2x its estimate now covers it, so the refit uses the provider's limit as it
    stands; at 5x calibration's 3x bound leaves it short, so the limit is scaled by what is
    still uncovered. Either way the task finishes and no later request overflows."""
    provider_config = {**OVERFLOW_PROVIDER, "usage_ratio": usage_ratio}
    plan = mount_plan({"steps": 14}, provider=provider_config, result_chars=3_000)
    async with open_session(plan) as (session, recorder):
        silent = SilentUsageProvider(provider_config | {"script": {"steps": 14}})
        await swap_provider(session, silent)
        assert await session.execute("Go.") == "Done."
        context = session.coordinator.get("context")
        history = await context.get_messages()
    rejected = [r for r in silent.records if r.rejected]
    assert len(rejected) == 1  # the lesson is learned once
    (refit,) = recorder.of(EVENT_OVERFLOW_RETRY)
    assert refit["budget_source"] == source and refit["refit"] == 1
    if source == "error_learned":
        assert refit["budget"] == 14_000
    if usage_ratio <= 3.0:  # within the ratio's bound: learned as a ratio
        assert context.counter.ratio(None) >= usage_ratio * 0.99
    else:  # beyond it, over an exact count: the excess is learned as a fixed part
        assert context.counter.fixed(None) > 0
    assert len(history) == 1 + 2 * 14 + 1
    assert_tool_groups_intact(history)


async def test_a_second_overflow_propagates() -> None:
    # With compaction disabled the refit cannot shrink the view, so the retry overflows too.
    plan = mount_plan(
        {"steps": 14},
        provider=OVERFLOW_PROVIDER,
        context={**OVERFLOW_CONTEXT, "compaction_enabled": False},
        result_chars=3_000,
    )
    async with open_session(plan) as (session, recorder):
        with raised_through_kernel(ContextLengthError, "Request input is .* over the limit 14000"):
            await session.execute("Go.")
        _, provider = parts(session)
    assert [r.rejected for r in provider.records[-2:]] == [True, True]
    assert len(recorder.of(EVENT_OVERFLOW_RETRY)) == 1
    assert len(recorder.of("provider:error")) == 2


async def test_overflow_raise_ends_the_session_like_loop_basic() -> None:
    plan = mount_plan(
        {"steps": 14},
        provider=OVERFLOW_PROVIDER,
        context=OVERFLOW_CONTEXT,
        loop={"overflow": "raise"},
        result_chars=3_000,
    )
    async with open_session(plan) as (session, recorder):
        with raised_through_kernel(ContextLengthError, "Request input is .* over the limit 14000"):
            await session.execute("Go.")
        _, provider = parts(session)
    assert [r.rejected for r in provider.records].count(True) == 1
    assert provider.records[-1].rejected  # no retry after the refusal
    assert recorder.of(EVENT_OVERFLOW_RETRY) == []
    (error,) = recorder.of("provider:error")
    assert error["error_type"] == "ContextLengthError"


async def test_a_second_overflow_keeps_its_type_outside_the_kernel() -> None:
    context = ContextFold({**OVERFLOW_CONTEXT, "compaction_enabled": False})
    provider = ScriptedProvider({"context_window": 1_000, "max_output_tokens": 500})
    with pytest.raises(ContextLengthError) as caught:
        await FoldLoop().execute(
            render_document("tides", 4_000), context, {"scripted": provider}, {}, None
        )
    assert caught.value.limit == 500
    assert [r.rejected for r in provider.records] == [True, True]


async def test_overflow_without_a_number_halves_the_last_budget() -> None:
    async with open_session(mount_plan([])) as (session, recorder):
        flaky = FlakyProvider([ContextLengthError("prompt is too long")], script=[{"text": "Ok."}])
        await swap_provider(session, flaky)
        assert await session.execute("Go.") == "Ok."
    (refit,) = recorder.of(EVENT_OVERFLOW_RETRY)
    first, second = recorder.of(REPORT)
    assert refit["budget_source"] == "half_last_budget"
    assert refit["budget"] == first["budget"] // 2
    assert (second["budget"], second["hard_fit"]) == (refit["budget"], True)


async def test_overflow_refit_without_hard_fit_support_passes_only_the_budget() -> None:
    # amplifier-core's own test context knows nothing of hard_fit (nor of last reports).
    context = MockContextManager()
    provider = FlakyProvider([ContextLengthError("too long")], script=[{"text": "Ok."}])
    answer = await FoldLoop().execute("Go.", context, {"scripted": provider}, {}, None)
    assert answer == "Ok."
    calls = context.get_messages_for_request.call_args_list
    assert [c.kwargs for c in calls] == [
        {"provider": provider},
        {"token_budget": (200_000 - 8_192) // 2, "provider": provider},
    ]


@pytest.mark.parametrize(
    ("error", "budget"),
    [
        (ContextLengthError("prompt too long, limit 8000 tokens"), 8000),
        (ContextLengthError("Request exceeds the token limit of 12,000"), 12000),
        (ContextLengthError("This model's maximum context length is 128000 tokens."), 128000),
        (ContextLengthError("prompt is too long: 210000 tokens > 200000 maximum"), 200000),
        (ContextLengthError("too long"), None),
    ],
)
def test_budget_is_read_from_the_error_text(error: ContextLengthError, budget: int | None) -> None:
    assert _budget_from_error(error) == budget


def test_budget_attribute_wins_over_text() -> None:
    error = ContextLengthError("limit 9000")
    error.max_tokens = 5000  # type: ignore[attr-defined]
    assert _budget_from_error(error) == 5000


# -- configuration and the kernel's validator -----------------------------------------------


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"max_iteration": 3}, "unknown config keys ['max_iteration']"),
        ({"max_iterations": 0}, "'max_iterations' must be an integer >= 1"),
        ({"provider_retries": -1}, "'provider_retries' must be an integer >= 0"),
        ({"retry_backoff": 5}, "'retry_backoff' must be a number of seconds"),
        ({"system_prompt": ""}, "'system_prompt' must be a non-empty string"),
        ({"overflow": "retry"}, "'overflow' must be one of ['refit', 'raise'], got 'retry'"),
        ({"injections": None}, "'injections' must be one of ['deferred', 'immediate']"),
    ],
)
def test_bad_loop_config_says_what_is_wrong(config: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        LoopConfig.from_mapping(config)
    assert fragment in str(caught.value)


async def test_unknown_default_provider_is_named() -> None:
    loop = FoldLoop({"default_provider": "openai"})
    with pytest.raises(
        ValueError, match=r"'openai' is not mounted; mounted providers: \['scripted'\]"
    ):
        await loop.execute("hi", SimpleNamespace(), {"scripted": object()}, {}, None)


async def test_kernel_validator_passes_for_the_orchestrator() -> None:
    result = await OrchestratorValidator().validate("contextfold.amplifier.orchestrator")
    failed = [(c.name, c.message) for c in result.checks if not c.passed]
    assert result.passed and failed == [], failed


async def test_many_tool_schemas_never_overflow_even_a_loop_that_cannot_refit() -> None:
    """58 tools whose schemas (about 14,200 tokens) ride on every request of a 16,000-token
    model, under a loop that ends the session on the first overflow as Amplifier's
    ``loop-basic`` does: the context learns the schemas' size from the first two usage
    readings and no request is ever refused."""
    from contextfold.cli.demo import CatalogTool

    plan = mount_plan(
        {"steps": 30},
        provider={"context_window": 16_000, "max_output_tokens": 1_024, "enforce_window": True},
        loop={"overflow": "raise"},
        result_chars=3_000,
    )
    async with open_session(plan) as (session, recorder):
        for index in range(58):
            tool = CatalogTool(index)
            await session.coordinator.mount("tools", tool, name=tool.name)
        assert await session.execute("Go.") == "Done."
        context, provider = parts(session)
        history = await context.get_messages()
    assert not [r for r in provider.records if r.rejected]
    assert recorder.of("provider:error") == []
    assert context.counter.fixed(None) > 12_000  # the schemas, learned as a fixed part
    assert len(history) == 1 + 2 * 30 + 1
    assert_tool_groups_intact(history)
