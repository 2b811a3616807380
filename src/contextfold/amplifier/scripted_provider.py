"""Amplifier provider module ``provider-scripted``: a deterministic, offline stand-in for an LLM.

It replays a script of replies and tool calls, but everything around the replies is measured
the way a real provider would report it: the input of each request is counted with a real
tokenizer (o200k_base), prompt-cache reads and writes are derived from the longest prefix the
request shares with the previous one, a request over the usable window is refused with
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
has its own prompt-cache lane, as a real provider caches each distinct prefix apart.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from amplifier_core.llm_errors import ContextLengthError, InvalidRequestError
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

from contextfold.summaries.digest import digest_transcript
from contextfold.summaries.summarizer import SUMMARY_METADATA_KEY, SUMMARY_REQUEST_MARKER
from contextfold.tokens import ExactCounter, TokenCounter

logger = logging.getLogger(__name__)

PROVIDER_NAME = "scripted"
EXHAUSTED_TEXT = "The script has no more steps, so this is where the scripted session ends."

_KNOWN_KEYS = frozenset(
    {
        "script",
        "model",
        "context_window",
        "max_output_tokens",
        "usage_ratio",
        "enforce_window",
        "reply_shape",
        "call_ids",
        "strict_sequence",
        "count_requests",
    }
)
REPLY_SHAPES = ("plain", "anthropic-thinking")
CALL_ID_MODES = ("unique", "per_response")
# Sizes of a real signed thinking block from Amplifier's Anthropic provider: a few hundred
# words of reasoning and a signature of several hundred base64 characters.
THINKING_WORDS = 250
SIGNATURE_CHARS = 480
_GENERATOR_KEYS = frozenset({"steps", "tool", "argument", "final_text"})


@dataclass(frozen=True)
class ScriptStep:
    """One scripted model reply: optional text and zero or more tool calls."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()


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
    error.limit = limit  # type: ignore[attr-defined]
    error.requested = requested  # type: ignore[attr-defined]
    return error


@dataclass(frozen=True)
class ScriptedConfig:
    """Validated provider configuration (see the module docstring for ``script``)."""

    script: tuple[ScriptStep, ...] = ()
    model: str = "scripted-o200k"
    context_window: int = 200_000
    max_output_tokens: int = 8192
    usage_ratio: float = 1.0
    enforce_window: bool = True
    reply_shape: str = "plain"
    call_ids: str = "unique"
    strict_sequence: bool = False
    count_requests: bool = True

    def window_for(self, max_output_tokens: int | None) -> int:
        """The input allowance of a request asking for ``max_output_tokens`` of output (at
        most the model's own cap): a smaller output reserve leaves more room for input."""
        reserve = self.max_output_tokens
        if isinstance(max_output_tokens, int) and 0 < max_output_tokens < reserve:
            reserve = max_output_tokens
        return self.context_window - reserve

    @property
    def window(self) -> int:
        """The usable input limit: what is left of the context window after the output reserve."""
        return self.context_window - self.max_output_tokens

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> ScriptedConfig:
        config = dict(config or {})
        unknown = sorted(set(config) - _KNOWN_KEYS)
        if unknown:
            raise ValueError(
                f"provider-scripted: unknown config keys {unknown}; known: {sorted(_KNOWN_KEYS)}"
            )
        context_window = _positive_int(config, "context_window", cls.context_window)
        max_output = _positive_int(config, "max_output_tokens", cls.max_output_tokens)
        if max_output >= context_window:
            raise ValueError(
                f"provider-scripted: max_output_tokens ({max_output}) must be smaller than "
                f"context_window ({context_window}), or no input would ever fit"
            )
        ratio = config.get("usage_ratio", cls.usage_ratio)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            raise ValueError(
                f"provider-scripted: 'usage_ratio' must be a positive number, got {ratio!r}"
            )
        enforce = config.get("enforce_window", cls.enforce_window)
        if not isinstance(enforce, bool):
            raise ValueError(
                f"provider-scripted: 'enforce_window' must be true or false, got {enforce!r}"
            )
        strict = config.get("strict_sequence", cls.strict_sequence)
        if not isinstance(strict, bool):
            raise ValueError(
                f"provider-scripted: 'strict_sequence' must be true or false, got {strict!r}"
            )
        count_requests = config.get("count_requests", cls.count_requests)
        if not isinstance(count_requests, bool):
            raise ValueError(
                f"provider-scripted: 'count_requests' must be true or false, got {count_requests!r}"
            )
        reply_shape = _choice(config, "reply_shape", REPLY_SHAPES, cls.reply_shape)
        call_ids = _choice(config, "call_ids", CALL_ID_MODES, cls.call_ids)
        model = config.get("model", cls.model)
        if not isinstance(model, str) or not model:
            raise ValueError(
                f"provider-scripted: 'model' must be a non-empty string, got {model!r}"
            )
        return cls(
            script=parse_script(config.get("script", [])),
            model=model,
            context_window=context_window,
            max_output_tokens=max_output,
            usage_ratio=float(ratio),
            enforce_window=enforce,
            reply_shape=reply_shape,
            call_ids=call_ids,
            strict_sequence=strict,
            count_requests=count_requests,
        )


