"""The eval's server-side baseline: Anthropic's ``clear_tool_uses`` at its documented defaults.

The client keeps and sends the whole conversation; the provider clears old tool results
before the model reads it (`contextfold.context_editing`, where the rules and what is ours
are stated). Its trigger of 100,000 input tokens is scaled to the window from Claude's
200,000, so it fires at half of any window, and it keeps the newest 3 tool uses. A request
still over the window after the edit is refused, as the provider refuses it. Nothing
cleared is kept anywhere the model can reach: no recall, no search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..context_editing import ClearToolUses, clear_tool_uses
from .counts import ExactCounts
from .policy import NoSearch, Refusal
from .scoring import View


@dataclass(frozen=True)
class ServerClearToolUses:
    """``clear_tool_uses`` as the provider applies it (see the module). ``settings`` are
    any `ClearToolUses` settings besides the scaled trigger (``keep``, ``clear_at_least``)."""

    settings: dict[str, Any] = field(default_factory=dict)

    key: ClassVar[str] = "clear-tool-uses"
    label: ClassVar[str] = "server-side clear_tool_uses"

    def __post_init__(self) -> None:
        ClearToolUses.scaled_to(1_000, **dict(self.settings))  # refuse bad settings now

    def start(self, window: int, counts: ExactCounts) -> _ServerEditingSession:
        edit = ClearToolUses.scaled_to(window, **dict(self.settings))
        return _ServerEditingSession(edit, window, counts)


class _ServerEditingSession(NoSearch):
    def __init__(self, edit: ClearToolUses, window: int, counts: ExactCounts) -> None:
        self._edit = edit
        self._window = window
        self._counts = counts
        self._messages: list[dict[str, Any]] = []
        # Each message's cleared form, made once: equal edits of later requests are then the
        # same objects (counted once, compared by identity).
        self._cleared: dict[int, Any] = {}

    async def add(self, message: dict[str, Any]) -> None:
        if not isinstance(message, dict):
            raise ValueError(f"a message must be an object, got {type(message).__name__}")
        self._messages.append(message)

    async def request(self) -> View:
        edited = clear_tool_uses(self._messages, self._edit, self._counts, self._counts.overhead)
        if edited.tokens > self._window:
            raise Refusal(
                f"clear_tool_uses: {edited.tokens:,} tokens after the edit, over the "
                f"{self._window:,}-token window"
            )
        sent = list(edited.messages)
        for index, (message, original) in enumerate(zip(sent, self._messages, strict=True)):
            if message is original:
                continue
            known = self._cleared.get(index)
            if known is not None and known == message:
                sent[index] = known  # the form an earlier request sent: the same object
            else:
                self._cleared[index] = message  # new, or more of its results cleared now
        return View(sent)
