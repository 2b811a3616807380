"""Admission: every shape accepted; every bad input refused clearly, history untouched."""

from __future__ import annotations

import pytest

from contextfold import ContextFold, Kind, MessageValidationError
from support import SYSTEM, human, tool_round


@pytest.fixture
def ctx() -> ContextFold:
    return ContextFold(token_counter="heuristic")


async def test_accepts_all_shapes(ctx: ContextFold) -> None:
    messages = [
        SYSTEM,
        human("start"),
        *tool_round(1, calls=2, shape="amplifier"),
        *tool_round(2, calls=1, shape="openai"),
        *tool_round(3, calls=3, shape="anthropic"),
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                {"type": "text", "text": "done"},
            ],
        },
        {"role": "developer", "content": "be brief"},
        human("next"),
    ]
    for m in messages:
        await ctx.add_message(m)
    assert await ctx.get_messages() == messages
    kinds = ctx.kinds()
    assert kinds[0] is Kind.SYSTEM and kinds[1] is Kind.HUMAN
    assert kinds.count(Kind.TOOL_RESULT) == 2 + 1 + 1


BAD = [
    ("not a dict", ["role", "user"], "message", "dict"),
    ("no role", {"content": "hi"}, "role", "missing"),
    ("unknown role", {"role": "robot", "content": "hi"}, "role", "unknown role"),
    ("user without content", {"role": "user"}, "content", "missing"),
    ("content of wrong type", {"role": "user", "content": 42}, "content", "string or a list"),
    ("block without type", {"role": "user", "content": [{"text": "x"}]}, "content[0]", "type"),
    ("metadata not a dict", {"role": "user", "content": "x", "metadata": [1]}, "metadata", "dict"),
    (
        "orphan tool result",
        {"role": "tool", "tool_call_id": "nope", "content": "x"},
        "tool_call_id",
        "orphan",
    ),
    ("tool result without id", {"role": "tool", "content": "x"}, "tool_call_id", "missing"),
    (
        "anthropic orphan",
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "ghost", "content": "x"}],
        },
        "content[0].tool_use_id",
        "orphan",
    ),
    (
        "not JSON-serialisable",
        {"role": "user", "content": "x", "metadata": {"when": object()}},
        "metadata.when",
        "JSON",
    ),
    (
        "NaN",
        {"role": "user", "content": "x", "metadata": {"score": float("nan")}},
        "metadata.score",
        "JSON",
    ),
    (
        "tool_calls not a list",
        {"role": "assistant", "content": "", "tool_calls": {"id": "a"}},
        "tool_calls",
        "list",
    ),
    (
        "tool call without id",
        {"role": "assistant", "content": "", "tool_calls": [{"tool": "x"}]},
        "tool_calls[0].id",
        "id",
    ),
    (
        "tool call without name",
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "arguments": {}}]},
        "tool_calls[0]",
        "name",
    ),
    (
        "tool calls on a user message",
        {"role": "user", "content": "x", "tool_calls": [{"id": "a", "tool": "t"}]},
        "tool_calls",
        "assistant",
    ),
]


@pytest.mark.parametrize(("label", "message", "field", "words"), BAD, ids=[b[0] for b in BAD])
async def test_bad_input_refused_and_history_unchanged(
    ctx: ContextFold, label: str, message: object, field: str, words: str
) -> None:
    before = [SYSTEM, human("hello")]
    for m in before:
        await ctx.add_message(m)
    view_before = await ctx.get_messages_for_request(token_budget=100_000)
    with pytest.raises(MessageValidationError) as err:
        await ctx.add_message(message)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError)
    assert err.value.field == field
    assert words.lower() in str(err.value).lower()
    assert f"field '{field}'" in str(err.value) and "message 2" in str(err.value)
    assert await ctx.get_messages() == before
    assert await ctx.get_messages_for_request(token_budget=100_000) == view_before
    assert ctx.message_count == 2


async def test_duplicate_and_repeated_results(ctx: ContextFold) -> None:
    for m in [SYSTEM, human("go"), *tool_round(1, calls=1)]:
        await ctx.add_message(m)
    with pytest.raises(MessageValidationError, match="already has a result"):
        await ctx.add_message({"role": "tool", "tool_call_id": "call_1_0", "content": "again"})
    with pytest.raises(MessageValidationError, match="already used"):
        await ctx.add_message(
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1_0", "tool": "x"}]}
        )
    assert ctx.message_count == 4


async def test_new_assistant_turn_with_unanswered_calls_is_refused(ctx: ContextFold) -> None:
    group = tool_round(1, calls=2)
    for m in [SYSTEM, human("go"), group[0], group[1]]:
        await ctx.add_message(m)
    with pytest.raises(MessageValidationError, match="call_1_1") as err:
        await ctx.add_message({"role": "assistant", "content": "next"})
    assert "error result" in str(err.value)
    # A hook injection between results is fine, and so is the missing result afterwards.
    await ctx.add_message({"role": "user", "content": "lint ok", "metadata": {"source": "hook"}})
    await ctx.add_message(group[2])
    await ctx.add_message({"role": "assistant", "content": "next"})


async def test_human_prompts_by_metadata_not_role(ctx: ContextFold) -> None:
    msgs = [
        SYSTEM,
        {"role": "user", "content": "first task"},  # no metadata: a person typed it
        {"role": "user", "content": "hook says hi", "metadata": {"source": "hook"}},
        {
            "role": "user",
            "content": "<reminder>",
            "metadata": {"ephemeral": True, "persisted": True},
        },
        human("last task"),
        {"role": "user", "content": "hook again", "metadata": {"source": "hook"}},
    ]
    for m in msgs:
        await ctx.add_message(m)
    assert ctx.human_prompt_indices() == (1, 4)


async def test_set_messages_is_all_or_nothing(ctx: ContextFold) -> None:
    good = [SYSTEM, human("a"), *tool_round(1)]
    await ctx.set_messages(good)
    bad = [SYSTEM, human("b"), {"role": "tool", "tool_call_id": "zzz", "content": "x"}]
    with pytest.raises(MessageValidationError) as err:
        await ctx.set_messages(bad)
    assert err.value.index == 2 and "message 2" in str(err.value)
    assert await ctx.get_messages() == good
    with pytest.raises(TypeError):
        await ctx.set_messages("not a list")  # type: ignore[arg-type]


async def test_history_is_a_private_copy(ctx: ContextFold) -> None:
    message = human("original")
    await ctx.add_message(message)
    message["content"] = "edited by caller"
    got = await ctx.get_messages()
    assert got[0]["content"] == "original"
    got[0]["content"] = "edited copy"
    assert (await ctx.get_messages())[0]["content"] == "original"


async def test_clear(ctx: ContextFold) -> None:
    await ctx.set_messages([SYSTEM, human("a")])
    await ctx.clear()
    assert await ctx.get_messages() == []
    assert await ctx.get_messages_for_request(token_budget=1000) == []
