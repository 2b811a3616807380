"""The summarizer: any async ``(messages, max_tokens) -> str``, adapters, and a safe call.

A summarizer is only ever called through :func:`summarize_span`, which bounds it with a
timeout and checks its answer. Whatever goes wrong (an exception, a timeout, an empty, cut or
oversized answer, something that is not text) comes back as a :class:`SummaryFailure` with
the reason, never as text: an error message must not become a summary (LangChain's
summarization middleware once stored the error text as the summary and a user lost 195
messages of context).

The adapters send the span as one rendered transcript under the summary prompt (see
:mod:`contextfold.summaries.transcript`). The summary request is recognisable two ways, so an
offline provider can answer it (``provider-scripted`` does): Amplifier requests carry
``metadata={"contextfold": {"purpose": "summary", ...}}`` (:data:`SUMMARY_METADATA_KEY`), and
the default prompt starts with :data:`SUMMARY_REQUEST_MARKER` on its first line.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from contextfold.request_forms import AnthropicSystem, anthropic_messages, openai_chat_messages
from contextfold.summaries.digest import digest_transcript
from contextfold.summaries.records import ill_formed_at
from contextfold.summaries.transcript import aligned_span, render_transcript
from contextfold.tokens import TokenCounter, build_counter

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "SUMMARY_METADATA_KEY",
    "SUMMARY_REQUEST_MARKER",
    "AnswerCutOff",
    "FailureReason",
    "ScriptedSummarizer",
    "Summarizer",
    "SummaryFailure",
    "SummaryPrompt",
    "amplifier_summarizer",
    "anthropic_summarizer",
    "openai_summarizer",
    "scripted_summarizer",
    "summarize_span",
    "summarizer_identity",
]

logger = logging.getLogger(__name__)

SUMMARY_REQUEST_MARKER = "[contextfold:summary-request]"
SUMMARY_METADATA_KEY = "contextfold"


@dataclass(frozen=True)
class SummaryPrompt:
    """A summary prompt and the name and version a record cites it by."""

    id: str
    version: int
    text: str

    @classmethod
    def custom(cls, text: str) -> SummaryPrompt:
        """A user's own prompt text, named by its content so a record says which one."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a summary prompt must be a non-empty string")
        return cls(
            id=f"custom-{hashlib.sha256(text.encode()).hexdigest()[:12]}", version=1, text=text
        )


DEFAULT_SUMMARY_PROMPT = SummaryPrompt(
    id="contextfold.summary",
    version=1,
    text=f"""{SUMMARY_REQUEST_MARKER}
You compress the earlier part of a conversation between a user, an AI assistant and its
tools, so the assistant can continue the work without the original messages.

Write a faithful, compact summary of the transcript you are given. If it starts with a
summary of the conversation so far, fold the new messages into that summary and return one
summary of everything; do not let it grow by restating what is already there.

Keep exactly, never paraphrased: names, identifiers (tool call ids, ticket and order numbers,
user names), numbers and units, dates, file paths, URLs, commands, and error messages.
Keep every decision taken and why, what each tool call found, and every open task or
question the user still expects to be handled. Leave out pleasantries and repetition.
Do not invent anything that is not in the transcript. Write plain text, short lines, in the
order things happened, and answer with the summary only.""",
)

FailureReason = Literal["error", "timeout", "empty", "oversized", "cut_off", "not_text"]


@dataclass(frozen=True)
class SummaryFailure:
    """Why a summarizer call produced no summary; nothing is written when this is returned."""

    reason: FailureReason
    detail: str
    summarizer: str


class AnswerCutOff(Exception):
    """An adapter's answer stopped at the token limit: a cut summary is not a summary."""


class AnswerNotText(Exception):
    """An adapter's answer carries no text (a refusal, a tool call): no summary."""


@runtime_checkable
class Summarizer(Protocol):
    """Any async callable from a span of chat messages and a token limit to summary text.

    The span may start with a previous summary to fold in (a message for which
    :func:`~contextfold.summaries.transcript.is_previous_summary` is true). Optional
    attributes ``name`` (str) and ``prompt`` (:class:`SummaryPrompt`) are copied into the
    records it produces.
    """

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str: ...


