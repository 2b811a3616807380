"""The compaction notice: what the model reads in place of what was compacted.

Besides saying that the view is compacted (so the model does not take the gap for a
missing memory), it carries an extractive digest of what was removed: the prompts,
the tool calls with their arguments, the first words of replies. No model call is
needed, and the digest is bounded by ``compaction_notice_token_reserve``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..history import History
from ..messages import NOTICE_SOURCE, Kind, well_formed_text
from ..recall import RECALL_TOOL, recall_id
from .working import FoldState

LINE_CHARS = 160
# The one line that tells the model it can search what left its view (`context_recall`).
SEARCH_LINE = f'- {RECALL_TOOL}(query="...") searches what was left out.'

CHARS_PER_TOKEN = 3  # conservative: digest lines are dense (names, ids, numbers)


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
    left out of earlier turns needs no notice: the model never relies on it).

    Its cost follows its size, never the length of history: the counts come from the
    state, and the digest reads only as many removed turns, from both ends, as it shows.
    """
    # A summary speaks for the summarized units; the notice for the rest of the removed.
    dropped_units = len(state.removed_units) - len(state.summarized_units)
    if not dropped_units and not state.shortened and not state.ledger.pages:
        return None
    metadata = {"source": NOTICE_SOURCE, "compaction_notice": True}
    if verbosity == "minimal":
        return {"role": role, "content": MINIMAL_TEXT, "metadata": metadata}
    removed_messages = state.removed_messages - state.summarized_messages
    head = [
        "<context-compaction>",
        "Parts of this conversation were compacted to fit the context window. The full "
        "history is kept outside this view; nothing below was changed except as stated.",
    ]
    if removed_messages:
        head.append(
            f"- {removed_messages} earlier message(s) in {dropped_units} turn(s) or "
            "tool-call group(s) were removed from this view."
        )
    if state.shortened:
        head.append(
            f"- {len(state.shortened)} older message(s) were shortened or cleared (each "
            "marked, with the id that recalls it)."
        )
    ledger = state.ledger
    if ledger.entries or ledger.unlisted:
        line = f"- The ledger above lists {len(ledger.entries)} value(s) taken out"
        if ledger.unlisted:
            line += (
                f"; about {ledger.unlisted} more are not listed (context_recall with a "
                "message's id returns it whole)"
            )
        head.append(line + ".")
    head.append(SEARCH_LINE)
    tail = ["</context-compaction>"]
    budget_chars = reserve_tokens * CHARS_PER_TOKEN - sum(len(line) + 1 for line in head + tail)
    digest = (
        _fitted_digest(history, state, budget_chars) if budget_chars > 0 and dropped_units else []
    )
    if dropped_units and not any(_is_digest_line(line) for line in digest):
        # No room for a line of the digest: the counts, the ids and the way back in one
        # short paragraph (a small window's notice rides on every request after a pass).
        return {
            "role": role,
            "content": _compact_text(history, state, removed_messages),
            "metadata": metadata,
        }
    head.extend(digest)
    return {
        "role": role,
        # The digest quotes history, which may hold lone surrogates: the view cannot.
        "content": well_formed_text("\n".join(head + tail)),
        "metadata": metadata,
    }


def _compact_text(history: History, state: FoldState, removed_messages: int) -> str:
    """The notice where its reserve holds no line of the digest: what left the view, by
    count and id range, and how to read it again, in one paragraph."""
    removed = state.removed_units.without(state.summarized_units)
    first_unit = next(removed, None)
    last_unit = next(state.removed_units.without(state.summarized_units, reverse=True), None)
    text = f"{removed_messages} earlier message(s)"
    if first_unit is not None and last_unit is not None:
        first_id = recall_id(min(history.units[first_unit].entries))
        last_id = recall_id(max(history.units[last_unit].entries))
        text += f" ({first_id}-{last_id})" if first_id != last_id else f" ({first_id})"
    text += " left this view to fit the window"
    if state.shortened:
        shortened = len(state.shortened)
        text += f", and {shortened} {'was' if shortened == 1 else 'were'} shortened"
    # Every word rides on each request until the next pass; the ledger says what it lists
    # and shortened messages carry their own ids, so the notice says only what left and how
    # to read it again.
    return (
        f'<context-compaction>{text}; all are kept: {RECALL_TOOL}("<id>") returns one '
        f'whole, {RECALL_TOOL}(query="...") searches them.</context-compaction>'
    )


_TITLE = "Removed, in order:"
_ELISION_ROOM = 60  # characters kept for the elision line
_ELISION_START = "- ... "


