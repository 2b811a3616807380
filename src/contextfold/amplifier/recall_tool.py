"""Amplifier tool module ``tool-context-recall``: the model asks for a compacted message back.

Every message contextfold shortens, clears or removes keeps its id, and the marker or notice
names it (``context_recall("r41")``). This tool returns that message's original content from
the history the context keeps, capped at ``max_tokens`` so a recall cannot itself overflow
the window: a longer text is cut with a marker giving the ``offset`` to continue from.

It is mounted beside the context and finds it through the coordinator
(``coordinator.get("context")``) at each call, so it follows a context remounted mid-session.
The context needs only ``get_messages()`` (the history as admitted, in order); its
``counter`` is used to measure the cap when it has one.
"""

from __future__ import annotations

import logging
from typing import Any

from amplifier_core.models import ToolResult

from contextfold.messages import well_formed_text
from contextfold.recall import (
    DEFAULT_MAX_TOKENS,
    MIN_MAX_TOKENS,
    RECALL_TOOL,
    RecallError,
    recall_from_messages,
)
from contextfold.tokens import TokenCounter, build_counter

logger = logging.getLogger(__name__)

MODULE_ID = "tool-context-recall"
CONFIG_KEYS = ("max_tokens",)

_DESCRIPTION = (
    "Get back a message that context compaction shortened, cleared or removed from your view. "
    'Markers and the compaction notice name each message by an id such as "r41"; pass it as '
    "'id'. Returns the original content (a tool result's output, a message's text, or a turn "
    "that called tools as JSON of its text and calls). A long "
    "text comes back in parts: the cut says which 'offset' to pass for the rest."
)

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {
            "type": "string",
            "description": 'The id a marker or the compaction notice names, e.g. "r41".',
            "pattern": "^r[0-9]+$",
        },
        "offset": {
            "type": "integer",
            "description": "Character offset to continue a cut recall from (default 0).",
            "minimum": 0,
        },
    },
    "required": ["id"],
    "additionalProperties": False,
}


class ContextRecallTool:
    """The ``context_recall`` tool."""

    def __init__(self, coordinator: Any, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValueError(
                f"{MODULE_ID} config 'max_tokens' must be a whole number of tokens, "
                f"got {max_tokens!r}"
            )
        if max_tokens < MIN_MAX_TOKENS:
            raise ValueError(
                f"{MODULE_ID} config 'max_tokens' must be at least {MIN_MAX_TOKENS}, "
                f"got {max_tokens}"
            )
        self.coordinator = coordinator
        self.max_tokens = max_tokens
        self._fallback_counter: TokenCounter | None = None

    @property
    def name(self) -> str:
        return RECALL_TOOL

    @property
    def description(self) -> str:
        return _DESCRIPTION

    @property
    def input_schema(self) -> dict[str, Any]:
        return dict(_SCHEMA)

    def get_schema(self) -> dict[str, Any]:
        return self.input_schema

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        if not isinstance(input, dict) or "id" not in input:
            return _error('context_recall needs an "id", e.g. {"id": "r41"}', "invalid_input")
        unknown = sorted(str(k) for k in input if k not in ("id", "offset"))
        if unknown:
            return _error(
                f"context_recall takes 'id' and optionally 'offset'; unknown: {unknown}",
                "invalid_input",
            )
        context = self.coordinator.get("context")
        get_messages = getattr(context, "get_messages", None)
        if not callable(get_messages):
            return _error("no context is mounted that keeps the history", "no_context")
        try:
            messages = await get_messages()
        except Exception as error:  # a store that cannot be read: a result, never a raise
            logger.warning("context_recall: the history could not be read", exc_info=True)
            return _error(
                f"the conversation history cannot be read right now ({type(error).__name__}: "
                f"{error}); go on without this recall, or try again later",
                "history_unavailable",
            )
        try:
            text = recall_from_messages(
                messages,
                input["id"],
                self.max_tokens,
                self._counter(context),
                offset=input.get("offset", 0),
            )
        except RecallError as error:
            return _error(str(error), error.kind)
        # The text as admitted, except that a lone surrogate (a tool's undecodable bytes)
        # goes to the model as U+FFFD, as in every view: amplifier-core refuses it in a
        # tool result, and no provider's JSON can carry it.
        return ToolResult(success=True, output=well_formed_text(text))

    def _counter(self, context: Any) -> TokenCounter:
        counter = getattr(context, "counter", None)
        if isinstance(counter, TokenCounter):
            return counter
        if self._fallback_counter is None:
            self._fallback_counter = build_counter("heuristic")
        return self._fallback_counter


def _error(message: str, kind: str) -> ToolResult:
    return ToolResult(success=False, error={"message": message, "type": kind})


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount ``context_recall`` at the kernel's ``tools`` mount point.

    Config: ``max_tokens`` (int, default 4000, at least 50): the most one recall returns.
    """
    config = dict(config or {})
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"{MODULE_ID}: unknown config keys {unknown}; known: {list(CONFIG_KEYS)}")
    tool = ContextRecallTool(coordinator, config.get("max_tokens", DEFAULT_MAX_TOKENS))
    await coordinator.mount("tools", tool, name=tool.name)
    return None
