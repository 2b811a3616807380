"""Anthropic's server-side context editing, ``clear_tool_uses``, reproduced as a baseline.

Anthropic's API can clear old tool results itself, before the prompt reaches the model
(strategy ``clear_tool_uses_20250919``, beta ``context-management-2025-06-27``). The client
keeps sending its whole history; the server edits each request. What its documentation
states, and what `clear_tool_uses` does:

- **trigger** (default 100,000 input tokens): the edit applies when the prompt as sent is
  over it; under it the request goes as it is;
- **keep** (default 3 tool uses): the newest tool uses keep their results; every older
  result is replaced by a placeholder, oldest first;
- **clear_at_least** (default none): when set, the edit applies only if it clears at least
  that many tokens (clearing invalidates the prompt cache after the first cleared result,
  so a small clearing is not worth the rewrite);
- **exclude_tools** (default none): tools whose results are never cleared;
- **clear_tool_inputs** (default false): also clear the calls' arguments.

Two things the documentation does not give are ours: the placeholder's wording
(`PLACEHOLDER`), and each request is edited from the whole history as sent, with nothing
remembered between requests (the server keeps no state of a client's history). Every
request over the trigger therefore clears all results but the newest ``keep``: the cleared
region grows by one tool use per request, and the prompt cache is rewritten from there.

A trigger made for a 200,000-token window is scaled to a smaller one by `scaled_to`
(100,000 of 200,000 is half the window), so the baseline behaves in an eval's 8,000-token
window as it does in Claude's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_TRIGGER = 100_000
DEFAULT_KEEP = 3
# The window the documented trigger was set for (Claude's standard context window).
REFERENCE_WINDOW = 200_000
PLACEHOLDER = "[tool result cleared by context editing]"

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """The ``clear_tool_uses`` settings, at Anthropic's documented defaults."""

    trigger: int = DEFAULT_TRIGGER
    keep: int = DEFAULT_KEEP
    clear_at_least: int = 0  # 0: none (the documented default)
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False
    placeholder: str = PLACEHOLDER

    def __post_init__(self) -> None:
        for key in ("trigger", "keep", "clear_at_least"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"clear_tool_uses: {key} must be a whole number >= 0, got {value!r}"
                )
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))

    @classmethod
    def scaled_to(cls, window: int, **settings: Any) -> ClearToolUses:
        """The defaults with the trigger scaled from a 200,000-token window to ``window``."""
        trigger = max(1, round(DEFAULT_TRIGGER * window / REFERENCE_WINDOW))
        return cls(trigger=settings.pop("trigger", trigger), **settings)


@dataclass(frozen=True, slots=True)
class Edited:
    """A request after the edit: its messages, what was cleared, and its size."""

    messages: list[Message]
    cleared_uses: int
    cleared_tokens: int
    tokens: int  # the request's size after the edit (before it, when nothing was cleared)

    @property
    def applied(self) -> bool:
        return self.cleared_uses > 0


def clear_tool_uses(
    messages: Sequence[Message],
    edit: ClearToolUses,
    count: Callable[[Message], int],
    overhead: int = 0,
) -> Edited:
    """``messages`` as the server would pass them on (see the module).

    ``count`` gives a message's tokens; ``overhead`` what the request costs beyond its
    messages (tool schemas, priming), for the trigger. The messages given are never
    changed: an edited message is a new dict.
    """
    costs = [count(message) for message in messages]
    tokens = overhead + sum(costs)
    unchanged = Edited(list(messages), 0, 0, tokens)
    if tokens <= edit.trigger:
        return unchanged
    uses = _tool_uses(messages)
    older = uses[: max(0, len(uses) - edit.keep)]
    cleared_ids = {call_id for call_id, name, _ in older if name not in edit.exclude_tools}
    cleared_ids -= _already_cleared(messages, edit.placeholder)
    if not cleared_ids:
        return unchanged
    edited = list(messages)
    saved, changed = 0, False
    for index, message in enumerate(messages):
        new = _cleared(message, cleared_ids, edit)
        if new is not message:
            edited[index], changed = new, True
            saved += costs[index] - count(new)
    if not changed or saved < edit.clear_at_least:
        return unchanged  # documented: a clearing under clear_at_least is not applied
    answered = {call_id for message in messages for call_id, _ in _results(message)}
    return Edited(edited, len(cleared_ids & answered), saved, tokens - saved)