def _is_digest_line(line: str) -> bool:
    """A line of the digest describing a removed turn (not its title, nor the elision)."""
    return line != _TITLE and not line.startswith(_ELISION_START)


def _fitted_digest(history: History, state: FoldState, budget_chars: int) -> list[str]:
    """The digest's title and lines: all of them if they fit ``budget_chars``, else the
    first and the last ones, alternately, around an elision line that still names the ids
    it leaves out (as a range). Lines are made only as they are taken, from both ends of
    the removed turns, so a long session's digest costs what it shows."""
    removed, summarized = state.removed_units, state.summarized_units
    forward = _lines(history, removed.without(summarized))
    backward = _lines(history, removed.without(summarized, reverse=True), reverse=True)
    next_head, next_tail = next(forward, None), next(backward, None)
    keep_head: list[_Line] = []
    keep_tail: list[_Line] = []
    used = len(_TITLE) + 1 + _ELISION_ROOM
    take_head = True
    # The two cursors meet when every line has been taken once (head key passes tail key).
    while next_head is not None and next_tail is not None and next_head.key <= next_tail.key:
        line = next_head if take_head else next_tail
        if used + len(line.text) + 1 > budget_chars:
            break
        used += len(line.text) + 1
        if take_head:
            keep_head.append(line)
            next_head = next(forward, None)
        else:
            keep_tail.append(line)
            next_tail = next(backward, None)
        take_head = not take_head
    else:
        # Everything fits: every line once, in order.
        return [_TITLE, *(line.text for line in keep_head + keep_tail[::-1])]
    assert next_head is not None and next_tail is not None
    # Skipped: the units between the cursors whose first line (the one naming their ids)
    # was not shown.
    low = next_head.unit if next_head.line_no == 0 else next_head.unit + 1
    high = next_tail.unit  # its first line is not shown: the tail had not reached it
    middle: list[str] = []
    if low <= high:
        skipped = removed.count_in(low, high + 1) - summarized.count_in(low, high + 1)
        if skipped:
            first_unit = next(removed.without(summarized, start=low), None)
            last_unit = next(removed.without(summarized, reverse=True, start=high), None)
            assert first_unit is not None and last_unit is not None
            first_id = min(history.units[first_unit].entries)
            last_id = max(history.units[last_unit].entries)
            middle = [
                f"{_ELISION_START}{skipped} more item(s) ({recall_id(first_id)}-"
                f"{recall_id(last_id)}) ..."
            ]
    return [
        _TITLE,
        *(line.text for line in keep_head),
        *middle,
        *(line.text for line in reversed(keep_tail)),
    ]


@dataclass(frozen=True, slots=True)
class _Line:
    unit: int
    line_no: int  # position among its unit's lines (0: the one naming the ids)
    text: str

    @property
    def key(self) -> tuple[int, int]:
        return (self.unit, self.line_no)


def _lines(history: History, units: Iterable[int], *, reverse: bool = False) -> Iterator[_Line]:
    for unit_index in units:
        texts = _unit_lines(history, unit_index)
        numbered = [_Line(unit_index, k, text) for k, text in enumerate(texts)]
        yield from reversed(numbered) if reverse else numbered


def _unit_lines(history: History, unit_index: int) -> list[str]:
    """One line per prompt, reply, call and note of a removed unit; the first names the
    ids of all its messages, each written out (``r12,r13``), so the model can
    recall any of them. Made once per unit (`History.digest_lines`): a pass describes the
    first removed turns again, and the ones the last pass removed."""
    entries = history.units[unit_index].entries
    key = (unit_index, len(entries))
    cache = history.digest_lines
    lines = cache.get(key)
    if lines is None:
        if len(cache) >= _DIGEST_CACHE_UNITS:
            cache.clear()  # a long session's old tail units are not shown again
        lines = cache[key] = _describe_unit(history, entries)
    return lines


# Units whose digest lines are kept (a few per pass are shown; the head ones every time).
_DIGEST_CACHE_UNITS = 1024


def _describe_unit(history: History, entries: list[int]) -> list[str]:
    lines: list[str] = []
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
    if lines:
        lines[0] = f"{_id_span(entries)}: {lines[0]}"
    return [_clip(f"- {line}") for line in lines]


def _id_span(entries: list[int]) -> str:
    """The ids of a unit's messages, each written out (``r12,r13``): a range would say only
    that one of its messages held something, not which one to recall."""
    return ",".join(recall_id(i) for i in sorted(entries))


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
