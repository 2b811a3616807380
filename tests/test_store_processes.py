"""Real processes against real databases: kill -9 mid-append, two workers on one session.

The workers are ``tests/store_support.py`` run as a script. A worker prints a line only
after the store acknowledged the write, so every line the test read is a promise: after a
SIGKILL at a random moment, each acknowledged message must be stored exactly once, in order.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfold.store import open_store
from store_support import PostgresServer

_databases = itertools.count()
WORKER = str(Path(__file__).with_name("store_support.py"))


@pytest.fixture(scope="module")
def postgres_server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.fresh_database(f"proc_{next(_databases)}")  # names stay under 63 bytes


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_after_acks(url: str, session_id: str, acks: int, rng: random.Random) -> list[int]:
    """Start a writer, let it acknowledge ``acks`` appends, SIGKILL it at a random moment
    after that, and return every seq it acknowledged (the lines it printed in full)."""
    writer = spawn("log", url, session_id)
    assert writer.stdout is not None
    acknowledged: list[int] = []
    deadline = time.monotonic() + 30
    while len(acknowledged) < acks:
        line = writer.stdout.readline()
        if not line:
            raise AssertionError(
                f"writer ended early: {writer.stderr.read() if writer.stderr else ''}"
            )
        acknowledged.append(int(line))
        assert time.monotonic() < deadline, "writer too slow"
    time.sleep(rng.uniform(0, 0.004))  # land the kill anywhere inside the next appends
    os.kill(writer.pid, signal.SIGKILL)
    rest, _ = writer.communicate(timeout=10)
    assert writer.returncode == -signal.SIGKILL
    # A line cut by the kill has no newline: it was never a complete acknowledgement.
    acknowledged += [int(line) for line in rest.splitlines(keepends=True) if line.endswith("\n")]
    return acknowledged


async def stored_log(url: str, session_id: str) -> list[tuple[int, str, int]]:
    store = await open_store(url)
    session = await store.open_session(session_id)
    await store.close()
    assert session.last_seq == (session.messages[-1].seq if session.messages else 0)
    return [(m.seq, m.message["content"], m.cost) for m in session.messages]


@pytest.mark.slow
def test_every_acknowledged_append_survives_kill_9(url: str) -> None:
    rng = random.Random(11)
    kills = 20 if url.startswith("sqlite") else 5
    acknowledged: list[int] = []
    for _ in range(kills):
        acknowledged += kill_after_acks(url, "durable", rng.randint(1, 12), rng)
        log = asyncio.run(stored_log(url, "durable"))
        # Exactly once and in order: seqs 1..n without gaps, each message the one written
        # at that seq, and nothing acknowledged is missing.
        assert [seq for seq, _, _ in log] == list(range(1, len(log) + 1))
        assert all(content == f"m{seq}" and cost == seq for seq, content, cost in log)
        assert acknowledged == sorted(set(acknowledged))
        assert acknowledged[-1] <= len(log)
    assert len(acknowledged) >= kills


def race(url: str, args: list[list[str]]) -> list[list[str]]:
    start_at = f"{time.time() + 1.5:.3f}"  # both import and connect first, then go together
    workers = [spawn(*worker_args, start_at) for worker_args in args]
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        outputs.append(out.splitlines())
    return outputs


@pytest.mark.slow
def test_two_workers_one_session_no_gap_no_duplicate_langgraph_8115(url: str) -> None:
    # LangGraph #8115: racing writers lost data silently. Two processes append to one
    # session, both starting from "the session is new" (OpenAI Agents SDK #2722's first-write
    # race); every lost race is a ConcurrentUpdateError, the loser reloads and retries.
    count = 40
    outputs = race(url, [["race", url, "shared", name, str(count)] for name in ("a", "b")])
    acks: dict[int, str] = {}
    conflicts = 0
    for lines in outputs:
        for line in lines:
            kind, *rest = line.split()
            if kind == "ack":
                seq, content = int(rest[0]), rest[1]
                assert seq not in acks, f"seq {seq} acknowledged twice"
                acks[seq] = content
            else:
                conflicts += int(rest[0])
    log = asyncio.run(stored_log(url, "shared"))
    assert [seq for seq, _, _ in log] == list(range(1, 2 * count + 1))
    assert {seq: content for seq, content, _ in log} == acks
    for name in ("a", "b"):  # each worker's messages once each, in its own order
        mine = [content for _, content, _ in log if content.startswith(f"{name}-")]
        assert mine == [f"{name}-{n}" for n in range(count)]
    assert conflicts >= 1  # the first write raced: one of the two lost it and was told


@pytest.mark.slow
def test_two_workers_summarizing_one_span_converge_on_one_record(url: str) -> None:
    outputs = race(url, [["summary", url, name] for name in ("a", "b")])
    held = {line for lines in outputs for line in lines}
    assert len(held) == 1

    async def records() -> list[str]:
        store = await open_store(url)
        found = await store.records()
        await store.close()
        return [r.text for r in found]

    stored = asyncio.run(records())
    assert len(stored) == 1 and held == {f"held {stored[0]}"}
