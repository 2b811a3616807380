"""Property tests: the DESIGN.md invariants on random conversations, tool groups and budgets.

1. history is append-only and never edited by compaction;
2. a view is a new list;
3. tool calls and results stay in atomic groups (no orphan, no unanswered call before the tail);
4. protected content (system, first/last human prompt, the current turn, the last tool
   results, signed thinking) reaches the model intact;
5. every view fits the budget by a fresh recount, or ContextLengthError is raised and
   nothing is committed, and only when the required core alone exceeds the budget;
and, for conversations with the sequence faults real runs produce (orphan results, results
naming no call, duplicates, unanswered calls, per-turn call ids, injections between calls
and their results, empty messages): admission never raises, and every view is one a
provider accepts.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold, ContextLengthError
from contextfold.messages import NOTICE_SOURCE
from contextfold.repair import synthetic_results
from support import assert_pairing, call_ids_of, result_ids_of, unstamped

THINKING = {"type": "thinking", "thinking": "let me think " * 20, "signature": "c2ln"}


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    shape = draw(st.sampled_from(["amplifier", "openai", "anthropic"]))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys " * draw(st.integers(1, 50))}
    ]
    messages.append(
        {
            "role": "user",
            "content": "task " * draw(st.integers(1, 60)),
            "metadata": {"source": "user"},
        }
    )
    n_steps = draw(st.integers(0, 40))
    call_no = 0
    for _ in range(n_steps):
        step = draw(st.sampled_from(["tools", "tools", "tools", "reply", "human", "hook"]))
        if step == "reply":
            messages.append({"role": "assistant", "content": "ok " * draw(st.integers(0, 400))})
        elif step == "human":
            messages.append(
                {
                    "role": "user",
                    "content": "more " * draw(st.integers(1, 80)),
                    "metadata": {"source": "user"},
                }
            )
        elif step == "hook":
            messages.append(
                {
                    "role": "user",
                    "content": "hook " * draw(st.integers(1, 40)),
                    "metadata": {"source": "hook"},
                }
            )
        else:
            calls = draw(st.integers(1, 3))
            ids = [f"c{call_no + k}" for k in range(calls)]
            call_no += calls
            sizes = [draw(st.integers(0, 6000)) for _ in ids]
            thinking = draw(st.booleans()) and shape == "anthropic"
            if shape == "anthropic":
                content: list[dict[str, Any]] = [dict(THINKING)] if thinking else []
                content += [
                    {"type": "tool_use", "id": i, "name": "f", "input": {"q": i}} for i in ids
                ]
                messages.append({"role": "assistant", "content": content})
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": i, "content": "r" * s}
                            for i, s in zip(ids, sizes, strict=True)
                        ],
                    }
                )
            else:
                if shape == "openai":
                    tool_calls = [
                        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        for i in ids
                    ]
                else:
                    tool_calls = [{"id": i, "tool": "f", "arguments": {}} for i in ids]
                messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
                for k, (i, s) in enumerate(zip(ids, sizes, strict=True)):
                    messages.append({"role": "tool", "tool_call_id": i, "content": "r" * s})
                    if k == 0 and calls > 1 and draw(st.booleans()):
                        messages.append(
                            {
                                "role": "user",
                                "content": "hook between results",
                                "metadata": {"source": "hook"},
                            }
                        )
    return messages


configs = st.fixed_dictionaries(
    {
        "protected_recent": st.sampled_from([0.0, 0.1, 0.3, 0.5]),
        "protected_tool_results": st.integers(0, 6),
        "compact_threshold": st.sampled_from([0.6, 0.92, 1.0]),
        "target_usage": st.sampled_from([0.3, 0.5]),
        "truncate_chars": st.sampled_from([0, 100, 250]),
        "compaction_notice_enabled": st.booleans(),
        "compaction_notice_token_reserve": st.sampled_from([0, 40, 800]),
        "token_counter": st.just("heuristic"),
    }
)


def is_notice(m: dict[str, Any]) -> bool:
    return (m.get("metadata") or {}).get("source") == NOTICE_SOURCE


def check_view(ctx: ContextFold, history: list[dict], view: list[dict], budget: int) -> None:
    # 5. Honest budget: a fresh recount of what is delivered fits, reply priming included.
    recount = sum(ctx.counter.count_message(m) for m in view) + ctx.counter.request_overhead
    assert recount <= budget, (recount, budget)
    assert ctx.last_report.tokens_after == math.ceil(recount * ctx.last_report.ratio)
    # 3. Atomic tool groups.
    assert_pairing(view)
    # Every view message is admitted, a shortened admitted message, or the notice.
    by_ids = {}
    for m in history:
        key = tuple(call_ids_of(m)) or tuple(result_ids_of(m))
        if key:
            by_ids[key] = m
    for m in view:
        if m in history or is_notice(m):
            continue
        key = tuple(call_ids_of(m)) or tuple(result_ids_of(m))
        original = by_ids.get(key) if key else None
        assert original is not None or m["role"] in ("assistant", "user"), m
        assert m["role"] in ("tool", "user", "assistant")
    # 4. Protected content intact.
    for m in history:
        if m["role"] == "system":
            assert m in view
    humans = [m for m in history if (m.get("metadata") or {}).get("source") == "user"]
    if humans:
        assert humans[0] in view and humans[-1] in view
    # The current turn: whole, or a tool result of the newest group shortened to fit, paired
    # and naming its recall id (never a human prompt or a system message).
    if history[-1] not in view:
        last = history[-1]
        ids = result_ids_of(last)
        assert ids, last
        (shown,) = [m for m in view if result_ids_of(m) == ids]
        marker = f'context_recall(\\"r{len(history) - 1}\\", offset='
        assert marker in json.dumps(shown["content"]), shown
    for m in view:
        content = m.get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "thinking":
                    assert block == THINKING
    # The newest call group of the current prompt goes back whole, thinking included.
    group = newest_current_group(history)
    if group:
        assert group[0] in view


def newest_current_group(history: list[dict]) -> list[dict]:
    """The call group whose results the next request sends back: the newest assistant
    message with calls after the last human prompt, unless an assistant reply followed it."""
    for i in range(len(history) - 1, -1, -1):
        message = history[i]
        if (message.get("metadata") or {}).get("source") == "user":
            return []
        if message["role"] == "assistant":
            if not call_ids_of(message):
                return []
            ids = set(call_ids_of(message))
            results = [m for m in history[i + 1 :] if set(result_ids_of(m)) & ids]
            return [message, *results]
    return []


def required_core_cost(ctx: ContextFold, history: list[dict]) -> int:
    """What no view may go without: system prompts, first and last human prompt, the newest
    call group of the current prompt and the last message (counted independently)."""
    humans = [m for m in history if (m.get("metadata") or {}).get("source") == "user"]
    core = [
        m
        for m in history
        if m["role"] == "system" and (m.get("metadata") or {}).get("source") != "hook"
    ]
    core += [m for m in humans[:1] + humans[-1:] if m not in core]
    group = newest_current_group(history)
    core += [m for m in group if m not in core]
    if history and history[-1] not in core:
        core.append(history[-1])
    if group and group[-1] is not history[-1]:
        # Anything after the group needs its missing results answered in the view.
        answered = {i for m in group[1:] for i in result_ids_of(m)}
        core += synthetic_results(group[0], [i for i in call_ids_of(group[0]) if i not in answered])
    return sum(ctx.counter.count_message(m) for m in core) + ctx.counter.request_overhead


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversations(), budget=st.integers(300, 30_000), config=configs)
def test_one_shot_views_keep_every_invariant(history, budget, config) -> None:
    async def run() -> None:
        ctx = ContextFold(config)
        await ctx.set_messages(history)
        try:
            view = await ctx.get_messages_for_request(token_budget=budget)
        except ContextLengthError as err:
            event("required core over budget")
            assert err.required_tokens > budget
            # Refused only when what no request may go without cannot fit.
            assert required_core_cost(ctx, history) > budget * 0.95
            # Nothing committed: a roomy request sees the whole history (a message stored
            # between a call and its results comes after the results).
            roomy = await ctx.get_messages_for_request(token_budget=10_000_000)
            assert not ctx.last_report.compacted and len(roomy) == len(history)
            assert sorted(map(repr, roomy)) == sorted(map(repr, history))
        else:
            event(f"rungs used: {ctx.last_report.applied}")
            check_view(ctx, history, view, budget)
            view.append({"role": "user", "content": "caller edits its copy"})
            again = await ctx.get_messages_for_request(token_budget=budget)
            assert again == view[:-1]  # 2. a new list each time; sticky and stable
        assert await ctx.get_messages() == history  # 1. history untouched

    asyncio.run(run())


async def views_as_asked(
    ctx: ContextFold, history: list[dict[str, Any]], budget: int
) -> AsyncIterator[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    """Admit ``history`` one message at a time, asking for a view where an orchestrator
    would (after each assistant turn and at the end): the messages admitted so far and the
    view, or None where the request raised `ContextLengthError`."""
    admitted: list[dict[str, Any]] = []
    for message in history:
        await ctx.add_message(message)
        admitted.append(message)
        if message["role"] != "assistant" and message is not history[-1]:
            continue
        try:
            view = await ctx.get_messages_for_request(token_budget=budget)
        except ContextLengthError:
            yield admitted, None
            continue
        yield admitted, view


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversations(), budget=st.integers(2_000, 20_000), config=configs)
def test_growing_conversation_views_are_valid_and_prefix_stable(history, budget, config) -> None:
    async def run() -> None:
        ctx = ContextFold(config)
        previous: list[dict] | None = None
        async for admitted, view in views_as_asked(ctx, history, budget):
            if view is None:
                previous = None
                continue
            check_view(ctx, admitted, unstamped(view), budget)
            if previous is not None and not ctx.last_report.compacted:
                assert view[: len(previous)] == previous  # byte-stable prefix between passes
            previous = view
        assert unstamped(await ctx.get_messages()) == history

    asyncio.run(run())


@st.composite
def faulty_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Amplifier/OpenAI-shaped runs with the sequence faults real runs produce."""
    per_turn_ids = draw(st.booleans())  # backends that number calls per response
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys " * 20}]
    messages.append({"role": "user", "content": "task " * 30, "metadata": {"source": "user"}})
    serial = 0
    for _ in range(draw(st.integers(0, 30))):
        step = draw(
            st.sampled_from(
                ["tools", "tools", "tools", "reply", "human", "orphan", "no_id", "empty"]
            )
        )
        if step == "reply":
            messages.append({"role": "assistant", "content": "ok " * draw(st.integers(0, 200))})
        elif step == "human":
            messages.append(
                {"role": "user", "content": "more " * 20, "metadata": {"source": "user"}}
            )
        elif step == "orphan":
            messages.append({"role": "tool", "tool_call_id": "ghost", "content": "lost " * 30})
        elif step == "no_id":
            messages.append({"role": "tool", "content": "who asked " * 10})
        elif step == "empty":
            messages.append({"role": "user", "content": None})
        else:
            calls = draw(st.integers(1, 3))
            ids = [f"call_{k}" if per_turn_ids else f"c{serial + k}" for k in range(calls)]
            serial += calls
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": i, "tool": "f", "arguments": {}} for i in ids],
                }
            )
            for i in ids:
                fault = draw(st.sampled_from(["ok", "ok", "ok", "missing", "duplicate", "inject"]))
                if fault == "missing":
                    continue
                if fault == "inject":  # a kernel-stored hook note between call and result
                    messages.append(
                        {
                            "role": "system",
                            "content": "lint says ok " * 10,
                            "metadata": {"source": "hook"},
                        }
                    )
                result = {
                    "role": "tool",
                    "tool_call_id": i,
                    "content": "r" * draw(st.integers(0, 4000)),
                }
                messages.append(result)
                if fault == "duplicate":
                    messages.append(dict(result))
    return messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=faulty_conversations(), budget=st.integers(300, 20_000), config=configs)
def test_sequence_faults_are_admitted_and_every_view_is_acceptable(history, budget, config) -> None:
    async def run() -> None:
        ctx = ContextFold(config)
        admitted: list[dict] = []
        for message in history:
            await ctx.add_message(message)  # never raises on a well-shaped message
            admitted.append(message)
            if message["role"] == "tool":
                continue  # an orchestrator asks before each model call, not mid-results
            try:
                view = await ctx.get_messages_for_request(token_budget=budget)
            except ContextLengthError as err:
                assert required_core_cost(ctx, admitted) > budget * 0.95, err
                continue
            recount = sum(ctx.counter.count_message(m) for m in view)
            assert recount + ctx.counter.request_overhead <= budget
            assert_pairing(view)
            for m in view:
                assert m.get("content") is not None or m["role"] == "assistant"
        assert unstamped(await ctx.get_messages()) == history
        resumed = ContextFold(config)
        await resumed.set_messages(history)  # a whole faulty transcript resumes
        assert await resumed.get_messages() == history

    asyncio.run(run())