def summarizer_identity(summarizer: Any) -> tuple[str, SummaryPrompt | None]:
    """The name a record cites a summarizer by, and its prompt when it says."""
    name = getattr(summarizer, "name", None)
    if not isinstance(name, str) or not name:
        name = getattr(summarizer, "__qualname__", None) or type(summarizer).__qualname__
    prompt = getattr(summarizer, "prompt", None)
    return name, prompt if isinstance(prompt, SummaryPrompt) else None


async def summarize_span(
    summarizer: Summarizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    counter: TokenCounter,
    timeout: float | None = 60.0,
) -> str | SummaryFailure:
    """Call ``summarizer`` once and return its checked answer, or why there is none.

    The answer is stripped of surrounding whitespace and must be a non-empty string of valid
    Unicode text (no lone surrogate), of at most ``max_tokens`` by ``counter``, given before
    the deadline: one given after it (the summarizer swallowed the cancellation) is a
    timeout. Cancellation of the caller is not a failure: it propagates.
    """
    name, _ = summarizer_identity(summarizer)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    request = [dict(m) for m in messages]
    try:
        async with asyncio.timeout(timeout) as deadline:
            answer = await summarizer(request, max_tokens)
    except TimeoutError as exc:
        if deadline.expired():
            return _failed("timeout", f"no answer within {timeout} s", name)
        return _failed("error", f"TimeoutError: {exc}", name)
    except AnswerCutOff as exc:
        return _failed("cut_off", str(exc) or "the answer stopped at the token limit", name)
    except AnswerNotText as exc:
        return _failed("not_text", str(exc) or "the answer is not text", name)
    except Exception as exc:  # any failure of the summarizer is reported, never raised
        return _failed("error", f"{type(exc).__name__}: {exc}", name)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        # It swallowed the caller's own cancellation: the cancellation still propagates.
        raise asyncio.CancelledError
    if deadline.expired():
        # It swallowed the cancellation at the deadline and answered anyway: a late answer
        # is never used (the pass it was for has already waited its whole timeout).
        return _failed("timeout", f"no answer within {timeout} s (a late one is not used)", name)
    if not isinstance(answer, str):
        return _failed("not_text", f"the answer is a {type(answer).__name__}, not text", name)
    text = answer.strip()
    if not text:
        return _failed("empty", "the answer is empty", name)
    problem = ill_formed_at(text)
    if problem is not None:
        # A record is stored and hashed as UTF-8, and the view is sent as JSON: text that
        # cannot be encoded would fail every later request, so it is no summary.
        return _failed("not_text", f"the answer is not valid Unicode text: {problem}", name)
    tokens = counter.count_text(text)
    if tokens > max_tokens:
        return _failed(
            "oversized", f"the answer is {tokens} tokens, over max_tokens {max_tokens}", name
        )
    return text


def _failed(reason: FailureReason, detail: str, name: str) -> SummaryFailure:
    logger.warning("context-fold: summarizer %s gave no summary (%s): %s", name, reason, detail)
    return SummaryFailure(reason=reason, detail=detail, summarizer=name)


# What an SDK summarizer's cache-aligned requests carry beside the messages, as the
# conversation's own requests do: the value, or a function giving the current one.
_T = TypeVar("_T")
Given: TypeAlias = _T | Callable[[], _T]


def _current(given: Any) -> Any:
    return given() if callable(given) else given


def _prompt(prompt: SummaryPrompt | str) -> SummaryPrompt:
    return prompt if isinstance(prompt, SummaryPrompt) else SummaryPrompt.custom(prompt)


# -- adapters ---------------------------------------------------------------------------------


