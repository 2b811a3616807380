"""``contextfold sessions list|show|export`` and ``demo --store``: what a durable store holds,
read back through the command line, and exported in a form ``replay`` reads."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.cli import main
from contextfold.store import SqliteStore
from contextfold.store.sqlite import APPLICATION_ID
from read_only import read_only, snapshot
from support import SYSTEM, human, tool_round


def make_session(path: Path, session_id: str = "agent-1") -> str:
    url = f"sqlite:///{path}"

    async def run() -> None:
        store = SqliteStore(path)
        context = ContextFold(store=store, session_id=session_id, token_counter="heuristic")
        await context.set_messages([SYSTEM, human("go")])
        for n in range(20):
            for message in tool_round(n, result_chars=1_500):
                await context.add_message(message)
            await context.get_messages_for_request(token_budget=6_000)
        await store.close()

    asyncio.run(run())
    return url


def test_list_show_and_export_a_stored_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_session(tmp_path / "agent.db")
    assert main(["sessions", "list", url]) == 0
    listing = capsys.readouterr().out
    assert "agent-1" in listing and " 42 " in listing
    assert main(["sessions", "show", url, "agent-1"]) == 0
    shown = capsys.readouterr().out
    assert "messages       42" in shown and "turns out of the view" in shown
    out = tmp_path / "agent-1.jsonl"
    assert main(["sessions", "export", url, "agent-1", "--out", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 42 and json.loads(lines[1])["content"] == "go"
    # The export is a transcript replay reads.
    assert main(["replay", str(out), "--quiet", "--no-chart", "--out", str(tmp_path / "r")]) == 0


def test_bad_store_and_unknown_session_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_session(tmp_path / "agent.db")
    assert main(["sessions", "show", url, "nobody"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no session 'nobody'" in err[0]
    assert main(["sessions", "list", "ftp://nowhere"]) == 2
    assert "unknown store scheme" in capsys.readouterr().err
    foreign = tmp_path / "picture.db"
    foreign.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 200)
    assert main(["sessions", "list", f"sqlite:///{foreign}"]) == 2
    assert "not a SQLite database" in capsys.readouterr().err


def test_export_never_writes_through_a_symlink(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_session(tmp_path / "agent.db")
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "export.jsonl"
    os.symlink(target, link)
    assert main(["sessions", "export", url, "agent-1", "--out", str(link)]) == 2
    assert "symlink" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_demo_keeps_its_session_in_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    status = main(
        ["demo", "--steps", "4", "--quiet", "--no-chart", "--out", str(tmp_path / "d"),
         "--store", url]
    )  # fmt: skip
    assert status == 0
    capsys.readouterr()
    assert main(["sessions", "list", url]) == 0
    [header, row] = capsys.readouterr().out.strip().splitlines()
    assert "session" in header and int(row.split()[1]) == 11  # system + prompt + 4 x 2 + answer
    assert main(["demo", "--steps", "2", "--quiet", "--store", "ftp://x"]) == 2
    assert "--store" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_with_tools_compares_the_message_budget_with_the_measured_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tools"
    status = main(
        ["demo", "--tools", "40", "--quiet", "--no-chart", "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "message-only budget" in printed and "measured request" in printed
    runs = json.loads((out / "demo.json").read_text())["runs"]
    legacy, measured = runs["unmanaged"], runs["managed"]
    assert legacy["count_calls"] == 0 and measured["count_calls"] >= measured["requests"]
    # The message-only budget learns the schemas' size from usage (a fixed part) and keeps
    # every request inside the window, under its safety margin (500 tokens of this 16,000
    # window); the measured request, counted whole by the provider, needs no margin: it
    # uses the window to its limit and compacts no more often.
    assert legacy["refused"] == 0 and measured["refused"] == 0 and not measured["overflowed"]
    assert legacy["completed"] and measured["completed"]
    assert measured["compactions"] <= legacy["compactions"]
    assert measured["largest_request"] > legacy["largest_request"]


def test_show_prints_the_learned_calibration_with_its_fixed_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session whose provider bills 600 tokens of tool schemas on every request: the
    calibration it stored (ratio and fixed part) is what `sessions show` prints."""
    url = f"sqlite:///{tmp_path / 'tools.db'}"

    async def run() -> None:
        context = ContextFold(store=url, session_id="tools", token_counter="calibrated")
        await context.set_messages([SYSTEM, human("go")])
        for n in range(6):
            view = await context.get_messages_for_request(token_budget=50_000)
            exact = sum(context.counter.count_message(m) for m in view)
            exact += context.counter.request_overhead
            await context.on_llm_response(
                {"usage": {"input_tokens": exact + 600}, "model": "gpt-4o"}
            )
            for message in tool_round(n, result_chars=1_500):
                await context.add_message(message)

    asyncio.run(run())
    assert main(["sessions", "show", url, "tools"]) == 0
    shown = capsys.readouterr().out
    assert "calibration    gpt-4o 1.000 + 600 fixed (6 readings)" in shown


