"""``contextfold sessions list|show|export`` and ``demo --store``: what a durable store holds,
read back through the command line, and exported in a form ``replay`` reads."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from contextfold import ContextFold
from contextfold.cli import main
from support import SYSTEM, human, tool_round


def make_session(path: Path, session_id: str = "agent-1") -> str:
    url = f"sqlite:///{path}"

    async def run() -> None:
        context = ContextFold(store=url, session_id=session_id, token_counter="heuristic")
        await context.set_messages([SYSTEM, human("go")])
        for n in range(20):
            for message in tool_round(n, result_chars=1_500):
                await context.add_message(message)
            await context.get_messages_for_request(token_budget=8_000)

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
