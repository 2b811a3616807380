"""``cache_breakpoints: anthropic``: Anthropic ``cache_control`` marks on delivered views only,
at most three, on the system prompt, the end of the stable prefix and the newest message."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold import ConfigError, ContextFold, ContextLengthError
from contextfold.amplifier.scripted_cache import unmarked
from support import SYSTEM, agent_run, human, reply, tool_round

EPHEMERAL = {"type": "ephemeral"}


def marked_positions(view: list[dict[str, Any]]) -> list[int]:
    return [
        i
        for i, message in enumerate(view)
        if isinstance(message.get("content"), list)
        and any("cache_control" in block for block in message["content"])
    ]


def contains_mark(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(contains_mark(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_mark(v) for v in value)
    return False


async def test_marks_stand_on_the_system_prompt_the_first_prompt_and_the_newest_message() -> None:
    history = agent_run(3)
    ctx = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
    await ctx.set_messages(history)
    view = await ctx.get_messages_for_request(token_budget=100_000)
    # system (index 0), the first human prompt (index 1: the end of the stable prefix),
    # and the newest message, a tool result.
    assert marked_positions(view) == [0, 1, len(view) - 1]
    assert view[0]["content"] == [
        {"type": "text", "text": SYSTEM["content"], "cache_control": EPHEMERAL}
    ]
    assert view[-1]["role"] == "tool" and view[-1]["content"][0]["cache_control"] == EPHEMERAL
    # Read back as Anthropic reads it, the view is the unmarked one, message for message.
    plain = ContextFold(token_counter="heuristic")
    await plain.set_messages(history)
    expected = await plain.get_messages_for_request(token_budget=100_000)
    assert [unmarked(m) for m in view] == expected


async def test_history_never_carries_a_mark_and_views_stay_detached() -> None:
    history = agent_run(4)
    given_copy = copy.deepcopy(history)
    ctx = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
    await ctx.set_messages(history)
    first = await ctx.get_messages_for_request(token_budget=100_000)
    assert history == given_copy  # the caller's list is untouched
    assert not contains_mark(await ctx.get_messages())
    # Writing into a delivered view (its marks included) reaches nothing else.
    for message in first:
        if isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict):
                    block["cache_control"] = {"type": "tampered"}
                    block["text"] = "changed"
        message["content"] = (
            "changed" if isinstance(message["content"], str) else message["content"]
        )
    second = await ctx.get_messages_for_request(token_budget=100_000)
    assert not contains_mark(await ctx.get_messages())
    assert all(
        block.get("cache_control") == EPHEMERAL
        for i in marked_positions(second)
        for block in second[i]["content"]
        if "cache_control" in block
    )
    assert "changed" not in str(second)
    assert first is not second and all(a is not b for a, b in zip(first, second, strict=False))


async def test_off_by_default_and_a_bad_mode_is_refused() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    assert not contains_mark(await ctx.get_messages_for_request(token_budget=100_000))
    for bad in ("openai", True, None, 1):
        with pytest.raises(ConfigError, match="cache_breakpoints"):
            ContextFold(cache_breakpoints=bad)


async def test_after_a_pass_the_stable_prefix_ends_before_the_notice() -> None:
    ctx = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
    await ctx.set_messages(agent_run(30, result_chars=3_000))
    view = await ctx.get_messages_for_request(token_budget=12_000)
    assert ctx.last_report.compacted
    notice = next(
        i for i, m in enumerate(view) if (m.get("metadata") or {}).get("compaction_notice")
    )
    marks = marked_positions(view)
    assert len(marks) <= 3 and marks[-1] == len(view) - 1
    assert max(i for i in marks if i < len(view) - 1) < notice  # nothing a pass rewrites
    assert notice not in marks


async def test_a_mark_skips_what_cannot_carry_one() -> None:
    """Thinking blocks and empty text cannot carry a mark: it goes to the last block that
    can, or to the message before."""
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    messages = [
        SYSTEM,
        human("Plan the trip."),
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "On it."}, thinking],
        },
        {"role": "user", "content": [{"type": "text", "text": ""}]},
    ]
    ctx = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
    await ctx.set_messages(messages)
    view = await ctx.get_messages_for_request(token_budget=100_000)
    assert marked_positions(view) == [0, 1, 2]
    assert view[2]["content"][0]["cache_control"] == EPHEMERAL
    assert view[2]["content"][1] == thinking  # signed thinking untouched


async def test_a_system_prompt_factory_view_is_marked_too() -> None:
    ctx = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
    await ctx.set_system_prompt_factory(lambda: "You are the factory's prompt.")
    await ctx.set_messages([human("Go."), reply("Going.")])
    view = await ctx.get_messages_for_request(token_budget=100_000)
    assert marked_positions(view) == [0, 1, 2]
    assert view[0]["content"][0]["text"] == "You are the factory's prompt."


def _conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, human("Start.")]
    for n in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["tools", "reply", "prompt", "anthropic"]))
        if kind == "tools":
            messages.extend(tool_round(n, calls=draw(st.integers(1, 3)), result_chars=400))
        elif kind == "anthropic":
            messages.extend(tool_round(n, result_chars=400, shape="anthropic"))
        elif kind == "reply":
            messages.append(reply(draw(st.sampled_from(["", "ok", "done here"]))))
        else:
            messages.append(human(f"Next {n}."))
    return messages


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from([3_000, 6_000, 100_000]))
def test_marks_never_reach_history_and_never_change_what_is_sent(
    data: st.DataObject, budget: int
) -> None:
    messages = _conversation(data.draw)

    async def run() -> tuple[list[Any], list[dict[str, Any]]]:
        marked = ContextFold(cache_breakpoints="anthropic", token_counter="heuristic")
        plain = ContextFold(token_counter="heuristic")
        views: list[Any] = []
        for ctx in (marked, plain):
            await ctx.set_messages(messages)
            try:
                views.append(await ctx.get_messages_for_request(token_budget=budget))
            except ContextLengthError as error:  # the same refusal for both, or none
                views.append(str(error))
        return views, await marked.get_messages()

    views, history = asyncio.run(run())
    assert isinstance(views[0], str) == isinstance(views[1], str)
    if isinstance(views[0], str):
        assert views[0] == views[1]
        return
    assert not contains_mark(history)
    assert len(marked_positions(views[0])) <= 3  # one of Anthropic's four left to the caller
    assert [unmarked(m) for m in views[0]] == [unmarked(m) for m in views[1]]
