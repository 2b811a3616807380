"""contextfold.formats: plain clients' message shapes fitted in one call each."""

from __future__ import annotations

from typing import Any

import anthropic.types as anthropic_types
import pytest

from adapter_support import assert_nothing_shared, page
from contextfold import ContextFold, ExactCounter
from contextfold.formats import anthropic, openai_chat, openai_responses
from support import assert_pairing

COUNTER = ExactCounter()
SYSTEM = "You are a careful reader."
TOOLS = [{"name": "read", "description": "Read a page.", "input_schema": {"type": "object"}}]


def anthropic_turn(n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"page {n} next " * 40, "signature": f"sig{n}"},
                {"type": "tool_use", "id": f"tu{n}", "name": "read", "input": {"page": n}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"tu{n}", "content": page(n)}],
        },
    ]


def anthropic_conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read the manual"}]
    for n in range(turns):
        messages += anthropic_turn(n)
    return messages


def request_size(view: anthropic.AnthropicView) -> int:
    system = [{"role": "system", "content": view.system}] if view.system else []
    return COUNTER.count_request([*system, *view.messages], tools=TOOLS)


async def test_an_anthropic_loop_stays_inside_its_window_with_the_system_prompt_apart() -> None:
    context = ContextFold(max_tokens=4000)
    messages = anthropic_conversation(1)
    for n in range(1, 30):
        view = await anthropic.view_for(context, messages, system=SYSTEM, tools=TOOLS)
        assert view.system == SYSTEM
        assert all(m["role"] in ("user", "assistant") for m in view.messages)
        assert request_size(view) <= 4000
        assert_pairing(view.messages)
        # The newest turn's signed thinking goes back exactly as the model wrote it.
        newest = next(m for m in reversed(view.messages) if m["role"] == "assistant")
        assert newest["content"][0] == messages[-2]["content"][0]
        assert_nothing_shared(view.messages, messages)
        messages += anthropic_turn(n)
    assert "system" in view.request() and view.request()["messages"] is view.messages


async def test_a_system_role_notice_joins_the_system_prompt() -> None:
    context = ContextFold(max_tokens=3000, compaction_notice_role="system")
    view = await anthropic.view_for(context, anthropic_conversation(20), system=SYSTEM)
    # The ledger's pages take the notice's role, so they join the system prompt too.
    assert view.system.startswith(SYSTEM + "\n\n<context-ledger>")
    assert "\n\n<context-compaction>" in view.system
    assert all(m["role"] != "system" for m in view.messages)
    blocks = await anthropic.view_for(
        ContextFold(max_tokens=3000, compaction_notice_role="system"),
        anthropic_conversation(20),
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
    )
    assert blocks.system[0]["cache_control"] == {"type": "ephemeral"}
    texts = [block["text"] for block in blocks.system[1:]]
    assert texts[0].startswith("<context-ledger>")
    assert texts[-1].startswith("<context-compaction>")


async def test_sdk_typed_blocks_are_taken_and_sent_back_as_plain_dicts() -> None:
    context = ContextFold(max_tokens=100_000)
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [anthropic_types.TextBlock(type="text", text="hello")]},
    ]
    view = await anthropic.view_for(context, messages)
    assert view.messages[1] == {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}
    assert view.request() == {"messages": view.messages}


async def test_a_system_prompt_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="system must be the prompt text"):
        await anthropic.view_for(ContextFold(), [{"role": "user", "content": "x"}], system=5)


async def test_openai_chat_messages_under_budget_come_back_as_given() -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "read"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "r", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "text"},
    ]
    view = await openai_chat.view_for(ContextFold(max_tokens=100_000), messages)
    assert view == messages
    assert_nothing_shared(view, messages)


async def test_responses_input_with_instructions_and_tools_fits_its_window() -> None:
    tools = [{"type": "function", "name": "read", "description": "Read.", "parameters": {}}]
    context = ContextFold(max_tokens=3000)
    items: list[dict[str, Any]] = [{"role": "user", "content": "read"}]
    for n in range(20):
        items += [
            {"type": "function_call", "call_id": f"c{n}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{n}", "output": page(n)},
        ]
        view = await openai_responses.view_for(context, items, instructions=SYSTEM, tools=tools)
        sent = [{"role": "system", "content": SYSTEM}, *openai_responses.to_messages(view)]
        assert COUNTER.count_request(sent, tools=tools) <= 3000
    await openai_responses.record_usage(context, {"input_tokens": 2900}, model="gpt-x")
    assert "gpt-x" in context.counter.ratios()


def test_an_item_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match="a Responses input item is a dict"):
        openai_responses.to_messages(["just text"])


async def test_responses_items_with_a_broken_sequence_are_mended_in_the_view_only() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
    items = [
        {"role": "user", "content": "read"},
        call,  # interrupted: never answered
        {"role": "user", "content": "go on"},
        {"type": "function_call_output", "call_id": "ghost", "output": "from nowhere"},
    ]
    view = await openai_responses.view_for(ContextFold(max_tokens=100_000), items)
    assert_pairing(openai_responses.to_messages(view))
    answer = next(i for i in view if i.get("type") == "function_call_output")
    assert answer["call_id"] == "c1" and "no result was recorded" in answer["output"]
    note = view[-1]
    assert note["role"] == "user" and "from nowhere" in note["content"]
    assert items[1] == call and len(items) == 4  # the caller's list is untouched
