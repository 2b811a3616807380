"""Amplifier provider module ``provider-scripted``: a deterministic, offline stand-in for an LLM.

It replays a script of replies and tool calls, but everything around the replies is measured
the way a real provider would report it: the input of each request is counted with a real
tokenizer (o200k_base), prompt-cache reads and writes are derived from the longest prefix the
request shares with the previous one (or, for a request carrying Anthropic ``cache_control``
marks, by Anthropic's breakpoint rules: see ``scripted_cache``), a request over the usable
window is refused with
amplifier-core's ``ContextLengthError`` (or, with ``enforce_window: false``, served and marked
overflowed), and usage is reported on ``llm:response`` like a vendor provider does. Each request
leaves a :class:`RequestRecord` in ``provider.records`` for reports and charts.

It can also count a request before sending it (``count_request``, advertised by
``supports_request_count``; config ``count_requests: false`` turns it off): the complete
request (system, tool schemas, messages) is counted exactly as ``complete`` bills it, and the
answer is the budget decision of the negotiated measured-request path (see
``contextfold.measured``). A request's ``max_output_tokens`` below the model's lowers the
output reserve, so the input allowance grows with a smaller output cap.

Script forms (config ``script``)::

    [{"text": "..."}, {"tool_calls": [{"name": "lookup", "arguments": {...}}], "text": "..."}]
    {"steps": 3, "tool": "lookup", "argument": "topic", "final_text": "Done."}

The generator form yields ``steps`` tool-using replies (topics "topic 1".."topic N") and then
the final text. When the script runs out the provider answers with a closing text instead of
failing, so a loop always terminates.

Shapes of real providers, so a whole session can meet what production meets:

* ``reply_shape: "anthropic-thinking"`` (default ``"plain"``): every reply starts with a signed
  ``ThinkingBlock`` (a few hundred words, a signature of several hundred base64 characters),
  then the text, then the tool calls as ``ToolCallBlock`` s, as Amplifier's Anthropic
  provider returns them.
* ``call_ids: "per_response"`` (default ``"unique"``): tool call ids restart at ``call_0`` in
  every response, as some OpenAI-compatible backends number them.
* ``context_editing: {"type": "clear_tool_uses", ...}`` (default none): Anthropic's
  server-side context editing, applied to every chat request before it is measured (see
  ``contextfold.context_editing``; the trigger left out is the documented 100,000 tokens
  scaled to ``context_window``). Each record says how many tool uses it cleared.
* ``cache_min_tokens`` (default 1,024): the shortest prefix a breakpoint caches.
* ``strict_sequence: true`` (default false): each request is checked the way real providers
  check it (see :class:`SequenceChecker`) and refused with a non-retryable
  ``InvalidRequestError`` on a sequence fault; every request's check is kept on its record.

Summary requests are answered offline too. A request is one when its ``metadata`` has
``{"contextfold": {"purpose": "summary"}}`` (what ``contextfold.summaries``'
``amplifier_summarizer`` sends) or its first system message starts with
``SUMMARY_REQUEST_MARKER`` (the first line of the default summary prompt). The answer is the
deterministic extractive digest of the transcript in its user message
(:func:`contextfold.summaries.digest.digest_transcript`), within the request's
``max_output_tokens``. It is measured like any request (a record with ``purpose="summary"``,
usage on ``llm:response`` with ``"purpose": "summary"``), does not consume a script step, and
has its own prompt-cache lane, as a real provider caches each distinct prefix apart. A
cache-aligned summary request (its metadata names the span: ``"aligned": {...}``, see
``contextfold.summaries.aligned``) is the conversation as last sent and an instruction: it is
measured against the conversation's cache (by the breakpoint rules when it carries marks),
without changing what that cache remembers for the next chat request, and its record says
``cache_lane="conversation"``; the digest is of the span it names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from amplifier_core.llm_errors import ContextLengthError
from amplifier_core.message_models import (
    ChatRequest,
    ChatResponse,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from amplifier_core.models import ModelInfo, ProviderInfo

from contextfold.amplifier.scripted_cache import (
    BreakpointCache,
    PrefixCache,
    block_count,
    cache_marks_of,
    unmarked,
)
from contextfold.amplifier.scripted_script import (
    CALL_ID_MODES,
    EXHAUSTED_TEXT,
    REPLY_SHAPES,
    ScriptedConfig,
    ScriptStep,
    parse_script,
)
from contextfold.amplifier.scripted_thinking import (
    SIGNATURE_CHARS,
    THINKING_WORDS,
    thinking_signature,
    thinking_text,
)
from contextfold.amplifier.sequence_check import (
    EmittedReply,
    SequenceCheck,
    SequenceChecker,
    canonical,
    sequence_refusal,
    text_content,
)
from contextfold.context_editing import clear_tool_uses
from contextfold.summaries.digest import digest_transcript
from contextfold.summaries.summarizer import SUMMARY_METADATA_KEY, SUMMARY_REQUEST_MARKER
from contextfold.summaries.transcript import SUMMARY_REQUEST_KEY, render_transcript
from contextfold.tokens import ExactCounter, TokenCounter

__all__ = [
    "CALL_ID_MODES",
    "EXHAUSTED_TEXT",
    "PROVIDER_NAME",
    "REPLY_SHAPES",
    "SIGNATURE_CHARS",
    "THINKING_WORDS",
    "RequestRecord",
    "ScriptStep",
    "ScriptedConfig",
    "ScriptedProvider",
    "SequenceCheck",
    "SequenceChecker",
    "is_summary_request",
    "mount",
    "parse_script",
    "thinking_signature",
    "thinking_text",
    "window_exceeded_error",
]

logger = logging.getLogger(__name__)

PROVIDER_NAME = "scripted"


@dataclass
class RequestRecord:
    """What one request cost, as the provider measured it.

    ``input_tokens + cache_write_tokens`` is always the full request size (exact count times
    ``usage_ratio``): ``input_tokens`` is gross input (cache reads plus any uncached part),
    ``cache_write_tokens`` the part newly written to the cache. A refused request
    (``rejected``) caches nothing, so its whole size is in ``input_tokens``.
    """

    index: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    message_count: int
    window: int
    overflowed: bool
    rejected: bool = False
    sequence: SequenceCheck | None = None  # what strict_sequence checked (None when off)
    purpose: str = "chat"  # "summary" for a summary request (see the module docstring)
    # Tokens the request shares with the previous one from the start (what an automatic
    # prefix cache reads), whichever rule billed it.
    prefix_tokens: int = 0
    cache_rule: str = "automatic"  # "breakpoints" when the request carried cache_control marks
    cleared_tool_uses: int = 0
    # Which cache a summary request was measured against: its own lane, or the
    # conversation's (a cache-aligned request).
    cache_lane: str = "own"  # tool results server-side context editing cleared

    @property
    def fresh_tokens(self) -> int:
        """Input neither read from nor written to the cache."""
        return self.input_tokens - self.cache_read_tokens

    @property
    def request_tokens(self) -> int:
        """The full size of the request in tokens (what the window is compared with)."""
        return self.input_tokens + self.cache_write_tokens


def window_exceeded_error(
    *, requested: int, limit: int, context_window: int, model: str
) -> ContextLengthError:
    """amplifier-core's own ``ContextLengthError``, as a vendor provider raises it, with the
    numbers in the text (``limit N``) and as attributes ``limit`` and ``requested``."""
    error = ContextLengthError(
        f"Request input is {requested} tokens, over the limit {limit} "
        f"(context_window {context_window} minus max_output_tokens) of model {model}. "
        "Send fewer or smaller messages.",
        provider=PROVIDER_NAME,
        model=model,
        status_code=400,
        retryable=False,
    )
    # The figures ride on the instance: the kernel's class has no fields for them.
    error.limit = limit  # type: ignore[attr-defined]
    error.requested = requested  # type: ignore[attr-defined]
    return error


class ScriptedProvider:
    """A provider that replays a script and measures requests like a real one."""

    def __init__(
        self,
        config: ScriptedConfig | Mapping[str, Any] | None = None,
        *,
        counter: TokenCounter | None = None,
        hooks: Any | None = None,
    ) -> None:
        self.config = (
            config if isinstance(config, ScriptedConfig) else ScriptedConfig.from_mapping(config)
        )
        self.counter = counter if counter is not None else ExactCounter("o200k_base")
        self.hooks = hooks
        self.records: list[RequestRecord] = []
        self.count_calls = 0  # count_request calls made (the measured path's cost)
        self._cursor = 0
        self._call_serial = 0
        self._cache = PrefixCache()
        self._summary_cache = PrefixCache()
        self._breakpoints = BreakpointCache(self.config.cache_min_tokens)
        self.emitted: list[EmittedReply] = []
        self._checker = SequenceChecker(
            check_thinking=self.config.reply_shape == "anthropic-thinking"
        )

    # -- Provider protocol -------------------------------------------------------------

    @property
    def name(self) -> str:
        return PROVIDER_NAME

    @property
    def default_model(self) -> str:
        """The model every reply is attributed to (per-model calibration keys on it)."""
        return self.config.model

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(
            id=PROVIDER_NAME,
            display_name="Scripted (offline)",
            capabilities=["tools"],
            defaults={
                "model": self.config.model,
                "context_window": self.config.context_window,
                "max_output_tokens": self.config.max_output_tokens,
            },
        )

    def get_model_info(self) -> ModelInfo:
        return ModelInfo(
            id=self.config.model,
            display_name=f"{self.config.model} (scripted)",
            context_window=self.config.context_window,
            max_output_tokens=self.config.max_output_tokens,
            capabilities=["tools"],
        )

    async def list_models(self) -> list[ModelInfo]:
        return [self.get_model_info()]

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])

    @property
    def supports_request_count(self) -> bool:
        """Whether ``count_request`` is offered (the measured-request path's provider side)."""
        return self.config.count_requests

    async def count_request(self, request: ChatRequest) -> dict[str, Any]:
        """Count ``request`` exactly as ``complete`` would bill it (system, tool schemas and
        messages, times ``usage_ratio``): the budget decision of the measured path."""
        if not self.config.count_requests:
            raise RuntimeError("provider-scripted: request counting is off (count_requests)")
        self.count_calls += 1
        messages, tools = _payload(request)
        messages, _marks, _cleared = self._prepared(messages, tools)
        total = self._scaled(self._raw_size(messages, tools)[0])
        return {
            "estimated_input_tokens": total,
            "input_limit_tokens": self.config.window_for(request.max_output_tokens),
            "measurement": {
                "kind": "provider_count",
                "source": f"{PROVIDER_NAME}.count_request",
                "input_tokens": total,
            },
        }

    def _prepared(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[int], int]:
        """A chat request's messages as the provider bills them, the positions of its
        ``cache_control`` marks, and the tool uses server-side editing cleared: the marks
        are read and taken off (never billed), then ``context_editing`` applies."""
        marks = cache_marks_of(messages)
        if marks:
            messages = [unmarked(message) for message in messages]
        edit = self.config.context_editing
        if edit is None:
            return messages, marks, 0
        overhead = self.counter.count_tools(tools) if tools else 0
        edited = clear_tool_uses(messages, edit, self.counter.count_message, overhead)
        return [dict(m) for m in edited.messages], marks, edited.cleared_uses

    def _raw_size(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[int, list[int], int]:
        """The request's exact size before ``usage_ratio``, its messages' costs, its tools'."""
        message_costs = [self.counter.count_message(m) for m in messages]
        tools_cost = self.counter.count_tools(tools) if tools else 0
        return tools_cost + sum(message_costs), message_costs, tools_cost

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        messages, tools = _payload(request)
        if is_summary_request(request):
            return await self._answer_summary(request, messages, tools)
        await self._emit(
            "llm:request",
            {
                "provider": PROVIDER_NAME,
                "model": self.config.model,
                "message_count": len(messages),
                "tool_count": len(tools),
            },
        )
        messages, marks, cleared = self._prepared(messages, tools)
        raw, message_costs, tools_cost = self._raw_size(messages, tools)
        total = self._scaled(raw)
        window = self.config.window_for(request.max_output_tokens)
        index = len(self.records)

        sequence = None
        if self.config.strict_sequence:
            sequence = self._checker.check(messages, self.emitted)
            if not sequence.ok:
                self.records.append(_refused(index, total, len(messages), window, sequence))
                raise sequence_refusal(sequence, provider=PROVIDER_NAME, model=self.config.model)

        if total > window and self.config.enforce_window:
            self.records.append(_refused(index, total, len(messages), window, sequence))
            raise window_exceeded_error(
                requested=total,
                limit=window,
                context_window=self.config.context_window,
                model=self.config.model,
            )

        tools_key = canonical({"tools": tools})
        keys = [canonical(m) for m in messages]
        prefix = self._scaled(self._cache.shared(tools_key, tools_cost, keys, message_costs))
        if marks:
            blocks = [block_count(m) for m in messages]
            bill = self._breakpoints.bill(tools_key, tools_cost, keys, message_costs, blocks, marks)
            cache_read = self._scaled(bill.read)
            cache_write = min(self._scaled(bill.read + bill.write), total) - cache_read
        else:
            cache_read, cache_write = prefix, total - prefix
        input_tokens = total - cache_write  # gross input: cache reads and fresh input
        step = self._next_step()
        content, calls, thinking = self._reply(step)
        output = self._scaled(self._output_cost(step, thinking))
        self.records.append(
            RequestRecord(
                index=index,
                input_tokens=input_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                output_tokens=output,
                message_count=len(messages),
                window=window,
                overflowed=total > window,
                sequence=sequence,
                prefix_tokens=prefix,
                cache_rule="breakpoints" if marks else "automatic",
                cleared_tool_uses=cleared,
            )
        )
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "total_tokens": input_tokens + cache_write + output,
        }
        await self._emit(
            "llm:response",
            {"provider": PROVIDER_NAME, "model": self.config.model, "usage": usage, "status": "ok"},
        )
        return ChatResponse(
            content=content,
            tool_calls=calls or None,
            usage=Usage.model_validate(usage),
            finish_reason="tool_use" if calls else "end_turn",
            metadata={"model": self.config.model, "script_step": self._cursor - 1},
        )

    # -- summary requests ----------------------------------------------------------------

    async def _answer_summary(
        self, request: ChatRequest, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        """Answer a summary request with the digest, measured and recorded like any request."""
        purpose = {"purpose": "summary"}
        await self._emit(
            "llm:request",
            {"provider": PROVIDER_NAME, "model": self.config.model, **purpose,
             "message_count": len(messages), "tool_count": 0},
        )  # fmt: skip
        message_costs = [self.counter.count_message(m) for m in messages]
        total = self._scaled(sum(message_costs))
        index = len(self.records)
        if total > self.config.window and self.config.enforce_window:
            refused = _refused(index, total, len(messages), self.config.window, None)
            refused.purpose = "summary"
            self.records.append(refused)
            raise window_exceeded_error(
                requested=total,
                limit=self.config.window,
                context_window=self.config.context_window,
                model=self.config.model,
            )
        aligned = _aligned_span(request)
        lane = "own"
        cache_write = None
        marks: list[int] = []
        if aligned is not None and len(messages) > aligned["last"] + 1:
            # The conversation as last sent (its tool schemas too), then the instruction:
            # read from the conversation's cache, which keeps remembering the last chat
            # request for the next one.
            lane = "conversation"
            prepared, marks, _ = self._prepared(messages, tools)
            raw, message_costs, tools_cost = self._raw_size(prepared, tools)
            total = self._scaled(raw)
            keys = [canonical(m) for m in prepared]
            tools_key = canonical({"tools": tools})
            shared = self._cache.peek(tools_key, tools_cost, keys, message_costs)
            cache_read = self._scaled(shared)
            if marks:
                blocks = [block_count(m) for m in prepared]
                bill = self._breakpoints.bill(
                    tools_key, tools_cost, keys, message_costs, blocks, marks
                )
                cache_read = self._scaled(bill.read)
                cache_write = min(self._scaled(bill.read + bill.write), total) - cache_read
            tagged = {**messages[-1], "metadata": {SUMMARY_REQUEST_KEY: aligned}}
            transcript = render_transcript([*messages[:-1], tagged])
        else:
            # The summary prompt is a prefix of its own: measure it against the previous
            # summary request, leaving the conversation's cache lane as it was.
            keys = [canonical(m) for m in messages]
            shared = self._summary_cache.shared(canonical({"tools": []}), 0, keys, message_costs)
            cache_read = self._scaled(shared)
            transcript = "\n".join(text_content(m) for m in messages if m.get("role") == "user")
        if cache_write is None:
            cache_write = total - cache_read
        limit = min(request.max_output_tokens or self.config.max_output_tokens,
                    self.config.max_output_tokens)  # fmt: skip
        answer = digest_transcript(transcript, limit, self.counter)
        output = self._scaled(self.counter.count_text(answer)) if answer else 0
        self.records.append(
            RequestRecord(
                index=index,
                input_tokens=total - cache_write,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                output_tokens=output,
                message_count=len(messages),
                window=self.config.window,
                overflowed=total > self.config.window,
                purpose="summary",
                prefix_tokens=cache_read,
                cache_rule="breakpoints" if lane == "conversation" and marks else "automatic",
                cache_lane=lane,
            )
        )
        usage = {
            "input_tokens": total - cache_write,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "total_tokens": total + output,
        }
        await self._emit(
            "llm:response",
            {"provider": PROVIDER_NAME, "model": self.config.model, **purpose,
             "usage": usage, "status": "ok"},
        )  # fmt: skip
        return ChatResponse(
            content=[TextBlock(text=answer)] if answer else [],
            usage=Usage.model_validate(usage),
            finish_reason="end_turn",
            metadata={"model": self.config.model, **purpose},
        )

    # -- internals ---------------------------------------------------------------------

    def _scaled(self, raw: int) -> int:
        return round(raw * self.config.usage_ratio)

    def _next_step(self) -> ScriptStep:
        if self._cursor < len(self.config.script):
            step = self.config.script[self._cursor]
        else:
            step = ScriptStep(text=EXHAUSTED_TEXT)
        self._cursor += 1
        return step

    def _reply(self, step: ScriptStep) -> tuple[list[Any], list[ToolCall], str]:
        """The reply's content blocks and tool calls in the configured shape; remembered."""
        response_index = len(self.emitted)
        calls = [
            self._tool_call(position, name, args)
            for position, (name, args) in enumerate(step.tool_calls)
        ]
        content: list[Any] = [TextBlock(text=step.text)] if step.text else []
        thinking_block = None
        if self.config.reply_shape == "anthropic-thinking":
            # Amplifier's Anthropic provider: thinking first, then text, then the tool calls.
            thinking = thinking_text(response_index, step.text)
            thinking_block = ThinkingBlock(
                thinking=thinking, signature=thinking_signature(response_index, thinking)
            )
            content = [
                thinking_block,
                *content,
                *(ToolCallBlock(id=c.id, name=c.name, input=dict(c.arguments)) for c in calls),
            ]
        self.emitted.append(
            EmittedReply(
                index=response_index,
                text=step.text,
                calls=tuple((c.id, c.name, canonical({"a": dict(c.arguments)})) for c in calls),
                thinking=thinking_block.model_dump(exclude_none=True) if thinking_block else None,
            )
        )
        return content, calls, thinking_block.thinking if thinking_block else ""

    def _tool_call(self, position: int, name: str, arguments: dict[str, Any]) -> ToolCall:
        if self.config.call_ids == "per_response":
            return ToolCall(id=f"call_{position}", name=name, arguments=dict(arguments))
        self._call_serial += 1
        return ToolCall(id=f"call_{self._call_serial:04d}", name=name, arguments=dict(arguments))

    def _output_cost(self, step: ScriptStep, thinking: str = "") -> int:
        cost = self.counter.count_text(thinking) if thinking else 0
        cost += self.counter.count_text(step.text) if step.text else 0
        for name, arguments in step.tool_calls:
            cost += self.counter.count_text(name) + self.counter.count_text(canonical(arguments))
        return cost

    async def _emit(self, event: str, data: dict[str, Any]) -> None:
        if self.hooks is None:
            return
        try:
            await self.hooks.emit(event, data)
        except Exception:  # observability must never break a request
            logger.warning("provider-scripted: emitting %s failed", event, exc_info=True)


def _payload(request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tool schemas a request sends. Metadata is bookkeeping for the
    context manager; a real provider never sends it."""
    messages = [m.model_dump(exclude_none=True, exclude={"metadata"}) for m in request.messages]
    tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
    return messages, tools


def _aligned_span(request: ChatRequest) -> dict[str, Any] | None:
    """The span a cache-aligned summary request names in its metadata, or None."""
    tag = (request.metadata or {}).get(SUMMARY_METADATA_KEY)
    span = tag.get("aligned") if isinstance(tag, Mapping) else None
    if not isinstance(span, Mapping) or not isinstance(span.get("last"), int):
        return None
    return dict(span)


def is_summary_request(request: ChatRequest) -> bool:
    """Whether ``request`` asks for a summary (see the module docstring for the two signals)."""
    tag = (request.metadata or {}).get(SUMMARY_METADATA_KEY)
    if isinstance(tag, Mapping) and tag.get("purpose") == "summary":
        return True
    system = next((m for m in request.messages if m.role == "system"), None)
    return (
        system is not None
        and isinstance(system.content, str)
        and system.content.startswith(SUMMARY_REQUEST_MARKER)
    )


def _refused(
    index: int, total: int, message_count: int, window: int, sequence: SequenceCheck | None
) -> RequestRecord:
    """The record of a refused request: it caches nothing, so its whole size is uncached."""
    return RequestRecord(
        index=index,
        input_tokens=total,
        cache_read_tokens=0,
        cache_write_tokens=0,
        output_tokens=0,
        message_count=message_count,
        window=window,
        overflowed=total > window,
        rejected=True,
        sequence=sequence,
    )


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount the scripted provider at ``providers`` under the name ``scripted``."""
    provider = ScriptedProvider(ScriptedConfig.from_mapping(config), hooks=coordinator.hooks)
    await coordinator.mount("providers", provider, name=PROVIDER_NAME)
