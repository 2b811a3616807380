"""The message shapes nearly every conversation is made of, admitted in one look.

Admission (`admission.admit`) turns typed objects into plain JSON, inspects the
message, makes a private copy and applies the ingress cap: four walks of a message that, in
most conversations, is one of a few shapes. A user's text, an assistant's text or its
OpenAI-shape tool calls, a tool's text result, each with the admission stamp as its only
metadata. `admit_common_shape` recognises exactly those and produces what the four walks
would (the stored copy and its classification) in one pass; anything else, or anything
about which it is in the least doubt (a key it does not expect, non-ASCII text, a result
near the cap), returns None and takes the general path, which gives the same answer or
the same error. ``tests/test_common_shapes.py`` holds the two paths equal on random
messages, common and not.
"""

from __future__ import annotations

from typing import Any

from .conventions import TIMESTAMP_KEY, is_reminder_envelope
from .messages import Kind, MessageInfo, info_without_ids

_USER_KEYS = frozenset({"role", "content", "metadata"})
_TOOL_KEYS = frozenset({"role", "content", "metadata", "tool_call_id"})
_ASSISTANT_KEYS = frozenset({"role", "content", "metadata", "tool_calls"})
_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_STAMP_ONLY = frozenset({TIMESTAMP_KEY})

_ASSISTANT = info_without_ids(Kind.ASSISTANT)


def admit_common_shape(
    message: Any, max_tool_result_bytes: int
) -> tuple[dict[str, Any], MessageInfo] | None:
    """The private stored copy of ``message`` and its classification, when it is one of
    the common shapes; None for anything else (the general path decides).

    The copy is what ``cap_tool_result(private_copy(message))`` stores (no cap applies to
    what is accepted here) and the classification what `inspect_message` says of it.
    """
    if type(message) is not dict:
        return None
    metadata = message.get("metadata")
    if metadata is not None:
        # Only the admission stamp: it marks nothing, so no convention needs reading.
        if type(metadata) is not dict or metadata.keys() != _STAMP_ONLY:
            return None
        stamp = metadata[TIMESTAMP_KEY]
        if type(stamp) is not str or not stamp.isascii():
            return None
        metadata = {TIMESTAMP_KEY: stamp}
    role = message.get("role")
    content = message.get("content")
    keys = message.keys()
    if role == "user":
        if type(content) is not str or not content.isascii() or not keys <= _USER_KEYS:
            return None
        # With nothing in metadata, a user's text is a person's words unless it is a
        # <system-reminder> envelope (`conventions.is_human_prompt`).
        info = info_without_ids(Kind.USER if is_reminder_envelope(content) else Kind.HUMAN)
    elif role == "tool":
        call_id = message.get("tool_call_id")
        if (
            type(content) is not str
            or not content.isascii()
            or len(content) > max_tool_result_bytes  # ASCII: a character is a byte
            or type(call_id) is not str
            or not call_id
            or not call_id.isascii()
            or not keys <= _TOOL_KEYS
        ):
            return None
        info = MessageInfo(Kind.TOOL_RESULT, (), (call_id,), False, False, False, False)
    elif role == "assistant":
        if (content is not None and (type(content) is not str or not content.isascii())) or (
            not keys <= _ASSISTANT_KEYS
        ):
            return None
        calls = message.get("tool_calls")
        if calls is None:
            info = _ASSISTANT
        else:
            copied = _copied_calls(calls)
            if copied is None:
                return None
            call_ids = tuple(call["id"] for call in copied)
            if len(set(call_ids)) != len(call_ids):
                return None  # the general path names the repeated id
            stored = message.copy()
            stored["tool_calls"] = copied
            if metadata is not None:
                stored["metadata"] = metadata
            return stored, MessageInfo(Kind.ASSISTANT, call_ids, (), False, False, False, False)
    else:
        return None
    stored = message.copy()
    if metadata is not None:
        stored["metadata"] = metadata
    return stored, info


def _copied_calls(calls: Any) -> list[dict[str, Any]] | None:
    """Copies of OpenAI-shape calls (``{"id", "type", "function": {"name", "arguments"}}``,
    every string ASCII, arguments as JSON text); None if any call is anything else."""
    if type(calls) is not list or not calls:
        return None
    copied: list[dict[str, Any]] = []
    for call in calls:
        if type(call) is not dict or not call.keys() <= _CALL_KEYS:
            return None
        call_id = call.get("id")
        kind = call.get("type")
        function = call.get("function")
        if (
            type(call_id) is not str
            or not call_id
            or not call_id.isascii()
            or (kind is not None and (type(kind) is not str or not kind.isascii()))
            or type(function) is not dict
            or not function.keys() <= _FUNCTION_KEYS
        ):
            return None
        name = function.get("name")
        arguments = function.get("arguments")
        if (
            type(name) is not str
            or not name
            or not name.isascii()
            or (arguments is not None and (type(arguments) is not str or not arguments.isascii()))
        ):
            return None
        copy = call.copy()
        copy["function"] = function.copy()
        copied.append(copy)
    return copied
