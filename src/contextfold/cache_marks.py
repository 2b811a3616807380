"""Anthropic prompt-cache breakpoints on a delivered view (``cache_breakpoints: anthropic``).

Anthropic caches a prompt only up to a block marked ``cache_control: {"type":
"ephemeral"}`` (at most four marks a request), and reads a cached prefix back only where a
mark stands at most 20 blocks after it. contextfold knows which part of the view the next
compaction pass leaves as it is, so it marks:

- the last leading system message (tool schemas and system prompt: the part every request
  of every session of an agent shares);
- the end of the stable prefix: the view up to the first message the next pass may change.
  That is the compaction notice or the summary when the view has one (a pass rewrites
  both), and never later than the protected head (the leading system messages and the first
  human prompt, which no rung touches): everything after it may be shortened or dropped;
- the newest message: the whole request, for the next request to read.

Three marks at most, so a caller keeps one of Anthropic's four (for its tool schemas, say).
A mark goes on the message's last content block that can carry one (not thinking, not empty
text); a message whose content is a string gets it as one text block, which Anthropic reads
exactly as the string. A message with nowhere to put a mark passes it to the message before.

Marks are made on copies: the messages given are never changed (history and the sticky view
stay unmarked), and a marked message is a new dict with a new content list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .conventions import is_human_prompt, is_system_role
from .messages import NOTICE_SOURCE

CACHE_BREAKPOINT_MODES = ("off", "anthropic")
EPHEMERAL = {"type": "ephemeral"}
MAX_MARKS = 3  # of Anthropic's four per request: one is left to the caller
# Blocks Anthropic does not let a cache_control mark stand on.
_UNMARKABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def stable_prefix_length(view: Sequence[Mapping[str, Any]]) -> int:
    """How many leading messages of ``view`` the next compaction pass leaves unchanged.

    The prefix ends before the first message contextfold wrote (the notice, a summary:
    ``metadata.source == "context-fold"``, rewritten by every pass), and at the latest
    after the protected head (leading system messages, then the first human prompt).
    """
    head = 0
    for message in view:
        if _written_by_contextfold(message):
            return head
        head += 1
        if is_system_role(message.get("role")):
            continue
        # The first human prompt closes the head; anything else before it does too (a
        # view opening with a tool result has no protected prompt to keep stable).
        return head if is_human_prompt(message) else head - 1
    return head


def _written_by_contextfold(message: Mapping[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("source") == NOTICE_SOURCE


def breakpoint_positions(view: Sequence[Mapping[str, Any]], stable: int) -> list[int]:
    """The messages to mark, in order (see the module): at most `MAX_MARKS`."""
    leading_system = 0
    while leading_system < len(view) and is_system_role(view[leading_system].get("role")):
        leading_system += 1
    wanted = (leading_system - 1, stable - 1, len(view) - 1)
    positions: list[int] = []
    for wish in wanted:
        position = _markable_at_or_before(view, wish)
        if position is not None and position not in positions:
            positions.append(position)
    return sorted(positions)[-MAX_MARKS:]


def marked_view(view: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """``view`` with breakpoints for ``mode`` (``"off"``: the view itself). The list and the
    messages given are left as they are; marked messages are new dicts in a new list."""
    if mode != "anthropic" or not view:
        return view
    positions = breakpoint_positions(view, stable_prefix_length(view))
    if not positions:
        return view
    marked = list(view)
    for position in positions:
        marked[position] = mark_message(view[position])
    return marked


def mark_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``message`` with a breakpoint on its last markable block; the message
    itself (and its blocks) untouched. ValueError when it has nowhere to carry one."""
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            raise ValueError("an empty message cannot carry a cache breakpoint")
        block = {"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}
        return {**message, "content": [block]}
    if isinstance(content, list):
        index = _markable_block(content)
        if index is not None:
            blocks = list(content)
            blocks[index] = {**content[index], "cache_control": dict(EPHEMERAL)}
            return {**message, "content": blocks}
    raise ValueError("the message has no content block that can carry a cache breakpoint")


def is_marked(message: Mapping[str, Any]) -> bool:
    """Whether any content block of ``message`` carries a ``cache_control`` mark."""
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and "cache_control" in block for block in content
    )


def _markable_at_or_before(view: Sequence[Mapping[str, Any]], position: int) -> int | None:
    while position >= 0:
        if _can_carry_mark(view[position]):
            return position
        position -= 1
    return None


def _can_carry_mark(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content)
    return isinstance(content, list) and _markable_block(content) is not None


def _markable_block(content: list[Any]) -> int | None:
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if not isinstance(block, Mapping) or block.get("type") in _UNMARKABLE_BLOCKS:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue  # Anthropic refuses a mark on an empty text block
        return index
    return None


__all__ = [
    "CACHE_BREAKPOINT_MODES",
    "EPHEMERAL",
    "MAX_MARKS",
    "breakpoint_positions",
    "is_marked",
    "mark_message",
    "marked_view",
    "stable_prefix_length",
]
