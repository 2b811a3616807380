"""`contextfold replay` end to end: every accepted format, config handling, bad input, outputs.

Most tests call ``main([...])`` in-process (fast); one runs the installed console script and
one ``python -m contextfold.cli`` to prove the real entry points work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold.cli import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_OK, main
from contextfold.cli.readers import read_conversation
from contextfold.cli.replay import ReplayError, replay_messages, replay_messages_async
from support import SYSTEM, agent_run, human, reply, tool_round

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["replay", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def expected_requests(messages: list[dict[str, Any]]) -> int:
    """One request before each assistant message that has something before it, one at the end."""
    return sum(1 for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0) + 1


def load_json(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "replay.json").read_text(encoding="utf-8"))


# -- the core function ---------------------------------------------------------------------


def test_replay_messages_rows_and_totals_agree() -> None:
    messages = agent_run(12, result_chars=1500)
    result = replay_messages(messages, {}, 12_000)

    assert len(result.rows) == expected_requests(messages)
    assert [row.request for row in result.rows] == list(range(1, len(result.rows) + 1))
    totals = result.totals
    assert totals.tokens_sent_total == sum(row.tokens_after for row in result.rows)
    assert totals.history_tokens_total == sum(row.history_tokens for row in result.rows)
    assert totals.compactions == sum(1 for row in result.rows if row.compacted) > 0
    assert totals.history_kept
    assert totals.over_budget_requests == 0
    assert all(row.tokens_after <= row.budget for row in result.rows)
    # The history only grows; the first request has no previous one to share a prefix with.
    sizes = [row.history_tokens for row in result.rows]
    assert sizes == sorted(sizes)
    assert result.rows[0].prefix_messages == 0 and result.rows[0].prefix_share == 0.0
    json.dumps(result.to_dict())  # plain data all the way down


def test_without_compaction_every_request_sends_the_whole_history_and_reuses_the_last() -> None:
    messages = agent_run(6, result_chars=800)
    result = replay_messages(messages, {"compaction_enabled": False}, None)

    for previous, row in pairwise(result.rows):
        assert row.tokens_after == row.history_tokens
        assert row.messages_after == row.history_messages
        # An append-only request repeats the whole previous request byte for byte.
        assert row.prefix_messages == previous.messages_after
    assert result.totals.compactions == 0
    assert result.totals.saved_share == 0.0


def test_compaction_breaks_the_prefix_only_where_it_acts() -> None:
    result = replay_messages(agent_run(16, result_chars=1500), {}, 12_000)
    rows = result.rows
    assert any(row.compacted for row in rows)
    for previous, row in pairwise(rows):
        if not row.compacted:
            # Nothing changed but the appended messages: the previous view is the prefix.
            assert row.prefix_messages == previous.messages_after
            assert 0 < row.prefix_share <= 1


async def test_async_variant_works_inside_a_running_loop() -> None:
    messages = agent_run(3, result_chars=500)
    result = await replay_messages_async(messages, {}, None)
    assert result.totals.requests == expected_requests(messages)


def test_refused_message_names_its_place() -> None:
    messages = [SYSTEM, human("hi"), {"role": "robot", "content": "x"}]
    with pytest.raises(ReplayError) as caught:
        replay_messages(messages, {}, None, places=["line 1", "line 2", "line 9"])
    assert caught.value.place == "line 9"
    assert "role" in str(caught.value)


def test_on_request_sees_every_row() -> None:
    seen: list[int] = []
    result = replay_messages(
        agent_run(4), {}, None, on_request=lambda row: seen.append(row.request)
    )
    assert seen == [row.request for row in result.rows]


# -- formats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt", "extra"),
    [
        # The commands the README gives for each shipped example: each one compacts.
        ("agent-session.json", "json", ["--window", "16000"]),
        ("anthropic-request.json", "anthropic", ["--window", "12000"]),
        ("transcript.jsonl", "jsonl", ["--window", "12000"]),
        ("transcript.jsonl", "jsonl", ["--config", str(EXAMPLES / "fold.toml")]),
    ],
)
def test_shipped_examples_replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, fmt: str, extra: list[str]
) -> None:
    status, out, err = run(
        capsys, str(EXAMPLES / name), *extra, "--out", str(tmp_path), "--no-chart"
    )
    assert status == EXIT_OK, err
    assert err == ""
    data = load_json(tmp_path)
    assert data["format"] == fmt
    conversation = read_conversation(EXAMPLES / name)
    assert data["totals"]["messages"] == len(conversation.messages)
    assert (
        data["totals"]["requests"] == len(data["rows"]) == expected_requests(conversation.messages)
    )
    assert data["totals"]["history_kept"] is True
    assert data["totals"]["over_budget_requests"] == 0
    assert data["totals"]["compactions"] > 0  # the examples are sized to need folding
    assert not (tmp_path / "requests.png").exists()
    assert "totals" in out and "requests" in out


def test_chart_is_a_png_and_the_printout_names_the_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, _ = run(
        capsys, str(EXAMPLES / "agent-session.json"), "--window", "16000", "--out", str(tmp_path)
    )
    assert status == EXIT_OK
    chart = tmp_path / "requests.png"
    assert chart.read_bytes()[:8] == PNG_MAGIC
    assert str(chart) in out and str(tmp_path / "replay.json") in out


def test_openai_request_body_and_list_give_the_same_replay(tmp_path: Path) -> None:
    messages = [SYSTEM, human("go"), *tool_round(1, shape="openai"), reply("done")]
    listed = read_conversation(write(tmp_path / "a.json", messages))
    body = read_conversation(write(tmp_path / "b.json", {"model": "gpt-4o", "messages": messages}))
    assert listed.format == body.format == "json"
    assert listed.messages == body.messages == messages
    assert listed.places == [f"message {i}" for i in range(len(messages))]


@pytest.mark.parametrize("system", ["You are terse.", [{"type": "text", "text": "You are terse."}]])
def test_anthropic_body_system_becomes_the_first_message(tmp_path: Path, system: Any) -> None:
    turns = [{"role": "user", "content": "go"}, *tool_round(1, shape="anthropic")]
    conversation = read_conversation(
        write(tmp_path / "req.json", {"system": system, "messages": turns})
    )
    assert conversation.format == "anthropic"
    assert conversation.messages[0] == {"role": "system", "content": system}
    assert conversation.messages[1:] == turns
    assert conversation.places == ["system", "message 0", "message 1", "message 2"]


def test_anthropic_blocks_without_system_are_detected(tmp_path: Path) -> None:
    turns = [{"role": "user", "content": "go"}, *tool_round(1, shape="anthropic")]
    assert (
        read_conversation(write(tmp_path / "req.json", {"messages": turns})).format == "anthropic"
    )


def test_jsonl_plain_and_wrapped_lines_with_blank_lines(tmp_path: Path) -> None:
    messages = [SYSTEM, human("go"), *tool_round(1), reply("done")]
    lines = [messages[0], {"message": messages[1], "timestamp": "2025-01-01T00:00:00Z"}]
    lines += messages[2:]
    path = write_jsonl(tmp_path / "t.jsonl", lines)
    path.write_text(path.read_text().replace("\n", "\n\n", 1))  # a blank line after line 1
    conversation = read_conversation(path)
    assert conversation.format == "jsonl"
    assert conversation.messages == messages
    assert conversation.places[:3] == ["line 1", "line 3", "line 4"]


def test_format_is_detected_by_content_not_extension(tmp_path: Path) -> None:
    messages = [human("go"), reply("ok")]
    assert read_conversation(write_jsonl(tmp_path / "x.json", messages)).format == "jsonl"
    assert read_conversation(write(tmp_path / "x.jsonl", messages)).format == "json"
    assert read_conversation(write(tmp_path / "x.txt", messages)).format == "json"


def test_format_option_overrides_detection(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "conv.json", [human("go"), reply("ok")])
    status, _, err = run(capsys, str(path), "--format", "anthropic", "--out", str(tmp_path))
    assert status == EXIT_BAD_INPUT
    assert "Anthropic Messages request body" in err


# -- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("flat.toml", "compact_threshold = 0.7\ntarget_usage = 0.3\n"),
        ("table.toml", "[config]\ncompact_threshold = 0.7\ntarget_usage = 0.3\n"),
        ("flat.yaml", "compact_threshold: 0.7\ntarget_usage: 0.3\n"),
        ("nested.yml", "config:\n  compact_threshold: 0.7\n  target_usage: 0.3\n"),
    ],
)
def test_config_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str
) -> None:
    (tmp_path / name).write_text(text)
    conv = write(tmp_path / "c.json", agent_run(3, result_chars=400))
    out = tmp_path / "out"
    status, _, err = run(
        capsys, str(conv), "--config", str(tmp_path / name), "--out", str(out), "--no-chart"
    )
    assert status == EXIT_OK, err
    assert load_json(out)["config"] == {"compact_threshold": 0.7, "target_usage": 0.3}


def test_set_values_are_typed_and_override_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "fold.toml").write_text("[config]\ncompact_threshold = 0.7\n")
    conv = write(tmp_path / "c.json", agent_run(3, result_chars=400))
    args = ["--config", str(tmp_path / "fold.toml"), "--set", "compact_threshold=0.8"]
    args += ["--set", "max_tokens=9_000", "--set", "compaction_notice_enabled=false"]
    args += ["--set", "token_counter=heuristic", "--set", "token_model=null"]
    status, _, err = run(capsys, str(conv), *args, "--out", str(tmp_path / "o"), "--no-chart")
    assert status == EXIT_OK, err
    assert load_json(tmp_path / "o")["config"] == {
        "compact_threshold": 0.8,
        "max_tokens": 9000,
        "compaction_notice_enabled": False,
        "token_counter": "heuristic",
        "token_model": None,
    }


def test_max_tokens_caps_the_budget_without_a_window(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conv = write(tmp_path / "c.json", agent_run(3, result_chars=400))
    status, _, _ = run(capsys, str(conv), "--set", "max_tokens=5000", "--out", str(tmp_path))
    assert status == EXIT_OK
    data = load_json(tmp_path)
    assert data["window"] is None
    assert {row["budget"] for row in data["rows"]} == {5000}


# -- bad input: one line on stderr naming the file and the place, exit 2 ----------------------


def assert_one_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("contextfold: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize(
    ("name", "content", "fragments"),
    [
        (
            "not-json.json",
            '[{"role": "user", "content": "hi"},\n  oops]',
            ["line 2", "not valid JSON"],
        ),
        ("shape.json", '{"conversation": []}', ["expected a JSON list of chat messages"]),
        ("scalar.json", "42", ["found a number"]),
        (
            "item.json",
            '[{"role": "user", "content": "hi"}, "hello"]',
            ["message 1", "found a string"],
        ),
        ("empty.json", "", ["the file is empty"]),
        ("blank.jsonl", "\n  \n", ["the file is empty"]),
        ("no-messages.json", "[]", ["no messages"]),
        (
            "no-role.json",
            json.dumps([human("hi"), {"content": "no role here"}]),
            ["message 1", "role"],
        ),
        (
            "bad-role.jsonl",
            "\n".join(
                json.dumps(m) for m in [human("hi"), reply("ok"), {"role": "robot", "content": "r"}]
            ),
            ["line 3", "role"],
        ),
        (
            "bad-line.jsonl",
            '{"role": "user", "content": "hi"}\n{"role": \n',
            ["line 2", "not valid JSON"],
        ),
        (
            "no-role.jsonl",
            '{"role": "user", "content": "hi"}\n{"text": "x"}\n',
            ["line 2", "'role'"],
        ),
        (
            "bad-role.json",
            json.dumps([human("hi"), {"role": "robot", "content": "x"}]),
            ["message 1", "role"],
        ),
        ("binary.json", b"\xff\xfe\x00garbage", ["not UTF-8"]),
    ],
)
def test_bad_files(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    content: str | bytes,
    fragments: list[str],
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    status, out, err = run(capsys, str(path), "--out", str(tmp_path / "out"))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, str(path), *fragments)
    assert out == ""
    assert not (tmp_path / "out" / "replay.json").exists()


def test_anthropic_system_place_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = {"system": 7, "messages": [{"role": "user", "content": "hi"}]}
    status, _, err = run(capsys, str(write(tmp_path / "req.json", body)), "--out", str(tmp_path))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, "req.json", "'system' must be a string or a list of blocks")


def test_missing_file_and_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, str(tmp_path / "nope.json"))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, "nope.json", "no such file")
    status, _, err = run(capsys, str(tmp_path))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, str(tmp_path), "is a directory")


@pytest.mark.parametrize(
    ("config_text", "suffix", "fragments"),
    [
        ("max_tokenz = 5\n", ".toml", ["unknown config key 'max_tokenz'", "max_tokens"]),
        ("config:\n  compact_threshold: 2\n", ".yaml", ["compact_threshold", "(0, 1]"]),
        ("[config\n", ".toml", ["not valid TOML"]),
        ("a: [1, 2\n", ".yaml", ["not valid YAML"]),
        (
            "compact_threshold = 0.8\n[config]\ntarget_usage = 0.3\n",
            ".toml",
            ["outside the [config]"],
        ),
    ],
)
def test_bad_config_file(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    config_text: str,
    suffix: str,
    fragments: list[str],
) -> None:
    config = tmp_path / f"fold{suffix}"
    config.write_text(config_text)
    conv = write(tmp_path / "c.json", [human("hi"), reply("ok")])
    status, _, err = run(capsys, str(conv), "--config", str(config), "--out", str(tmp_path / "o"))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, str(config), *fragments)


@pytest.mark.parametrize(
    ("pairs", "fragments"),
    [
        (
            ["protected_recnt=0.2"],
            ["--set protected_recnt=0.2", "unknown config key", "protected_recent"],
        ),
        (["target_usage=0.99"], ["--set target_usage=0.99", "above compact_threshold"]),
        (["truncate_chars=many"], ["truncate_chars", "'many'"]),
        (["compact_threshold"], ["--set", "expected key=value"]),
    ],
)
def test_bad_set_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pairs: list[str], fragments: list[str]
) -> None:
    conv = write(tmp_path / "c.json", [human("hi"), reply("ok")])
    args = [arg for pair in pairs for arg in ("--set", pair)]
    status, _, err = run(capsys, str(conv), *args, "--out", str(tmp_path / "o"))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, *fragments)


def test_output_reserve_must_be_below_the_window(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conv = write(tmp_path / "c.json", [human("hi"), reply("ok")])
    status, _, err = run(capsys, str(conv), "--window", "3000", "--out", str(tmp_path))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, "--max-output-tokens", "below --window 3000")


def test_conversation_that_cannot_fit_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conv = write(
        tmp_path / "big.json", [{"role": "system", "content": "word " * 20_000}, human("hi")]
    )
    status, _, err = run(capsys, str(conv), "--window", "8000", "--out", str(tmp_path))
    assert status == EXIT_DOES_NOT_FIT
    assert_one_line(err, "big.json", "does not fit", "effective budget")


# -- the real entry points -----------------------------------------------------------------


@pytest.mark.slow
def test_console_script_replays_a_shipped_example(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("contextfold")
    assert script.exists(), "the console script is installed with the package"
    done = subprocess.run(
        [
            str(script),
            "replay",
            str(EXAMPLES / "agent-session.json"),
            "--window",
            "16000",
            "--out",
            str(tmp_path),
            "--no-chart",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert "totals" in done.stdout and "compaction trigger" in done.stdout
    assert load_json(tmp_path)["totals"]["history_kept"] is True


@pytest.mark.slow
def test_python_dash_m_reports_a_bad_file_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{broken\n')
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "replay", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT
    assert_one_line(done.stderr, "bad.jsonl", "line 2")


def test_out_that_is_a_file_is_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    conv = write(tmp_path / "c.json", [human("hi"), reply("ok")])
    status, out, err = run(capsys, str(conv), "--out", str(taken))
    assert status == EXIT_BAD_INPUT
    assert_one_line(err, "--out", "is not a folder")
    assert out == ""


# -- sizes, prefix reuse and the ingress cap, measured linearly -------------------------------


def test_history_sizes_do_not_depend_on_compaction() -> None:
    # "history" is what an unmanaged request would cost: the same whether or not compaction
    # acted, request by request.
    messages = agent_run(16, result_chars=1500)
    managed = replay_messages(messages, {}, 12_000)
    unmanaged = replay_messages(messages, {"compaction_enabled": False}, None)
    assert managed.totals.compactions > 0
    assert [row.history_tokens for row in managed.rows] == [
        row.history_tokens for row in unmanaged.rows
    ]
    assert all(row.tokens_after == row.history_tokens for row in unmanaged.rows)


def test_an_ingress_clip_is_reported_apart_from_compaction(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # One 500 KB tool result, clipped to the 128 KiB ingress cap on admission; the budget
    # (200,000 by default) holds everything, so compaction has nothing to do.
    messages = [SYSTEM, human("read the log"), *tool_round(1, result_chars=500_000)]
    messages.append(reply("done"))
    conv = write(tmp_path / "big.json", messages)
    status, out, err = run(capsys, str(conv), "--out", str(tmp_path / "o"), "--no-chart")
    assert status == EXIT_OK, err
    totals = load_json(tmp_path / "o")["totals"]
    assert totals["compactions"] == 0
    assert totals["ingress_clipped_results"] == 1
    assert 500_000 - 131_072 - 1_000 < totals["ingress_bytes_removed"] <= 500_000 - 131_072
    # The clip is not a saving of compaction: what is sent is the (clipped) history.
    assert totals["tokens_sent_total"] == totals["history_tokens_total"]
    assert totals["saved_share"] == 0.0
    assert "tool results clipped at admission" in out
    assert f"1 ({totals['ingress_bytes_removed']:,} bytes removed" in out
    assert "±0%" in out


def test_no_clip_is_reported_when_nothing_was_clipped() -> None:
    result = replay_messages(agent_run(3, result_chars=400), {}, None)
    assert result.totals.ingress_clipped_results == 0
    assert result.totals.ingress_bytes_removed == 0


def brute_force_prefix(previous: list[Any], current: list[Any]) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if json.dumps(old) != json.dumps(new):
            break
        shared += 1
    return shared


def test_incremental_prefix_matches_a_full_recount() -> None:
    from contextfold.cli.replay import _PrefixTracker

    def count(message: dict[str, Any]) -> int:
        return len(json.dumps(message))

    base = [{"role": "user", "content": f"m{i}"} for i in range(40)]
    views: list[list[dict[str, Any]]] = [
        base[:5],
        base[:9],  # appended: the same objects
        [dict(m) for m in base[:12]],  # equal copies count as repeated
        [base[0], *base[4:14]],  # the oldest dropped after the first message
        [base[0], *base[4:8], {"role": "user", "content": "short"}, *base[9:16]],  # truncated
        [base[0], *base[4:8], {"role": "user", "content": "short"}, *base[9:18]],
        [],  # an empty view (nothing shared either way)
        base[:3],
        base[:2],  # a view shorter than the previous one, all of it repeated
    ]
    tracker = _PrefixTracker(count)
    previous: list[dict[str, Any]] = []
    for view in views:
        shared, tokens = tracker.advance(view)
        expected = brute_force_prefix(previous, view)
        assert shared == expected
        assert tokens == sum(count(m) for m in view[:expected])
        previous = view


@pytest.mark.slow
def test_long_replay_shows_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    import os
    import pty

    from contextfold.cli.commands import PROGRESS_MIN_MESSAGES

    messages = [SYSTEM]
    while len(messages) < PROGRESS_MIN_MESSAGES + 10:
        messages += [human(f"q{len(messages)}"), reply(f"a{len(messages)}")]
    conv = write(tmp_path / "long.json", messages)

    def stderr_on_a_terminal(*extra: str) -> tuple[int, str]:
        leader, follower = pty.openpty()
        command = [sys.executable, "-m", "contextfold.cli", "replay", str(conv), "--no-chart"]
        child = subprocess.Popen(
            [*command, "--out", str(tmp_path / "o"), *extra],
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env=os.environ | {"TERM": "xterm", "COLUMNS": "100"},
        )
        os.close(follower)
        # Read while the child runs, so a full terminal buffer never blocks it.
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child exited and the terminal is drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        return child.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")

    status, shown = stderr_on_a_terminal()
    assert status == EXIT_OK
    assert "replaying" in shown and "messages" in shown
    status, shown = stderr_on_a_terminal("--quiet")
    assert status == EXIT_OK
    assert "replaying" not in shown


def test_readme_replay_example_is_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CLI page of the docs shows the example's output in full; it must be today's output.

    When compaction changes, refresh the block with the command the page names (run from
    the repository root; the three file paths at the end carry a timestamp and are not
    compared).
    """
    root = EXAMPLES.parent
    readme = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    command = "uv run contextfold replay examples/agent-session.json --window 16000"
    after = readme.index(f"(`{command}`):")
    start = readme.index("```\n", after) + len("```\n")
    shown = readme[start : readme.index("```", start)].splitlines()

    monkeypatch.chdir(root)  # the heading names the file as given, relative to the root
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run(
        capsys, "examples/agent-session.json", "--window", "16000", "--out", str(tmp_path)
    )
    assert status == EXIT_OK, err
    printed = [line.rstrip() for line in out.splitlines()]

    def without_paths(lines: list[str]) -> list[str]:
        # The file paths come last (and a long one wraps): compare everything before them.
        return lines[: next(i for i, line in enumerate(lines) if line.startswith("numbers:"))]

    assert without_paths(printed) == without_paths(shown)


