"""``provider-scripted``'s configuration and its script: the validated settings, and the two
script forms (a list of steps, or a generator object) read into steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.context_editing import ClearToolUses

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
        "cache_min_tokens",
        "context_editing",
    }
)
REPLY_SHAPES = ("plain", "anthropic-thinking")
CALL_ID_MODES = ("unique", "per_response")
_GENERATOR_KEYS = frozenset({"steps", "tool", "argument", "final_text"})


@dataclass(frozen=True)
class ScriptStep:
    """One scripted model reply: optional text and zero or more tool calls."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()


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
    # The shortest prefix a breakpoint caches (requests with cache_control marks): 1,024
    # tokens, Anthropic's minimum for Sonnet and Opus 4.x.
    cache_min_tokens: int = 1_024
    # Server-side context editing applied to every chat request before it is measured
    # (``{"type": "clear_tool_uses", ...}``; the trigger scales to the context window).
    context_editing: ClearToolUses | None = None

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
        cache_min = config.get("cache_min_tokens", cls.cache_min_tokens)
        if isinstance(cache_min, bool) or not isinstance(cache_min, int) or cache_min < 0:
            raise ValueError(
                f"provider-scripted: 'cache_min_tokens' must be an integer >= 0, got {cache_min!r}"
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
            cache_min_tokens=cache_min,
            context_editing=_context_editing(config.get("context_editing"), context_window),
        )


def _context_editing(spec: Any, context_window: int) -> ClearToolUses | None:
    """``context_editing``: None, or ``{"type": "clear_tool_uses"}`` with any of its
    settings (trigger, keep, clear_at_least, exclude_tools, clear_tool_inputs); the
    trigger left out is Anthropic's default scaled to the context window."""
    if spec is None:
        return None
    where = "provider-scripted: 'context_editing'"
    if not isinstance(spec, Mapping) or spec.get("type") != "clear_tool_uses":
        raise ValueError(
            f'{where} must be null or an object with "type": "clear_tool_uses", got {spec!r:.200}'
        )
    settings = {key: value for key, value in spec.items() if key != "type"}
    known = {"trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; known: {sorted(known)}")
    exclude = settings.get("exclude_tools", ())
    if not isinstance(exclude, list | tuple) or not all(isinstance(n, str) for n in exclude):
        raise ValueError(f"{where}.exclude_tools must be a list of tool names")
    if not isinstance(settings.get("clear_tool_inputs", False), bool):
        raise ValueError(f"{where}.clear_tool_inputs must be true or false")
    try:
        return ClearToolUses.scaled_to(context_window, **settings)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None


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
