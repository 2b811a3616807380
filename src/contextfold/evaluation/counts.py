"""Exact o200k counts of the messages a run's views hold, each message counted once.

Every policy is measured with the same ruler: the exact o200k counter (`tokens.ExactCounter`)
over the view as sent, plus the request's reply priming. Views share most of their message
objects with the previous request's, so counts are kept by identity (holding the message,
so its id cannot be reused while the count is kept); and the runs of one conversation share
counts by content (`ContentCounts`), so a message every policy sends as it is, or that
contextfold stores as an equal copy, is encoded once for them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..tokens import ExactCounter

# The keys whose values a count reads (metadata is never sent, so never counted).
_COUNTED_KEYS = ("role", "content", "tool_call_id", "tool_calls", "name")


class ContentCounts:
    """Counts by what a message says (role, content, call id, calls, name), shared by the
    runs of one conversation."""

    def __init__(self, counter: ExactCounter) -> None:
        self.counter = counter
        self._known: dict[tuple[Any, ...], int] = {}

    def count(self, message: Mapping[str, Any]) -> int:
        key = _content_key(message)
        if key is None:
            return self.counter.count_message(message)
        tokens = self._known.get(key)
        if tokens is None:
            tokens = self._known[key] = self.counter.count_message(message)
        return tokens


def _content_key(message: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What ``count_message`` reads of a message, as a hashable key; None for a message
    with other keys (counted directly, never shared)."""
    if any(key not in _COUNTED_KEYS and key != "metadata" for key in message):
        return None
    parts: list[Any] = []
    for key in _COUNTED_KEYS:
        value = message.get(key)
        if value is None or isinstance(value, str):
            parts.append(value)
            continue
        try:
            parts.append(json.dumps(value, sort_keys=True, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            return None
    return tuple(parts)


class ExactCounts:
    """Cached exact counts for one run (a policy over one session in one window)."""

    def __init__(self, shared: ContentCounts) -> None:
        self._count = shared.count
        self.overhead = shared.counter.request_overhead
        self._known: dict[int, tuple[Mapping[str, Any], int]] = {}

    def __call__(self, message: Mapping[str, Any]) -> int:
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        tokens = self._count(message)
        self._known[id(message)] = (message, tokens)
        return tokens

    def request(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a request carrying ``messages``: theirs plus the reply priming."""
        return sum(map(self, messages)) + self.overhead
