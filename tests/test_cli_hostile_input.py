"""`contextfold replay` against hostile files and options: one line on stderr, exit 2, no hang.

Each case runs the real command in a subprocess with a timeout, the way a user (or a script
feeding it untrusted paths) would: a FIFO, a symlink to /dev/zero, a file over the size cap,
JSON that breaks Python's parser, names and values that are not valid text, output folders
that are empty, unwritable or booby-trapped with symlinks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.cli import EXIT_BAD_INPUT, EXIT_OK
from support import SYSTEM, human, reply

# Generous: a correct run takes about a second; a hang or a blow-up never ends by itself.
TIMEOUT = 60


def replay(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "replay", *argv],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=TIMEOUT,
        cwd=cwd,
        check=False,
    )


def assert_refused(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == EXIT_BAD_INPUT, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("contextfold: error: ")
    assert len(lines[0]) < 1_100, lines[0][:200]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert done.stdout == ""


@pytest.fixture
def conversation(tmp_path: Path) -> Path:
    path = tmp_path / "conv.json"
    path.write_text(json.dumps([SYSTEM, human("hi"), reply("hello")]), encoding="utf-8")
    return path


# -- what is read --------------------------------------------------------------------------


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "conv.json"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it to read would block forever
    assert_refused(replay(str(fifo), "--out", str(tmp_path / "o")), "FIFO", "not a regular file")


def test_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    assert_refused(replay(str(link), "--out", str(tmp_path / "o")), "device")


@pytest.mark.slow
def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path, conversation: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(conversation)
    done = replay(str(link), "--out", str(tmp_path / "o"), "--no-chart", "--quiet")
    assert done.returncode == EXIT_OK, done.stderr


# A whole process of its own; in the default run, test_cli_replay's in-process
# test_missing_file_and_directory refuses a directory the same way.
@pytest.mark.slow
def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert_refused(replay(str(tmp_path), "--out", str(tmp_path / "o")), "a directory")


@pytest.mark.slow
def test_a_file_over_max_bytes_is_refused_and_the_cap_can_be_raised(
    tmp_path: Path, conversation: Path
) -> None:
    size = conversation.stat().st_size
    assert_refused(
        replay(str(conversation), "--max-bytes", str(size - 1), "--out", str(tmp_path / "o")),
        "over the",
        "--max-bytes",
    )
    done = replay(
        str(conversation), "--max-bytes", str(size), "--out", str(tmp_path / "o"), "--no-chart"
    )
    assert done.returncode == EXIT_OK, done.stderr


def test_the_read_itself_is_bounded() -> None:
    from contextfold.cli.errors import InputError
    from contextfold.cli.files import read_regular_file

    # /proc files are regular files that stat as 0 bytes and read as more: the size check
    # before opening passes, and only a bounded read can notice the content is over the cap.
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs /proc")
    assert os.stat(status).st_size == 0
    with pytest.raises(InputError, match="grew past"):
        read_regular_file(status, 64, what="file")
    assert b"Name:" in read_regular_file(status, 1 << 20, what="file")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "text", "fragments"),
    [
        (
            "int.json",
            '[{"role": "user", "content": "hi", "n": ' + "7" * 5_000 + "}]",
            ["number too long", "4,300 digits"],
        ),
        (
            "int.jsonl",
            '{"role": "user", "content": "hi"}\n{"role": "user", "n": ' + "7" * 5_000 + "}\n",
            ["line 2", "number too long"],
        ),
        ("deep.json", "[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
        (
            "deep.jsonl",
            '{"role": "user", "content": "hi"}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
            ["line 2", "nested too deeply"],
        ),
        (
            "deep-object.json",
            '[{"role": "user", "content": "hi", "x": '
            + '{"a": ' * 100_000
            + "1"
            + "}" * 100_000
            + "}]",
            ["nested too deeply"],
        ),
    ],
)
def test_json_that_breaks_the_parser_is_one_line(
    tmp_path: Path, name: str, text: str, fragments: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert_refused(replay(str(path), "--out", str(tmp_path / "o")), name, *fragments)


def test_a_message_nested_too_deep_to_walk_is_a_refused_message() -> None:
    # JSON this deep cannot come from a file (the parser stops first, as above), but
    # replay_messages also takes messages from Python: a RecursionError while admitting one
    # is that message's problem, reported with its place like any refused message.
    from contextfold.cli.replay import ReplayError, replay_messages

    deep: object = "x"
    for _ in range(5_000):
        deep = {"k": deep}
    with pytest.raises(ReplayError) as caught:
        replay_messages([human("hi"), {"role": "user", "content": [deep]}], {}, None)
    assert caught.value.place == "message 1"


@pytest.mark.slow
def test_a_file_name_that_is_not_utf8_is_replayed_and_shown_escaped(
    tmp_path: Path, conversation: Path
) -> None:
    odd = os.fsencode(tmp_path) + b"/\xffconv.json"
    os.rename(conversation, odd)
    out = tmp_path / "o"
    done = replay(os.fsdecode(odd), "--out", str(out), "--no-chart")
    assert done.returncode == EXIT_OK, done.stderr
    assert "\\xffconv.json" in done.stdout
    data = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert data["source"].endswith("\\xffconv.json")


@pytest.mark.slow
def test_default_output_folder_of_an_odd_name_is_plain_ascii(
    tmp_path: Path, conversation: Path
) -> None:
    odd = os.fsencode(tmp_path) + b"/\xff odd name.json"
    os.rename(conversation, odd)
    done = replay(os.fsdecode(odd), "--no-chart", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    (folder,) = (tmp_path / "contextfold-out").iterdir()
    assert folder.name.startswith("replay-odd_name-")
    assert folder.name.isascii()


# -- options -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("pair", "fragments"),
    [
        ('token_model="\\ud800"', ["--set", "token_model", "lone surrogate"]),
        # A key from bytes that are not UTF-8 (byte 0xFF reaches Python as "\udcff").
        (os.fsdecode(b"\xff") + "=1", ["--set", "the key", "lone surrogate"]),
    ],
)
def test_set_values_that_are_not_text_are_refused(
    tmp_path: Path, conversation: Path, pair: str, fragments: list[str]
) -> None:
    done = replay(str(conversation), "--set", pair, "--out", str(tmp_path / "o"))
    assert_refused(done, *fragments)


@pytest.mark.slow
def test_set_values_too_big_to_parse_are_refused_in_one_line(
    tmp_path: Path, conversation: Path
) -> None:
    for value in ("9" * 5_000, "[" * 100_000):
        done = replay(str(conversation), "--set", f"max_tokens={value}")
        assert_refused(done, "max_tokens")


def test_a_config_file_holding_a_lone_surrogate_is_refused(
    tmp_path: Path, conversation: Path
) -> None:
    config = tmp_path / "fold.yaml"
    config.write_text('token_model: "\\ud800"\n', encoding="utf-8")
    done = replay(str(conversation), "--config", str(config), "--out", str(tmp_path / "o"))
    assert_refused(done, "fold.yaml", "token_model", "lone surrogate")


@pytest.mark.slow
def test_a_config_fifo_is_refused(tmp_path: Path, conversation: Path) -> None:
    fifo = tmp_path / "fold.toml"
    os.mkfifo(fifo)
    assert_refused(replay(str(conversation), "--config", str(fifo)), "fold.toml", "FIFO")


@pytest.mark.slow
def test_a_yaml_alias_bomb_in_the_config_is_one_short_line(
    tmp_path: Path, conversation: Path
) -> None:
    # Nine levels of ten aliases: a billion-element value if anything expands it (its repr
    # in an error message was 1.2 GB). The value is wrong for the key, so it is refused.
    levels = ["  - &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        levels.append(f"  - &a{level} [{refs}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("compact_threshold:\n" + "\n".join(levels) + "\n")
    done = replay(str(conversation), "--config", str(bomb), "--out", str(tmp_path / "o"))
    assert_refused(done, "bomb.yaml")


@pytest.mark.slow
def test_an_unknown_meter_mode_warns_once(tmp_path: Path, conversation: Path) -> None:
    done = replay(
        str(conversation), "--set", "token_meter=actaul", "--out", str(tmp_path / "o"), "--quiet"
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stderr.count("actaul") == 1, done.stderr


# -- what is written -----------------------------------------------------------------------


@pytest.mark.slow
def test_an_empty_out_is_refused_and_nothing_is_written(tmp_path: Path, conversation: Path) -> None:
    done = replay(str(conversation), "--out", "", cwd=tmp_path)
    assert_refused(done, "--out", "empty")
    assert not (tmp_path / "replay.json").exists()
    assert not (tmp_path / "contextfold-out").exists()


@pytest.mark.slow
def test_an_out_that_is_a_symlink_is_refused(tmp_path: Path, conversation: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    for given in (str(link), f"{link}/"):
        assert_refused(replay(str(conversation), "--out", given), "--out", "symlink")
    assert list(real.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["replay.json", "requests.png"])
def test_a_symlink_planted_in_out_is_not_followed(
    tmp_path: Path, conversation: Path, planted: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (out / planted).symlink_to(target)
    done = replay(str(conversation), "--out", str(out))
    assert_refused(done, "--out", planted, "symlink")
    assert target.read_text() == "keep me"


@pytest.mark.slow
def test_a_fifo_planted_in_out_is_not_written_into(tmp_path: Path, conversation: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "replay.json")
    assert_refused(replay(str(conversation), "--out", str(out)), "--out", "replay.json")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["/proc", "file/inside"])
def test_an_unwritable_out_is_one_line(tmp_path: Path, conversation: Path, where: str) -> None:
    # Root may write anywhere, so the folders here are ones nobody can write into: /proc,
    # and a "folder" below a regular file.
    (tmp_path / "file").write_text("")
    out = where if where.startswith("/") else str(tmp_path / where)
    done = replay(str(conversation), "--out", out, "--no-chart")
    assert_refused(done, "--out")


# -- where the printout goes -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True])
def test_a_full_disk_on_stdout_is_one_line_and_a_failure(
    tmp_path: Path, conversation: Path, quiet: bool
) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "contextfold.cli", "replay", str(conversation), "--no-chart",
             "--out", str(tmp_path / "out"), *(["--quiet"] if quiet else [])],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )  # fmt: skip
    assert done.returncode == EXIT_BAD_INPUT
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "contextfold: error: cannot write to standard output (No space left on device)"
    ]
    assert (
        tmp_path / "out" / "replay.json"
    ).exists()  # the files were written; only the printout failed
