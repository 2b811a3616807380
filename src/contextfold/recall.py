"""Recall by id: compaction you can undo.

Every message keeps a stable id, ``r`` + its history index (``r41``). A rung that shortens,
clears or removes a message names that id in its marker, placeholder or notice line, and
``recall_message`` returns the original content from history, as admitted: the text of the
message, or for a tool result the text of its content, byte for byte; a turn that called
tools, as the JSON of its content and calls.

A recall is itself sent to the model, so it is capped (``max_tokens``): a longer text is cut
at a character offset with a marker saying how to ask for the rest (``offset``), and a recall
can never overflow the window on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .history import History
from .messages import block_texts
from .tokens import TokenCounter

ID_PREFIX = "r"
DEFAULT_MAX_TOKENS = 4_000
MIN_MAX_TOKENS = 50  # below this a recall could not carry its own continuation marker
RECALL_TOOL = "context_recall"

_ID_PATTERN = re.compile(r"r(0|[1-9][0-9]{0,11})")
CUT_MARKER = (
    "\n[... recall cut at character {end:,} of {total:,}; "
    'context_recall("{rid}", offset={end}) returns the rest]'
)


class RecallError(ValueError):
    """A recall that cannot be answered: the message says why and what to ask instead.

    ``kind`` is ``unknown_id`` (well formed, but no such message), ``malformed_id`` or
    ``invalid_argument`` (an offset or cap out of range).
    """

    def __init__(self, message: str, kind: str = "invalid_argument") -> None:
        super().__init__(message)
        self.kind = kind


def recall_id(index: int) -> str:
    """The stable id of the message at history ``index``."""
    return f"{ID_PREFIX}{index}"


def recall_hint(index: int) -> str:
    """How a marker tells the model to get a message back: ``context_recall("r41")``."""
    return f'{RECALL_TOOL}("{recall_id(index)}")'


def parse_recall_id(value: Any, history_size: int) -> int:
    """The history index an id names; `RecallError` for anything else."""
    if not isinstance(value, str):
        raise RecallError(
            f"a recall id is a string like 'r41' (as the marker names it), got "
            f"{type(value).__name__}",
            "malformed_id",
        )
    match = _ID_PATTERN.fullmatch(value.strip())
    if match is None:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise RecallError(
            f"{shown!r} is not a recall id: ids are 'r' followed by a message number, e.g. "
            "'r41', exactly as a compaction marker or notice names them",
            "malformed_id",
        )
    index = int(match.group(1))
    if index >= history_size:
        span = f"r0 to r{history_size - 1}" if history_size else "none yet"
        raise RecallError(
            f"unknown id {value.strip()!r}: the history holds {history_size} message(s) "
            f"(ids {span})",
            "unknown_id",
        )
    return index


def message_text(message: Mapping[str, Any]) -> str:
    """What a recall returns for a message: its text, or a tool result's content text.

    A string content is returned exactly. Blocks give their text joined by newlines (a
    tool_result block its own content's text). A turn that calls tools (whether or not it
    also has text), or a message with no text at all (an image), gives the JSON of its
    content and calls as admitted, so the model gets back everything it was: the calls'
    names, ids and arguments as well as its words.
    """
    content = message.get("content")
    if not message.get("tool_calls") and not _has_call_blocks(content):
        if isinstance(content, str):
            return content
        parts = block_texts(content) if isinstance(content, list) else []
        if parts:
            return "\n".join(parts)
    rest = {k: message[k] for k in ("content", "tool_calls") if message.get(k) not in (None, "")}
    return json.dumps(rest, ensure_ascii=False, default=str) if rest else ""


def _has_call_blocks(content: Any) -> bool:
    """Whether content blocks hold a tool call (Anthropic ``tool_use``, Amplifier
    ``tool_call``)."""
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") in ("tool_use", "tool_call")
        for block in content
    )


def recall_message(
    history: History,
    recall_id: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    offset: int = 0,
) -> str:
    """The original content of the message ``recall_id`` names, from ``offset`` on, capped
    to ``max_tokens`` (cut with a marker naming the offset to continue from)."""
    index = parse_recall_id(recall_id, len(history.entries))
    return recall_text(
        history.entries[index].message, recall_id.strip(), max_tokens, counter, offset=offset
    )


def recall_from_messages(
    messages: Sequence[Mapping[str, Any]],
    recall_id: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    offset: int = 0,
) -> str:
    """`recall_message` over a list of messages as admitted (``get_messages()``)."""
    index = parse_recall_id(recall_id, len(messages))
    return recall_text(messages[index], recall_id.strip(), max_tokens, counter, offset=offset)


def recall_text(
    message: Mapping[str, Any],
    rid: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    offset: int = 0,
) -> str:
    """The text of ``message`` from ``offset``, cut to fit ``max_tokens`` with a marker."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise RecallError(f"max_tokens must be a whole number, got {max_tokens!r}")
    if max_tokens < MIN_MAX_TOKENS:
        raise RecallError(f"max_tokens must be at least {MIN_MAX_TOKENS}, got {max_tokens}")
    text = message_text(message)
    total = len(text)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise RecallError(f"offset must be a whole number >= 0, got {offset!r}")
    if offset > total or (offset == total and total):
        raise RecallError(
            f"offset {offset} is past the end of {rid}, which has {total:,} characters"
        )
    rest = text[offset:]
    if counter.count_text(rest) <= max_tokens:
        return rest
    # Room for the continuation marker at its longest, then the longest prefix that fits:
    # a binary search over the cut point, O(log n) counts of at most max_tokens' worth.
    room = max_tokens - counter.count_text(CUT_MARKER.format(end=total, total=total, rid=rid))
    # A token is rarely longer than 32 characters: no need to count further than that.
    low, high = 0, min(len(rest), max(room, 1) * 32)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text(rest[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    keep = max(low, 1)  # always progress, even when one character counts as much as the room
    end = offset + keep
    return rest[:keep] + CUT_MARKER.format(end=end, total=total, rid=rid)
