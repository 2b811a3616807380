"""bench/bench_replay.py: its conversations are well formed, and a small run prints the table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from contextfold.cli.replay import replay_messages

_BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_replay.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # bench/ is not a package; load the file under a private name so nothing leaks into sys.path.
    spec = importlib.util.spec_from_file_location("_bench_replay", _BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 250])
def test_short_conversations_are_well_formed(bench: ModuleType, size: int) -> None:
    messages = bench.short_conversation(size)
    assert 1 <= len(messages) <= size
    assert not messages[-1].get("tool_calls")  # never cut between a call and its result
    result = replay_messages(messages, {}, None)  # refuses any malformed message
    assert result.totals.history_kept


@pytest.mark.slow
def test_a_small_run_prints_the_table_and_skips_what_would_take_too_long(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "speed.json"
    sizes = "200,400,100000000"
    assert (
        bench.main(["--sizes", sizes, "--window", "8000", "--cap", "60", "--json", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "100,000,000 messages: skipped" in printed
    assert "| 200 |" in printed and "| 400 |" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [row["messages"] for row in rows] == [200, 400]
    for row in rows:
        # The replay's own time is what is left of the whole once the core's calls are out.
        assert 0 < row["replay_own_s"] < row["replay_s"]


@pytest.mark.slow
def test_the_command_is_timed_end_to_end_beside_the_library_replay(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "speed.json"
    assert bench.main(["--sizes", "300", "--window", "8000", "--command", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "300 messages: the contextfold replay command, end to end" in printed
    (run,) = json.loads(out.read_text())["command"]
    assert run["messages"] == 300 and run["file_mb"] > 0
    assert run["wall_s"] > 0 and run["peak_rss_mb"] > 0
