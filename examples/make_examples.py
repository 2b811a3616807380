"""Regenerate the sample conversations in this folder (run from the repository root).

    uv run python examples/make_examples.py

- ``agent-session.json``: a coding agent exploring this repository (Amplifier/OpenAI message
  shape). Its tool results are this repository's real files and real ``grep`` output at the
  time the examples were made; the assistant turns are written by hand.
- ``anthropic-request.json``: an Anthropic Messages request body (system blocks with
  ``cache_control``, ``thinking`` blocks, parallel ``tool_use`` / ``tool_result``) for a
  similar task. Thinking signatures are placeholders: replay treats them as opaque.
- ``transcript.jsonl``: a session recorded from the real Amplifier kernel (orchestrator
  ``loop-fold``, context ``context-fold``, the offline ``provider-scripted`` model and the
  ``tool-doc-lookup`` tool), one message per line as ``context.get_messages()`` returned it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "examples"
READ_LIMIT = 160  # lines per read_file call, like a real agent's file tool

SYSTEM = (
    "You are a coding agent working in the contextfold repository (a context manager for LLM "
    "agents, Python 3.11, managed with uv). Use the tools to look before you answer: "
    "read_file(path, offset, limit) returns numbered lines, grep(pattern, path) returns "
    "matching lines, run(command) runs a shell command in the repository root. Quote file "
    "paths and line numbers in your answers. Never change files unless asked."
)


def read_file(path: str, offset: int = 1, limit: int = READ_LIMIT) -> str:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    chosen = lines[offset - 1 : offset - 1 + limit]
    body = "\n".join(f"{offset + i:6d}\t{line}" for i, line in enumerate(chosen))
    rest = len(lines) - (offset - 1 + len(chosen))
    if rest > 0:
        body += f"\n... ({rest} more lines; call read_file with offset={offset + len(chosen)})"
    return body


def grep(pattern: str, path: str) -> str:
    done = subprocess.run(
        ["grep", "-rn", "--include=*.py", pattern, path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "(no matches)"


def command(argv: list[str]) -> str:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).strip()


def listing(path: str) -> str:
    entries = sorted(p.name for p in (ROOT / path).iterdir() if p.name != "__pycache__")
    return "\n".join(entries)


# -- agent-session.json: Amplifier/OpenAI shape ------------------------------------------------


class Session:
    """Builds an Amplifier-shape conversation: tool calls as {"id", "tool", "arguments"}."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        self.serial = 0

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def act(self, text: str, *calls: tuple[str, dict[str, Any], str]) -> None:
        ids = []
        for _ in calls:
            self.serial += 1
            ids.append(f"call_{self.serial:03d}")
        self.messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"id": call_id, "tool": tool, "arguments": arguments}
                    for call_id, (tool, arguments, _) in zip(ids, calls, strict=True)
                ],
            }
        )
        for call_id, (_, _, result) in zip(ids, calls, strict=True):
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})


def read(path: str, offset: int = 1) -> tuple[str, dict[str, Any], str]:
    arguments: dict[str, Any] = {"path": path}
    if offset > 1:
        arguments["offset"] = offset
    return ("read_file", arguments, read_file(path, offset))


def agent_session() -> list[dict[str, Any]]:
    s = Session()
    s.user(
        "`contextfold replay` shows 0% prefix reuse on the first request of every file. Is "
        "that a bug? While you are there, tell me how it decides a file's format."
    )
    s.act(
        "I'll start with the layout of the CLI package.",
        ("run", {"command": "ls src/contextfold/cli"}, listing("src/contextfold/cli")),
    )
    s.act(
        "The replay logic should be in replay.py; reading it.",
        read("src/contextfold/cli/replay.py"),
    )
    s.act(
        "Let me see every place the prefix is computed or printed.",
        (
            "grep",
            {"pattern": "prefix", "path": "src/contextfold/cli"},
            grep("prefix", "src/contextfold/cli"),
        ),
    )
    s.act(
        "The rest of replay.py has the request loop and the totals.",
        read("src/contextfold/cli/replay.py", READ_LIMIT + 1),
    )
    s.act(
        "Now the format detection and the table, in parallel.",
        read("src/contextfold/cli/readers.py"),
        read("src/contextfold/cli/report.py"),
    )
    s.act(
        "Checking what the command itself says about formats.",
        (
            "run",
            {"command": "uv run contextfold replay --help"},
            command(["python", "-m", "contextfold.cli", "replay", "--help"]),
        ),
    )
    s.say(
        "Not a bug. Prefix reuse compares each request with the previous one "
        "(`_common_prefix` in src/contextfold/cli/replay.py): the first request has nothing "
        "before it, so its share is defined as 0 and the totals weigh only requests 2..n "
        "(`prefix_share` in `_totals`). The table prints '-' for it (report.py, "
        "`replay_rows_table`).\n\nFormat detection (`_detect` in readers.py) parses the whole "
        "file as JSON first: an object with a `messages` list is an Anthropic body when it has "
        "`system` or Anthropic-only blocks (tool_use, tool_result, thinking), otherwise a plain "
        "request body; a list is a message list. If the whole file is not JSON but its first "
        "line is, it is JSON Lines. `--format` overrides all of this."
    )
    s.user("Good. How is one message's token cost estimated, and what does the framing add?")
    s.act(
        "Finding the counters first.",
        (
            "grep",
            {"pattern": "def count_message", "path": "src/contextfold/tokens"},
            grep("def count_message", "src/contextfold/tokens"),
        ),
    )
    s.act("Reading the heuristic counter.", read("src/contextfold/tokens/heuristic.py"))
    s.act("And the framing constants it adds.", read("src/contextfold/tokens/framing.py"))
    s.act(
        "Last, how a message is serialised before counting.",
        read("src/contextfold/tokens/serialize.py"),
    )
    s.say(
        "`HeuristicCounter.count_message` (src/contextfold/tokens/heuristic.py) serialises the "
        "message canonically (tokens/serialize.py), weighs its bytes by class (letters 0.22, "
        "digits 0.75, punctuation 0.64, spaces 0.12, non-ASCII 0.29 tokens per byte, fitted "
        "against exact o200k counts) and adds the framing from tokens/framing.py: 3 tokens per "
        "message, 1 for a name, 3 per tool call. Requests add 3 tokens of reply priming once."
    )
    s.user("Thanks, that's all for now.")
    return s.messages


