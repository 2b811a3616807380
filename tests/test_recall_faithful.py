"""Recall gives back what was admitted, calls included, and the ``context_recall`` tool
answers with a result, never an exception, when the history cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amplifier_core.testing import MockCoordinator

from contextfold import ContextFold
from contextfold.amplifier.recall_tool import mount
from support import SYSTEM, human

# An assistant turn with words and calls, in each shape a history may hold.
AMPLIFIER_TURN = {
    "role": "assistant",
    "content": "Let me check both files.",
    "tool_calls": [
        {"id": "call_a", "tool": "read_file", "arguments": {"path": "/etc/app/a.conf"}},
        {"id": "call_b", "tool": "read_file", "arguments": {"path": "/etc/app/b.conf"}},
    ],
}
OPENAI_TURN = {
    "role": "assistant",
    "content": "Searching.",
    "tool_calls": [
        {
            "id": "call_c",
            "type": "function",
            "function": {"name": "grep", "arguments": '{"q": "timeout", "max": 3}'},
        }
    ],
}
ANTHROPIC_TURN = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "tu_d", "name": "lookup", "input": {"topic": "quartz"}},
    ],
}


def conversation() -> list[dict[str, Any]]:
    return [
        SYSTEM,  # r0
        human("Compare the configs."),  # r1
        AMPLIFIER_TURN,  # r2
        {"role": "tool", "tool_call_id": "call_a", "content": "timeout=30"},
        {"role": "tool", "tool_call_id": "call_b", "content": "timeout=60"},
        OPENAI_TURN,  # r5
        {"role": "tool", "tool_call_id": "call_c", "content": "a.conf:1:timeout=30"},
        ANTHROPIC_TURN,  # r7
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_d", "content": "quartz"}],
        },
    ]


async def test_a_turn_with_text_and_calls_is_recalled_whole() -> None:
    context = ContextFold(token_counter="exact")
    await context.set_messages(conversation())
    for rid, turn in (("r2", AMPLIFIER_TURN), ("r5", OPENAI_TURN), ("r7", ANTHROPIC_TURN)):
        recalled = json.loads(await context.recall(rid))
        # Exactly what was admitted: the words, and every call with its id and arguments.
        assert recalled == {k: turn[k] for k in ("content", "tool_calls") if k in turn}
    # A message without calls is still its text, byte for byte.
    assert await context.recall("r3") == "timeout=30"
    assert await context.recall("r1") == "Compare the configs."


async def test_the_tool_recalls_the_calls_too() -> None:
    coordinator = MockCoordinator()
    context = ContextFold(token_counter="exact")
    await coordinator.mount("context", context)
    await mount(coordinator, {})
    await context.set_messages(conversation())
    result = await coordinator.get("tools")["context_recall"].execute({"id": "r2"})
    assert result.success
    recalled = json.loads(result.output)
    assert [c["arguments"]["path"] for c in recalled["tool_calls"]] == [
        "/etc/app/a.conf",
        "/etc/app/b.conf",
    ]
    assert recalled["content"] == "Let me check both files."


async def test_a_store_that_cannot_be_read_is_an_error_result(tmp_path: Path) -> None:
    damaged = tmp_path / "agent.db"
    damaged.write_bytes(b"\x03r\x105 not a database at all " * 200)
    coordinator = MockCoordinator()
    context = ContextFold(store=f"sqlite:///{damaged}", session_id="s1")
    await coordinator.mount("context", context)
    await mount(coordinator, {})
    result = await coordinator.get("tools")["context_recall"].execute({"id": "r2"})
    assert result.success is False
    assert result.error["type"] == "history_unavailable"
    assert "cannot be read" in result.error["message"] and "agent.db" in result.error["message"]


async def test_a_recalled_lone_surrogate_reaches_the_model_as_replacement() -> None:
    coordinator = MockCoordinator()
    context = ContextFold(token_counter="exact")
    await coordinator.mount("context", context)
    await mount(coordinator, {})
    raw = b"blob \xff\xfe end".decode("utf-8", "surrogateescape")
    await context.set_messages(
        [human("read"), {**AMPLIFIER_TURN, "tool_calls": AMPLIFIER_TURN["tool_calls"][:1]}]
    )
    await context.add_message({"role": "tool", "tool_call_id": "call_a", "content": raw})
    assert await context.recall("r2") == raw  # the library returns it as admitted
    result = await coordinator.get("tools")["context_recall"].execute({"id": "r2"})
    # The tool's result goes to the model: amplifier-core's own presentation of it works.
    assert result.success and result.output == "blob \ufffd\ufffd end"
    result.safe_hook_presentation()
