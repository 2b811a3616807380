"""Amplifier tool module ``tool-context-recall``: the model asks for a compacted message back.

Every message contextfold shortens, clears or removes keeps its id, and the marker or notice
names it (``context_recall("r41")``). This tool returns that message's original content from
the history the context keeps, capped at ``max_tokens`` so a recall cannot itself overflow
the window: a longer text is cut with a marker giving the ``offset`` to continue from.

A model that knows what it needs but not its id searches instead
(``context_recall(query="the refund of the lost parcel")``): the tool lists the best matches
among the messages out of its view, each with its id, role and a snippet, and the model
reads one with ``id``. Every failure is a result the model can act on, never an exception.

It is mounted beside the context and finds it through the coordinator
(``coordinator.get("context")``) at each call, so it follows a context remounted mid-session.
The context needs ``get_messages()`` (the history as admitted, in order) for ``id``, and
``search(query, limit=...)`` (`ContextFold.search`) for ``query``; its ``counter`` is used
to measure the cap when it has one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from amplifier_core.models import ToolResult

from contextfold.messages import well_formed_text
from contextfold.recall import (
    DEFAULT_MAX_TOKENS,
    MIN_MAX_TOKENS,
    RECALL_TOOL,
    RecallError,
    recall_from_messages,
    recall_id,
)
from contextfold.tokens import TokenCounter, build_counter

logger = logging.getLogger(__name__)

MODULE_ID = "tool-context-recall"
CONFIG_KEYS = ("max_tokens",)

SEARCH_LIMIT = 5  # matches listed when 'limit' is not given
MAX_SEARCH_LIMIT = 10

_DESCRIPTION = (
    "Get back a message that context compaction shortened, cleared or removed from your view. "
    'Markers and the compaction notice name each message by an id such as "r41"; pass it as '
    "'id'. Returns the original content (a tool result's output, a message's text, or a turn "
    "that called tools as JSON of its text and calls). A long "
    "text comes back in parts: the cut says which 'offset' to pass for the rest. "
    "Without an id, pass 'query' (a few words describing what you need, e.g. \"the invoice "
    'paid twice"): it lists the best matches out of your view, each with its id, so you can '
    "read one."
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
        "query": {
            "type": "string",
            "description": "Instead of an id: a few words describing what to find among the "
            "messages out of your view.",
        },
        "limit": {
            "type": "integer",
            "description": f"With query: how many matches to list (default {SEARCH_LIMIT}).",
            "minimum": 1,
            "maximum": MAX_SEARCH_LIMIT,
        },
    },
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
        if not isinstance(input, dict) or ("id" not in input and "query" not in input):
            return _error(
                'context_recall needs an "id" (e.g. {"id": "r41"}) or a "query" (e.g. '
                '{"query": "the invoice paid twice"})',
                "invalid_input",
            )
        unknown = sorted(str(k) for k in input if k not in ("id", "offset", "query", "limit"))
        if unknown:
            return _error(
                "context_recall takes 'id' (and optionally 'offset'), or 'query' (and "
                f"optionally 'limit'); unknown: {unknown}",
                "invalid_input",
            )
        if "id" in input and "query" in input:
            return _error(
                "give either 'id' (to read one message) or 'query' (to search), not both",
                "invalid_input",
            )
        if "query" in input:
            if "offset" in input:
                return _error("'offset' goes with 'id', not with 'query'", "invalid_input")
            return await self._search(input["query"], input.get("limit", SEARCH_LIMIT))
        if "limit" in input:
            return _error("'limit' goes with 'query', not with 'id'", "invalid_input")
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

    async def _search(self, query: Any, limit: Any) -> ToolResult:
        if isinstance(limit, bool) or not isinstance(limit, int):
            return _error(f"'limit' must be a whole number, got {limit!r}", "invalid_input")
        if not 1 <= limit <= MAX_SEARCH_LIMIT:
            return _error(
                f"'limit' must be from 1 to {MAX_SEARCH_LIMIT}, got {limit}", "invalid_input"
            )
        context = self.coordinator.get("context")
        search = getattr(context, "search", None)
        if not callable(search):
            return _error(
                "the mounted context cannot search its history; ask for a message by the id "
                "a marker or the compaction notice names",
                "no_search",
            )
        try:
            hits = await search(query, limit=limit)
        except ValueError as error:  # a query with no word to search by, say
            return _error(str(error), "invalid_input")
        except Exception as error:  # a store that cannot be read: a result, never a raise
            logger.warning("context_recall: the search failed", exc_info=True)
            return _error(
                f"the conversation history cannot be searched right now "
                f"({type(error).__name__}: {error}); go on without it, or try again later",
                "history_unavailable",
            )
        return ToolResult(success=True, output=well_formed_text(search_listing(query, hits)))

    def _counter(self, context: Any) -> TokenCounter:
        counter = getattr(context, "counter", None)
        if isinstance(counter, TokenCounter):
            return counter
        if self._fallback_counter is None:
            self._fallback_counter = build_counter("heuristic")
        return self._fallback_counter


def search_listing(query: str, hits: Any) -> str:
    """The matches as the model reads them: one line each, best first, with the id that
    reads the message whole."""
    lines = []
    for hit in hits or ():
        rid, role, text = _hit_fields(hit)
        if rid is None:
            continue
        text = " ".join(text.split())
        lines.append(f"{rid} ({role}): {text}")
    shown = query if len(query) <= 80 else query[:77] + "..."
    if not lines:
        return (
            f"No message out of your view matches {shown!r}. What you have seen that "
            "matches is still in your view; or try other words."
        )
    head = (
        f"{len(lines)} match(es) for {shown!r} among the messages out of your view, best "
        'first. Read one whole with context_recall(id="...").'
    )
    return "\n".join([head, *lines])


def _hit_fields(hit: Any) -> tuple[str | None, str, str]:
    """(recall id, role, snippet) of a search hit: a `SearchHit` or a mapping with the same
    names."""

    def field(name: str) -> Any:
        return hit.get(name) if isinstance(hit, Mapping) else getattr(hit, name, None)

    rid = field("recall_id")
    if not isinstance(rid, str):
        index = field("index")
        rid = recall_id(index) if isinstance(index, int) and not isinstance(index, bool) else None
    role = field("role")
    text = field("snippet")
    return rid, role if isinstance(role, str) else "message", text if isinstance(text, str) else ""


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
