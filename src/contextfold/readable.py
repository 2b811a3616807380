"""What a model reads in a message, for any message shape: the text of its content, its
tool calls and their arguments, and the decoded values of text that is a JSON document.

Messages come in every shape a conversation may hold (OpenAI/Amplifier chat dicts, Anthropic
blocks) and some recorded ones are damaged: a ``content`` that is a number, arguments that
are not JSON, a block that is not an object. Nothing here raises on such input: a part that
cannot be read is left out. The identifier ledger and the eval's fact rule both read messages
through these functions, so they see the same text.

- `calls_of`: the tool calls a message makes, as (name, arguments) with the arguments
  parsed when they are JSON text;
- `text_leaves`: every string a model reads in a message, JSON-decoded where the text is
  JSON, so a value compares equal however it was escaped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

# Text that is parsed as JSON to read its values: larger documents are searched as text
# only (a megabyte result decoded on every view would cost more than the replay).
MAX_DECODED_CHARS = 200_000


def role_of(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    return role if isinstance(role, str) else ""


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


def content_texts(message: Mapping[str, Any]) -> Iterator[str]:
    """The texts of a message's content as written (string content, text blocks, tool_result
    contents; thinking left out), without the calls, the call id or any JSON decoding."""
    yield from _content_leaves(message.get("content"), decoded=False)


def _content_leaves(content: Any, decoded: bool = True) -> Iterator[str]:
    if isinstance(content, str):
        yield content
        if decoded:
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
                    if decoded:
                        yield from _decoded_leaves(text)
                if kind == "tool_result":
                    yield from _content_leaves(block.get("content"), decoded)
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