class OpenAISummarizer:
    """Summaries from an ``openai.AsyncOpenAI`` client's Chat Completions API.

    With ``aligned=True`` it takes cache-aligned requests (`contextfold.summaries.aligned`):
    the conversation's messages as last sent (in the form `contextfold.formats.openai_chat`
    sends them), with ``tools``, then the instruction, so OpenAI's prompt cache serves the
    prefix. Use it when the summary is asked of the conversation's own model.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
        *,
        limit_parameter: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        aligned: bool = False,
        tools: Given[Sequence[Mapping[str, Any]]] = (),
    ) -> None:
        if limit_parameter not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                "limit_parameter must be 'max_completion_tokens' (OpenAI today) or 'max_tokens' "
                f"(older OpenAI-compatible servers), got {limit_parameter!r}"
            )
        self.client = client
        self.model = model
        self.prompt = _prompt(prompt)
        self.limit_parameter = limit_parameter
        self.name = f"openai:{model}"
        self.aligned_requests = _aligned(aligned)
        self.tools = tools

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        options: dict[str, Any] = {self.limit_parameter: max_tokens}
        if aligned_span(messages) is not None:
            sent = openai_chat_messages(messages)
            tools = list(_current(self.tools))
            if tools:
                options["tools"] = tools
        else:
            sent = [
                {"role": "system", "content": self.prompt.text},
                {"role": "user", "content": render_transcript(messages)},
            ]
        response = await self.client.chat.completions.create(
            model=self.model, messages=sent, **options
        )
        choice = response.choices[0]
        if choice.finish_reason == "length":
            raise AnswerCutOff(f"finish_reason 'length' at {max_tokens} tokens")
        content: str | None = choice.message.content  # None for a refusal or a tool call
        if content is None:
            raise AnswerNotText("the answer is a NoneType, not text")
        return content


class AnthropicSummarizer:
    """Summaries from an ``anthropic.AsyncAnthropic`` client's Messages API.

    With ``aligned=True`` it takes cache-aligned requests (`contextfold.summaries.aligned`):
    the conversation as last sent (as `contextfold.formats.anthropic` sends it: ``system``,
    ``tools``, the messages with their ``cache_control`` breakpoints), then the instruction,
    so the prompt cache serves the prefix. Use it when the summary is asked of the
    conversation's own model, and give the ``system`` and ``tools`` its requests carry.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
        *,
        aligned: bool = False,
        system: Given[AnthropicSystem] = None,
        tools: Given[Sequence[Mapping[str, Any]]] = (),
    ) -> None:
        self.client = client
        self.model = model
        self.prompt = _prompt(prompt)
        self.name = f"anthropic:{model}"
        self.aligned_requests = _aligned(aligned)
        self.system = system
        self.tools = tools

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        options: dict[str, Any] = {}
        if aligned_span(messages) is not None:
            system, sent = anthropic_messages(messages, _current(self.system))
            if system is not None:
                options["system"] = system
            tools = list(_current(self.tools))
            if tools:
                options["tools"] = tools
        else:
            options["system"] = self.prompt.text
            sent = [{"role": "user", "content": render_transcript(messages)}]
        response = await self.client.messages.create(
            model=self.model, max_tokens=max_tokens, messages=sent, **options
        )
        if response.stop_reason == "max_tokens":
            raise AnswerCutOff(f"stop_reason 'max_tokens' at {max_tokens} tokens")
        return "".join(block.text for block in response.content if block.type == "text")


def _aligned(aligned: object) -> bool:
    if not isinstance(aligned, bool):
        raise TypeError(f"aligned must be True or False, got {aligned!r}")
    return aligned


