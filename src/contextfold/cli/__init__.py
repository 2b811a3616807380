"""The ``contextfold`` command: ``demo``, ``replay``, ``eval`` and ``sessions``.

Exit status: 0 on success; 1 when a conversation cannot fit the window even fully compacted
(``ContextLengthError``: its protected content alone is too big); 2 for bad input or usage (a
file that cannot be read or has the wrong shape, a bad option or config value), or when
standard output cannot be written (a full disk, a closed pipe). Problems with input are
reported as one line on stderr naming the file and the place, never a traceback.

The subcommands' modules (and through them amplifier-core, rich and matplotlib) are imported
only when a subcommand runs, so ``contextfold --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

# Light (the standard library only), so --help stays instant.
from contextfold.cli.errors import (
    DEMO_WINDOW_FOR_DEFAULT_RESULTS,
    EXIT_BAD_INPUT,
    EXIT_DOES_NOT_FIT,
    EXIT_OK,
    MIN_DEMO_WINDOW,
    OutputError,
)
from contextfold.cli.files import DEFAULT_MAX_INPUT_BYTES
from contextfold.cli.numbers import positive_int

__all__ = [
    "DEMO_WINDOW_FOR_DEFAULT_RESULTS",
    "EXIT_BAD_INPUT",
    "EXIT_DOES_NOT_FIT",
    "EXIT_OK",
    "MIN_DEMO_WINDOW",
    "build_parser",
    "main",
]

_DESCRIPTION = """\
contextfold keeps an agent's whole conversation and, before every model call, hands the
provider a fitted view inside an honest token budget. Try 'contextfold demo'."""

_EPILOG = """\
exit status: 0 success; 1 the conversation cannot fit the window even fully compacted;
2 bad input (unreadable or malformed file, bad option or config value), or output that
cannot be written (a full disk, a closed pipe).
Run 'contextfold COMMAND --help' for a command's options."""

_DEMO_EPILOG = """\
Every run is a whole AmplifierSession (orchestrator loop-fold, context context-fold, the
offline provider-scripted model, which also writes the summaries, and the tool-doc-lookup
tool); nothing touches the network. The folder named at the end holds requests.png (request
size per step against the window and the compaction trigger) and demo.json (every number,
plus each run's mount plan). Costs are list prices in USD (docs/pricing.md): Anthropic's
claude-sonnet-4-5 with a 5-minute cache, and OpenAI's gpt-5."""

_REPLAY_EPILOG = """\
formats (detected from the content unless --format is given):
  json       a JSON list of chat messages (OpenAI/Amplifier shape), or {"messages": [...]}
  anthropic  an Anthropic Messages request body {"system": ..., "messages": [...]}
  jsonl      one message per line (Amplifier's transcript.jsonl); a line may wrap the
             message as {"message": {...}}

config: --config FILE reads TOML or YAML, flat or under a [config] table; --set KEY=VALUE
(repeatable, applied after the file) takes JSON/TOML scalars: 0.8, true, null, "text".
Keys: max_tokens, compact_threshold, target_usage, protected_recent, protected_tool_results,
truncate_chars, compaction_enabled, ... (see the README's configuration table).

example:
  contextfold replay examples/agent-session.json --window 16000 --set compact_threshold=0.8"""


