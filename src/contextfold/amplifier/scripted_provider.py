"""Amplifier provider module ``provider-scripted``: a deterministic, offline stand-in for an LLM.

It replays a script of replies and tool calls, but everything around the replies is measured
the way a real provider would report it: the input of each request is counted with a real
tokenizer (o200k_base), prompt-cache reads and writes are derived from the longest prefix the
request shares with the previous one, a request over the usable window is refused with
amplifier-core's ``ContextLengthError`` (or, with ``enforce_window: false``, served and marked
overflowed), and usage is reported on ``llm:response`` like a vendor provider does. Each request
leaves a :class:`RequestRecord` in ``provider.records`` for reports and charts.

Script forms (config ``script``)::

    [{"text": "..."}, {"tool_calls": [{"name": "lookup", "arguments": {...}}], "text": "..."}]
    {"steps": 3, "tool": "lookup", "argument": "topic", "final_text": "Done."}

The generator form yields ``steps`` tool-using replies (topics "topic 1".."topic N") and then
the final text. When the script runs out the provider answers with a closing text instead of
failing, so a loop always terminates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from amplifier_core.llm_errors import ContextLengthError
from amplifier_core.message_models import (
    ChatRequest,
    ChatResponse,
    TextBlock,
    ToolCall,
    Usage,
)
from amplifier_core.models import ModelInfo, ProviderInfo

from contextfold.tokens import ExactCounter, TokenCounter

logger = logging.getLogger(__name__)

PROVIDER_NAME = "scripted"
EXHAUSTED_TEXT = "The script has no more steps, so this is where the scripted session ends."

_KNOWN_KEYS = frozenset(
    {"script", "model", "context_window", "max_output_tokens", "usage_ratio", "enforce_window"}
)
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


def _canonical(item: Mapping[str, Any]) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class _CachePrefix:
    """The previous request, as the provider's prompt cache remembers it."""

    tools_key: str | None = None
    message_keys: list[str] = field(default_factory=list)


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
        self._cursor = 0
        self._call_serial = 0
        self._cache = _CachePrefix()

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

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        # Metadata is bookkeeping for the context manager; a real provider never sends it.
        messages = [m.model_dump(exclude_none=True, exclude={"metadata"}) for m in request.messages]
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
        await self._emit(
            "llm:request",
            {
                "provider": PROVIDER_NAME,
                "model": self.config.model,
                "message_count": len(messages),
                "tool_count": len(tools),
            },
        )
        message_costs = [self.counter.count_message(m) for m in messages]
        tools_cost = self.counter.count_tools(tools) if tools else 0
        total = self._scaled(tools_cost + sum(message_costs))
        window = self.config.window
        index = len(self.records)

        if total > window and self.config.enforce_window:
            # Refused requests cache nothing: the whole size is uncached input.
            self.records.append(
                RequestRecord(index, total, 0, 0, 0, len(messages), window, True, rejected=True)
            )
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
        calls = [self._tool_call(name, args) for name, args in step.tool_calls]
        output = self._scaled(self._output_cost(step))
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
            content=[TextBlock(text=step.text)] if step.text else [],
            tool_calls=calls or None,
            usage=Usage(**usage),
            finish_reason="tool_use" if calls else "end_turn",
            metadata={"model": self.config.model, "script_step": self._cursor - 1},
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

    def _tool_call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        self._call_serial += 1
        return ToolCall(id=f"call_{self._call_serial:04d}", name=name, arguments=dict(arguments))

    def _output_cost(self, step: ScriptStep) -> int:
        cost = self.counter.count_text(step.text) if step.text else 0
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


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount the scripted provider at ``providers`` under the name ``scripted``."""
    provider = ScriptedProvider(ScriptedConfig.from_mapping(config), hooks=coordinator.hooks)
    await coordinator.mount("providers", provider, name=PROVIDER_NAME)
