"""Durable sessions through the public API: acknowledged messages survive, a resume counts
nothing again and delivers the view the last process would have delivered next, two workers
never interleave, and summaries are found again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contextfold import ConfigError, ContextFold
from contextfold.store import ConcurrentUpdateError
from contextfold.summaries import scripted_summarizer
from contextfold.tokens import HeuristicCounter
from support import SYSTEM, human, tool_round

BUDGET = 8_000


class CountingCounter(HeuristicCounter):
    """The heuristic counter, counting how often a message is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.messages_counted = 0

    def count_message(self, message: Any) -> int:
        self.messages_counted += 1
        return super().count_message(message)


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agent.db'}"


async def run(context: ContextFold, rounds: range) -> list[dict[str, Any]]:
    view: list[dict[str, Any]] = []
    for n in rounds:
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=BUDGET)
    return view


async def test_a_resume_delivers_the_next_view_the_last_process_would_have(tmp_path: Path) -> None:
    store = url(tmp_path)
    first = ContextFold(store=store, session_id="s1", token_counter="heuristic")
    await first.set_messages([SYSTEM, human("Look up every topic.")])
    await run(first, range(25))
    assert first.last_report.removed_total > 0  # the sticky state is worth restoring
    extra = {"role": "user", "content": "And one more thing.", "metadata": {"source": "user"}}
    await first.add_message(extra)
    # Another process opens the same session (the first one crashed here, say).
    counter = CountingCounter()
    resumed = ContextFold(store=store, session_id="s1", counter=counter)
    assert await resumed.get_messages() == await first.get_messages()
    assert counter.messages_counted == 0  # costs come from the store
    expected = await first.get_messages_for_request(token_budget=BUDGET)
    assert await resumed.get_messages_for_request(token_budget=BUDGET) == expected
    assert counter.messages_counted < 5  # a notice or stand-in at most, never the history


async def test_two_workers_on_one_session_never_interleave(tmp_path: Path) -> None:
    store = url(tmp_path)
    a = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    b = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    await a.add_message(human("from a"))
    await b.get_messages()  # b loads: it has seen a's message
    await a.add_message(human("a again"))
    with pytest.raises(ConcurrentUpdateError):
        await b.add_message(human("from b"))  # b lost the race: told, not interleaved
    assert [m["content"] for m in await b.get_messages()] == ["from a"]  # b unchanged
    fresh = ContextFold(store=store, session_id="shared", token_counter="heuristic")
    assert [m["content"] for m in await fresh.get_messages()] == ["from a", "a again"]


async def test_summaries_made_by_one_worker_are_reused_by_the_next(tmp_path: Path) -> None:
    ladder = [
        "strip_thinking",
        "truncate_tool_results",
        {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
        "drop_oldest",
    ]
    calls = {"n": 0}
    digest = scripted_summarizer()

    async def summarizer(messages: list[dict[str, Any]], max_tokens: int) -> str:
        calls["n"] += 1
        return await digest(messages, max_tokens)

    store = url(tmp_path)
    first = ContextFold(
        store=store, session_id="s", summarizer=summarizer, strategies=ladder,
        token_counter="heuristic",
    )  # fmt: skip
    await first.set_messages([SYSTEM, human("go")])
    await run(first, range(25))
    made = calls["n"]
    assert made >= 2
    # A new process with no sticky state of its own: set_messages of the same transcript
    # into another session of the same store finds every summary in the store.
    transcript = await first.get_messages()
    second = ContextFold(
        store=store, session_id="other", summarizer=summarizer, strategies=ladder,
        token_counter="heuristic",
    )  # fmt: skip
    await second.set_messages(transcript)
    view = await second.get_messages_for_request(token_budget=BUDGET)
    assert calls["n"] == made  # no summarizer call: the records were found
    assert [m for m in view if (m.get("metadata") or {}).get("summary")]


def test_a_store_needs_a_session_id_and_a_known_url() -> None:
    with pytest.raises(ConfigError, match="session"):
        ContextFold(store="memory://")
    with pytest.raises(ConfigError):
        ContextFold(store="ftp://nowhere", session_id="s")
    with pytest.raises(ConfigError, match="store"):
        ContextFold(session_id="s")


WRITER = """
import asyncio, json, sys
from contextfold import ContextFold

async def main() -> None:
    context = ContextFold(store=sys.argv[1], session_id="killed", token_counter="heuristic")
    n = len(await context.get_messages())
    while True:
        await context.add_message({"role": "user", "content": f"message {n}"})
        print(n, flush=True)  # acknowledged: add_message returned
        n += 1

asyncio.run(main())
"""


async def test_every_acknowledged_message_survives_kill_9(tmp_path: Path) -> None:
    store = url(tmp_path)
    rng = random.Random(7)
    acknowledged: list[int] = []
    for _ in range(5):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, store],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert writer.stdout is not None
        target = len(acknowledged) + rng.randint(3, 30)
        deadline = time.monotonic() + 60
        while len(acknowledged) < target and time.monotonic() < deadline:
            line = writer.stdout.readline()
            if not line:
                break
            acknowledged.append(int(line))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        # What it printed before the kill was acknowledged too, read or not.
        acknowledged.extend(int(line) for line in writer.stdout.read().split())
        stored = await ContextFold(store=store, session_id="killed").get_messages()
        contents = [m["content"] for m in stored]
        # Every acknowledged message is there exactly once, in order; at most the one
        # being written when the kill came may follow.
        assert contents[: len(acknowledged)] == [f"message {n}" for n in acknowledged]
        assert len(contents) - len(acknowledged) <= 1
        acknowledged = [int(c.split()[1]) for c in contents]
    assert len(acknowledged) >= 15
    assert json.dumps(acknowledged) == json.dumps(sorted(set(acknowledged)))


async def test_mounted_in_amplifier_the_session_id_comes_from_the_kernel(tmp_path: Path) -> None:
    from amplifier_core.testing import MockCoordinator

    from contextfold.amplifier import mount

    config = {"store": url(tmp_path), "token_counter": "heuristic"}
    first = MockCoordinator()
    await mount(first, dict(config))
    await first.get("context").add_message(human("kept across processes"))
    again = MockCoordinator()  # the same kernel session id, in a new process say
    await mount(again, dict(config))
    [stored] = await again.get("context").get_messages()
    assert stored["content"] == "kept across processes"
    assert first.session_id == again.session_id
