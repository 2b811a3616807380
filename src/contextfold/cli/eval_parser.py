"""The options of ``contextfold eval`` (the standard library only, so --help stays instant)."""

from __future__ import annotations

import argparse
from typing import Any

from contextfold.cli.numbers import whole_number

# Mirrors of the library's defaults (not imported: that would load the context manager
# for --help); test_cli_eval holds them equal.
DEFAULT_WINDOWS = (4_000, 8_000, 16_000)
DEFAULT_SESSIONS = 8
DEFAULT_NEAR_TURNS = 10
DEFAULT_BFCL_CHAIN = 5
BUILTIN_POLICY_NAMES = (
    "naive",
    "masking",
    "context-simple",
    "clear-tool-uses",
    "contextfold",
    "summarize",
    "threshold",
)
CORPORA = ("long-horizon", "bfcl")

_EPILOG = """\
inputs: FILEs as 'contextfold replay' reads them (JSON, Anthropic, JSONL), and the built-in
corpora: long-horizon (our own generated sessions: 8-10 tool-using tasks back to back, later
tasks needing ids, amounts, paths and emails found dozens of turns earlier) and bfcl (the
Berkeley Function Calling Leaderboard's long_context category, 5 conversations chained per
session; needs the bfcl-eval package). Without FILEs both corpora run; with FILEs, only the
files and the corpora named with --corpus.

policies: naive (drop the oldest whole turns and call groups until the view fits),
masking (older tool results replaced by a stub, the last 10 kept; then drop oldest),
context-simple (Amplifier's reference module's eight-level ladder), contextfold (its
defaults), summarize (contextfold with the summarize ladder and the offline summarizer);
--config FILE adds contextfold with that config (TOML or YAML, as 'replay --config').

scores: at every model request, each value the next step needs (by the fact rule in
docs/eval.md) is in view, in the view's ledger or summary, recoverable (the view names its
source's recall id, or a search with the task's words finds it) or lost; near (current task
or last 10 turns) and far facts apart. Also tokens sent, prefix-cache share, refusals and
views over the window by exact o200k recount.

example:
  contextfold eval --window 8000 --policy naive --policy contextfold"""


def add_eval_parser(commands: Any) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="score what each policy keeps of what the next step needs, request by request",
        description=(
            "Replay conversations through policies (naive drop-oldest, observation masking,\n"
            "context-simple, contextfold configurations) and score, at every model request,\n"
            "where each fact the next step needs stands in the view sent."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "files", nargs="*", metavar="FILE", help="recorded conversations (JSON, Anthropic, JSONL)"
    )
    evaluate.add_argument(
        "--format",
        choices=("auto", "json", "anthropic", "jsonl"),
        default="auto",
        help="the FILEs' format (default: detect from the content)",
    )
    evaluate.add_argument(
        "--corpus",
        action="append",
        choices=CORPORA,
        metavar="NAME",
        help="a built-in corpus to replay: long-horizon or bfcl (repeatable; default: both "
        "when no FILE is given)",
    )
    evaluate.add_argument(
        "--sessions",
        type=_positive_int,
        default=DEFAULT_SESSIONS,
        metavar="N",
        help=f"long-horizon sessions to generate (default {DEFAULT_SESSIONS})",
    )
    evaluate.add_argument(
        "--seed",
        type=_whole_number,
        default=0,
        metavar="N",
        help="the long-horizon corpus's seed (default 0; the same seed, the same sessions)",
    )
    evaluate.add_argument(
        "--bfcl-limit",
        type=_positive_int,
        metavar="N",
        help="replay only the first N BFCL conversations (default: all 200)",
    )
    evaluate.add_argument(
        "--bfcl-chain",
        type=_positive_int,
        default=DEFAULT_BFCL_CHAIN,
        metavar="N",
        help=f"BFCL conversations chained into one session (default {DEFAULT_BFCL_CHAIN})",
    )
    evaluate.add_argument(
        "--window",
        action="append",
        type=_positive_int,
        metavar="TOKENS",
        help="an input window in tokens, the budget every policy fits its views to "
        "(repeatable; default 4000, 8000 and 16000)",
    )
    evaluate.add_argument(
        "--policy",
        action="append",
        choices=BUILTIN_POLICY_NAMES,
        metavar="NAME",
        help="a built-in policy: " + ", ".join(BUILTIN_POLICY_NAMES) + " (repeatable; default all)",
    )
    evaluate.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="add contextfold with this config (TOML or YAML, flat or under [config]); "
        "repeatable, each shown by its file name",
    )
    evaluate.add_argument(
        "--near-turns",
        type=_whole_number,
        default=DEFAULT_NEAR_TURNS,
        metavar="N",
        help="a fact last seen in the current task or the last N assistant turns is near "
        f"(default {DEFAULT_NEAR_TURNS})",
    )
    evaluate.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=256 * 1024 * 1024,
        metavar="BYTES",
        help="refuse a FILE larger than this (default 268,435,456, 256 MiB)",
    )
    evaluate.add_argument(
        "--out",
        metavar="DIR",
        help="folder for eval.json and eval.png (default ./contextfold-out/eval-<timestamp>/); "
        "not a symlink, and no file in it is written through a symlink",
    )
    evaluate.add_argument("--no-chart", action="store_true", help="do not draw the PNG chart")
    evaluate.add_argument(
        "--html",
        action="store_true",
        help="also write inspector.html: every run's requests, and every view of contextfold's "
        "policies, in one self-contained page (choose the run in its list)",
    )
    evaluate.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def _whole_number(text: str) -> int:
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value
