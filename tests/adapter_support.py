"""What the framework tests share: the scripted agent's plan, its tool's pages, the checks.

Every framework runs the same agent: a prompt "read steps A-B" makes the model call
``read_page(page=A)``, each result makes it call the next page, and after page B it answers
"done". The model decides from the request alone (the last human prompt, which compaction
protects, and the newest result), so a run resumed in a fresh process asks exactly what an
uninterrupted one does. Each page is about 300 tokens: sixty steps are about 20,000 tokens,
far over the `WINDOW` every test model enforces as a provider does.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextfold import ExactCounter

WINDOW = 6000
STEPS = 60
COUNTER = ExactCounter()
SYSTEM_PROMPT = "You read the manual one page at a time with read_page."


class WindowExceeded(Exception):
    """What a provider answers to a request over its context window."""


def page(number: int) -> str:
    """What ``read_page(page=number)`` returns: about 300 tokens."""
    return f"page {number}: " + " ".join(f"term{number}x{i}" for i in range(120))


def prompt(first: int, last: int) -> str:
    return f"read steps {first}-{last}"


def next_step(prompt_text: str, last_result_call: str | None) -> int | None:
    """The page the model reads next, or None when it is done."""
    first, last = map(int, re.findall(r"\d+", prompt_text))
    step = first if last_result_call is None else int(last_result_call.split("_")[1]) + 1
    return step if step <= last else None


def call_id(step: int) -> str:
    return f"call_{step}"


_COUNTS: dict[str, int] = {}


def count_sent(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> int:
    """The exact count of a request as sent (messages, tool schemas, reply priming); each
    distinct message is encoded once per test session (runs resend the same messages)."""
    total = COUNTER.request_overhead + (COUNTER.count_tools(list(tools)) if tools else 0)
    for message in messages:
        key = json.dumps(message, sort_keys=True, default=str)
        count = _COUNTS.get(key)
        if count is None:
            count = _COUNTS[key] = COUNTER.count_message(message)
        total += count
    return total


def check_request(size: int) -> None:
    if size > WINDOW:
        raise WindowExceeded(f"this request is {size} tokens; the window is {WINDOW}")


def assert_pairs_whole(messages: Sequence[Mapping[str, Any]]) -> None:
    """OpenAI chat messages (as a framework sends them): every result answers a call of the
    assistant message just before its run of results, and every call is answered there."""
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            assert message["tool_call_id"] in pending, f"orphan result at {index}"
            pending.discard(message["tool_call_id"])
            continue
        assert not pending, f"calls {sorted(pending)} unanswered before message {index}"
        pending = {call["id"] for call in message.get("tool_calls") or ()}
    assert not pending or messages[-1].get("tool_calls"), "unanswered calls at the end"


_SHARED_SKIP = (str, bytes, int, float, bool, type(None), type)


def mutable_ids(root: Any) -> set[int]:
    """Ids of every mutable object reachable from ``root`` (containers, models, dataclasses)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        value = stack.pop()
        if isinstance(value, _SHARED_SKIP) or id(value) in seen:
            continue
        if _frozen(value) or not _mutable(value):
            stack.extend(_children(value))
            continue
        seen.add(id(value))
        stack.extend(_children(value))
    return seen


def _mutable(value: Any) -> bool:
    """Containers, and objects whose attributes can be set (models, dataclasses); a value
    type without either (a datetime, a UUID, an enum member) cannot be changed in place."""
    if isinstance(value, dict | list | set | bytearray):
        return True
    if isinstance(value, enum.Enum):
        return False
    return hasattr(value, "__dict__") or dataclasses.is_dataclass(value)


def _frozen(value: Any) -> bool:
    if isinstance(value, tuple | frozenset):
        return True
    if dataclasses.is_dataclass(value):
        return bool(getattr(type(value), "__dataclass_params__").frozen)  # noqa: B009
    return False


def _children(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        return [*value.keys(), *value.values()]
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if dataclasses.is_dataclass(value):
        return [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    fields = getattr(value, "__dict__", None)
    return list(fields.values()) if isinstance(fields, dict) else []


def assert_nothing_shared(sent: Any, stored: Any) -> None:
    """No mutable object reachable from what is sent is reachable from what is stored."""
    shared = mutable_ids(sent) & mutable_ids(stored)
    assert not shared, f"{len(shared)} mutable object(s) shared between the request and state"


def deface(root: Any) -> None:
    """Change every mutable container reachable from ``root`` in place: a request whose
    objects were the state's own would carry the damage into the stored history."""
    for value in _walk(root):
        if isinstance(value, dict):
            value["defaced"] = True
        elif isinstance(value, list):
            value.append("defaced")


def _walk(root: Any) -> list[Any]:
    out: list[Any] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        value = stack.pop()
        if isinstance(value, _SHARED_SKIP) or id(value) in seen:
            continue
        seen.add(id(value))
        out.append(value)
        stack.extend(_children(value))
    return out
