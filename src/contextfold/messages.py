"""The message shapes contextfold accepts, their validation and their classification.

Accepted shapes (one history may mix them):
- Amplifier/OpenAI chat dicts: ``role``, ``content`` (str, None or a list of blocks),
  ``tool_calls`` (OpenAI ``{"id", "type": "function", "function": {"name", "arguments"}}``
  or Amplifier ``{"id", "tool", "arguments"}``), ``tool_call_id``, ``name``, ``metadata``;
- Anthropic content blocks: ``tool_use`` in assistant content, ``tool_result`` in user
  content, ``thinking`` (with ``signature``) and ``redacted_thinking``.

Validation happens once, at admission, and is all-or-nothing: a refused message raises
`MessageValidationError` naming the field and the fix, and nothing is stored.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .errors import MessageValidationError

ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# A user-role message is a human prompt unless its metadata says it came from elsewhere:
# hook injections, reminders and our own notices are user-role but not human input.
HUMAN_SOURCES = frozenset({"user", "human", "cli", "prompt", "repl", "api"})
NOTICE_SOURCE = "context-fold"


class Kind(StrEnum):
    """What a message is, for protection and compaction."""

    SYSTEM = "system"
    HUMAN = "human"  # a prompt typed by a person
    USER = "user"  # user-role but not human: hook injection, reminder, other
    ASSISTANT = "assistant"
    TOOL_RESULT = "tool_result"  # role tool, or a user message carrying tool_result blocks


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """Facts about one admitted message, computed once."""

    kind: Kind
    call_ids: tuple[str, ...]  # tool calls this message makes
    result_ids: tuple[str, ...]  # tool calls this message answers
    signed_thinking: bool  # carries a thinking block with a signature (or redacted thinking)
    loaded_tool_state: bool  # metadata records loaded-tool state: never compacted
    reminder: bool  # an ephemeral+persisted user-role reminder envelope


def _fail(problem: str, field: str, fix: str, index: int | None) -> MessageValidationError:
    return MessageValidationError(problem, field=field, fix=fix, index=index)


def canonical_json(message: Mapping[str, Any], *, index: int | None = None) -> str:
    """Compact JSON of a message; refuses what a provider request could not carry."""
    try:
        return json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise _fail(
            f"not JSON-serialisable ({exc})",
            _find_bad_field(message) or "content",
            "Convert it to plain JSON types (str, int, float, bool, None, list, dict with "
            "str keys) before adding it, e.g. str() a Pydantic model's output or use "
            "model_dump(mode='json')",
            index,
        ) from None


def _find_bad_field(value: Any, path: str = "") -> str | None:
    """Dotted path of the first value json.dumps would refuse, for a precise error."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}.{key!r}" if path else repr(key)
            found = _find_bad_field(item, f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _find_bad_field(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
        return path or "value"
    if value is None or isinstance(value, str | int | float | bool):
        return None
    return path or "value"


def inspect_message(
    message: Any,
    *,
    index: int | None,
    pending: Mapping[str, int],
    issued: Container[str],
) -> MessageInfo:
    """Validate one message against the history so far and classify it.

    ``pending`` maps tool-call ids still awaiting a result to the index of the assistant
    message that made them; ``issued`` holds every call id made so far.
    """
    if not isinstance(message, Mapping):
        raise _fail(
            f"expected a dict with 'role' and 'content', got {type(message).__name__}",
            "message",
            "Pass each message as a dict such as {'role': 'user', 'content': 'hi'}",
            index,
        )
    role = message.get("role")
    if role is None:
        raise _fail(
            "is missing",
            "role",
            f"Every message needs a role, one of: {', '.join(ROLES)}",
            index,
        )
    if role not in ROLES:
        raise _fail(
            f"unknown role {role!r}",
            "role",
            f"Use one of: {', '.join(ROLES)} (Anthropic tool results go in a 'user' message "
            "as tool_result blocks)",
            index,
        )
    metadata = message.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise _fail(
            f"must be a dict, got {type(metadata).__name__}",
            "metadata",
            "Pass metadata as a dict or leave it out",
            index,
        )
    metadata = metadata or {}

    content = message.get("content")
    blocks = _check_content(role, content, message, index)
    call_ids = _collect_call_ids(role, message, blocks, index, issued)
    result_ids = _collect_result_ids(role, message, blocks, index, pending, issued)

    if role == "assistant" and pending and not result_ids:
        waiting = ", ".join(sorted(pending, key=pending.__getitem__))
        first = min(pending.values())
        raise _fail(
            f"a new assistant turn arrived while tool call(s) {waiting} from message {first} "
            "have no result",
            "role",
            "Add a tool result for every call first (an error result for a cancelled or "
            "failed call), then the next assistant message",
            index,
        )

    signed_thinking = any(
        (b.get("type") == "thinking" and b.get("signature")) or b.get("type") == "redacted_thinking"
        for b in blocks
    )
    loaded_tool_state = bool(metadata.get("loaded_tools")) or (
        metadata.get("kind") == "loaded_tool_state"
    )
    reminder = (
        role == "user" and metadata.get("ephemeral") is True and bool(metadata.get("persisted"))
    )
    return MessageInfo(
        kind=_classify(role, result_ids, metadata, reminder),
        call_ids=call_ids,
        result_ids=result_ids,
        signed_thinking=signed_thinking,
        loaded_tool_state=loaded_tool_state,
        reminder=reminder,
    )


def _classify(
    role: str, result_ids: tuple[str, ...], metadata: Mapping[str, Any], reminder: bool
) -> Kind:
    if role in ("system", "developer"):
        return Kind.SYSTEM
    if role in ("tool", "function") or result_ids:
        return Kind.TOOL_RESULT
    if role == "assistant":
        return Kind.ASSISTANT
    source = metadata.get("source")
    human = (
        not reminder
        and not metadata.get("ephemeral")
        and not metadata.get("compaction_notice")
        and (source is None or str(source).lower() in HUMAN_SOURCES)
    )
    return Kind.HUMAN if human else Kind.USER


def _check_content(
    role: str, content: Any, message: Mapping[str, Any], index: int | None
) -> list[Mapping[str, Any]]:
    """Check the content field; return its blocks (empty for string content)."""
    if content is None:
        if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
            return []
        if role == "assistant":
            return []  # an empty assistant turn is legal in both APIs
        raise _fail(
            "is missing or None",
            "content",
            f"A {role} message needs content: a string or a list of content blocks",
            index,
        )
    if isinstance(content, str):
        return []
    if role == "tool" and not _looks_like_blocks(content):
        # A ToolResult's dict/list output is stored as given; it is JSON-checked later.
        return []
    if not isinstance(content, list):
        raise _fail(
            f"must be a string or a list of content blocks, got {type(content).__name__}",
            "content",
            "Pass text as a string, or blocks such as [{'type': 'text', 'text': '...'}]",
            index,
        )
    for i, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _fail(
                "is not a content block (a dict with a string 'type')",
                f"content[{i}]",
                "Each block needs a type, e.g. {'type': 'text', 'text': '...'}",
                index,
            )
    return content


def _looks_like_blocks(content: Any) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content)
    )


