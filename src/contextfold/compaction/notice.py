"""The compaction notice: what the model reads in place of what was compacted.

Besides saying that the view is compacted (so the model does not take the gap for a
missing memory), it carries an extractive digest of what was removed: the prompts,
the tool calls with their arguments, the first words of replies. No model call is
needed, and the digest is bounded by ``compaction_notice_token_reserve``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..history import History
from ..messages import NOTICE_SOURCE, Kind
from ..recall import recall_id
from .working import FoldState

LINE_CHARS = 160
CHARS_PER_TOKEN = 3  # conservative: digest lines are dense (names, ids, numbers)
# The ids at the head of a digest line: "- r12-r15: ..." or "- r7,r9: ...".
_ID_PREFIX = re.compile(r"- (r\d+(?:[-,]r\d+)*): ")


MINIMAL_TEXT = (
    "<context-compaction>Earlier parts of this conversation were compacted to fit the context "
    "window: older messages and tool results may be shortened or left out.</context-compaction>"
)


def build_notice(
    history: History,
    state: FoldState,
    *,
    truncate_chars: int,
    reserve_tokens: int,
    role: str,
    verbosity: str = "normal",
) -> dict[str, Any] | None:
    """The notice for ``state``, or None when nothing was removed or shortened (thinking
    left out of earlier turns needs no notice: the model never relies on it)."""
    dropped = state.removed_units - state.summarized_units  # a summary speaks for the rest
    if not dropped and not state.shortened:
        return None
    metadata = {"source": NOTICE_SOURCE, "compaction_notice": True}
    if verbosity == "minimal":
        return {"role": role, "content": MINIMAL_TEXT, "metadata": metadata}
    removed_messages = sum(len(history.units[u].entries) for u in dropped)
    head = [
        "<context-compaction>",
        "Parts of this conversation were compacted to fit the context window. The full "
        "history is kept outside this view; nothing below was changed except as stated.",
    ]
    if removed_messages:
        head.append(
            f"- {removed_messages} earlier message(s) in {len(dropped)} turn(s) or "
            "tool-call group(s) were removed from this view."
        )
    if state.shortened:
        head.append(
            f"- {len(state.shortened)} older message(s) were shortened or cleared (each "
            "marked, with the id that recalls it)."
        )
    tail = ["</context-compaction>"]
    budget_chars = reserve_tokens * CHARS_PER_TOKEN - sum(len(line) + 1 for line in head + tail)
    digest = _digest_lines(history, state) if budget_chars > 0 else []
    if digest:
        head.extend(_fit_lines(["Removed, in order:", *digest], budget_chars))
    return {
        "role": role,
        "content": "\n".join(head + tail),
        "metadata": metadata,
    }


def _digest_lines(history: History, state: FoldState) -> list[str]:
    """One line per prompt, reply, call and note removed; a unit's first line names the ids
    of all its messages, a range for a call group (``r12-r15``), so the model can recall any
    of them."""
    lines: list[str] = []
    for unit_index in sorted(state.removed_units - state.summarized_units):
        entries = history.units[unit_index].entries
        first = len(lines)
        for index in entries:
            entry = history.entries[index]
            message = entry.message
            kind = entry.info.kind
            if kind is Kind.HUMAN:
                lines.append(f'user asked: "{_text_of(message)}"')
            elif kind is Kind.ASSISTANT:
                text = _text_of(message)
                if text:
                    lines.append(f'assistant said: "{text}"')
                for call in _calls_of(message):
                    lines.append(f"assistant called {call}")
            elif kind is Kind.USER:
                lines.append(f'note: "{_text_of(message)}"')
        if len(lines) > first:
            lines[first] = f"{_id_span(entries)}: {lines[first]}"
        lines[first:] = [_clip(f"- {line}") for line in lines[first:]]
    return lines


def _id_span(entries: list[int]) -> str:
    """The ids of a unit's messages: ``r7``, or ``r12-r15`` when they run consecutively."""
    low, high = min(entries), max(entries)
    if low == high:
        return recall_id(low)
    if high - low + 1 == len(entries):
        return f"{recall_id(low)}-{recall_id(high)}"
    return ",".join(recall_id(i) for i in sorted(entries))


def _fit_lines(lines: list[str], budget_chars: int) -> list[str]:
    """All lines if they fit, else the first and the last ones around an elision (which
    still names the ids it leaves out, as a range)."""
    if sum(len(line) + 1 for line in lines) <= budget_chars:
        return lines
    keep_head: list[str] = []
    keep_tail: list[str] = []
    used = len(lines[0]) + 1 + 60  # the title and the elision line
    head_i, tail_i = 1, len(lines) - 1
    take_head = True
    while head_i <= tail_i:
        line = lines[head_i] if take_head else lines[tail_i]
        if used + len(line) + 1 > budget_chars:
            break
        used += len(line) + 1
        if take_head:
            keep_head.append(line)
            head_i += 1
        else:
            keep_tail.append(line)
            tail_i -= 1
        take_head = not take_head
    skipped = tail_i - head_i + 1
    middle = []
    if skipped > 0:
        ids = [
            int(number)
            for line in lines[head_i : tail_i + 1]
            if (prefix := _ID_PREFIX.match(line))
            for number in re.findall(r"\d+", prefix.group(1))
        ]
        span = f" ({recall_id(min(ids))}-{recall_id(max(ids))})" if ids else ""
        middle = [f"- ... {skipped} more item(s){span} ..."]
    return [lines[0], *keep_head, *middle, *reversed(keep_tail)]


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content[:LINE_CHARS]
    if isinstance(content, list):
        parts = [
            str(b.get("text", ""))
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        ]
        return " ".join(parts)[:LINE_CHARS]
    return ""


def _calls_of(message: Mapping[str, Any]) -> list[str]:
    calls: list[str] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        name = call.get("tool") or call.get("name") or function.get("name")
        arguments = call.get("arguments", function.get("arguments"))
        calls.append(f"{name}({_arguments(arguments)})")
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                calls.append(f"{block.get('name')}({_arguments(block.get('input'))})")
    return calls


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments[:80]
    if isinstance(arguments, Mapping):
        return ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:40]}"
            for k, v in arguments.items()
        )
    return "" if arguments is None else json.dumps(arguments, default=str)[:80]