def _tool_uses(messages: Sequence[Message]) -> list[tuple[str, str, int]]:
    """``(call id, tool name, message index)`` of every tool call, oldest first."""
    uses: list[tuple[str, str, int]] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for call in _calls(message):
            uses.append((*call, index))
    return uses


def _calls(message: Message) -> list[tuple[str, str]]:
    """``(id, name)`` of an assistant message's calls, in every shape contextfold takes:
    OpenAI and Amplifier ``tool_calls``, Anthropic ``tool_use`` and Amplifier ``tool_call``
    blocks (an id is listed once, whichever shapes carry it)."""
    found: dict[str, str] = {}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                function = call.get("function")
                function = function if isinstance(function, Mapping) else {}
                name = call.get("tool") or call.get("name") or function.get("name") or ""
                found.setdefault(call["id"], str(name))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") in ("tool_use", "tool_call")
                and isinstance(block.get("id"), str)
            ):
                found.setdefault(block["id"], str(block.get("name") or ""))
    return list(found.items())


def _already_cleared(messages: Sequence[Message], placeholder: str) -> set[str]:
    """Calls whose results already read as the placeholder (cleared in the history given)."""
    done: set[str] = set()
    for message in messages:
        for call_id, content in _results(message):
            if content == placeholder:
                done.add(call_id)
    return done


def _results(message: Message) -> list[tuple[str, Any]]:
    """``(call id, content)`` of the tool results a message carries."""
    if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
        return [(message["tool_call_id"], message.get("content"))]
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [
        (block["tool_use_id"], block.get("content"))
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") == "tool_result"
        and isinstance(block.get("tool_use_id"), str)
    ]


def _cleared(message: Message, ids: set[str], edit: ClearToolUses) -> Message:
    """The message with the results (and, with ``clear_tool_inputs``, the calls' inputs) of
    ``ids`` cleared; the message itself when it holds none of them."""
    role = message.get("role")
    if role == "tool":
        if message.get("tool_call_id") in ids:
            return {**message, "content": edit.placeholder}
        return message
    content = message.get("content")
    if role == "user" and isinstance(content, list):
        blocks = [
            {**block, "content": edit.placeholder}
            if isinstance(block, Mapping)
            and block.get("type") == "tool_result"
            and block.get("tool_use_id") in ids
            else block
            for block in content
        ]
        changed = any(new is not old for new, old in zip(blocks, content, strict=True))
        return {**message, "content": blocks} if changed else message
    if role == "assistant" and edit.clear_tool_inputs:
        return _inputs_cleared(message, ids)
    return message


def _inputs_cleared(message: Message, ids: set[str]) -> Message:
    new: dict[str, Any] = dict(message)
    changed = False
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out = []
        for call in calls:
            if isinstance(call, Mapping) and call.get("id") in ids:
                changed = True
                function = call.get("function")
                if isinstance(function, Mapping):
                    call = {**call, "function": {**function, "arguments": "{}"}}
                else:
                    call = {**call, "arguments": {}}
            out.append(call)
        new["tool_calls"] = out
    content = message.get("content")
    if isinstance(content, list):
        blocks = []
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") in ("tool_use", "tool_call")
                and block.get("id") in ids
            ):
                changed = True
                block = {**block, "input": {}}
            blocks.append(block)
        new["content"] = blocks
    return new if changed else message


__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_TRIGGER",
    "PLACEHOLDER",
    "REFERENCE_WINDOW",
    "ClearToolUses",
    "Edited",
    "clear_tool_uses",
]
