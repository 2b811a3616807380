"""Cache-aligned summary requests through the OpenAI and Anthropic SDK summarizers.

An application sends its conversation with the real SDK clients through
`contextfold.formats`; a summarize rung asks the same model for summaries with
``openai_summarizer(..., aligned=True)`` / ``anthropic_summarizer(..., aligned=True)``. Each
summary request must repeat a request the application sent, byte for byte (model, tools,
system, messages and their ``cache_control`` breakpoints), then add only the instruction: that
is what lets the provider's prompt cache serve it. HTTP is answered in process.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from contextfold import ContextFold
from contextfold.formats import anthropic as anthropic_format
from contextfold.formats import openai_chat
from contextfold.summaries import anthropic_summarizer, openai_summarizer
from support import tool_round
from test_summaries_adapters import anthropic_reply, mock_client, openai_reply

try:  # the SDKs' HTTP library (renamed httpx2 in their newer releases)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDK releases
    import httpx  # type: ignore[no-redef]

SYSTEM_PROMPT = "You look topics up with the lookup tool and compare them."
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a topic up.",
            "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "lookup",
        "description": "Look a topic up.",
        "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}},
    }
]
LADDER = [
    "strip_thinking",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "truncate_tool_results",
    "drop_oldest",
]
INSTRUCTION = "Summarize only that transcript"
# Two summaries need the threshold planner's passes: a cost pass goes deep and drops the
# turns after its one summarized block.
PLANNER = "threshold"
SUMMARY = "Topics t0 onward were looked up with lookup; each result is a page of prose."


class Server:
    """Answers Chat Completions and Messages requests; keeps each body as sent (bytes)."""

    def __init__(self) -> None:
        self.conversation: list[bytes] = []
        self.summaries: list[bytes] = []

    def handle(self, request: Any) -> Any:
        body = request.read()
        summary = INSTRUCTION.encode() in body
        (self.summaries if summary else self.conversation).append(body)
        text = SUMMARY if summary else "Noted."
        if request.url.path.endswith("/messages"):
            return httpx.Response(200, json=anthropic_reply(text, model="claude-sonnet-5"))
        return httpx.Response(200, json=openai_reply(text, "stop"))

    def http(self) -> Any:
        return mock_client(self.handle)


def without_limit(body: bytes) -> dict[str, Any]:
    """A request as sent, less its output limit (a summary asks for its own)."""
    sent = json.loads(body)
    sent.pop("max_tokens", None)
    sent.pop("max_completion_tokens", None)
    return sent


def summary_prefixes(context: ContextFold, server: Server) -> list[dict[str, Any]]:
    """Each summary request less its instruction, checked to be a request the application
    sent; every summary call was an aligned one."""
    assert context.summary_stats.calls == len(server.summaries) >= 2
    assert context.summary_stats.aligned == context.summary_stats.calls
    sent = [without_limit(body) for body in server.conversation]
    prefixes = []
    for summary in server.summaries:
        prefix = without_limit(summary)
        assert INSTRUCTION in json.dumps(prefix["messages"][-1])
        prefix["messages"] = prefix["messages"][:-1]
        assert prefix in sent, "a summary request repeats no request the application sent"
        prefixes.append(prefix)
    return prefixes


async def test_openai_summary_requests_repeat_a_sent_request_then_the_instruction() -> None:
    server = Server()
    client = openai.AsyncOpenAI(api_key="k", http_client=server.http(), max_retries=0)
    summarizer = openai_summarizer(client, "gpt-4.1", aligned=True, tools=OPENAI_TOOLS)
    context = ContextFold(
        max_tokens=8_000, strategies=LADDER, summarizer=summarizer, planner=PLANNER
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Look up every topic and compare."},
    ]
    for n in range(30):
        messages += tool_round(n, result_chars=1_500, shape="openai")
        view = await openai_chat.view_for(context, messages, tools=OPENAI_TOOLS)
        response = await client.chat.completions.create(
            model="gpt-4.1", messages=view, tools=OPENAI_TOOLS, max_completion_tokens=500
        )
        await openai_chat.record_usage(context, response.usage)

    for prefix in summary_prefixes(context, server):
        assert prefix["tools"] == OPENAI_TOOLS and prefix["model"] == "gpt-4.1"


async def test_anthropic_summary_requests_repeat_a_sent_request_breakpoints_included() -> None:
    server = Server()
    client = anthropic.AsyncAnthropic(api_key="k", http_client=server.http(), max_retries=0)
    summarizer = anthropic_summarizer(
        client, "claude-sonnet-5", aligned=True, system=SYSTEM_PROMPT, tools=ANTHROPIC_TOOLS
    )
    context = ContextFold(
        max_tokens=8_000,
        strategies=LADDER,
        summarizer=summarizer,
        cache_breakpoints="anthropic",
        planner=PLANNER,
    )
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Look up every topic and compare."}
    ]
    for n in range(30):
        messages += tool_round(n, result_chars=1_500, shape="anthropic")
        view = await anthropic_format.view_for(
            context, messages, system=SYSTEM_PROMPT, tools=ANTHROPIC_TOOLS
        )
        response = await client.messages.create(
            model="claude-sonnet-5", max_tokens=500, tools=ANTHROPIC_TOOLS, **view.request()
        )
        await anthropic_format.record_usage(context, response.usage)

    for prefix in summary_prefixes(context, server):
        assert prefix["system"] == SYSTEM_PROMPT and prefix["tools"] == ANTHROPIC_TOOLS
        # The breakpoints the conversation's request carried are where the cache is read.
        assert "cache_control" in json.dumps(prefix["messages"])


async def test_without_aligned_the_sdk_summarizers_send_the_transcript_alone() -> None:
    server = Server()
    client = openai.AsyncOpenAI(api_key="k", http_client=server.http(), max_retries=0)
    summarizer = openai_summarizer(client, "gpt-4.1-mini", tools=OPENAI_TOOLS)
    assert summarizer.aligned_requests is False
    context = ContextFold(
        max_tokens=8_000, strategies=LADDER, summarizer=summarizer, planner=PLANNER
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Look up every topic."}]
    for n in range(30):
        messages += tool_round(n, result_chars=1_500, shape="openai")
        await openai_chat.view_for(context, messages)
    assert context.summary_stats.calls >= 2 and context.summary_stats.aligned == 0
    for body in server.summaries:
        request = json.loads(body)
        assert "tools" not in request and [m["role"] for m in request["messages"]] == [
            "system",
            "user",
        ]


def test_aligned_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="aligned must be True or False"):
        openai_summarizer(object(), "m", aligned="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="aligned must be True or False"):
        anthropic_summarizer(object(), "m", aligned=1)  # type: ignore[arg-type]
