"""Views handed to callers: copies that share nothing mutable with history, and the
provider-ready form without contextfold's ``metadata`` key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


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
