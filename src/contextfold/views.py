"""Conveniences for plain-library use with a list of chat messages and any client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any


def fit(
    messages: Iterable[Mapping[str, Any]], token_budget: int, **settings: Any
) -> list[dict[str, Any]]:
    """One-shot: the view of ``messages`` that fits ``token_budget`` tokens.

    For a loop that calls a model many times, keep a `ContextFold` instead: it counts each
    message once and keeps compaction sticky (prefix-cache friendly). Must not be called
    from inside a running event loop (use ``await ContextFold(...).get_messages_for_request``).
    """

    from .manager import ContextFold  # late: the manager itself uses `detached`

    async def run() -> list[dict[str, Any]]:
        context = ContextFold(settings)
        await context.set_messages(list(messages))
        return await context.get_messages_for_request(token_budget=token_budget)

    return asyncio.run(run())


def strip_metadata(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` without the ``metadata`` key, which provider APIs refuse.

    Amplifier providers drop metadata themselves; call this before handing a view to an
    SDK such as ``openai`` or ``anthropic`` directly.
    """
    return [{k: detached(v) for k, v in m.items() if k != "metadata"} for m in messages]


def detached(value: Any) -> Any:
    """A copy of a JSON-shaped value sharing nothing mutable with it.

    Dicts and lists are copied at every level; strings, numbers and None are immutable and
    shared, which keeps the copy cheap (its cost is the view's structure, not its text).
    Containers are copied at C speed and only nested containers are visited.
    """
    kind = type(value)
    if kind is dict:
        return _detached_dict(value)
    if kind is list:
        return _detached_list(value)
    return value


# One function per container type, each visiting only its nested containers: a view is
# copied on every request, and a type test saved per level is a fifth of the copy.
def _detached_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    out = value.copy()
    for key, item in out.items():
        kind = type(item)
        if kind is dict:
            out[key] = _detached_dict(item)
        elif kind is list:
            out[key] = _detached_list(item)
    return out


def _detached_list(value: list[Any]) -> list[Any]:
    out = value.copy()
    for index, item in enumerate(out):
        kind = type(item)
        if kind is dict:
            out[index] = _detached_dict(item)
        elif kind is list:
            out[index] = _detached_list(item)
    return out
