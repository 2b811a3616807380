"""Shortening one message for the view: a new dict, structure kept, one short marker.

Tool-call structure is never altered (ids, names, arguments, tool_use/tool_result
pairing), thinking blocks are never edited, and non-text blocks of a shortened tool
result (images, documents) give way to a one-line placeholder, since they are usually
the largest part of an old result.

Every marker names the message's recall id (``context_recall("r41")``), so what the view
leaves out can be asked for again. Two shapes: ``head`` keeps the start; ``head_tail`` keeps
the start and the end (where a test run, a build or a log says how it ended) and says how
much of the middle was left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..messages import THINKING_KEYS, THINKING_TYPES
from ..recall import recall_hint

SHAPE_HEAD = "head"
SHAPE_HEAD_TAIL = "head_tail"
SHAPES = (SHAPE_HEAD, SHAPE_HEAD_TAIL)

# Without an id (a caller outside a history, e.g. `fit`) the marker says where the text is.
MARKER = (
    "\n[... {omitted:,} more characters omitted from this view by contextfold; "
    "the full text is in the history]"
)
MARKER_WITH_ID = "\n[... {omitted:,} more characters omitted from this view; {hint} returns it]"
MIDDLE_MARKER = "\n[... {omitted:,} characters omitted from the middle; {hint} returns it]\n"
CLEARED = "[... {tokens:,} tokens cleared; {hint} returns it]"


def marker(omitted: int, index: int | None, shape: str = SHAPE_HEAD) -> str:
    """The marker for ``omitted`` characters left out of message ``index``."""
    hint = recall_hint(index) if index is not None else "the history keeps the full text"
    if shape == SHAPE_HEAD_TAIL:
        return MIDDLE_MARKER.format(omitted=omitted, hint=hint)
    if index is None:
        return MARKER.format(omitted=omitted)
    return MARKER_WITH_ID.format(omitted=omitted, hint=hint)


def cleared_text(tokens: int, index: int) -> str:
    """The placeholder a cleared tool result carries in place of its content."""
    return CLEARED.format(tokens=tokens, hint=recall_hint(index))


def shorten_text(
    text: str, keep: int, *, index: int | None = None, shape: str = SHAPE_HEAD
) -> str | None:
    """``text`` cut to ``keep`` characters with a marker (the head, or the head and the
    tail around it), or None when that would not be shorter."""
    omitted = len(text) - keep
    mark = marker(omitted, index, shape)
    if omitted <= len(mark):
        return None
    if shape == SHAPE_HEAD_TAIL:
        head = keep - keep // 2
        tail = keep // 2
        # text[-0:] is the whole string: an empty tail must be spelled out.
        return text[:head] + mark + (text[-tail:] if tail else "")
    return text[:keep] + mark


def shorten_tool_result(
    message: Mapping[str, Any], keep: int, *, index: int | None = None, shape: str = SHAPE_HEAD
) -> dict[str, Any] | None:
    """A shortened copy of a tool-result message (role tool, or user with tool_result blocks)."""
    if message.get("role") == "user":
        return _shorten_result_blocks(message, keep, index, shape)
    new_content = _shorten_result_content(message.get("content"), keep, index, shape)
    if new_content is None:
        return None
    return {**message, "content": new_content}


def shorten_prose(
    message: Mapping[str, Any], keep: int, *, index: int | None = None
) -> dict[str, Any] | None:
    """A shortened copy of an assistant or non-human user message's text."""
    content = message.get("content")
    if isinstance(content, str):
        short = shorten_text(content, keep, index=index)
        return None if short is None else {**message, "content": short}
    if not isinstance(content, list):
        return None
    changed = False
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text":
            short = shorten_text(str(block.get("text", "")), keep, index=index)
            if short is not None:
                block = {**block, "text": short}
                changed = True
        blocks.append(block)
    return {**message, "content": blocks} if changed else None


def clear_tool_result(message: Mapping[str, Any], placeholder: str) -> dict[str, Any] | None:
    """A copy of a tool-result message whose content is only ``placeholder``.

    The pairing stays exactly as it was (``tool_call_id``, each ``tool_result`` block's
    ``tool_use_id`` and ``is_error``), so the call keeps its answer and the model still sees
    what it did; only what the tool returned leaves the view.
    """
    if message.get("role") == "user":
        content = message.get("content")
        if not isinstance(content, list):
            return None
        blocks = [
            {**block, "content": placeholder}
            if isinstance(block, Mapping) and block.get("type") == "tool_result"
            else block
            for block in content
        ]
        return {**message, "content": blocks}
    return {**message, "content": placeholder}


def _shorten_result_content(content: Any, keep: int, index: int | None, shape: str) -> Any | None:
    if isinstance(content, str):
        return shorten_text(content, keep, index=index, shape=shape)
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content
    ):
        text = "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        dropped = sum(1 for b in content if b.get("type") != "text")
        note = f"\n[{dropped} non-text block(s) omitted from this view]" if dropped else ""
        short = shorten_text(text, keep, index=index, shape=shape)
        if short is None and not dropped:
            return None
        return [{"type": "text", "text": (short if short is not None else text) + note}]
    if content is None:
        return None
    text = json.dumps(content, ensure_ascii=False, default=str)
    return shorten_text(text, keep, index=index, shape=shape)


def _shorten_result_blocks(
    message: Mapping[str, Any], keep: int, index: int | None, shape: str
) -> dict[str, Any] | None:
    content = message.get("content")
    if not isinstance(content, list):
        return None
    changed = False
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            inner = _shorten_result_content(block.get("content"), keep, index, shape)
            if inner is not None:
                block = {**block, "content": inner}
                changed = True
        blocks.append(block)
    return {**message, "content": blocks} if changed else None


def strip_thinking(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of an assistant message without its thinking, or None if it has none.

    Every thinking and redacted_thinking block goes: a message's thinking is returned whole
    or not at all, never partly (Anthropic's rule). Amplifier's loops may also keep a copy
    beside the blocks (``thinking_block``; ``thinking_text`` in CLI transcripts): those go
    too, or the rung would leave the bulk of it in the view.
    """
    content = message.get("content")
    kept: Any = content
    if isinstance(content, list):
        kept = [
            block
            for block in content
            if not (isinstance(block, Mapping) and block.get("type") in THINKING_TYPES)
        ]
    side_keys = [key for key in THINKING_KEYS if key in message]
    if not side_keys and (not isinstance(content, list) or len(kept) == len(content)):
        return None
    stripped = {k: v for k, v in message.items() if k not in THINKING_KEYS}
    stripped["content"] = kept
    return stripped
