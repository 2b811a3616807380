"""``context_recall(query=...)``: the model searches what left its view, by description, and
reads a match by its id; every failure is a result it can act on, never an exception."""

from __future__ import annotations

from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.testing import MockCoordinator

from contextfold import ContextFold
from contextfold.amplifier.recall_tool import mount
from support import SYSTEM, assert_pairing, hook_note, human, reply


def crowded() -> list[dict[str, Any]]:
    """A finding early on, then enough bulk that a small window leaves it out."""
    messages: list[dict[str, Any]] = [SYSTEM, human("Find the broken export.")]
    note = "Export audit. " + "Every file of the batch was read. " * 12
    messages.append(hook_note(note + "The broken one is /srv/exports/eu-7/orders-516.csv."))
    for n in range(30):
        messages.append(reply(f"Step {n}: " + "checking the next batch of files. " * 40))
    messages.append(human("Now fix it."))
    return messages


async def tool_for(context: Any) -> Any:
    coordinator = MockCoordinator()
    await coordinator.mount("context", context)
    await mount(coordinator, {})
    return coordinator.get("tools")["context_recall"]


async def test_a_query_lists_matches_out_of_view_with_the_id_that_reads_each() -> None:
    context = ContextFold(max_tokens=2500)
    await context.set_messages(crowded())
    view = await context.get_messages_for_request()
    assert not any("orders-516" in str(m.get("content")) for m in view)
    tool = await tool_for(context)
    result = await tool.execute({"query": "the broken export file"})
    assert result.success
    lines = result.output.splitlines()
    assert "out of your view" in lines[0] and 'context_recall(id="...")' in lines[0]
    assert lines[1].startswith("r2 (user): ") and "broken" in lines[1]
    read = await tool.execute({"id": "r2"})
    assert read.success and read.output == crowded()[2]["content"]
    limited = await tool.execute({"query": "checking batch files", "limit": 2})
    assert limited.success and len(limited.output.splitlines()) == 3


async def test_a_query_that_finds_nothing_out_of_view_says_so() -> None:
    context = ContextFold(max_tokens=200_000)  # nothing compacted: everything is in view
    await context.set_messages(crowded())
    await context.get_messages_for_request()
    result = await (await tool_for(context)).execute({"query": "broken export quoting"})
    assert result.success and result.output.startswith("No message out of your view matches")


async def test_a_snippet_with_a_lone_surrogate_reaches_the_model_well_formed() -> None:
    messages = crowded()
    messages[2] = hook_note("tachograph dump \udcff\udcfe " + "from the broken export. " * 20)
    context = ContextFold(max_tokens=2500)
    await context.set_messages(messages)
    await context.get_messages_for_request()
    result = await (await tool_for(context)).execute({"query": "tachograph dump"})
    assert result.success and "\ufffd" in result.output
    result.output.encode("utf-8")  # no lone surrogate left


@pytest.mark.parametrize(
    ("tool_input", "text"),
    [
        ({"query": ""}, "search takes a query"),
        ({"query": "the of and"}, "no word to search by"),
        ({"query": 42}, "search takes a query"),
        ({"query": "export", "limit": 0}, "from 1 to 10"),
        ({"query": "export", "limit": 11}, "from 1 to 10"),
        ({"query": "export", "limit": "5"}, "whole number"),
        ({"query": "export", "limit": True}, "whole number"),
        ({"query": "export", "offset": 3}, "'offset' goes with 'id'"),
        ({"query": "export", "id": "r2"}, "not both"),
        ({"query": "export", "page": 2}, "unknown: ['page']"),
    ],
)
async def test_a_bad_query_is_an_error_result(tool_input: dict[str, Any], text: str) -> None:
    context = ContextFold(max_tokens=2500)
    await context.set_messages(crowded())
    result = await (await tool_for(context)).execute(tool_input)
    assert result.success is False
    assert result.error["type"] == "invalid_input" and text in result.error["message"]


class NoSearch:
    async def get_messages(self) -> list[dict[str, Any]]:
        return crowded()


class BrokenStore(ContextFold):
    async def search(self, query: str, limit: int = 5) -> Any:
        raise OSError("disk on fire")


async def test_a_context_without_search_or_one_that_fails_is_an_error_result() -> None:
    result = await (await tool_for(NoSearch())).execute({"query": "export"})
    assert result.success is False and result.error["type"] == "no_search"
    assert "by the id" in result.error["message"]
    broken = BrokenStore(max_tokens=2500)
    await broken.set_messages(crowded())
    result = await (await tool_for(broken)).execute({"query": "export"})
    assert result.success is False and result.error["type"] == "history_unavailable"
    assert "disk on fire" in result.error["message"]


# -- in the real kernel -----------------------------------------------------------------------

LOOKUPS = 8


async def test_an_agent_finds_a_cleared_result_by_description_and_reads_it() -> None:
    topics = ["tidal energy harbour", *(f"topic {n}" for n in range(2, LOOKUPS + 1))]
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "lookup", "arguments": {"topic": topic}}]} for topic in topics
    ]
    script += [
        {"tool_calls": [{"name": "context_recall", "arguments": {"query": "tidal energy"}}]},
        {"tool_calls": [{"name": "context_recall", "arguments": {"id": "r2"}}]},
        {"text": "Found and re-read the tidal energy document."},
    ]
    plan = {
        "session": {
            "orchestrator": {"module": "loop-fold", "config": {}},
            "context": {
                "module": "context-fold",
                "config": {
                    "max_tokens": 5_000,
                    "token_counter": "exact",
                    "protected_tool_results": 2,
                    "strategies": [{"name": "clear_tool_results", "keep_last": 2}, "drop_oldest"],
                },
            },
        },
        "providers": [{"module": "provider-scripted", "config": {"script": script}}],
        "tools": [
            {"module": "tool-doc-lookup", "config": {"result_chars": 3_000}},
            {"module": "tool-context-recall", "config": {}},
        ],
        "hooks": [],
    }
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        answer = await session.execute("Look up the topics, then find the tidal one again.")
        context = session.coordinator.get("context")
        history = await context.get_messages()
        view = await context.get_messages_for_request()
    finally:
        await session.cleanup()
    assert answer == "Found and re-read the tidal energy document."
    first = history[2]
    assert first["role"] == "tool" and "tidal energy harbour" in first["content"].lower()
    calls = [i for i, m in enumerate(history) if m.get("tool_calls")]
    search_result = history[calls[-2] + 1]
    listing = search_result["content"].splitlines()
    assert listing[1].startswith("r2 (tool): ")  # the cleared result, found by description
    read_result = history[calls[-1] + 1]
    assert read_result["content"] == first["content"]
    assert_pairing(view)
