"""What the eval needs to know of a message's shape, for any recorded session.

Recorded sessions come in every shape ``contextfold replay`` reads (OpenAI/Amplifier chat
dicts, Anthropic blocks) and some are damaged: a ``content`` that is a number, arguments
that are not JSON, a block that is not an object. Nothing here raises on such input: a
part that cannot be read is left out, so the fact rule and the baselines see what can be
seen and the context manager (which validates on admission) says what is wrong.

- `calls_of`, `text_leaves`, `message_text`: what a model reads in a message (from
  `contextfold.readable`, which the identifier ledger reads messages with too);
- `answers_calls`: whether a message carries tool results;
- `units`: a list of messages cut into removable units (a call group whole).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..readable import (
    MAX_DECODED_CHARS,
    calls_of,
    message_text,
    parsed_arguments,
    role_of,
    text_leaves,
    value_leaves,
    visible_text,
)

__all__ = [
    "MAX_DECODED_CHARS",
    "SYSTEM_ROLES",
    "answers_calls",
    "calls_of",
    "is_system",
    "makes_calls",
    "message_text",
    "parsed_arguments",
    "role_of",
    "text_leaves",
    "units",
    "value_leaves",
    "visible_text",
]

SYSTEM_ROLES = frozenset({"system", "developer"})


def is_system(message: Mapping[str, Any]) -> bool:
    return role_of(message) in SYSTEM_ROLES


def makes_calls(message: Mapping[str, Any]) -> bool:
    return bool(calls_of(message))


def answers_calls(message: Mapping[str, Any]) -> bool:
    """A tool result: role ``tool`` (or ``function``), or a user message of tool_result
    blocks."""
    role = role_of(message)
    if role in ("tool", "function"):
        return True
    content = message.get("content")
    return (
        role == "user"
        and isinstance(content, list)
        and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    )


def units(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indices of ``messages`` in removable units, oldest first, system messages left out:
    an assistant message that calls tools together with the results right after it, any
    other message alone. A result with no call before it is a unit of its own."""
    found: list[list[int]] = []
    open_group = False
    for index, message in enumerate(messages):
        if is_system(message):
            open_group = False
            continue
        if answers_calls(message) and open_group:
            found[-1].append(index)
            continue
        found.append([index])
        open_group = makes_calls(message)
    return found
