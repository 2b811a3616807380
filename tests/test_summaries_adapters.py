"""The summarizer adapters through the real SDK clients (HTTP answered in process), and
through the real scripted Amplifier provider, whose summary answers are the digest."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from amplifier_core.message_models import ChatRequest, Message

from contextfold.amplifier.scripted_provider import ScriptedProvider, is_summary_request
from contextfold.summaries import (
    DEFAULT_SUMMARY_PROMPT,
    SUMMARY_REQUEST_MARKER,
    InMemorySummaryStore,
    SummaryFailure,
    SummaryFolder,
    SummaryPrompt,
    amplifier_summarizer,
    anthropic_summarizer,
    openai_summarizer,
    render_transcript,
    scripted_summarizer,
    summarize_span,
)
from contextfold.tokens import build_counter

try:  # the SDKs' HTTP library (renamed httpx2 in their newer releases)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDK releases
    import httpx  # type: ignore[no-redef]

COUNTER = build_counter("exact")
SPAN = [
    {"role": "user", "content": "Move ticket INC-2291 to the SRE queue."},
    {
        "role": "assistant",
        "content": "Moving it.",
        "tool_calls": [{"id": "call_9", "tool": "tickets", "arguments": {"id": "INC-2291"}}],
    },
    {"role": "tool", "tool_call_id": "call_9", "content": "INC-2291 moved to SRE"},
]
SUMMARY = "INC-2291 moved to the SRE queue (call_9)."


def mock_client(handler: Any) -> Any:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def openai_client(seen: list[dict[str, Any]], reply: dict[str, Any] | None = None) -> Any:
    def handler(request: Any) -> Any:
        assert request.method == "POST" and request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer test-key"
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=reply or openai_reply(SUMMARY, "stop"))

    return openai.AsyncOpenAI(api_key="test-key", http_client=mock_client(handler), max_retries=0)


def openai_reply(text: str | None, finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 12, "total_tokens": 212},
    }


def anthropic_reply(
    text: str, stop: str = "end_turn", model: str = "claude-haiku-4-5"
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 200, "output_tokens": 12},
    }


def anthropic_client(seen: list[dict[str, Any]], stop: str = "end_turn", status: int = 200) -> Any:
    def handler(request: Any) -> Any:
        assert request.method == "POST" and request.url.path == "/v1/messages"
        # The key travels as x-api-key, or as a bearer token in the SDK's newer releases.
        key = request.headers.get("x-api-key") or request.headers["authorization"]
        assert key.removeprefix("Bearer ") == "test-key"
        seen.append(json.loads(request.content))
        if status != 200:
            error = {"type": "overloaded_error", "message": "Overloaded"}
            return httpx.Response(status, json={"type": "error", "error": error})
        return httpx.Response(200, json=anthropic_reply(SUMMARY, stop))

    return anthropic.AsyncAnthropic(
        api_key="test-key", http_client=mock_client(handler), max_retries=0
    )


async def test_openai_adapter_sends_the_prompt_the_transcript_and_the_limit() -> None:
    seen: list[dict[str, Any]] = []
    summarizer = openai_summarizer(openai_client(seen), "gpt-4o-mini")
    answer = await summarize_span(summarizer, SPAN, max_tokens=300, counter=COUNTER)
    assert answer == SUMMARY
    (body,) = seen
    assert body["model"] == "gpt-4o-mini"
    assert body["max_completion_tokens"] == 300 and "max_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": DEFAULT_SUMMARY_PROMPT.text},
        {"role": "user", "content": render_transcript(SPAN)},
    ]
    assert "call_9" in body["messages"][1]["content"]
    assert summarizer.name == "openai:gpt-4o-mini"


async def test_openai_adapter_can_send_max_tokens_for_older_servers() -> None:
    seen: list[dict[str, Any]] = []
    client = openai_client(seen)
    summarizer = openai_summarizer(client, "local-model", limit_parameter="max_tokens")
    assert await summarizer(SPAN, 120) == SUMMARY
    assert seen[0]["max_tokens"] == 120 and "max_completion_tokens" not in seen[0]
    with pytest.raises(ValueError, match="limit_parameter"):
        openai_summarizer(client, "m", limit_parameter="max_output")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (openai_reply(SUMMARY, "length"), "cut_off"),
        (openai_reply(None, "stop"), "not_text"),
        (openai_reply("", "stop"), "empty"),
    ],
)
async def test_openai_answers_that_are_no_summary(reply: dict[str, Any], reason: str) -> None:
    summarizer = openai_summarizer(openai_client([], reply), "gpt-4o-mini")
    failure = await summarize_span(summarizer, SPAN, max_tokens=300, counter=COUNTER)
    assert isinstance(failure, SummaryFailure) and failure.reason == reason


async def test_anthropic_adapter_sends_system_messages_and_max_tokens() -> None:
    seen: list[dict[str, Any]] = []
    summarizer = anthropic_summarizer(anthropic_client(seen), "claude-haiku-4-5")
    answer = await summarize_span(summarizer, SPAN, max_tokens=256, counter=COUNTER)
    assert answer == SUMMARY
    (body,) = seen
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 256
    assert body["system"] == DEFAULT_SUMMARY_PROMPT.text
    assert body["messages"] == [{"role": "user", "content": render_transcript(SPAN)}]
    assert summarizer.name == "anthropic:claude-haiku-4-5"


async def test_anthropic_cut_off_and_http_errors_are_failures_not_summaries() -> None:
    cut = anthropic_summarizer(anthropic_client([], stop="max_tokens"), "claude-haiku-4-5")
    failure = await summarize_span(cut, SPAN, max_tokens=256, counter=COUNTER)
    assert isinstance(failure, SummaryFailure) and failure.reason == "cut_off"

    store = InMemorySummaryStore()
    overloaded = anthropic_summarizer(anthropic_client([], status=529), "claude-haiku-4-5")
    result = await SummaryFolder(overloaded, store=store, counter=COUNTER).fold(
        None, SPAN, [0, 1, 2]
    )
    assert result.record is None and result.failure is not None
    assert result.failure.reason == "error" and "529" in result.failure.detail
    assert await store.records() == []


async def test_a_custom_prompt_is_sent_and_named_in_the_record() -> None:
    seen: list[dict[str, Any]] = []
    prompt = "Summarize tersely; keep ticket ids."
    summarizer = openai_summarizer(openai_client(seen), "gpt-4o-mini", prompt=prompt)
    result = await SummaryFolder(summarizer, counter=COUNTER).fold(None, SPAN, [0, 1, 2])
    assert seen[0]["messages"][0]["content"] == prompt
    assert result.record is not None
    assert result.record.prompt_id == SummaryPrompt.custom(prompt).id
    assert result.record.prompt_id.startswith("custom-") and result.record.prompt_version == 1
    assert result.record.summarizer == "openai:gpt-4o-mini"


async def test_amplifier_adapter_against_the_scripted_provider() -> None:
    provider = ScriptedProvider({"script": [{"text": "the scripted chat reply"}]})
    summarizer = amplifier_summarizer(provider)
    offline = scripted_summarizer(COUNTER)
    answer = await summarize_span(summarizer, SPAN, max_tokens=80, counter=COUNTER)
    assert answer == await offline(SPAN, 80)  # one digest, with or without a provider
    assert "INC-2291" in answer and "call_9" in answer
    (record,) = provider.records
    assert record.purpose == "summary" and not record.rejected
    assert record.output_tokens == COUNTER.count_text(answer)
    assert record.request_tokens > COUNTER.count_text(DEFAULT_SUMMARY_PROMPT.text)
    # The summary did not consume the chat script: the next chat request gets its step.
    chat = await provider.complete(ChatRequest(messages=[Message(role="user", content="hi")]))
    assert chat.content[0].text == "the scripted chat reply"
    assert [r.purpose for r in provider.records] == ["summary", "chat"]


async def test_the_scripted_answer_respects_max_tokens() -> None:
    provider = ScriptedProvider()
    long_span = [{"role": "user", "content": f"item {i}: " + "alpha " * 50} for i in range(40)]
    summarizer = amplifier_summarizer(provider)
    for limit in (20, 60, 200):
        answer = await summarize_span(summarizer, long_span, max_tokens=limit, counter=COUNTER)
        assert isinstance(answer, str) and COUNTER.count_text(answer) <= limit


async def test_summary_requests_have_their_own_cache_lane() -> None:
    provider = ScriptedProvider({"script": [{"text": "one"}, {"text": "two"}]})
    chat = [Message(role="system", content="You help."), Message(role="user", content="go")]
    await provider.complete(ChatRequest(messages=chat))
    await amplifier_summarizer(provider)(SPAN, 80)
    await provider.complete(ChatRequest(messages=chat))
    chat_records = [r for r in provider.records if r.purpose == "chat"]
    # The summary between them did not evict the conversation's cached prefix.
    assert chat_records[1].cache_read_tokens == chat_records[1].request_tokens


def test_summary_requests_are_recognised_by_metadata_or_marker() -> None:
    user = Message(role="user", content="text")
    tagged = ChatRequest(messages=[user], metadata={"contextfold": {"purpose": "summary"}})
    marked = ChatRequest(
        messages=[Message(role="system", content=DEFAULT_SUMMARY_PROMPT.text), user]
    )
    assert DEFAULT_SUMMARY_PROMPT.text.startswith(SUMMARY_REQUEST_MARKER)
    assert is_summary_request(tagged) and is_summary_request(marked)
    plain = ChatRequest(messages=[Message(role="system", content="You help."), user])
    other_metadata = ChatRequest(messages=[user], metadata={"contextfold": {"purpose": "chat"}})
    quoted = ChatRequest(
        messages=[Message(role="system", content=f"Never say {SUMMARY_REQUEST_MARKER}"), user]
    )
    assert not any(is_summary_request(r) for r in (plain, other_metadata, quoted))


async def test_a_summary_request_over_the_window_is_refused_and_recorded() -> None:
    from amplifier_core.llm_errors import ContextLengthError

    provider = ScriptedProvider({"context_window": 600, "max_output_tokens": 100})
    huge = [{"role": "user", "content": "beta " * 2_000}]
    with pytest.raises(ContextLengthError):
        await amplifier_summarizer(provider)(huge, 50)
    (record,) = provider.records
    assert record.rejected and record.purpose == "summary"


async def test_summary_usage_is_reported_and_marked_on_llm_response() -> None:
    class Hooks:
        def __init__(self) -> None:
            self.events: list[tuple[str, dict[str, Any]]] = []

        async def emit(self, event: str, data: dict[str, Any]) -> None:
            self.events.append((event, data))

    hooks = Hooks()
    provider = ScriptedProvider(hooks=hooks)
    answer = await amplifier_summarizer(provider)(SPAN, 80)
    responses = [data for event, data in hooks.events if event == "llm:response"]
    assert len(responses) == 1 and responses[0]["purpose"] == "summary"
    assert responses[0]["usage"]["output_tokens"] == COUNTER.count_text(answer)
