"""Which tool produced a result: read from the call in its group's assistant message.

A result carries only the id of the call it answers; the tool's name is on the call. A
result's unit is its call group, whose first entry is the assistant message that made the
calls (Amplifier ``tool``, OpenAI ``function.name``, Anthropic ``tool_use`` blocks). A
result that names its tool itself (``name``, or ``metadata.tool_name``, as some hosts
store it) is read as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..history import History


def result_tool_names(history: History, index: int) -> frozenset[str]:
    """Names of the tools whose output the result at history ``index`` carries."""
    entry = history.entries[index]
    message = entry.message
    names: set[str] = set()
    own = message.get("name")
    if isinstance(own, str) and own:
        names.add(own)
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("tool_name"), str):
        names.add(metadata["tool_name"])
    unit = history.units[entry.unit]
    if unit.is_group and unit.start != index:
        by_id = call_names(history.entries[unit.start].message)
        names.update(by_id[i] for i in entry.info.result_ids if i in by_id)
    return frozenset(names)


def call_names(assistant: Mapping[str, Any]) -> dict[str, str]:
    """Call id -> tool name, for every call an assistant message makes (all shapes)."""
    found: dict[str, str] = {}
    for call in assistant.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        name = call.get("tool") or call.get("name")
        if not name and isinstance(function, Mapping):
            name = function.get("name")
        if isinstance(call.get("id"), str) and isinstance(name, str):
            found[call["id"]] = name
    content = assistant.get("content")
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") in ("tool_use", "tool_call")
                and isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
            ):
                found[block["id"]] = block["name"]
    return found
