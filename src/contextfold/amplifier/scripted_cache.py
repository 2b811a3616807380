"""``provider-scripted``'s prompt caches: how much of a request its cache serves.

Two rules, as real providers apply them:

- **automatic** (a request without ``cache_control`` marks; OpenAI's and Gemini's way, and
  what a provider module that marks the newest turn itself gets from Anthropic): the prefix
  the request shares with the previous one is read, the rest is written;
- **breakpoints** (a request whose messages carry ``cache_control`` marks, Anthropic's
  explicit caching): a prefix is written only up to the latest mark, and only when it is at
  least ``cache_min_tokens`` long; a later request reads the longest cached prefix found by
  walking back from each of its marks, at most 20 blocks (the documented lookback window);
  everything after the latest mark is fresh input.

Messages are the units compared (a message's blocks count toward the lookback). The marks
themselves are not billed and do not change what a prefix is: Anthropic matches a prompt by
its content, and reads a string as the one text block it stands for (`unmarked`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LOOKBACK_BLOCKS = 20


@dataclass
class PrefixCache:
    """The automatic rule: the previous request, as the provider's prompt cache remembers it."""

    tools_key: str | None = None
    message_keys: list[str] = field(default_factory=list)

    def shared(self, tools_key: str, tools_cost: int, keys: list[str], costs: Sequence[int]) -> int:
        """Tokens of the prefix shared with the previous request; then remember this one.
        Tool schemas come first in a real prompt, so a change there invalidates everything."""
        shared = 0
        if tools_key == self.tools_key:
            shared = tools_cost
            for key, previous, cost in zip(keys, self.message_keys, costs, strict=False):
                if key != previous:
                    break
                shared += cost
        self.tools_key, self.message_keys = tools_key, keys
        return shared

    def peek(self, tools_key: str, tools_cost: int, keys: list[str], costs: Sequence[int]) -> int:
        """`shared`, leaving the remembered request as it is (a request that branches off
        the conversation, such as a cache-aligned summary request: the provider keeps the
        conversation's prefix cached for the next turn)."""
        remembered = self.tools_key, self.message_keys
        shared = self.shared(tools_key, tools_cost, keys, costs)
        self.tools_key, self.message_keys = remembered
        return shared


@dataclass(frozen=True)
class BreakpointBill:
    """What a marked request's input was billed as (raw tokens, before any usage ratio)."""

    read: int
    write: int


class BreakpointCache:
    """The breakpoint rule: prefixes written at marks, read back through the lookback."""

    def __init__(self, min_tokens: int) -> None:
        self.min_tokens = min_tokens
        self._cached: set[int] = set()  # identities of every cached prefix

    def bill(
        self,
        tools_key: str,
        tools_cost: int,
        keys: Sequence[str],
        costs: Sequence[int],
        blocks: Sequence[int],
        marks: Sequence[int],
    ) -> BreakpointBill:
        """Read and write of a request whose messages ``marks`` carry breakpoints."""
        # identity[p] and tokens[p] describe the prefix of the first p messages (after the
        # tool schemas, which come first in every prompt).
        identity = [hash(("tools", tools_key))]
        tokens = [tools_cost]
        for key, cost in zip(keys, costs, strict=True):
            identity.append(hash((identity[-1], key)))
            tokens.append(tokens[-1] + cost)
        read_at = 0
        for mark in marks:
            end = mark + 1
            checked, position = 0, end
            while position > read_at and checked < LOOKBACK_BLOCKS:
                if identity[position] in self._cached:
                    read_at = position
                    break
                checked += blocks[position - 1]
                position -= 1
        read = tokens[read_at] if read_at else 0
        last = max(marks) + 1 if marks else 0
        write = 0
        if last > read_at and tokens[last] >= self.min_tokens:
            write = tokens[last] - read
            self._cached.update(
                identity[p] for p in range(1, last + 1) if tokens[p] >= self.min_tokens
            )
        return BreakpointBill(read=read, write=write)


def cache_marks_of(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of the messages a ``cache_control`` mark stands on."""
    return [
        index
        for index, message in enumerate(messages)
        if isinstance(message.get("content"), list)
        and any(isinstance(b, Mapping) and "cache_control" in b for b in message["content"])
    ]


def unmarked(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as Anthropic reads it for caching and billing: ``cache_control`` keys
    dropped, and content that is one plain text block read as its string."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blocks = [
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, dict) and "cache_control" in block
        else block
        for block in content
    ]
    only = blocks[0] if len(blocks) == 1 else None
    if (
        isinstance(only, dict)
        and set(only) == {"type", "text"}
        and only["type"] == "text"
        and isinstance(only["text"], str)
    ):
        return {**message, "content": only["text"]}
    return {**message, "content": blocks}


def block_count(message: Mapping[str, Any]) -> int:
    """Content blocks a message puts in the prompt (a string is one; each tool call one)."""
    content = message.get("content")
    count = len(content) if isinstance(content, list) else 1
    calls = message.get("tool_calls")
    return max(1, count + (len(calls) if isinstance(calls, list) else 0))
