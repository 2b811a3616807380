"""What a chat request costs beyond its text: per-message framing and tool schemas.

The constants follow OpenAI's documented accounting (the "How to count tokens with tiktoken"
cookbook): every message is wrapped in ``<|start|>{role/name}\\n{content}<|end|>\\n``, which is
3 tokens plus the role; a ``name`` costs one more; every reply is primed with
``<|start|>assistant<|message|>``, 3 tokens per *request*. Function definitions are rendered
into the system prompt in a TypeScript-like namespace; the cookbook measures that as a fixed
cost per function (7 for the gpt-4o family, 10 for gpt-4/3.5), 3 to open the properties, 3 per
property, -3 per enum plus 3 per enum item, and 12 to close the block. How tool *calls* in
the history are framed is not documented; we charge 3 tokens per call (like a message) on top
of its id, name and arguments, and let calibration absorb what remains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.tokens.base import TokenCounter
from contextfold.tokens.serialize import tool_parts

__all__ = [
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "ToolOverhead",
    "count_request",
    "tool_schema_tokens",
]

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_TOOL_CALL = 3
REPLY_PRIMING_TOKENS = 3


@dataclass(frozen=True, slots=True)
class ToolOverhead:
    """The cookbook's fixed costs of a function definition block."""

    per_function: int = 7
    properties_open: int = 3
    per_property: int = 3
    enum_open: int = -3
    per_enum_item: int = 3
    block_end: int = 12


GPT4O_TOOLS = ToolOverhead(per_function=7)
GPT4_TOOLS = ToolOverhead(per_function=10)


def tool_schema_tokens(
    tools: Sequence[Mapping[str, Any]],
    measure: Callable[[str], float],
    overhead: ToolOverhead = GPT4O_TOOLS,
) -> float:
    """Cost of a request's tool definitions, text measured by ``measure``.

    Follows the cookbook: ``name:description`` per function (a trailing period dropped), then
    ``key:type:description`` per property and each enum item. Nested object properties and
    array item properties are counted the same way, which the cookbook leaves out.
    """
    if isinstance(tools, Mapping | str):
        raise TypeError("tools must be a list of tool schemas, not a single schema or a string")
    if not tools:
        return 0.0
    total = float(overhead.block_end)
    for tool in tools:
        spec = tool_parts(tool)
        total += overhead.per_function
        total += measure(f"{spec.name}:{spec.description.removesuffix('.')}")
        if spec.properties:
            total += overhead.properties_open
        for path, kind, description, enum in spec.properties:
            total += overhead.per_property
            total += measure(f"{path}:{kind}:{description.removesuffix('.')}")
            if enum:
                total += overhead.enum_open
                for item in enum:
                    total += overhead.per_enum_item + measure(item)
    return total


def count_request(
    counter: TokenCounter,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """RAW tokens of a whole request: messages, tool schemas and ``counter.request_overhead``
    (the reply priming).

    For a one-off count; the manager instead sums the per-message integers it cached.
    """
    total = sum(counter.count_message(message) for message in messages)
    if tools:
        total += counter.count_tools(tools)
    return total + counter.request_overhead
