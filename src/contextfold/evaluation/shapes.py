"""What the eval needs to know of a message's shape, for any recorded session.

Recorded sessions come in every shape ``contextfold replay`` reads (OpenAI/Amplifier chat
dicts, Anthropic blocks) and some are damaged: a ``content`` that is a number, arguments
that are not JSON, a block that is not an object. Nothing here raises on such input: a
part that cannot be read is left out, so the fact rule and the baselines see what can be
seen and the context manager (which validates on admission) says what is wrong.

- `calls_of`: the tool calls a message makes, as (name, arguments) with the arguments
  parsed when they are JSON text;
- `answers_calls`: whether a message carries tool results;
- `units`: a list of messages cut into removable units (a call group whole);
- `text_leaves`: every string a model reads in a message, JSON-decoded where the text is
  JSON, so a value compares equal however it was escaped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})
# Text that is parsed as JSON to read its values: larger documents are searched as text
# only (a megabyte result decoded on every view would cost more than the replay).
MAX_DECODED_CHARS = 200_000


def role_of(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    return role if isinstance(role, str) else ""


def is_system(message: Mapping[str, Any]) -> bool:
    return role_of(message) in SYSTEM_ROLES


def parsed_arguments(arguments: Any) -> Any:
    """Arguments as a value: JSON text decoded, anything else as given (None if unreadable
    text, which callers then read as plain text)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    return arguments


def calls_of(message: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``(name, arguments, raw)`` for each tool call of an assistant message: OpenAI
    ``function`` calls, Amplifier ``{"tool", "arguments"}`` calls and Anthropic
    ``tool_use`` blocks. ``raw`` is the arguments' text when they were given as text."""
    if role_of(message) != "assistant":
        return []
    found: list[tuple[str, Any, str]] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            name = call.get("tool") or call.get("name") or function.get("name")
            arguments = call.get("arguments", function.get("arguments"))
            raw = arguments if isinstance(arguments, str) else ""
            found.append((str(name or ""), parsed_arguments(arguments), raw))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                found.append((str(block.get("name") or ""), block.get("input"), ""))
    return found


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


def text_leaves(message: Mapping[str, Any]) -> Iterator[str]:
    """Every string a model reads in ``message`` (metadata is never sent, so never read):
    the content's text (string, text blocks, tool_result contents, tool_use inputs), the
    calls' arguments, and the decoded values of any text that is a JSON document."""
    yield from _content_leaves(message.get("content"))
    for name, arguments, raw in calls_of(message):
        if name:
            yield name
        if raw:
            yield raw
        if not isinstance(arguments, str):
            yield from value_leaves(arguments)
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str):
        yield call_id


def _content_leaves(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
        yield from _decoded_leaves(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                yield block
            elif isinstance(block, Mapping):
                kind = block.get("type")
                if kind in ("thinking", "redacted_thinking"):
                    continue  # reasoning the next request may not even carry
                text = block.get("text")
                if isinstance(text, str):
                    yield text
                    yield from _decoded_leaves(text)
                if kind == "tool_result":
                    yield from _content_leaves(block.get("content"))
                elif kind == "tool_use":
                    yield from value_leaves(block.get("input"))


def _decoded_leaves(text: str) -> Iterator[str]:
    """The string values of ``text`` when it is a JSON object or array (a tool result), so
    an escaped value (``\\u00e9``, ``\\/``) is found as the value it stands for."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "{[" or len(text) > MAX_DECODED_CHARS:
        return
    if "\\" not in text:
        return  # nothing escaped: the raw text already holds every value as it is
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return
    yield from value_leaves(value)


def value_leaves(value: Any, depth: int = 0) -> Iterator[str]:
    """Strings and numbers inside a JSON-shaped value, as text (booleans and null are
    not values a step copies from anywhere)."""
    if depth > 64:  # a hostile nesting depth: what lies deeper is not read
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield json.dumps(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from value_leaves(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from value_leaves(item, depth + 1)


def message_text(message: Mapping[str, Any]) -> str:
    """All of `text_leaves` as one searchable text (leaves joined by newlines)."""
    return "\n".join(text_leaves(message))


def visible_text(message: Mapping[str, Any]) -> str:
    """An assistant message's own words: its string content or text blocks (no calls, no
    thinking)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, Mapping)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
    return ""
