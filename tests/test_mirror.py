"""The mirror: a context kept in step with a framework's own, growing message list."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter_support import assert_nothing_shared, page
from contextfold import (
    CALIBRATION,
    ContextFold,
    ContextLengthError,
    ExactCounter,
    MessageValidationError,
)
from contextfold.formats import openai_chat
from contextfold.mirror import Mirror, run_sync
from support import assert_pairing, unstamped


class CountingContext(ContextFold):
    """A real context that also counts how its history was written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.added = 0
        self.replaced = 0

    async def add_message(self, message: dict[str, Any]) -> None:
        self.added += 1
        await super().add_message(message)

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        self.replaced += 1
        await super().set_messages(messages)


def tool_turn(n: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": page(n)},
    ]


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read them all"}]
    for n in range(turns):
        messages += tool_turn(n)
    return messages


async def test_only_what_the_list_gained_is_admitted() -> None:
    context = CountingContext(max_tokens=3000)
    messages = conversation(2)
    await openai_chat.view_for(context, messages)
    for n in range(2, 12):
        messages += tool_turn(n)
        view = await openai_chat.view_for(context, messages)
        assert_pairing(view)
    assert context.added == len(messages) and context.replaced == 0
    assert unstamped(await context.get_messages()) == messages
    assert ExactCounter().count_request(view) <= 3000


async def test_a_list_rebuilt_with_equal_items_each_call_is_not_admitted_again() -> None:
    context = CountingContext(max_tokens=3000)
    messages = conversation(3)
    for _ in range(3):
        rebuilt = [dict(message) for message in messages]  # as the Agents SDK builds its input
        await openai_chat.view_for(context, rebuilt)
    assert context.added == len(messages) and context.replaced == 0


async def test_an_edited_list_replaces_the_history_it_no_longer_extends() -> None:
    context = CountingContext(max_tokens=100_000)
    messages = conversation(3)
    await openai_chat.view_for(context, messages)
    edited = [{"role": "user", "content": "read only the first"}, *messages[1:3]]
    view = await openai_chat.view_for(context, edited)
    assert context.replaced == 1
    assert view == edited
    assert unstamped(await context.get_messages()) == edited


async def test_a_stored_session_is_continued_not_admitted_twice(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'fold.db'}"
    messages = conversation(12)
    first = ContextFold(max_tokens=3000, store=url, session_id="s")
    await openai_chat.view_for(first, messages)
    messages += tool_turn(12)
    await openai_chat.view_for(first, messages)
    messages += tool_turn(13)
    expected = await openai_chat.view_for(first, messages)

    # A new process: the same stored session, and the framework's own list as it was at
    # the second request, grown since by the turn the first process saw as well.
    resumed = CountingContext(max_tokens=3000, store=url, session_id="s")
    assert await openai_chat.view_for(resumed, messages) == expected
    assert resumed.added == 0 and resumed.replaced == 0  # what was stored is what was sent
    assert len(await resumed.get_messages()) == len(messages)


async def test_a_stored_session_gains_only_what_the_list_added_since(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'fold.db'}"
    messages = conversation(12)
    await openai_chat.view_for(ContextFold(max_tokens=3000, store=url, session_id="s"), messages)
    plain = ContextFold(max_tokens=3000)  # the same requests, never interrupted
    await openai_chat.view_for(plain, messages)
    grown = [*messages, *tool_turn(12)]
    resumed = CountingContext(max_tokens=3000, store=url, session_id="s")
    assert await openai_chat.view_for(resumed, grown) == await openai_chat.view_for(plain, grown)
    assert resumed.added == 2 and resumed.replaced == 0


async def test_the_fixed_parts_of_a_request_come_out_of_the_budget() -> None:
    tools = [{"type": "function", "function": {"name": "read", "description": "x " * 1000}}]
    counter = ExactCounter()
    settings = {"max_tokens": 3000, "compact_threshold": 0.95, "target_usage": 0.9}
    messages = conversation(12)
    view = await openai_chat.view_for(ContextFold(**settings), messages, tools=tools)
    assert counter.count_request(view, tools=tools) <= 3000
    # Fitted as if the schemas cost nothing, the same request would overflow.
    blind = await openai_chat.view_for(ContextFold(**settings), messages)
    assert counter.count_request(blind, tools=tools) > 3000


