"""Recall by id: the original content of a compacted message, byte for byte, capped.

From `recall_message` over a real history, through the ``tool-context-recall`` tool on a
coordinator, to a whole agent loop in the real kernel that clears a result, reads the id in
the placeholder and gets the result back identical to what was admitted.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.message_models import ChatRequest, ChatResponse
from amplifier_core.testing import MockCoordinator

from contextfold import ContextFold
from contextfold.amplifier.recall_tool import ContextRecallTool, mount
from contextfold.amplifier.scripted_provider import ScriptedProvider
from contextfold.history import History
from contextfold.recall import (
    CUT_MARKER,
    RecallError,
    message_text,
    parse_recall_id,
    recall_hint,
    recall_id,
    recall_message,
)
from contextfold.tokens import build_counter
from support import SYSTEM, assert_pairing, human, prose, reply

EXACT = build_counter("exact")

# Texts a byte-level slip would change: non-ASCII, astral code points, CRLF, trailing spaces,
# JSON-looking text, an empty line at the end.
ODD_TEXT = 'Zürich → 東京 🚀\r\nline two  \n{"not": "parsed"}\n\n'


def conversation() -> list[dict[str, Any]]:
    return [
        SYSTEM,  # r0
        human("Compare the reports."),  # r1
        {  # r2
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "tool": "read_file", "arguments": {"path": "x"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": ODD_TEXT},  # r3
        {  # r4: OpenAI shape, content as text blocks
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "grep", "arguments": '{"q": "error"}'},
                }
            ],
        },
        {  # r5
            "role": "tool",
            "tool_call_id": "b",
            "content": [{"type": "text", "text": "first part"}, {"type": "text", "text": "二"}],
        },
        {  # r6: Anthropic shape
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c", "name": "lookup", "input": {"t": 1}}],
        },
        {  # r7
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c", "content": ODD_TEXT * 2}],
        },
        reply("Both reports agree. " + ODD_TEXT),  # r8
    ]


def history_of(messages: list[dict[str, Any]]) -> History:
    history = History(EXACT, 1_000_000)
    history.extend(messages)
    return history


# -- recall_message ------------------------------------------------------------------------------


def test_a_recall_returns_the_text_exactly_as_admitted() -> None:
    messages = conversation()
    history = history_of(messages)
    assert recall_message(history, "r3", 4_000, EXACT) == ODD_TEXT
    assert recall_message(history, "r3", 4_000, EXACT).encode() == ODD_TEXT.encode()
    assert recall_message(history, "r5", 4_000, EXACT) == "first part\n二"
    assert recall_message(history, "r7", 4_000, EXACT) == ODD_TEXT * 2
    assert recall_message(history, "r8", 4_000, EXACT) == messages[8]["content"]
    assert recall_message(history, "r1", 4_000, EXACT) == "Compare the reports."


def test_a_turn_that_only_calls_tools_comes_back_as_its_calls() -> None:
    history = history_of(conversation())
    recalled = json.loads(recall_message(history, "r2", 4_000, EXACT))
    assert recalled == {
        "tool_calls": [{"id": "a", "tool": "read_file", "arguments": {"path": "x"}}]
    }
    assert "lookup" in recall_message(history, "r6", 4_000, EXACT)


def test_ids_are_history_indices_and_markers_name_them() -> None:
    assert recall_id(41) == "r41"
    assert recall_hint(41) == 'context_recall("r41")'
    assert parse_recall_id("r0", 1) == 0
    assert parse_recall_id(" r41 ", 42) == 41  # a model's stray spaces are forgiven


@pytest.mark.parametrize(
    ("value", "kind", "message"),
    [
        ("r9", "unknown_id", r"unknown id 'r9': the history holds 9 message\(s\) \(ids r0 to r8\)"),
        ("r123456", "unknown_id", r"unknown id"),
        ("41", "malformed_id", r"'41' is not a recall id.*'r41'"),
        ("R4", "malformed_id", r"is not a recall id"),
        ("r-1", "malformed_id", r"is not a recall id"),
        ("r01", "malformed_id", r"is not a recall id"),
        ("r4; drop", "malformed_id", r"is not a recall id"),
        ("", "malformed_id", r"is not a recall id"),
        ("r" + "9" * 5000, "malformed_id", r"is not a recall id"),
        (4, "malformed_id", r"a recall id is a string like 'r41'.*int"),
        (None, "malformed_id", r"NoneType"),
    ],
)
def test_a_bad_id_is_a_clear_error(value: Any, kind: str, message: str) -> None:
    history = history_of(conversation())
    with pytest.raises(RecallError, match=message) as caught:
        recall_message(history, value, 4_000, EXACT)
    assert caught.value.kind == kind
    assert len(str(caught.value)) < 300


def test_an_empty_history_has_no_ids() -> None:
    with pytest.raises(RecallError, match=r"holds 0 message\(s\) \(ids none yet\)"):
        recall_message(history_of([]), "r0", 4_000, EXACT)


def test_a_long_text_is_cut_to_the_cap_and_continues_from_its_offset() -> None:
    body = prose(7, 60_000) + " " + ODD_TEXT * 50
    history = history_of([human("Go."), {"role": "assistant", "content": body}])
    parts: list[str] = []
    offset = 0
    while True:
        part = recall_message(history, "r1", 1_000, EXACT, offset=offset)
        assert EXACT.count_text(part) <= 1_000  # a recall never exceeds its cap
        match = re.search(
            r"\n\[\.\.\. recall cut at character ([\d,]+) of ([\d,]+); "
            r'context_recall\("r1", offset=(\d+)\) returns the rest\]$',
            part,
        )
        if match is None:
            parts.append(part)
            break
        end = int(match.group(3))
        assert int(match.group(1).replace(",", "")) == end
        assert int(match.group(2).replace(",", "")) == len(body)
        parts.append(part[: match.start()])
        assert end > offset  # every part makes progress
        offset = end
    assert len(parts) > 5
    assert "".join(parts) == body  # the parts put back together are the text, exactly


def test_a_recall_that_fits_has_no_marker() -> None:
    history = history_of(conversation())
    assert "recall cut" not in recall_message(history, "r7", 50, EXACT)
    assert recall_message(history, "r3", 50, EXACT, offset=4) == ODD_TEXT[4:]


@pytest.mark.parametrize(
    ("max_tokens", "offset", "message"),
    [
        (49, 0, r"max_tokens must be at least 50"),
        (True, 0, r"max_tokens must be a whole number"),
        ("4000", 0, r"max_tokens must be a whole number"),
        (4_000, -1, r"offset must be a whole number >= 0"),
        (4_000, 1.5, r"offset must be a whole number"),
        (4_000, len(ODD_TEXT), r"offset \d+ is past the end of r3"),
        (4_000, 10**9, r"past the end"),
    ],
)
def test_a_bad_cap_or_offset_is_a_clear_error(max_tokens: Any, offset: Any, message: str) -> None:
    history = history_of(conversation())
    with pytest.raises(RecallError, match=message):
        recall_message(history, "r3", max_tokens, EXACT, offset=offset)


def test_the_cut_marker_is_counted_inside_the_cap() -> None:
    history = history_of(
        [human("Go."), {"role": "tool", "tool_call_id": "z", "content": "é" * 9_000}]
    )
    part = recall_message(history, "r1", 60, EXACT)
    assert EXACT.count_text(part) <= 60
    assert part.endswith("returns the rest]") and part.startswith("é")
    assert CUT_MARKER.split("{")[0] in part


def test_message_text_of_odd_shapes() -> None:
    assert message_text({"role": "user", "content": ""}) == ""
    assert message_text({"role": "assistant", "content": None}) == ""
    image = {"type": "image", "source": {"type": "base64", "data": "AAAA"}}
    assert json.loads(message_text({"role": "user", "content": [image]})) == {"content": [image]}


# -- the library method (the manager calls `recall_message`) ------------------------------------


async def test_the_library_method_recalls_by_id() -> None:
    """Needs ``ContextFold.recall`` (see the report for the exact code)."""
    context = ContextFold(token_counter="exact")
    await context.set_messages(conversation())
    assert await context.recall("r3") == ODD_TEXT
    with pytest.raises(RecallError, match="unknown id"):
        await context.recall("r99")


# -- the tool module --------------------------------------------------------------------------


async def mounted_tool(config: dict[str, Any] | None = None) -> tuple[Any, ContextRecallTool]:
    coordinator = MockCoordinator()
    context = ContextFold(token_counter="exact")
    await coordinator.mount("context", context)
    await mount(coordinator, config or {})
    return context, coordinator.get("tools")["context_recall"]


async def test_the_tool_returns_what_history_holds() -> None:
    context, tool = await mounted_tool()
    await context.set_messages(conversation())
    result = await tool.execute({"id": "r3"})
    assert result.success and result.output == ODD_TEXT
    result = await tool.execute({"id": "r7", "offset": 3})
    assert result.success and result.output == (ODD_TEXT * 2)[3:]


async def test_the_tool_cap_comes_from_its_config() -> None:
    context, tool = await mounted_tool({"max_tokens": 200})
    await context.set_messages([human("Go."), reply(prose(3, 20_000))])
    result = await tool.execute({"id": "r1"})
    assert result.success and EXACT.count_text(result.output) <= 200
    assert 'context_recall("r1", offset=' in result.output


@pytest.mark.parametrize(
    ("tool_input", "kind", "text"),
    [
        ({"id": "r50"}, "unknown_id", "unknown id 'r50'"),
        ({"id": "fifty"}, "malformed_id", "is not a recall id"),
        ({"id": "r3", "offset": -4}, "invalid_argument", "offset"),
        ({}, "invalid_input", 'needs an "id"'),
        ({"id": "r3", "limit": 5}, "invalid_input", "'limit' goes with 'query'"),
        ({"id": "r3", "pages": 5}, "invalid_input", "unknown: ['pages']"),
        ("r3", "invalid_input", 'needs an "id"'),
    ],
)
async def test_the_tool_reports_bad_input_as_an_error_result(
    tool_input: Any, kind: str, text: str
) -> None:
    context, tool = await mounted_tool()
    await context.set_messages(conversation())
    result = await tool.execute(tool_input)
    assert result.success is False
    assert result.error["type"] == kind and text in result.error["message"]


async def test_the_tool_without_a_context_says_so() -> None:
    coordinator = MockCoordinator()
    await mount(coordinator, {})
    result = await coordinator.get("tools")["context_recall"].execute({"id": "r0"})
    assert result.success is False and result.error["type"] == "no_context"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"max_token": 10}, "unknown config keys"),
        ({"max_tokens": 10}, "at least 50"),
        ({"max_tokens": "4000"}, "whole number"),
        ({"max_tokens": False}, "whole number"),
    ],
)
async def test_a_bad_tool_config_fails_the_mount(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await mount(MockCoordinator(), config)


def test_the_tool_describes_itself() -> None:
    tool = ContextRecallTool(MockCoordinator())
    assert tool.name == "context_recall"
    assert "required" not in tool.input_schema  # an id or a query
    assert set(tool.input_schema["properties"]) == {"id", "offset", "query", "limit"}
    assert "r41" in tool.description and "'query'" in tool.description


# -- an agent loop in the real kernel -----------------------------------------------------------


class WatchedProvider(ScriptedProvider):
    """The scripted provider, keeping the messages of every request it was sent."""

    def __init__(self, config: dict[str, Any], hooks: Any) -> None:
        super().__init__(config, hooks=hooks)
        self.sent: list[list[dict[str, Any]]] = []

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.sent.append([m.model_dump(exclude_none=True) for m in request.messages])
        return await super().complete(request, **kwargs)


LOOKUPS = 10


def recall_script(recall: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "lookup", "arguments": {"topic": f"topic {n}"}}]}
        for n in range(1, LOOKUPS + 1)
    ]
    steps.append({"tool_calls": [{"name": "context_recall", "arguments": {"id": recall}}]})
    steps.append({"text": "Recalled the first document."})
    return steps


async def test_an_agent_recalls_a_cleared_result_byte_identical() -> None:
    """Needs the manager to pass ``config.ladder`` to ``run_pass`` (see the report)."""
    # The prompt is r0, the first call r1 and its result r2: the id the placeholder will name,
    # which the script's recall step asks for (checked below against what was really sent).
    script = recall_script("r2")
    plan = {
        "session": {
            "orchestrator": {"module": "loop-fold", "config": {}},
            "context": {
                "module": "context-fold",
                "config": {
                    "max_tokens": 5_000,
                    # Exact counts from the first request on (no calibration), so the pass
                    # lands where this test expects; the threshold planner's pass clears the
                    # first result (a cost pass goes deep and drops its group).
                    "token_counter": "exact",
                    "planner": "threshold",
                    "protected_tool_results": 2,
                    "strategies": [{"name": "clear_tool_results", "keep_last": 2}, "drop_oldest"],
                },
            },
        },
        "providers": [{"module": "provider-scripted", "config": {"script": script}}],
        "tools": [
            {"module": "tool-doc-lookup", "config": {"result_chars": 3_000}},
            {"module": "tool-context-recall", "config": {"max_tokens": 4_000}},
        ],
        "hooks": [],
    }
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        provider = WatchedProvider({"script": script}, session.coordinator.hooks)
        await session.coordinator.mount("providers", provider, name="scripted")
        answer = await session.execute("Look up ten topics, then re-read the first.")
        context = session.coordinator.get("context")
        history = await context.get_messages()
    finally:
        await session.cleanup()

    assert answer == "Recalled the first document."
    first = history[2]
    assert first["role"] == "tool" and first["tool_call_id"] == history[1]["tool_calls"][0]["id"]
    assert first["content"].startswith("# Topic 1")

    # The model was shown the placeholder naming r2, in place of the first result, and its
    # call stayed in the view.
    placeholder = re.compile(
        r'^\[\.\.\. [\d,]+ tokens cleared; context_recall\("r2"\) returns it\]$'
    )
    before_recall = provider.sent[LOOKUPS]  # the request that answered with the recall call
    shown = [m for m in before_recall if m.get("tool_call_id") == first["tool_call_id"]]
    assert len(shown) == 1 and placeholder.match(str(shown[0]["content"])), shown
    for sent in provider.sent:
        assert_pairing(sent)

    # The recall's result is the first document, byte for byte as admitted.
    [recall_call] = [
        m for m in history if (m.get("tool_calls") or [{}])[0].get("tool") == "context_recall"
    ]
    recall_index = history.index(recall_call)
    recalled = history[recall_index + 1]
    assert recalled["tool_call_id"] == recall_call["tool_calls"][0]["id"]
    assert recalled["content"] == first["content"]
    assert recalled["content"].encode("utf-8") == first["content"].encode("utf-8")
    # And the model's last request carried it whole.
    last = provider.sent[-1]
    assert any(m.get("content") == first["content"] for m in last if m.get("role") == "tool")