def parse_script(script: Any) -> tuple[ScriptStep, ...]:
    """Normalise either script form into steps, naming the offending step on bad input."""
    if isinstance(script, Mapping):
        return _generated_script(script)
    if not isinstance(script, Sequence) or isinstance(script, str):
        raise ValueError(
            "provider-scripted: 'script' must be a list of steps or a generator object like "
            "{'steps': 3, 'tool': 'lookup', 'argument': 'topic', 'final_text': 'Done.'}"
        )
    return tuple(_parse_step(i, step) for i, step in enumerate(script))


def _parse_step(index: int, step: Any) -> ScriptStep:
    where = f"provider-scripted: script[{index}]"
    if not isinstance(step, Mapping):
        raise ValueError(f"{where} must be an object with 'text' and/or 'tool_calls'")
    unknown = sorted(set(step) - {"text", "tool_calls"})
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; use 'text' and/or 'tool_calls'")
    text = step.get("text", "")
    if not isinstance(text, str):
        raise ValueError(f"{where}.text must be a string, got {type(text).__name__}")
    raw_calls = step.get("tool_calls", [])
    if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str):
        raise ValueError(f"{where}.tool_calls must be a list of {{'name', 'arguments'}} objects")
    if not text and not raw_calls:
        raise ValueError(f"{where} needs a non-empty 'text' or at least one tool call")
    calls = []
    for j, call in enumerate(raw_calls):
        if (
            not isinstance(call, Mapping)
            or not isinstance(call.get("name"), str)
            or not call["name"]
        ):
            raise ValueError(f"{where}.tool_calls[{j}] needs a non-empty string 'name'")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, Mapping):
            raise ValueError(f"{where}.tool_calls[{j}].arguments must be an object")
        calls.append((call["name"], dict(arguments)))
    return ScriptStep(text=text, tool_calls=tuple(calls))


def _generated_script(spec: Mapping[str, Any]) -> tuple[ScriptStep, ...]:
    unknown = sorted(set(spec) - _GENERATOR_KEYS)
    if unknown:
        raise ValueError(
            f"provider-scripted: generator script has unknown keys {unknown}; "
            f"known: {sorted(_GENERATOR_KEYS)}"
        )
    steps = spec.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(
            f"provider-scripted: generator 'steps' must be an integer >= 0, got {steps!r}"
        )
    tool = spec.get("tool", "lookup")
    argument = spec.get("argument", "topic")
    final_text = spec.get("final_text", "Done.")
    for key, value in (("tool", tool), ("argument", argument), ("final_text", final_text)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"provider-scripted: generator '{key}' must be a non-empty string")
    generated = [
        ScriptStep(text=f"Looking up topic {i}.", tool_calls=((tool, {argument: f"topic {i}"}),))
        for i in range(1, steps + 1)
    ]
    return (*generated, ScriptStep(text=final_text))


def _positive_int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"provider-scripted: '{key}' must be a positive integer, got {value!r}")
    return value


