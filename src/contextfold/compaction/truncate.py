"""Shortening one message for the view: a new dict, structure kept, one short marker.

Tool-call structure is never altered (ids, names, arguments, tool_use/tool_result
pairing), thinking blocks are never edited, and non-text blocks of a shortened tool
result (images, documents) give way to a one-line placeholder, since they are usually
the largest part of an old result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..messages import THINKING_TYPES

MARKER = (
    "\n[... {omitted:,} more characters omitted from this view by contextfold; "
    "the full text is in the history]"
)


def shorten_text(text: str, keep: int) -> str | None:
    """Head of ``text`` plus a marker, or None when that would not be shorter."""
    omitted = len(text) - keep
    marker = MARKER.format(omitted=omitted)
    if omitted <= len(marker):
        return None
    return text[:keep] + marker


def shorten_tool_result(message: Mapping[str, Any], keep: int) -> dict[str, Any] | None:
    """A shortened copy of a tool-result message (role tool, or user with tool_result blocks)."""
    if message.get("role") == "user":
        return _shorten_result_blocks(message, keep)
    new_content = _shorten_result_content(message.get("content"), keep)
    if new_content is None:
        return None
    return {**message, "content": new_content}


def shorten_prose(message: Mapping[str, Any], keep: int) -> dict[str, Any] | None:
    """A shortened copy of an assistant or non-human user message's text."""
    content = message.get("content")
    if isinstance(content, str):
        short = shorten_text(content, keep)
        return None if short is None else {**message, "content": short}
    if not isinstance(content, list):
        return None
    changed = False
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text":
            short = shorten_text(str(block.get("text", "")), keep)
            if short is not None:
                block = {**block, "text": short}
                changed = True
        blocks.append(block)
    return {**message, "content": blocks} if changed else None


def text_length(message: Mapping[str, Any]) -> int:
    """Characters of text a message carries (for choosing what is worth shortening)."""
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            if isinstance(block, Mapping):
                if block.get("type") == "text":
                    total += len(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    total += _result_length(block.get("content"))
                else:
                    total += 200  # images and other blocks: worth shortening a result
        return total
    if content is None:
        return 0
    return len(json.dumps(content, ensure_ascii=False, default=str))


def _result_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return text_length({"content": content})
    return 0 if content is None else len(str(content))


def _shorten_result_content(content: Any, keep: int) -> Any | None:
    if isinstance(content, str):
        return shorten_text(content, keep)
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content
    ):
        text = "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
        dropped = sum(1 for b in content if b.get("type") != "text")
        note = f"\n[{dropped} non-text block(s) omitted from this view]" if dropped else ""
        short = shorten_text(text, keep)
        if short is None and not dropped:
            return None
        return [{"type": "text", "text": (short if short is not None else text) + note}]
    if content is None:
        return None
    return shorten_text(json.dumps(content, ensure_ascii=False, default=str), keep)


def _shorten_result_blocks(message: Mapping[str, Any], keep: int) -> dict[str, Any] | None:
    content = message.get("content")
    if not isinstance(content, list):
        return None
    changed = False
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            inner = _shorten_result_content(block.get("content"), keep)
            if inner is not None:
                block = {**block, "content": inner}
                changed = True
        blocks.append(block)
    return {**message, "content": blocks} if changed else None


def strip_thinking(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of an assistant message without its thinking blocks, or None if it has none.

    Every thinking and redacted_thinking block goes: a message's thinking is returned whole
    or not at all, never partly (Anthropic's rule).
    """
    content = message.get("content")
    if not isinstance(content, list):
        return None
    kept = [
        block
        for block in content
        if not (isinstance(block, Mapping) and block.get("type") in THINKING_TYPES)
    ]
    if len(kept) == len(content):
        return None
    return {**message, "content": kept}
