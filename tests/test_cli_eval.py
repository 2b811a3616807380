"""`contextfold eval` end to end: inputs, policies, outputs, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextfold.cli import EXIT_BAD_INPUT, EXIT_OK, build_parser, eval_parser, main
from contextfold.evaluation import (
    BUILTIN_POLICIES,
    COLUMNS,
    DEFAULT_WINDOWS,
    CorpusSettings,
    FactRule,
    generate_corpus,
)
from contextfold.evaluation.bfcl import DEFAULT_CHAIN

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LABELS = (
    "naive drop-oldest",
    "observation masking",
    "context-simple",
    "server-side clear_tool_uses",
    "contextfold defaults",
    "contextfold, summarize ladder",
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["eval", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def load(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "eval.json").read_text(encoding="utf-8"))


def test_the_options_mirror_the_librarys_defaults() -> None:
    assert eval_parser.DEFAULT_WINDOWS == DEFAULT_WINDOWS
    assert CorpusSettings().sessions == eval_parser.DEFAULT_SESSIONS
    assert FactRule().near_turns == eval_parser.DEFAULT_NEAR_TURNS
    assert eval_parser.DEFAULT_BFCL_CHAIN == DEFAULT_CHAIN
    assert tuple(BUILTIN_POLICIES) == eval_parser.BUILTIN_POLICY_NAMES
    args = build_parser().parse_args(["eval"])
    assert (args.files, args.window, args.policy, args.corpus) == ([], None, None, None)


def test_help_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "--window" in out and "long-horizon" in out and "context-simple" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "eval" in capsys.readouterr().out


@pytest.mark.slow
def test_eval_on_the_long_horizon_corpus_prints_tables_and_writes_json_and_chart(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    status, printed, err = run(
        capsys,
        "--corpus", "long-horizon", "--sessions", "1", "--seed", "5",
        "--window", "4000", "--window", "8000", "--out", str(out), "-q",
    )  # fmt: skip
    assert status == EXIT_OK, err
    assert "window 4,000 tokens" in printed and "window 8,000 tokens" in printed
    for label in LABELS:
        assert label in printed
    assert "(search: yes)" in printed  # contextfold policies answer the search step
    assert "cost" in printed and "anthropic" in printed and "openai" in printed
    data = load(out)
    assert data["settings"]["windows"] == [4_000, 8_000]
    assert data["inputs"] == [{"corpus": "long-horizon", "seed": 5, "sessions": 1}]
    assert [p["key"] for p in data["policies"]] == list(BUILTIN_POLICIES)
    policies = len(BUILTIN_POLICIES)
    assert len(data["totals"]) == 2 * policies and len(data["runs"]) == 2 * policies
    conversation = data["conversations"][0]
    expected = generate_corpus(CorpusSettings(seed=5, sessions=1))[0]
    assert conversation["messages"] == len(expected.messages)
    for run_data in data["runs"]:
        assert len(run_data["requests"]) == len(conversation["steps"]) + 1
        for request, step in zip(run_data["requests"], conversation["steps"], strict=False):
            assert request[0] == step["message_index"]
            assert len(request[-1]) == len(step["facts"])
    for totals in data["totals"]:
        assert {column.key for column in COLUMNS} <= set(totals)
        assert totals["far"]["facts"] == sum(
            totals["far"][c] for c in ("in_view", "ledger_or_summary", "recoverable", "lost")
        )
    assert (out / "eval.png").read_bytes().startswith(PNG_MAGIC)
    # The same command prints the same figures.
    again = tmp_path / "again"
    status, _, _ = run(
        capsys,
        "--corpus", "long-horizon", "--sessions", "1", "--seed", "5",
        "--window", "4000", "--window", "8000", "--out", str(again), "-q", "--no-chart",
    )  # fmt: skip
    assert status == EXIT_OK
    assert load(again)["totals"] == data["totals"]
    assert not (again / "eval.png").exists()


def test_eval_of_a_file_under_chosen_policies_and_a_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "late-compaction.yaml"
    config.write_text("compact_threshold: 0.8\ntarget_usage: 0.6\n", encoding="utf-8")
    out = tmp_path / "out"
    status, printed, err = run(
        capsys,
        str(EXAMPLES / "agent-session.json"),
        "--policy", "naive", "--policy", "contextfold",
        "--config", str(config), "--window", "4000", "--out", str(out), "--no-chart",
    )  # fmt: skip
    assert status == EXIT_OK, err
    data = load(out)
    assert [p["key"] for p in data["policies"]] == ["naive", "contextfold", "late-compaction"]
    assert data["policies"][2]["config"] == {"compact_threshold": 0.8, "target_usage": 0.6}
    assert data["corpora"][0]["name"] == "files"
    assert "contextfold, late-compaction" in printed
    assert data["inputs"][0]["format"] == "json"
    # Beside the raw totals, the same measures on the requests every policy answered.
    assert "answered by all" in printed
    for totals in data["totals"]:
        assert totals["answered_requests"] == totals["requests"] - max(
            t["refusals"] for t in data["totals"]
        )
        assert 0 < totals["answered_tokens_sent"] <= totals["tokens_sent"]
        for name in ("anthropic", "openai"):
            assert 0 < totals[f"answered_cost_{name}_usd"] <= totals[f"cost_{name}_usd"]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda d: d / "missing.json", "no such file"),
        (lambda d: write(d / "bad.json", "[{"), "not valid JSON"),
        (lambda d: write(d / "empty.json", "[]"), "holds no messages"),
        (
            lambda d: write(
                d / "role.json",
                json.dumps([{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]),
            ),
            "role.json, message 1",
        ),
        (lambda d: d, "is a directory"),
    ],
)
def test_a_conversation_that_cannot_be_replayed_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make: Any, fragment: str
) -> None:
    status, _out, err = run(
        capsys, str(make(tmp_path)), "--policy", "contextfold", "--out", str(tmp_path / "o")
    )
    assert status == EXIT_BAD_INPUT
    assert fragment in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("compact_threshold: 7\n", "compact_threshold must be a fraction"),
        ("compact_treshold: 0.5\n", "Did you mean 'compact_threshold'"),
        ("strategies: [summarise]\n", "unknown rung 'summarise'"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_a_bad_config_file_is_named_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str
) -> None:
    config = write(tmp_path / "mine.yaml", text)
    status, _out, err = run(
        capsys,
        str(EXAMPLES / "agent-session.json"),
        "--config",
        str(config),
        "--out",
        str(tmp_path / "o"),
    )
    assert status == EXIT_BAD_INPUT
    assert "mine.yaml" in err and fragment in err


def test_bad_options_are_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for argv in (["--window", "0"], ["--window", "lots"], ["--policy", "nope"], ["--corpus", "x"]):
        with pytest.raises(SystemExit) as exited:
            main(["eval", *argv])
        assert exited.value.code == EXIT_BAD_INPUT
    capsys.readouterr()
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    status, _out, err = run(capsys, str(EXAMPLES / "agent-session.json"), "--out", str(link))
    assert status == EXIT_BAD_INPUT and "symlink" in err


@pytest.mark.slow
def test_the_installed_console_script_runs_eval(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = Path(sys.executable).with_name("contextfold")
    done = subprocess.run(
        [str(script), "eval", str(EXAMPLES / "agent-session.json"), "--policy", "naive",
         "--window", "4000", "--out", str(out), "--no-chart"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "naive drop-oldest" in done.stdout
    assert load(out)["runs"]


def test_the_shipped_summarize_ladder_config_is_the_builtin_summarize_policy() -> None:
    from contextfold.cli.config import load_config_file
    from contextfold.evaluation import builtin_policy

    shipped = load_config_file(EXAMPLES / "summarize-ladder.yaml")
    assert shipped == dict(builtin_policy("summarize").config)


@pytest.mark.slow
def test_summary_requests_are_priced_apart_and_counted_in_the_cost(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    status, printed, err = run(
        capsys,
        "--corpus", "long-horizon", "--sessions", "2", "--window", "8000",
        "--policy", "contextfold", "--policy", "summarize", "--out", str(out), "--no-chart",
    )  # fmt: skip
    assert status == EXIT_OK, err
    totals = {t["policy"]: t for t in load(out)["totals"]}
    summarizing, plain = totals["summarize"], totals["contextfold"]
    assert plain["summary_requests"] == 0 and plain["summary_cost_anthropic_usd"] == 0
    assert summarizing["summary_requests"] > 0
    for pricing in ("anthropic", "openai"):
        summary = summarizing[f"summary_cost_{pricing}_usd"]
        assert 0 < summary < summarizing[f"cost_{pricing}_usd"]
    said = " ".join(printed.split())
    assert f"{summarizing['summary_requests']:,} summary requests" in said