class AmplifierSummarizer:
    """Summaries from a mounted Amplifier provider (``provider.complete(ChatRequest)``)."""

    def __init__(
        self,
        provider: Any,
        model: str | None = None,
        prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
        *,
        aligned: bool | None = None,
        tools: Callable[[], Sequence[Any]] | None = None,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self.model = model
        self.prompt = _prompt(prompt)
        provider_name = getattr(provider, "name", None) or type(provider).__name__
        model_name = model or getattr(provider, "default_model", None)
        self.name = f"amplifier:{provider_name}" + (f"/{model_name}" if model_name else "")
        # Cache-aligned requests pay where the summary is asked of the model the conversation
        # runs on (its default, no model named): the same cache (`summaries.aligned`).
        self.aligned_requests = model is None if aligned is None else aligned

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        from amplifier_core.message_models import ChatRequest, Message

        tag: dict[str, Any] = {
            "purpose": "summary",
            "prompt_id": self.prompt.id,
            "prompt_version": self.prompt.version,
        }
        span = aligned_span(messages)
        if span is not None:
            # The conversation as last sent, then the instruction: sent as they are.
            typed = [Message.model_validate(message) for message in messages]
            tag["aligned"] = span.to_dict()
            # The tool schemas the conversation's requests carry come first in its cached
            # prompt: sent again, or nothing of it would be read.
            specs = list(self.tools()) if self.tools is not None else []
        else:
            typed = [
                Message(role="system", content=self.prompt.text),
                Message(role="user", content=render_transcript(messages)),
            ]
            specs = []
        request = ChatRequest(
            messages=typed,
            tools=specs or None,
            model=self.model,
            max_output_tokens=max_tokens,
            metadata={SUMMARY_METADATA_KEY: tag},
        )
        response = await self.provider.complete(request)
        if response.finish_reason in ("length", "max_tokens"):
            raise AnswerCutOff(f"finish_reason {response.finish_reason!r} at {max_tokens} tokens")
        return "".join(
            block.text for block in response.content or [] if getattr(block, "type", None) == "text"
        )


class ScriptedSummarizer:
    """The offline summarizer: the deterministic digest ``provider-scripted`` answers with,
    computed in process (no provider, no cost records)."""

    name = "scripted-digest"
    prompt = DEFAULT_SUMMARY_PROMPT

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter = counter if counter is not None else build_counter("exact")

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        return digest_transcript(render_transcript(messages), max_tokens, self.counter)


def openai_summarizer(
    client: Any,
    model: str,
    prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
    *,
    limit_parameter: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
    aligned: bool = False,
    tools: Given[Sequence[Mapping[str, Any]]] = (),
) -> OpenAISummarizer:
    """A summarizer over ``client.chat.completions.create`` (an ``openai.AsyncOpenAI``).
    ``aligned=True``: cache-aligned requests, carrying ``tools`` (or ``tools()``), the tool
    schemas the conversation's requests carry (see `OpenAISummarizer`)."""
    return OpenAISummarizer(
        client, model, prompt, limit_parameter=limit_parameter, aligned=aligned, tools=tools
    )


def anthropic_summarizer(
    client: Any,
    model: str,
    prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
    *,
    aligned: bool = False,
    system: Given[AnthropicSystem] = None,
    tools: Given[Sequence[Mapping[str, Any]]] = (),
) -> AnthropicSummarizer:
    """A summarizer over ``client.messages.create`` (an ``anthropic.AsyncAnthropic``).
    ``aligned=True``: cache-aligned requests, carrying the conversation's ``system`` and
    ``tools`` (values, or functions giving them; see `AnthropicSummarizer`)."""
    return AnthropicSummarizer(client, model, prompt, aligned=aligned, system=system, tools=tools)


def amplifier_summarizer(
    provider: Any,
    model: str | None = None,
    prompt: SummaryPrompt | str = DEFAULT_SUMMARY_PROMPT,
    *,
    aligned: bool | None = None,
    tools: Callable[[], Sequence[Any]] | None = None,
) -> AmplifierSummarizer:
    """A summarizer over an Amplifier provider's ``complete`` (the request says it is one).
    ``aligned`` (default: when no ``model`` is named) takes cache-aligned requests, which
    carry the tool schemas ``tools()`` gives (those the conversation's requests carry)."""
    return AmplifierSummarizer(provider, model, prompt, aligned=aligned, tools=tools)


def scripted_summarizer(counter: TokenCounter | None = None) -> ScriptedSummarizer:
    """The offline digest summarizer, for tests and demos (o200k counting by default)."""
    return ScriptedSummarizer(counter)