def _choice(config: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = config.get(key, default)
    if value not in allowed:
        raise ValueError(
            f"provider-scripted: '{key}' must be one of {list(allowed)}, got {value!r}"
        )
    return value


def _canonical(item: Mapping[str, Any]) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class _CachePrefix:
    """The previous request, as the provider's prompt cache remembers it."""

    tools_key: str | None = None
    message_keys: list[str] = field(default_factory=list)


# -- strict_sequence: the request checks real providers make ---------------------------------


@dataclass(frozen=True)
class EmittedReply:
    """What this provider answered once: enough to recognise the turn when it comes back."""

    index: int
    text: str
    calls: tuple[tuple[str, str, str], ...]  # (id, name, canonical arguments)
    thinking: Mapping[str, Any] | None  # the signed thinking block, as produced


@dataclass
class SequenceCheck:
    """What ``strict_sequence`` checked on one request, and the faults it found.

    ``thinking_turn`` is the index of the assistant message whose signed thinking was compared
    with what this provider produced (None when no such check applied).
    """

    messages: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    thinking_turn: int | None = None
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.faults


def _calls_of(message: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(id, name, canonical arguments) of an assistant message's tool calls, in order."""
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        name = call.get("tool") or call.get("name") or function.get("name") or ""
        arguments = call.get("arguments", function.get("arguments", {}))
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: compare the raw string
                arguments = json.loads(arguments)
        found.append((str(call.get("id")), str(name), _canonical({"a": arguments})))
        seen.add(str(call.get("id")))
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        is_call = isinstance(block, Mapping) and block.get("type") in ("tool_call", "tool_use")
        if is_call and str(block.get("id")) not in seen:  # Amplifier repeats calls as blocks
            arguments = block.get("input", block.get("arguments", {}))
            found.append(
                (str(block.get("id")), str(block.get("name")), _canonical({"a": arguments}))
            )
    return found


def _text_content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""


def _thinking_blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    return [
        b
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking")
    ]


class SequenceChecker:
    """Checks a request the way real providers do before they run it.

    * OpenAI: nothing but tool results may sit between an assistant message with tool calls
      and the results of those calls; every result answers a call of the assistant message
      just before it (else an *orphan*); every call has a result before the next non-tool
      message (else *unanswered*).
    * Anthropic, with thinking replies: the latest assistant turn whose tool results are being
      sent must carry its signed thinking block exactly as the provider produced it. Thinking
      of earlier turns may be left out (the API ignores it), so only that turn is compared.
    """

    def __init__(self, *, check_thinking: bool) -> None:
        self.check_thinking = check_thinking

    def check(
        self, messages: Sequence[Mapping[str, Any]], emitted: Sequence[EmittedReply]
    ) -> SequenceCheck:
        report = SequenceCheck(messages=len(messages))
        self._check_pairing(messages, report)
        if self.check_thinking:
            self._check_latest_thinking(messages, emitted, report)
        return report

    @staticmethod
    def _check_pairing(messages: Sequence[Mapping[str, Any]], report: SequenceCheck) -> None:
        open_at: int | None = None  # the assistant message whose results are being collected
        pending: list[str] = []
        for index, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                report.tool_results += 1
                call_id = message.get("tool_call_id")
                if open_at is not None and call_id in pending:
                    pending.remove(call_id)
                else:
                    report.faults.append(
                        f"message {index}: tool result {call_id!r} answers no call of the "
                        "assistant message before it (orphan result)"
                    )
                continue
            if pending:
                answered_later = any(
                    m.get("role") == "tool" and m.get("tool_call_id") in pending
                    for m in messages[index + 1 :]
                )
                if answered_later and not _calls_of(message):
                    # Keep the calls open: their results further on are not orphans too.
                    report.faults.append(
                        f"message {index} (role {role!r}) sits between the tool calls of "
                        f"message {open_at} and their results"
                    )
                    continue
                report.faults.append(
                    f"message {open_at}: tool call(s) {pending} have no result before "
                    f"message {index} (role {role!r}) (unanswered call)"
                )
            calls = _calls_of(message) if role == "assistant" else []
            report.tool_calls += len(calls)
            open_at = index if calls else None
            pending = [call_id for call_id, _, _ in calls]
        if pending:
            report.faults.append(
                f"message {open_at}: tool call(s) {pending} have no result at the end of the "
                "request (unanswered call)"
            )

    @staticmethod
    def _check_latest_thinking(
        messages: Sequence[Mapping[str, Any]],
        emitted: Sequence[EmittedReply],
        report: SequenceCheck,
    ) -> None:
        last = max(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None
        )
        if last is None or last == len(messages) - 1:
            return
        if not _calls_of(messages[last]) or any(
            m.get("role") != "tool" for m in messages[last + 1 :]
        ):
            return  # its tool results are not what this request sends
        report.thinking_turn = last
        message = messages[last]
        key = (_text_content(message), tuple(_calls_of(message)))
        origin = next((r for r in reversed(emitted) if (r.text, r.calls) == key), None)
        if origin is None or origin.thinking is None:
            report.faults.append(
                f"message {last}: the assistant turn whose tool results are sent was not "
                "produced by this provider, so its thinking signature cannot be verified"
            )
            return
        blocks = _thinking_blocks(message)
        intact = len(blocks) == 1 and all(
            blocks[0].get(k) == origin.thinking.get(k) for k in ("type", "thinking", "signature")
        )
        if not intact:
            report.faults.append(
                f"message {last}: the latest assistant turn is sent with its tool results but "
                "without its signed thinking block exactly as produced (Anthropic requires it "
                "unmodified)"
            )


def sequence_refusal(check: SequenceCheck, *, model: str) -> InvalidRequestError:
    """The non-retryable error a real provider answers a malformed sequence with."""
    more = f" (and {len(check.faults) - 1} more)" if len(check.faults) > 1 else ""
    return InvalidRequestError(
        f"Invalid request: {check.faults[0]}{more}.",
        provider=PROVIDER_NAME,
        model=model,
        status_code=400,
        retryable=False,
    )


# -- thinking replies ---------------------------------------------------------------------

_THINKING_WORDS = (
    "the", "result", "suggests", "that", "next", "source", "should", "confirm", "figure",
    "before", "summary", "compare", "earlier", "notes", "check", "whether", "topic", "covers",
    "detail", "missing", "evidence", "so", "I", "will", "look", "up", "again", "and", "weigh",
    "each", "claim", "against", "document", "carefully", "then", "decide", "what", "remains",
    "reconciling", "discrepancy", "provenance", "methodology", "quantitative", "assumptions",
    "cross-reference", "inconsistent", "timeline", "2019", "estimates", "caveat", "plausibly",
)  # fmt: skip


def thinking_text(response_index: int, step_text: str) -> str:
    """Deterministic reasoning of ``THINKING_WORDS`` words for one response."""
    words = [f"Response {response_index}: {step_text.rstrip('.') or 'answering'}."]
    seed = hashlib.sha256(f"thinking:{response_index}".encode()).digest()
    i = 0
    while len(words) < THINKING_WORDS:
        byte = seed[i % len(seed)] ^ (i * 31 % 256)
        words.append(_THINKING_WORDS[byte % len(_THINKING_WORDS)])
        i += 1
    return " ".join(words) + "."


def thinking_signature(response_index: int, thinking: str) -> str:
    """A deterministic base64 signature of ``SIGNATURE_CHARS`` characters for a thinking text."""
    material = b""
    block = hashlib.sha256(f"{response_index}:{thinking}".encode()).digest()
    while len(material) * 4 < SIGNATURE_CHARS * 3:
        material += block
        block = hashlib.sha256(block).digest()
    return base64.b64encode(material).decode()[:SIGNATURE_CHARS]


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
        self._cache = _CachePrefix()
        self._summary_cache = _CachePrefix()
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
            return await self._answer_summary(request, messages)
        await self._emit(
            "llm:request",
            {
                "provider": PROVIDER_NAME,
                "model": self.config.model,
                "message_count": len(messages),
                "tool_count": len(tools),
            },
        )
        raw, message_costs, tools_cost = self._raw_size(messages, tools)
        total = self._scaled(raw)
        window = self.config.window_for(request.max_output_tokens)
        index = len(self.records)

        sequence = None
        if self.config.strict_sequence:
            sequence = self._checker.check(messages, self.emitted)
            if not sequence.ok:
                self.records.append(_refused(index, total, len(messages), window, sequence))
                raise sequence_refusal(sequence, model=self.config.model)

        if total > window and self.config.enforce_window:
            self.records.append(_refused(index, total, len(messages), window, sequence))
            raise window_exceeded_error(
                requested=total,
                limit=window,
                context_window=self.config.context_window,
                model=self.config.model,
            )

        prefix_raw = self._cached_prefix_tokens(tools, tools_cost, messages, message_costs)
        cache_read = self._scaled(prefix_raw)
        cache_write = total - cache_read
        step = self._next_step()
        content, calls, thinking = self._reply(step)
        output = self._scaled(self._output_cost(step, thinking))
        self.records.append(
            RequestRecord(
                index=index,
                input_tokens=cache_read,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                output_tokens=output,
                message_count=len(messages),
                window=window,
                overflowed=total > window,
                sequence=sequence,
            )
        )
        usage = {
            "input_tokens": cache_read,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "total_tokens": cache_read + cache_write + output,
        }
        await self._emit(
            "llm:response",
            {"provider": PROVIDER_NAME, "model": self.config.model, "usage": usage, "status": "ok"},
        )
        return ChatResponse(
            content=content,
            tool_calls=calls or None,
            usage=Usage(**usage),
            finish_reason="tool_use" if calls else "end_turn",
            metadata={"model": self.config.model, "script_step": self._cursor - 1},
        )

    # -- summary requests ----------------------------------------------------------------

    async def _answer_summary(
        self, request: ChatRequest, messages: list[dict[str, Any]]
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
        # The summary prompt is a prefix of its own: measure it against the previous summary
        # request, leaving the conversation's cache lane as it was.
        conversation_cache, self._cache = self._cache, self._summary_cache
        try:
            cache_read = self._scaled(self._cached_prefix_tokens([], 0, messages, message_costs))
        finally:
            self._summary_cache, self._cache = self._cache, conversation_cache
        limit = min(request.max_output_tokens or self.config.max_output_tokens,
                    self.config.max_output_tokens)  # fmt: skip
        transcript = "\n".join(_text_content(m) for m in messages if m.get("role") == "user")
        answer = digest_transcript(transcript, limit, self.counter)
        output = self._scaled(self.counter.count_text(answer)) if answer else 0
        self.records.append(
            RequestRecord(
                index=index,
                input_tokens=cache_read,
                cache_read_tokens=cache_read,
                cache_write_tokens=total - cache_read,
                output_tokens=output,
                message_count=len(messages),
                window=self.config.window,
                overflowed=total > self.config.window,
                purpose="summary",
            )
        )
        usage = {
            "input_tokens": cache_read,
            "output_tokens": output,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": total - cache_read,
            "total_tokens": total + output,
        }
        await self._emit(
            "llm:response",
            {"provider": PROVIDER_NAME, "model": self.config.model, **purpose,
             "usage": usage, "status": "ok"},
        )  # fmt: skip
        return ChatResponse(
            content=[TextBlock(text=answer)] if answer else [],
            usage=Usage(**usage),
            finish_reason="end_turn",
            metadata={"model": self.config.model, **purpose},
        )

    # -- internals ---------------------------------------------------------------------

    def _scaled(self, raw: int) -> int:
        return round(raw * self.config.usage_ratio)

    def _cached_prefix_tokens(
        self,
        tools: list[dict[str, Any]],
        tools_cost: int,
        messages: list[dict[str, Any]],
        message_costs: list[int],
    ) -> int:
        """Tokens of the prefix shared with the previous request; then remember this one.

        Tool schemas come first in a real prompt, so a change there invalidates everything.
        """
        tools_key = _canonical({"tools": tools})
        keys = [_canonical(m) for m in messages]
        shared = 0
        if tools_key == self._cache.tools_key:
            shared = tools_cost
            for key, previous, cost in zip(
                keys, self._cache.message_keys, message_costs, strict=False
            ):
                if key != previous:
                    break
                shared += cost
        self._cache = _CachePrefix(tools_key=tools_key, message_keys=keys)
        return shared

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
                calls=tuple((c.id, c.name, _canonical({"a": dict(c.arguments)})) for c in calls),
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
            cost += self.counter.count_text(name) + self.counter.count_text(_canonical(arguments))
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
