"""Checks for rung settings: each failure is a `ConfigError` naming the rung and the setting.

Rungs check their own settings when built, so a rung made in code
(``TruncateToolResults(shape="middle")``) fails as clearly as one named in a mount plan;
`ladder.build_ladder` adds where in ``strategies`` it sits.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from ..shown import shown


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_at_least(rung: str, setting: str, value: Any, minimum: int) -> int:
    if not _is_int(value) or value < minimum:
        raise ConfigError(
            f"{rung}: setting '{setting}' must be a whole number >= {minimum}, got {shown(value)}."
        )
    return value


def optional_int_at_least(rung: str, setting: str, value: Any, minimum: int) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise ConfigError(
            f"{rung}: setting '{setting}' must be a whole number >= {minimum}, or left out "
            f"(then truncate_chars applies), got {shown(value)}."
        )
    return value


def one_of(rung: str, setting: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(
            f"{rung}: setting '{setting}' must be one of {', '.join(choices)}, got {shown(value)}."
        )
    return value


def tool_names(rung: str, setting: str, value: Any) -> frozenset[str]:
    """A list of tool names (a bare string is refused: it would read as its letters)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(
        value, list | tuple | set | frozenset
    ):
        raise ConfigError(
            f"{rung}: setting '{setting}' must be a list of tool names, e.g. "
            f"['load_skill'], got {shown(value)}."
        )
    for name in value:
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{rung}: setting '{setting}' must hold tool names (non-empty strings), got "
                f"{shown(name)} in {shown(value)}."
            )
    return frozenset(value)


def chars_by_tool(rung: str, setting: str, value: Any) -> Mapping[str, int]:
    """A mapping of tool name to a character budget (read-only once checked)."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{rung}: setting '{setting}' must map tool names to character budgets, e.g. "
            f"{{'read_file': 2000}}, got {shown(value)}."
        )
    checked: dict[str, int] = {}
    for name, chars in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{rung}: setting '{setting}' has a key that is not a tool name: {shown(name)}."
            )
        if not _is_int(chars) or chars < 0:
            raise ConfigError(
                f"{rung}: setting '{setting}' for tool {name!r} must be a whole number of "
                f"characters >= 0, got {shown(chars)}."
            )
        checked[name] = chars
    return MappingProxyType(checked)
