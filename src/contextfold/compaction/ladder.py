"""The ladder as configuration: ``strategies`` names the rungs, in order, with settings.

``strategies`` is an ordered list; each item is a rung name (``"drop_oldest"``), a mapping
``{"name": ..., <settings>}``, or, in library use, a rung object of your own (anything with
``name``, ``level`` and ``apply(work, target_raw)``: see `rungs.Rung`). Every name and
setting is checked when the config is built, and a bad one is a `ConfigError` saying where
it sits in the list, which rung and which setting, and what is accepted.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from ..errors import ConfigError
from ..shown import shown
from .clear import ClearToolResults
from .rungs import (
    DropLeastUsed,
    DropOldest,
    Rung,
    StripEarlierThinking,
    TruncateLongText,
    TruncateToolResults,
)
from .summarize import Summarize

#: rung name -> the class that builds it from its settings (keyword arguments)
RUNGS: dict[str, type] = {
    cls.name: cls
    for cls in (
        StripEarlierThinking,
        TruncateToolResults,
        TruncateLongText,
        ClearToolResults,
        Summarize,
        DropOldest,
        DropLeastUsed,
    )
}

#: today's ladder: what ``strategies`` is when the config names none
DEFAULT_STRATEGIES: tuple[str, ...] = (
    "strip_thinking",
    "truncate_tool_results",
    "truncate_long_text",
    "drop_least_used",
)


def rung_settings(name: str) -> tuple[str, ...]:
    """The settings a named rung accepts."""
    return tuple(f.name for f in fields(RUNGS[name]))


def normalize_strategies(strategies: Any) -> tuple[Any, ...]:
    """``strategies`` checked in full and frozen as a tuple; settings mappings are deep
    copies, so neither the caller's dicts nor a `to_dict` copy can change the config."""
    if isinstance(strategies, set | frozenset):
        raise ConfigError(f"strategies must be an ordered list, got a set: {shown(strategies)}.")
    if isinstance(strategies, str | bytes | Mapping) or not isinstance(strategies, Sequence):
        raise ConfigError(
            "strategies must be a list of rung names or {'name': ..., <settings>} mappings, "
            f"e.g. ['truncate_tool_results', 'drop_oldest'], got {shown(strategies)}."
        )
    items = tuple(settings_copy(item) for item in strategies)
    build_ladder(items)
    return items


def settings_copy(item: Any) -> Any:
    """A rung's settings mapping as a private deep copy; a name or rung object as itself."""
    return copy.deepcopy(dict(item)) if isinstance(item, Mapping) else item


def build_ladder(strategies: Sequence[Any] = DEFAULT_STRATEGIES) -> tuple[Rung, ...]:
    """The rungs ``strategies`` names, in order, built with their settings."""
    if not strategies:
        raise ConfigError(
            "strategies is empty: a ladder needs at least one rung. To turn compaction off, "
            "set compaction_enabled: false instead."
        )
    ladder: list[Rung] = []
    seen: set[str] = set()
    for position, item in enumerate(strategies):
        rung = _build_one(position, item)
        if rung.name in seen:
            raise ConfigError(
                f"strategies[{position}]: rung {rung.name!r} is listed twice; a message one "
                "rung changed is not changed by it again, so list each rung once."
            )
        seen.add(rung.name)
        ladder.append(rung)
    return tuple(ladder)


def _build_one(position: int, item: Any) -> Rung:
    where = f"strategies[{position}]"
    if isinstance(item, str):
        return _construct(where, _known_name(where, item), {})
    if isinstance(item, Mapping):
        if "name" not in item:
            raise ConfigError(
                f"{where}: a rung with settings needs its 'name', e.g. "
                f"{{'name': 'clear_tool_results', 'keep_last': 3}}; got {shown(item)}."
            )
        name = _known_name(where, item["name"])
        values = {k: v for k, v in item.items() if k != "name"}
        accepted = rung_settings(name)
        for key in values:
            if key not in accepted:
                known = ", ".join(accepted) or "none"
                hint = ""
                if isinstance(key, str) and len(key) <= 100:
                    close = difflib.get_close_matches(key, accepted, n=1)
                    hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"{where}: {name} has no setting {shown(key)}.{hint} Its settings: {known}."
                )
        return _construct(where, name, values)
    if _is_rung(item):
        return item
    raise ConfigError(
        f"{where} must be a rung name, a {{'name': ..., <settings>}} mapping or a rung object "
        f"(with name, level and apply(work, target_raw)); got {shown(item)}."
    )


def _known_name(where: str, name: Any) -> str:
    if isinstance(name, str) and name in RUNGS:
        return name
    hint = ""
    if isinstance(name, str) and len(name) <= 100:
        close = difflib.get_close_matches(name, list(RUNGS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"{where}: unknown rung {shown(name)}.{hint} Known rungs: {', '.join(RUNGS)}."
    )


def _construct(where: str, name: str, values: dict[str, Any]) -> Rung:
    try:
        return RUNGS[name](**values)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def _is_rung(item: Any) -> bool:
    return (
        isinstance(getattr(item, "name", None), str)
        and bool(item.name)
        and isinstance(getattr(item, "level", None), int)
        and not isinstance(item.level, bool)
        and callable(getattr(item, "apply", None))
    )