def _collect_call_ids(
    role: str,
    message: Mapping[str, Any],
    blocks: list[Mapping[str, Any]],
    index: int | None,
    issued: Container[str],
) -> tuple[str, ...]:
    tool_calls = message.get("tool_calls")
    ids: list[str] = []
    if tool_calls is not None:
        if role != "assistant":
            raise _fail(
                f"only assistant messages make tool calls, this one has role {role!r}",
                "tool_calls",
                "Move the tool calls to an assistant message",
                index,
            )
        if not isinstance(tool_calls, list):
            raise _fail(
                f"must be a list, got {type(tool_calls).__name__}",
                "tool_calls",
                "Pass a list of calls such as [{'id': 'call_1', 'tool': 'read', 'arguments': {}}]",
                index,
            )
        for i, call in enumerate(tool_calls):
            field = f"tool_calls[{i}]"
            if not isinstance(call, Mapping):
                raise _fail("is not a dict", field, "Each tool call is a dict with an 'id'", index)
            call_id = _require_id(
                call.get("id"),
                f"{field}.id",
                "Give every tool call a unique id; its result refers to it by tool_call_id",
                index,
            )
            function = call.get("function")
            name = call.get("tool") or call.get("name")
            if isinstance(function, Mapping):
                name = name or function.get("name")
            if not isinstance(name, str) or not name:
                raise _fail(
                    "has no tool name",
                    field,
                    "Name the tool: OpenAI shape {'function': {'name': ...}} or Amplifier "
                    "shape {'tool': ...}",
                    index,
                )
            ids.append(call_id)
    for i, block in enumerate(blocks):
        if block.get("type") in ("tool_use", "tool_call"):
            if role != "assistant":
                raise _fail(
                    f"a {block['type']} block belongs in an assistant message, not {role!r}",
                    f"content[{i}]",
                    "Move the tool call to the assistant message that makes it",
                    index,
                )
            call_id = _require_id(
                block.get("id"), f"content[{i}].id", "Give every tool_use block a unique id", index
            )
            if call_id not in ids:  # Amplifier may carry the same call as block and list entry
                ids.append(call_id)
    seen: set[str] = set()
    for call_id in ids:
        if call_id in seen or call_id in issued:
            raise _fail(
                f"tool call id {call_id!r} is already used by an earlier call",
                "tool_calls",
                "Tool call ids must be unique within a conversation",
                index,
            )
        seen.add(call_id)
    return tuple(ids)


def _require_id(value: Any, field: str, fix: str, index: int | None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail("has no string 'id'", field, fix, index)
    return value


def _collect_result_ids(
    role: str,
    message: Mapping[str, Any],
    blocks: list[Mapping[str, Any]],
    index: int | None,
    pending: Mapping[str, int],
    issued: Container[str],
) -> tuple[str, ...]:
    ids: list[tuple[str, str]] = []
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _fail(
                "is missing",
                "tool_call_id",
                "A tool message must name the call it answers with tool_call_id",
                index,
            )
        ids.append((call_id, "tool_call_id"))
    elif role == "user":
        for i, block in enumerate(blocks):
            if block.get("type") == "tool_result":
                call_id = block.get("tool_use_id") or block.get("tool_call_id")
                if not isinstance(call_id, str) or not call_id:
                    raise _fail(
                        "has no tool_use_id",
                        f"content[{i}].tool_use_id",
                        "A tool_result block must name the tool_use it answers",
                        index,
                    )
                ids.append((call_id, f"content[{i}].tool_use_id"))
    seen: set[str] = set()
    for call_id, field in ids:
        if call_id in seen:
            raise _fail(
                f"answers tool call {call_id!r} twice",
                field,
                "Give each call exactly one result",
                index,
            )
        seen.add(call_id)
        if call_id in pending:
            continue
        if call_id in issued:
            raise _fail(
                f"tool call {call_id!r} already has a result",
                field,
                "Give each call exactly one result; drop the duplicate",
                index,
            )
        raise _fail(
            f"no earlier assistant message made a tool call with id {call_id!r} (an orphan "
            "tool result)",
            field,
            "Add the assistant message with that tool call first, or drop this result",
            index,
        )
    return tuple(call_id for call_id, _ in ids)
