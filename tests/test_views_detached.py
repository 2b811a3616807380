"""A delivered view shares no mutable object with history (issue: cache_control marks and
in-place edits leaking into the record and the reports)."""

from __future__ import annotations

import json

from contextfold import ContextFold, strip_metadata
from support import SYSTEM, human, tool_round


def anthropic_turn(n: int) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"plan {n}", "signature": "c2ln"},
                {"type": "text", "text": f"step {n}"},
                {"type": "tool_use", "id": f"t{n}", "name": "lookup", "input": {"q": [n]}},
            ],
            "metadata": {"turn": n},
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * 200}],
        },
    ]


def dump(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True)


async def test_marking_the_last_block_each_turn_never_reaches_history() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages([SYSTEM, human("go")])
    for n in range(6):
        for message in anthropic_turn(n):
            await ctx.add_message(message)
        view = await ctx.get_messages_for_request(token_budget=100_000)
        # The usual prompt-caching pattern: a breakpoint on the last block of the view.
        view[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        marks = dump(view).count("cache_control")
        assert marks == 1  # only this turn's mark; Anthropic accepts at most 4
    assert "cache_control" not in dump(await ctx.get_messages())


async def test_editing_any_part_of_a_view_leaves_history_and_the_next_view_unchanged() -> None:
    ctx = ContextFold(token_counter="heuristic")
    history = [SYSTEM, human("go"), *tool_round(1, calls=2), *anthropic_turn(2)]
    await ctx.set_messages(history)
    before = dump(await ctx.get_messages())
    view = await ctx.get_messages_for_request(token_budget=100_000)
    first = dump(view)
    report = ctx.last_report.tokens_after
    # Blocks, nested block data, tool calls, arguments, metadata, whole messages.
    view[1]["metadata"]["source"] = "edited"
    view[2]["tool_calls"][0]["arguments"]["topic"] = "edited"
    view[2]["tool_calls"].append({"id": "new", "tool": "x"})
    view[5]["content"][0]["thinking"] = "edited"
    view[5]["content"][2]["input"]["q"].append(99)
    view[5]["metadata"]["turn"] = -1
    view[6]["content"][0]["content"] = "y" * 100_000
    view[-1]["content"].append({"type": "text", "text": "z" * 100_000})
    view.append({"role": "user", "content": "extra"})
    assert dump(await ctx.get_messages()) == before
    again = await ctx.get_messages_for_request(token_budget=100_000)
    assert dump(again) == first and ctx.last_report.tokens_after == report
    # strip_metadata hands out copies too.
    stripped = strip_metadata(again)
    stripped[2]["tool_calls"][0]["arguments"]["topic"] = "edited"
    assert dump(await ctx.get_messages_for_request(token_budget=100_000)) == first


async def test_get_messages_hands_out_copies() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages([SYSTEM, *anthropic_turn(1)])
    copy = await ctx.get_messages()
    copy[1]["content"][2]["input"]["q"].append(7)
    assert (await ctx.get_messages())[1]["content"][2]["input"]["q"] == [1]