@given(
    previous=st.lists(st.integers(0, 2), max_size=40),
    current=st.lists(st.integers(0, 2), max_size=40),
    keep=st.integers(0, 40),
)
def test_common_prefix_is_the_first_difference(
    previous: list[int], current: list[int], keep: int
) -> None:
    from contextfold.cli.replay import _common_prefix

    current = previous[:keep] + current  # often a long shared run, as between real views
    expected = next(
        (i for i, (a, b) in enumerate(zip(previous, current, strict=False)) if a != b),
        min(len(previous), len(current)),
    )
    assert _common_prefix(previous, current) == expected


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "drop", "shorten", "copy", "duplicate"]),
            st.integers(0, 30),
            st.integers(1, 6),
        ),
        max_size=25,
    )
)
def test_prefix_tracker_matches_a_full_recount_through_any_edits(
    edits: list[tuple[str, int, int]],
) -> None:
    # Views evolve as compaction makes them: messages appended, stretches dropped, some
    # shortened, everything copied, equal messages repeated. After every view the tracker's
    # prefix and its running totals must equal a recount from scratch.
    from contextfold.cli.replay import _PrefixTracker

    def count(message: dict[str, Any]) -> int:
        return len(json.dumps(message))

    tracker = _PrefixTracker(count)
    previous: list[dict[str, Any]] = []
    view: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    serial = 0
    for action, where, amount in edits:
        view = list(view)
        if action == "append":
            for _ in range(amount):
                serial += 1
                view.append({"role": "user", "content": "m" * (serial % 7 + 1) + str(serial)})
        elif action == "drop" and len(view) > 1:
            start = 1 + where % (len(view) - 1)
            del view[start : start + amount]
        elif action == "shorten":
            index = where % len(view)
            view[index] = {**view[index], "content": str(view[index]["content"])[:1] + "~"}
        elif action == "copy":
            view = [dict(message) for message in view]
        elif action == "duplicate":
            view.append(dict(view[where % len(view)]))
        shared, tokens = tracker.advance(view)
        expected = brute_force_prefix(previous, view)
        assert (shared, tokens) == (expected, sum(count(m) for m in view[:expected]))
        running = [0]
        for message in view:
            running.append(running[-1] + count(message))
        assert tracker._cumulative == running
        previous = view


