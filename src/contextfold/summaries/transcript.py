"""The text a summarizer reads: a span of chat messages rendered as a numbered transcript.

Every adapter sends the span the same way, as one user message of plain text under the
summary prompt, rather than as the original chat turns: a summarizer call then needs no tool
schemas, cannot be refused for a tool-call sequence fault, and reads the same on every
provider. Each message becomes one or more entries that start a line with ``[n] label:``
(``n`` its position in the span); tool calls and results name their call id so the summary
can keep it. A previous summary being folded in is passed as the first message, marked in
its metadata (:func:`previous_summary_message`), and rendered under its own heading.

A cache-aligned summary request (see :mod:`contextfold.summaries.aligned`) is the view as it
was last sent followed by one instruction message naming the span: rendered, it is the same
transcript of that span (and of the summary in the view, as the previous one), so a
summarizer that renders every request it gets works with either shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MESSAGES_HEADING",
    "PREVIOUS_SUMMARY_HEADING",
    "PREVIOUS_SUMMARY_KEY",
    "SUMMARY_REQUEST_KEY",
    "AlignedSpan",
    "aligned_span",
    "is_previous_summary",
    "previous_summary_message",
    "render_transcript",
]

PREVIOUS_SUMMARY_KEY = "contextfold_previous_summary"
PREVIOUS_SUMMARY_HEADING = "Summary of the conversation so far:"
MESSAGES_HEADING = "Messages to fold into the summary:"
# The metadata key of a cache-aligned request's instruction message (its last message).
SUMMARY_REQUEST_KEY = "contextfold_summary_request"


@dataclass(frozen=True)
class AlignedSpan:
    """Where a cache-aligned request's span lies in it: messages ``first`` to ``last``
    (positions in the request, both included), and the summary so far at ``previous``
    (None when there is none); ``covers`` names the span's history ids (``r5-r20``)."""

    first: int
    last: int
    previous: int | None
    covers: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "previous": self.previous,
            "covers": self.covers,
        }


def aligned_span(messages: Sequence[Mapping[str, Any]]) -> AlignedSpan | None:
    """The span of a cache-aligned request (its last message says where), or None when
    ``messages`` is a plain span to summarize."""
    if not messages:
        return None
    metadata = messages[-1].get("metadata")
    info = metadata.get(SUMMARY_REQUEST_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(info, Mapping):
        return None
    first, last, previous = info.get("first"), info.get("last"), info.get("previous")
    size = len(messages) - 1
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last < size):
        return None
    if previous is not None and not (isinstance(previous, int) and 0 <= previous < first):
        return None
    return AlignedSpan(first, last, previous, str(info.get("covers", "")))


def previous_summary_message(text: str) -> dict[str, Any]:
    """The message that carries an earlier summary into the next summarizer call."""
    return {"role": "user", "content": text, "metadata": {PREVIOUS_SUMMARY_KEY: True}}


def is_previous_summary(message: Mapping[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get(PREVIOUS_SUMMARY_KEY) is True


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The span as the summarizer's input text (see the module docstring for its shape)."""
    aligned = aligned_span(messages)
    if aligned is not None:
        # The span and the summary so far, as a plain span request would carry them.
        named: list[Mapping[str, Any]] = list(messages[aligned.first : aligned.last + 1])
        if aligned.previous is not None:
            text = _text_of(messages[aligned.previous].get("content"))
            named.insert(0, previous_summary_message(_unframed(text)))
        messages = named
    previous = [m for m in messages if is_previous_summary(m)]
    span = [m for m in messages if not is_previous_summary(m)]
    lines: list[str] = []
    if previous:
        lines.append(PREVIOUS_SUMMARY_HEADING)
        lines.extend(_text_of(m.get("content")).strip() for m in previous)
        lines.append("")
        lines.append(MESSAGES_HEADING)
    for position, message in enumerate(span, start=1):
        lines.extend(f"[{position}] {label}: {text}" for label, text in message_entries(message))
    return "\n".join(lines)


_FRAME = re.compile(r"\A\s*<context-summary[^>\n]*>\n(.*)\n</context-summary>\s*\Z", re.DOTALL)


def _unframed(text: str) -> str:
    """A summary as the view frames it (``<context-summary covers=...>``), without the frame."""
    match = _FRAME.match(text)
    return match.group(1) if match else text


def message_entries(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) entries of one message: its words, then its tool calls, or its results.

    Thinking blocks are left out: they are the model's scratch work, not the conversation,
    and providers drop old ones anyway.
    """
    role = str(message.get("role", "unknown"))
    content = message.get("content")
    entries: list[tuple[str, str]] = []
    if role in ("tool", "function"):
        call_id = message.get("tool_call_id") or message.get("name") or "?"
        return [(f"result ({call_id})", _text_of(content))]
    text_parts: list[str] = []
    seen_calls: set[str] = set()
    calls: list[tuple[str, str, Any]] = []
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            calls.append(_call_of(call))
            seen_calls.add(calls[-1][0])
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind in ("tool_call", "tool_use") and str(block.get("id")) not in seen_calls:
            calls.append(_call_of(block))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id") or block.get("tool_call_id") or "?"
            entries.append((f"result ({call_id})", _text_of(block.get("content"))))
        elif kind not in ("tool_call", "tool_use"):
            text = _text_of([block])
            if text:
                text_parts.append(text)
    if isinstance(content, str):
        text_parts.append(content)
    words = "\n".join(part for part in text_parts if part)
    if words or not (calls or entries):
        entries.insert(0, (role, words))
    entries.extend(
        ("call", f"{name} {_arguments_text(arguments)} (id {call_id})")
        for call_id, name, arguments in calls
    )
    return entries


def _call_of(call: Mapping[str, Any]) -> tuple[str, str, Any]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = {}
    name = call.get("tool") or call.get("name") or function.get("name") or "?"
    arguments = call.get("arguments", call.get("input", function.get("arguments", {})))
    return str(call.get("id")), str(name), arguments


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments  # already JSON text, as OpenAI sends it
    try:
        return json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(arguments)


def _text_of(content: Any) -> str:
    """Readable text of a content value: a string, or blocks (text kept, media named)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list):
        return str(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking", "reasoning"):
            continue
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "tool_result":
            parts.append(_text_of(block.get("content")))
        elif kind in ("image", "image_url", "input_image"):
            parts.append("[image]")
        elif kind:
            parts.append(f"[{kind}]")
    return "\n".join(part for part in parts if part)
