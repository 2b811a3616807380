"""Builders of conversations for the tests (Amplifier/OpenAI and Anthropic shapes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM = {"role": "system", "content": "You are a careful research agent."}


def human(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "metadata": {"source": "user"}}


def hook_note(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "metadata": {"source": "hook"}}


def reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def prose(seed: int, chars: int) -> str:
    words = ("alpha", "bravo", "delta", "harbor", "lantern", "quartz", "meadow", "signal", "vector")
    out: list[str] = []
    total = 0
    i = seed
    while total < chars:
        word = words[(i * 7 + 3) % len(words)] + str(i % 97)
        out.append(word)
        total += len(word) + 1
        i += 1
    return " ".join(out)[:chars]


def tool_round(
    n: int, *, calls: int = 1, result_chars: int = 2000, shape: str = "amplifier"
) -> list[dict[str, Any]]:
    """An assistant message making ``calls`` tool calls, then their results."""
    ids = [f"call_{n}_{k}" for k in range(calls)]
    if shape == "openai":
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"topic": f"t{n}"})},
                }
                for i in ids
            ],
        }
    elif shape == "anthropic":
        assistant = {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": i, "name": "lookup", "input": {"topic": f"t{n}"}}
                for i in ids
            ],
        }
        results = {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": i,
                    "content": prose(n * 10 + k, result_chars),
                }
                for k, i in enumerate(ids)
            ],
        }
        return [assistant, results]
    else:
        assistant = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": i, "tool": "lookup", "arguments": {"topic": f"t{n}"}} for i in ids
            ],
        }
    results = [
        {"role": "tool", "tool_call_id": i, "content": prose(n * 10 + k, result_chars)}
        for k, i in enumerate(ids)
    ]
    return [assistant, *results]


def agent_run(rounds: int, *, result_chars: int = 2000, shape: str = "amplifier") -> list[dict]:
    messages: list[dict[str, Any]] = [SYSTEM, human("Research every topic and summarise.")]
    for n in range(rounds):
        messages.extend(tool_round(n, calls=1 + n % 3, result_chars=result_chars, shape=shape))
        if n % 5 == 4:
            messages.append(reply(f"Progress note {n}: " + prose(n, 300)))
    return messages


def call_ids_of(message: Mapping[str, Any]) -> list[str]:
    ids = [c["id"] for c in message.get("tool_calls") or ()]
    content = message.get("content")
    if isinstance(content, list):
        ids += [b["id"] for b in content if b.get("type") in ("tool_use", "tool_call")]
    return ids


def result_ids_of(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") == "tool":
        return [message.get("tool_call_id")]
    content = message.get("content")
    if isinstance(content, list):
        return [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
    return []


def assert_pairing(view: Sequence[Mapping[str, Any]]) -> None:
    """What every provider accepts: no orphan result; no call left unanswered unless its
    group is the open tail; nothing but results between a call and its results."""
    pending: dict[str, int] = {}
    for i, message in enumerate(view):
        results = result_ids_of(message)
        for rid in results:
            assert rid in pending, f"orphan tool result {rid!r} at view index {i}"
            del pending[rid]
        if pending and not results:
            raise AssertionError(
                f"view index {i} (role {message.get('role')!r}) sits between calls "
                f"{sorted(pending)} and their results"
            )
        for cid in call_ids_of(message):
            pending[cid] = i


def unstamped(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages without the ``metadata.timestamp`` admission stamps them with (and without
    a ``metadata`` left empty by that), to compare what was stored with what was given."""
    out: list[dict[str, Any]] = []
    for message in messages:
        message = dict(message)
        metadata = message.get("metadata")
        if isinstance(metadata, Mapping) and "timestamp" in metadata:
            rest = {k: v for k, v in metadata.items() if k != "timestamp"}
            if rest:
                message["metadata"] = rest
            else:
                del message["metadata"]
        out.append(message)
    return out


# amplifier-core's engine sometimes crashes while the interpreter shuts down (a fatal error in
# PyGILState_Release, or a segmentation fault) after the validator has printed its verdict and
# chosen its exit status. Run the kernel's own CLI and exit with that status before teardown,
# so the tests judge the validator, not the shutdown.
_KERNEL_CLI = """
import os, sys
from amplifier_core.cli import cli
try:
    cli.main(args=sys.argv[1:], prog_name="amplifier-core", standalone_mode=False)
    code = 0
except SystemExit as exit:
    code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
except Exception as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    code = 1
sys.stdout.flush(); sys.stderr.flush()
os._exit(code)
"""


def kernel_cli(*args: str) -> list[str]:
    """The command line running ``amplifier-core <args>`` (see `_KERNEL_CLI`)."""
    import sys

    return [sys.executable, "-c", _KERNEL_CLI, *args]