def _version() -> str:
    try:
        return version("contextfold")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0"


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contextfold",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"contextfold {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    demo = commands.add_parser(
        "demo",
        help="run a long agent task offline without compaction, with context-fold, with "
        "the threshold planner, with the summarize ladder and with the provider's clear_tool_uses, "
        "and price each run",
        description=(
            "Run a long tool-using agent task in a deliberately small window without\n"
            "compaction, with context-fold, with its threshold planner (planner: threshold),\n"
            "with the summarize ladder and with Anthropic's server-side clear_tool_uses, and\n"
            "print the runs side by side with what each cost at Anthropic's and at OpenAI's\n"
            "prices."
        ),
        epilog=_DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--window",
        type=positive_int,
        default=16_000,
        metavar="TOKENS",
        help=f"the model's context window in tokens (default 16000). Below {MIN_DEMO_WINDOW} is "
        f"refused; with the default --result-chars the task needs about "
        f"{DEMO_WINDOW_FOR_DEFAULT_RESULTS}, more with larger results; a window the task "
        "cannot fit exits 1",
    )
    demo.add_argument(
        "--steps",
        type=positive_int,
        default=80,  # cli.demo.DEFAULT_STEPS (not imported here: it loads the kernel)
        metavar="N",
        help="tool-using steps before the final answer (default 80)",
    )
    demo.add_argument(
        "--result-chars",
        type=positive_int,
        default=3_000,  # cli.demo.DEFAULT_RESULT_CHARS
        metavar="CHARS",
        help="characters each lookup result returns (default 3000; at least 200)",
    )
    _add_output_options(demo, "demo-<timestamp>")
    demo.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar (the table is still printed)"
    )

    demo.add_argument(
        "--tools",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="mount N extra tools whose schemas ride on every request, and compare the "
        "message-only budget with the measured request (the provider counts the whole "
        "request) instead of no compaction with context-fold (default 0)",
    )
    demo.add_argument(
        "--cache-breakpoints",
        action="store_true",
        help="every run's context marks Anthropic cache_control breakpoints on its views "
        "(config cache_breakpoints: anthropic); the provider then bills its cache by "
        "Anthropic's breakpoint rules",
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        help="keep the managed run's session in a durable store (sqlite:///demo.db, "
        "postgresql://...); see it with 'contextfold sessions list URL'",
    )
    replay = commands.add_parser(
        "replay",
        help="show what context-fold sends at every request of a recorded conversation",
        description=(
            "Replay a recorded conversation one message at a time, asking context-fold for a\n"
            "view before every assistant message and once at the end, as an orchestrator would.\n"
            "Each request is reported: tokens before and after, the compaction level, what was\n"
            "applied, and how much repeats the previous request (what a prompt cache reuses)."
        ),
        epilog=_REPLAY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("file", metavar="FILE", help="the conversation (JSON, Anthropic, JSONL)")
    replay.add_argument(
        "--format",
        choices=("auto", "json", "anthropic", "jsonl"),
        default="auto",
        help="the file's format (default: detect from the content)",
    )
    replay.add_argument(
        "--window",
        type=positive_int,
        metavar="TOKENS",
        help="the model's context window in tokens (default: none; the budget then comes from "
        "max_tokens, else max_tokens_fallback=200000)",
    )
    replay.add_argument(
        "--max-output-tokens",
        type=positive_int,
        default=4096,
        metavar="TOKENS",
        help="the model's output reserve, with --window (default 4096)",
    )
    replay.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_MAX_INPUT_BYTES,
        metavar="BYTES",
        help=f"refuse a conversation file larger than this (default {DEFAULT_MAX_INPUT_BYTES:,}"
        ", 256 MiB); only regular files are read, never a FIFO, device or directory",
    )
    replay.add_argument(
        "--config",
        metavar="FILE",
        help="module config as TOML or YAML (flat, or under a [config] table)",
    )
    replay.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="set one config key (repeatable; applied after --config)",
    )
    _add_output_options(replay, "replay-<file>-<timestamp>")
    replay.add_argument(
        "--html",
        action="store_true",
        help="also write inspector.html: one self-contained page with the timeline, the "
        "compactions and every request's view (opens offline in any browser)",
    )
    from contextfold.cli.eval_parser import add_eval_parser
    from contextfold.cli.sessions import add_sessions_parser

    add_sessions_parser(commands)
    add_eval_parser(commands)
    replay.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print the totals only, not every request, and no progress bar",
    )
    return parser


def _add_output_options(parser: argparse.ArgumentParser, folder: str) -> None:
    parser.add_argument(
        "--out",
        metavar="DIR",
        help=f"folder for the chart and JSON (default ./contextfold-out/{folder}/); not empty "
        "and not a symlink, and no file in it is written through a symlink",
    )
    parser.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")


def _only_charts_missing() -> bool:
    """matplotlib (the [charts] extra) is missing, and what the command needs besides is
    there: the note about the chart is worth saying only for a command that can run."""
    needed = ("amplifier_core", "rich", "yaml")
    if any(importlib.util.find_spec(name) is None for name in needed):
        return False
    return importlib.util.find_spec("matplotlib") is None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    if not getattr(args, "no_chart", True) and _only_charts_missing():
        # Charts are the [charts] extra's: without it a command still runs and says so.
        print(
            "contextfold: no chart: matplotlib is not installed (install contextfold with its "
            "[charts] extra, from a checkout: pip install '.[charts]')",
            file=sys.stderr,
        )
        args.no_chart = True
    try:
        if args.command == "demo":
            from contextfold.cli.commands import run_demo_command

            return run_demo_command(args)
        if args.command == "sessions":
            from contextfold.cli.sessions import run_sessions

            return run_sessions(args)
        if args.command == "eval":
            from contextfold.cli.eval_command import run_eval_command

            return run_eval_command(args)
        from contextfold.cli.commands import run_replay_command

        return run_replay_command(args)
    except OutputError as error:
        print(f"contextfold: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("contextfold: interrupted", file=sys.stderr)
        return 130