# -- costs ---------------------------------------------------------------------------------


def test_every_request_is_priced_beside_the_whole_history(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from contextfold.costing import price_columns
    from contextfold.prices import reference_prices

    status, out, err = run(
        capsys, str(EXAMPLES / "agent-session.json"), "--window", "16000",
        "--out", str(tmp_path), "--no-chart", "-q",
    )  # fmt: skip
    assert status == EXIT_OK, err
    data = load_json(tmp_path)
    rows = data["rows"]
    assert list(data["costs"]) == ["anthropic", "openai"]
    for (name, priced), prices in zip(data["costs"].items(), reference_prices(), strict=True):
        assert priced["prices"]["name"] == prices.name
        sent = price_columns(
            prices, [r["tokens_after"] for r in rows], [r["prefix_tokens"] for r in rows]
        )
        history = price_columns(
            prices,
            [r["history_tokens"] for r in rows],
            [0] + [r["history_tokens"] for r in rows[:-1]],
        )
        assert [r[f"cost_{name}_usd"] for r in rows] == [round(u, 8) for u in sent.usd]
        assert priced["sent_usd"] == round(sent.total_usd, 6)
        assert priced["history_usd"] == round(history.total_usd, 6)
        assert priced["cache_read_tokens"] == sent.cache_read_tokens
        shown = f"history ${priced['history_usd']:.4f}, sent ${priced['sent_usd']:.4f}"
        assert shown in " ".join(out.split())
        assert f"input cost at {prices.name}" in out


def test_a_gap_beyond_the_cache_lifetime_finds_the_cache_cold() -> None:
    from datetime import UTC, datetime, timedelta

    def stamped(gap: timedelta) -> list[dict[str, Any]]:
        start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        out = []
        for index, message in enumerate(agent_run(6, result_chars=3_000)):
            moment = (start + gap * index).isoformat()
            out.append(
                {**message, "metadata": {**message.get("metadata", {}), "timestamp": moment}}
            )
        return out

    plain = replay_messages(agent_run(6, result_chars=3_000), {}, 200_000)
    quick = replay_messages(stamped(timedelta(seconds=30)), {}, 200_000)
    slow = replay_messages(stamped(timedelta(minutes=10)), {}, 200_000)
    assert [r.tokens_after for r in quick.rows] == [r.tokens_after for r in plain.rows]
    # Within five minutes of each other the requests cost as if there were no clock.
    assert quick.costs[0].requests == plain.costs[0].requests
    # Ten minutes apart, Anthropic's five-minute cache is gone each time: nothing is read.
    assert slow.costs[0].cache_read_tokens == 0 < plain.costs[0].cache_read_tokens
    assert slow.costs[0].sent_usd > plain.costs[0].sent_usd


def test_the_configs_own_prices_are_added(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, _, err = run(
        capsys, str(EXAMPLES / "agent-session.json"), "--set", 'prices="gemini-2.5-pro"',
        "--out", str(tmp_path), "--no-chart", "-q",
    )  # fmt: skip
    assert status == EXIT_OK, err
    data = load_json(tmp_path)
    assert list(data["costs"]) == ["anthropic", "openai", "config"]
    assert data["costs"]["config"]["prices"]["name"] == "gemini-2.5-pro"
    assert all("cost_config_usd" in row for row in data["rows"])
    status, _, err = run(
        capsys, str(EXAMPLES / "agent-session.json"), "--set", 'prices="gpt-9000"',
        "--out", str(tmp_path / "bad"), "--no-chart", "-q",
    )  # fmt: skip
    assert status == EXIT_BAD_INPUT
    assert "no prices known for 'gpt-9000'" in err and err.count("\n") == 1


def test_a_summarize_ladder_replays_offline_and_prices_its_summaries_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ladder = {"strategies": ["strip_thinking", "summarize", "truncate_tool_results", "drop_oldest"]}
    messages = [SYSTEM, human("Look up every topic."), *agent_run(30, result_chars=1_500)[2:]]
    result = replay_messages(messages, ladder, 8_000)
    assert any("summarize" in row.applied for row in result.rows)
    for priced in result.costs:
        assert priced.summary_requests > 0 and 0 < priced.summary_usd < priced.sent_usd
        assert priced.to_dict()["summary_requests"] == priced.summary_requests
    # The command says so, beside the input cost; it used to stop with a traceback.
    conversation = tmp_path / "session.json"
    conversation.write_text(json.dumps(messages), encoding="utf-8")
    config = tmp_path / "ladder.yaml"
    config.write_text(
        "strategies: [strip_thinking, summarize, truncate_tool_results, drop_oldest]\n"
    )
    status = main(
        ["replay", str(conversation), "--config", str(config), "--window", "8000",
         "--out", str(tmp_path / "out"), "--no-chart", "--quiet"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert status == EXIT_OK, err
    said = " ".join(out.split())
    assert f"({result.costs[0].summary_requests} requests, input and output)" in said