# -- anthropic-request.json ------------------------------------------------------------------


def signature(n: int) -> str:
    return base64.b64encode(f"example-signature-{n:02d}-not-a-real-one".encode()).decode()


def anthropic_request() -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    serial = 0

    def turn(thinking: str, text: str, *calls: tuple[str, dict[str, Any], str]) -> None:
        nonlocal serial
        blocks: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": thinking, "signature": signature(serial)},
            {"type": "text", "text": text},
        ]
        results = []
        for name, arguments, output in calls:
            serial += 1
            call_id = f"toolu_{serial:03d}"
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": [{"type": "text", "text": output}],
                }
            )
        messages.append({"role": "assistant", "content": blocks})
        if results:
            messages.append({"role": "user", "content": results})

    messages.append(
        {
            "role": "user",
            "content": "What does the scripted provider measure for each request, and how does "
            "the loop react when the provider says a request is too long?",
        }
    )
    turn(
        "Two files: the provider and the orchestrator. Read both at once.",
        "Reading the provider and the orchestrator.",
        read("src/contextfold/amplifier/scripted_provider.py"),
        read("src/contextfold/amplifier/orchestrator.py"),
    )
    turn(
        "The provider's complete() is further down; I need the cache accounting part.",
        "The request accounting is further down in the provider.",
        read("src/contextfold/amplifier/scripted_provider.py", READ_LIMIT + 1),
    )
    turn(
        "The overflow handling is in _request of the orchestrator; find it.",
        "Now the overflow retry in the loop.",
        (
            "grep",
            {"pattern": "ContextLengthError", "path": "src/contextfold/amplifier"},
            grep("ContextLengthError", "src/contextfold/amplifier"),
        ),
    )
    turn(
        "Read the rest of the orchestrator for _refit_budget.",
        "Reading the retry budget logic.",
        read("src/contextfold/amplifier/orchestrator.py", READ_LIMIT + 1),
    )
    turn(
        "I have enough to answer.",
        "Each request is counted with the exact o200k tokenizer (times usage_ratio); the "
        "prefix it shares with the previous request is reported as cache reads and the rest "
        "as cache writes; a request over context_window - max_output_tokens is refused with "
        "a ContextLengthError subclass carrying `requested` and `limit` (or, with "
        "enforce_window false, served and marked overflowed). On that error the loop asks the "
        "context for a forced refit (hard_fit=True) to the limit, scaled down when the "
        "provider measured more than the context believed it sent, and retries once.",
    )
    messages.append({"role": "user", "content": "Where are the records kept?"})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {
                "name": "read_file",
                "description": "Read numbered lines of a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
                    "required": ["path"],
                },
            },
            {
                "name": "grep",
                "description": "Search files for a pattern.",
                "input_schema": {
                    "type": "object",
                    "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                    "required": ["pattern", "path"],
                },
            },
        ],
        "messages": messages,
    }


# -- transcript.jsonl: recorded from the real kernel -------------------------------------------


async def kernel_transcript() -> list[dict[str, Any]]:
    from amplifier_core import AmplifierSession

    from contextfold.cli.demo import DemoSettings, mount_plan

    plan = mount_plan(DemoSettings(window=16_000, steps=16, result_chars=3_000), managed=True)
    session = AmplifierSession(plan)
    try:
        await session.initialize()
        await session.execute("Research the topics 'topic 1' to 'topic 16', then say you are done.")
        return await session.coordinator.get("context").get_messages()
    finally:
        await session.cleanup()


def main() -> None:
    session = agent_session()
    (HERE / "agent-session.json").write_text(
        json.dumps(session, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "anthropic-request.json").write_text(
        json.dumps(anthropic_request(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    transcript = asyncio.run(kernel_transcript())
    (HERE / "transcript.jsonl").write_text(
        "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in transcript), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