# -- show: real counts, and what it cannot read said in one line -------------------------------


def test_show_counts_the_turns_and_messages_the_saved_state_takes_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state stores its sets as runs ({"runs": [[start, end], ...]}): the count is the
    units in the runs, not the length of that object (which printed "1 turns" every time)."""
    url = make_session(tmp_path / "agent.db")

    async def stored_state() -> dict:
        store = SqliteStore(tmp_path / "agent.db")
        state = (await store.open_session("agent-1")).state
        await store.close()
        assert state is not None
        return state.snapshot

    state = asyncio.run(stored_state())
    removed = sum(end - start for start, end in state["removed_units"]["runs"])
    assert removed > 1
    assert main(["sessions", "show", url, "agent-1"]) == 0
    shown = capsys.readouterr().out
    expected = f"{removed} turns out of the view ({state['removed_messages']} messages)"
    assert expected in shown, shown
    assert f"level {state['level']}" in shown


def test_show_says_in_one_line_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.db"

    async def odd_documents() -> None:
        store = SqliteStore(path)
        await store.append("odd", 0, '{"role": "user", "content": "hi"}', 2)
        await store.save_state("odd", 1, {"removed_units": 7, "level": "high"})
        await store.save_calibration("odd", {"gpt-4o": 5, "other": {"ratio": "x"}})
        await store.close()

    asyncio.run(odd_documents())
    assert main(["sessions", "show", f"sqlite:///{path}", "odd"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    compaction = next(line for line in lines if line.startswith("compaction"))
    calibration = next(line for line in lines if line.startswith("calibration"))
    assert "cannot read" in compaction and "cannot read" in calibration


def test_session_ids_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id holding a terminal escape, a newline (a forged row), a right-to-left override or
    a backslash cannot restyle the terminal or pass for another session."""
    path = tmp_path / "ids.db"
    ids = ["evil\x1b[2J\x1b[31mred", "two\nforged   99   99   0", "\u202egnp.exe", "back\\slash"]

    async def sessions() -> None:
        store = SqliteStore(path)
        for session_id in ids:
            await store.append(session_id, 0, '{"role": "user", "content": "hi"}', 1)
        await store.close()

    asyncio.run(sessions())
    url = f"sqlite:///{path}"
    assert main(["sessions", "list", url]) == 0
    listing = capsys.readouterr().out
    assert len(listing.splitlines()) == 1 + len(ids)
    assert "\x1b" not in listing and "\u202e" not in listing
    assert "evil\\x1b[2J\\x1b[31mred" in listing and "two\\x0aforged" in listing
    assert "\\u202egnp.exe" in listing and "back\\\\slash" in listing
    assert main(["sessions", "show", url, ids[0]]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "session        evil\\x1b[2J" in shown
    assert main(["sessions", "show", url, "no\x1bbody"]) == 2
    assert "\x1b" not in capsys.readouterr().err


# -- inspection only reads ---------------------------------------------------------------------


@pytest.mark.parametrize("action", [["list"], ["show", "s"], ["export", "s"]])
def test_inspecting_a_missing_file_is_an_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    assert main(["sessions", action[0], url, *action[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_inspecting_a_device_node_writes_nothing_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:  # a null device of our own, so a stray journal would land here
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        device = Path(os.devnull)
    journal = Path(f"{device}-journal")
    assert not journal.exists()
    try:
        assert main(["sessions", "list", f"sqlite:///{device}"]) == 2
        assert "a device, not a SQLite store" in capsys.readouterr().err
        assert not journal.exists()
    finally:
        if device.parent == tmp_path:
            journal.unlink(missing_ok=True)


def legacy_version_2_store(path: Path) -> None:
    """A store as an earlier contextfold wrote it (version 2, its version in
    schema_version), built by hand."""
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        raw.executescript(
            """
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (2);
            CREATE TABLE cf_sessions (session_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,
                                      generation INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE cf_messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                                      message_json TEXT NOT NULL, cost INTEGER NOT NULL,
                                      PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
            CREATE TABLE cf_summaries (position INTEGER PRIMARY KEY AUTOINCREMENT,
                                       covered_hash TEXT NOT NULL UNIQUE, session_id TEXT,
                                       record_json TEXT NOT NULL);
            CREATE TABLE cf_documents (session_id TEXT NOT NULL, kind TEXT NOT NULL,
                                       seq INTEGER, body_json TEXT NOT NULL,
                                       PRIMARY KEY (session_id, kind)) WITHOUT ROWID;
            INSERT INTO cf_sessions VALUES ('old', 2, 0);
            INSERT INTO cf_messages VALUES ('old', 1, '{"role":"user","content":"hi"}', 3);
            INSERT INTO cf_messages VALUES ('old', 2, '{"role":"assistant","content":"yo"}', 4);
            """
        )


def test_inspecting_an_older_store_never_migrates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy_version_2_store(tmp_path / "old.db")
    before = snapshot(tmp_path)
    url = f"sqlite:///{tmp_path / 'old.db'}"
    assert main(["sessions", "list", url]) == 0
    assert "old" in capsys.readouterr().out
    assert main(["sessions", "show", url, "old"]) == 0
    assert "messages       2" in capsys.readouterr().out
    assert main(["sessions", "export", url, "old"]) == 0
    assert [json.loads(line)["content"] for line in capsys.readouterr().out.splitlines()] == [
        "hi",
        "yo",
    ]
    assert snapshot(tmp_path) == before


def test_a_store_on_a_read_only_medium_can_be_inspected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "backup"
    folder.mkdir()
    url = make_session(folder / "agent.db")
    before = snapshot(folder)
    with read_only(folder):
        assert main(["sessions", "list", url]) == 0
        assert "agent-1" in capsys.readouterr().out
        assert main(["sessions", "show", url, "agent-1"]) == 0
        assert "messages       42" in capsys.readouterr().out
        assert main(["sessions", "export", url, "agent-1"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 42
    assert snapshot(folder) == before


# -- standard output that cannot be written ------------------------------------------------------


def run_cli(*argv: str, stdout: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextfold.cli", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("action", [["list"], ["show", "agent-1"], ["export", "agent-1"]])
def test_a_full_disk_on_stdout_is_one_line_and_a_failure(tmp_path: Path, action: list[str]) -> None:
    url = make_session(tmp_path / "agent.db")
    with open("/dev/full", "w") as full:
        done = run_cli("sessions", action[0], url, *action[1:], stdout=full)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == (
        "contextfold: error: cannot write to standard output (No space left on device)"
    )


@pytest.mark.slow
def test_a_closed_pipe_on_stdout_is_one_line_and_a_failure(tmp_path: Path) -> None:
    url = make_session(tmp_path / "agent.db")
    reader, writer = os.pipe()
    os.close(reader)  # nobody will ever read: every write fails with EPIPE
    try:
        done = run_cli("sessions", "export", url, "agent-1", stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot write to standard output (Broken pipe)" in lines[0]


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_an_escaped_id_is_one_printable_line_and_names_one_id(first: str, second: str) -> None:
    from contextfold.cli.sessions import shown

    for text in (first, second):
        escaped = shown(text)
        assert escaped.isprintable() and "\n" not in escaped
        escaped.encode("utf-8")  # always writable
    if first != second:
        assert shown(first) != shown(second)


def test_inspecting_a_store_a_killed_writer_left_never_checkpoints_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last messages of a writer killed mid-run are only in the write-ahead log: they are
    read from there, and neither the store file nor its log is rewritten."""
    live = tmp_path / "live"
    live.mkdir()
    make_session(live / "agent.db")
    holder = sqlite3.connect(live / "agent.db", isolation_level=None)
    holder.execute("SELECT count(*) FROM cf_messages").fetchone()  # keeps the log alive

    async def one_more() -> None:
        store = SqliteStore(live / "agent.db")
        last = (await store.open_session("agent-1")).last_seq
        await store.append("agent-1", last, json.dumps(human("and one more")), 5)
        await store.close()  # not the last connection: the message stays in the log

    asyncio.run(one_more())
    left = tmp_path / "left"
    shutil.copytree(live, left)  # the files as a SIGKILL would leave them
    holder.close()
    assert (left / "agent.db-wal").stat().st_size > 0
    kept = {name: (left / name).read_bytes() for name in ("agent.db", "agent.db-wal")}
    assert main(["sessions", "export", f"sqlite:///{left / 'agent.db'}", "agent-1"]) == 0
    exported = capsys.readouterr().out.splitlines()
    assert len(exported) == 43 and json.loads(exported[-1])["content"] == "and one more"
    assert {name: (left / name).read_bytes() for name in kept} == kept