async def test_fixed_parts_that_leave_nothing_are_refused_with_the_numbers() -> None:
    context = ContextFold(max_tokens=500)
    tools = [{"type": "function", "function": {"name": "read", "description": "x " * 800}}]
    with pytest.raises(ContextLengthError, match="leave nothing of the 500-token budget"):
        await openai_chat.view_for(context, conversation(1), tools=tools)
    assert await context.get_messages() != []  # the conversation itself was admitted


async def test_usage_is_reported_less_the_fixed_parts() -> None:
    readings: list[dict[str, Any]] = []

    def listen(event: str, data: dict[str, Any]) -> None:
        if event == CALIBRATION:
            readings.append(data)

    context = ContextFold(max_tokens=100_000, on_event=listen)
    mirror = Mirror(context, openai_chat.to_messages)
    await mirror.view(conversation(1), fixed_tokens=700, model="m")
    await mirror.record_usage({"prompt_tokens": 1500}, model="m")
    await mirror.record_usage(None)  # no usage: nothing to learn
    await mirror.record_usage({"prompt_tokens": 650})  # less than the fixed part: no reading
    assert [r["actual"] for r in readings] == [800]
    assert readings[0]["model"] == "m"


async def test_a_message_the_context_refuses_leaves_it_to_be_fixed_in_the_list() -> None:
    context = CountingContext(max_tokens=100_000)
    messages = conversation(2)
    await openai_chat.view_for(context, messages)
    messages += [{"role": "user", "content": "fine"}, {"role": "robot", "content": "bad"}]
    with pytest.raises(MessageValidationError, match="unknown role 'robot'"):
        await openai_chat.view_for(context, messages)
    messages[-1] = {"role": "user", "content": "better"}
    view = await openai_chat.view_for(context, messages)
    assert view == messages  # every message once, the refused one never
    assert unstamped(await context.get_messages()) == messages


def test_sync_entry_points_run_a_durable_context_on_one_loop(tmp_path: Any) -> None:
    context = ContextFold(max_tokens=3000, store=f"sqlite:///{tmp_path / 'f.db'}", session_id="s")
    mirror = Mirror(context, openai_chat.to_messages)
    for turns in range(1, 6):
        view = run_sync(mirror.view(conversation(turns)))
        assert_pairing(view)
    assert len(run_sync(context.get_messages())) == 11


async def test_a_sync_entry_point_called_inside_a_running_loop_still_runs() -> None:
    mirror = Mirror(ContextFold(max_tokens=3000), openai_chat.to_messages)
    assert len(run_sync(mirror.view(conversation(1)))) == 3


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 3)),  # a tool turn (long result or not)
        st.tuples(st.just("say"), st.integers(0, 3)),  # a user message
        st.tuples(st.just("cut"), st.integers(1, 6)),  # the framework drops its tail
        st.tuples(st.just("edit"), st.integers(0, 6)),  # replaces an earlier message
        st.tuples(st.just("rebuild"), st.just(0)),  # hands equal copies of every message
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_the_history_is_always_the_list_and_every_view_is_whole(operations: list[Any]) -> None:
    async def run() -> None:
        context = ContextFold(max_tokens=1500)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
        for number, (operation, value) in enumerate(operations):
            if operation == "turn":
                messages = [*messages, *tool_turn(number)]
                messages[-1] = {**messages[-1], "content": page(number) * value}
            elif operation == "say":
                messages = [*messages, {"role": "user", "content": f"note {number} " * value}]
            elif operation == "cut":
                messages = messages[: max(1, len(messages) - value)]
            elif operation == "edit":
                at = min(value, len(messages) - 1)
                if messages[at].get("role") == "user":
                    messages = [*messages]
                    messages[at] = {"role": "user", "content": f"edited {number}"}
            else:
                messages = [dict(message) for message in messages]
            view = await openai_chat.view_for(context, messages)
            assert_pairing(view)
            assert_nothing_shared(view, messages)
            assert unstamped(await context.get_messages()) == messages

    asyncio.run(run())
