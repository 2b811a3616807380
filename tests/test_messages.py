"""Admission: every shape accepted; every bad input refused clearly, history untouched."""

from __future__ import annotations

import pytest

from contextfold import ContextFold, Kind, MessageValidationError
from support import SYSTEM, assert_pairing, human, tool_round, unstamped


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
    assert unstamped(await ctx.get_messages()) == messages
    kinds = ctx.kinds()
    assert kinds[0] is Kind.SYSTEM and kinds[1] is Kind.HUMAN
    assert kinds.count(Kind.TOOL_RESULT) == 2 + 1 + 1


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": value}
    return value


NESTED = _nested(2_000)

BAD = [
    ("not a dict", ["role", "user"], "message", "dict"),
    ("no role", {"content": "hi"}, "role", "missing"),
    ("unknown role", {"role": "robot", "content": "hi"}, "role", "unknown role"),
    ("metadata not a dict", {"role": "user", "content": "x", "metadata": [1]}, "metadata", "dict"),
    ("content of wrong type", {"role": "user", "content": 42}, "content", "string or a list"),
    ("block without type", {"role": "user", "content": [{"text": "x"}]}, "content[0]", "type"),
    (
        "text block text not a string",
        {"role": "user", "content": [{"type": "text", "text": 5}]},
        "content[0].text",
        "string",
    ),
    (
        "tool content a number",
        {"role": "tool", "tool_call_id": "a", "content": 42},
        "content",
        "string",
    ),
    (
        "OpenAI arguments as a dict",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
            ],
        },
        "tool_calls[0].function.arguments",
        "JSON string",
    ),
    (
        "tool_call_id not a string",
        {"role": "tool", "tool_call_id": 1, "content": "x"},
        "tool_call_id",
        "string id",
    ),
    (
        "nested too deeply",
        {"role": "tool", "tool_call_id": "a", "content": NESTED},
        "content",
        "nested too deeply",
    ),
    (
        "two calls with one id",
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "tool": "t"}, {"id": "a", "tool": "t"}],
        },
        "tool_calls",
        "used twice",
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
    assert unstamped(await ctx.get_messages()) == before
    assert await ctx.get_messages_for_request(token_budget=100_000) == view_before
    assert ctx.message_count == 2


async def test_sequence_faults_are_admitted_as_they_are_and_reported() -> None:
    events: list = []
    ctx = ContextFold(token_counter="heuristic", on_event=lambda e, d: events.append((e, d)))
    group = tool_round(1, calls=2)
    faulty = [
        SYSTEM,
        human("go"),
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan"},  # unknown call
        {"role": "tool", "content": "no id at all"},  # names no call
        group[0],  # two calls ...
        group[1],  # ... one answered
        {"role": "assistant", "content": "next"},  # the other never is
        {"role": "tool", "tool_call_id": "call_1_0", "content": "again"},  # a duplicate
        {"role": "user", "content": None},  # empty
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1_0", "tool": "t"}]},
    ]
    for m in faulty:
        await ctx.add_message(m)
    assert unstamped(await ctx.get_messages()) == faulty  # history is the record
    kinds = [(d["kind"], d["index"]) for e, d in events if e == "context:repaired"]
    assert kinds == [
        ("orphan_result", 2),
        ("orphan_result", 3),
        ("unanswered_call", 4),
        ("orphan_result", 7),
        ("empty_message", 8),
        ("reused_call_id", 9),
    ]
    assert [r.kind for r in ctx.repairs] == [k for k, _ in kinds]
    [unanswered] = [d for e, d in events if d.get("kind") == "unanswered_call"]
    assert unanswered["call_ids"] == ["call_1_1"] and "synthetic" in unanswered["action"]


async def test_a_message_inside_a_group_is_delivered_after_its_results(ctx: ContextFold) -> None:
    group = tool_round(1, calls=2)
    note = {"role": "system", "content": "lint ok", "metadata": {"source": "hook"}}
    for m in [SYSTEM, human("go"), group[0], group[1], note, group[2]]:
        await ctx.add_message(m)
    view = await ctx.get_messages_for_request(token_budget=100_000)
    assert unstamped(view) == [SYSTEM, human("go"), group[0], group[1], group[2], note]
    assert_pairing(view)


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
    bad = [SYSTEM, human("b"), {"role": "robot", "content": "x"}]
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


async def test_a_hook_note_between_a_call_and_its_result_is_no_unanswered_call() -> None:
    """Found beside the real loop-basic: the note is stored before the result arrives; the
    call is answered, so nothing may be reported as synthesized."""
    events: list = []
    ctx = ContextFold(token_counter="heuristic", on_event=lambda e, d: events.append((e, d)))
    group = tool_round(1, calls=1)
    note = {"role": "system", "content": "lint ok", "metadata": {"source": "hook"}}
    for m in [SYSTEM, human("go"), group[0], note, group[1]]:
        await ctx.add_message(m)
    await ctx.get_messages_for_request(token_budget=100_000)
    kinds = [d["kind"] for e, d in events if e == "context:repaired"]
    assert kinds == ["inside_call_group"]


async def test_a_stand_in_result_is_reported_once_when_a_view_carries_it() -> None:
    events: list = []
    ctx = ContextFold(token_counter="heuristic", on_event=lambda e, d: events.append((e, d)))
    group = tool_round(1, calls=1)
    # A transcript cut mid-tool, then the person's next prompt, then a request.
    await ctx.set_messages([SYSTEM, human("go"), group[0], human("are you there?")])
    view = await ctx.get_messages_for_request(token_budget=100_000)
    assert_pairing(view)
    await ctx.get_messages_for_request(token_budget=100_000)
    unanswered = [d for e, d in events if d.get("kind") == "unanswered_call"]
    assert [(d["index"], d["call_ids"]) for d in unanswered] == [(2, ["call_1_0"])]


async def test_an_empty_message_inside_a_group_is_reported_once_as_left_out() -> None:
    events: list = []
    ctx = ContextFold(token_counter="heuristic", on_event=lambda e, d: events.append((e, d)))
    group = tool_round(1, calls=1)
    for m in [SYSTEM, human("go"), group[0], {"role": "user", "content": None}, group[1]]:
        await ctx.add_message(m)
    assert [d["kind"] for e, d in events if e == "context:repaired"] == ["empty_message"]


async def test_an_assistant_turn_without_content_is_sent_with_empty_text() -> None:
    """A CLI transcript drops None values, so a turn of calls only has no content key;
    Amplifier's loops build a typed Message from every view message, which needs it."""
    from amplifier_core.message_models import Message

    ctx = ContextFold(token_counter="heuristic")
    calls_only = {"role": "assistant", "tool_calls": [{"id": "c1", "tool": "t", "arguments": {}}]}
    openai_style = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c2", "tool": "t", "arguments": {}}],
    }
    await ctx.set_messages(
        [
            human("go"),
            calls_only,
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            openai_style,
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
        ]
    )
    view = await ctx.get_messages_for_request(token_budget=100_000)
    assert [m["content"] for m in view if m["role"] == "assistant"] == ["", ""]
    for message in view:
        Message(**message)  # what loop-basic and loop-streaming do with every view message
    assert "content" not in (await ctx.get_messages())[1]  # history keeps it as it came
