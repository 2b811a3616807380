"""``contextfold eval``: read the inputs, replay them through the policies, print a table per
window, write eval.json (every request and every policy's totals) and eval.png."""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from contextfold.cli.config import load_config_file
from contextfold.cli.errors import EXIT_OK, InputError
from contextfold.cli.files import check_output_option, display_path
from contextfold.cli.output import fail, progress_bar
from contextfold.cli.readers import read_conversation
from contextfold.cli.report import output_folder, write_json
from contextfold.errors import ConfigError
from contextfold.evaluation import (
    BUILTIN_POLICIES,
    COLUMNS,
    DEFAULT_WINDOWS,
    CorpusSettings,
    EvalConversation,
    EvalInputError,
    EvalReport,
    EvalSettings,
    FactRule,
    Policy,
    builtin_policy,
    config_policy,
    evaluate,
    generate_corpus,
)
from contextfold.evaluation.bfcl import bfcl_available, bfcl_sessions
from contextfold.evaluation.export import report_dict
from contextfold.evaluation.metrics import ANSWERED, usd
from contextfold.evaluation.runner import PRICING_NAMES

FILES_CORPUS = "files"
BFCL_INSTALL = "bfcl-eval is not installed (pip install --no-deps bfcl-eval mpmath)"
# Columns of the printout when stdout is not a terminal: every measure on one line per policy.
EVAL_WIDTH = 230


def run_eval_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    notes: list[str] = []
    try:
        check_output_option(args.out)
        policies = _policies(args)
        conversations, inputs = _inputs(args, notes)
        settings = EvalSettings(
            windows=tuple(dict.fromkeys(args.window or DEFAULT_WINDOWS)),
            rule=FactRule(near_turns=args.near_turns),
            inspect=args.html,
        )
        runs = len(conversations) * len(policies) * len(settings.windows)
        with _context_logs_muted(), _progress(runs, quiet=args.quiet) as on_progress:
            report = evaluate(conversations, policies, settings, on_progress=on_progress)
    except InputError as error:
        return fail(str(error))
    except EvalInputError as error:
        return fail(f"{error.conversation}, {error.place}: {error.problem}")
    seconds = time.monotonic() - started

    try:
        folder = output_folder(args.out, "eval")
        data = {"inputs": inputs, "seconds": round(seconds, 1)} | report_dict(report)
        json_path = write_json(folder / "eval.json", data)
        chart_path = None
        if not args.no_chart:
            from contextfold.cli.eval_chart import write_eval_chart

            chart_path = write_eval_chart(folder / "eval.png", report)
        page_path = None
        if args.html:
            from contextfold.cli.inspector_page import eval_runs, write_inspector_page

            page_path = write_inspector_page(
                folder / "inspector.html", "contextfold eval", eval_runs(report)
            )
    except InputError as error:
        return fail(str(error))

    console = Console(highlight=False, width=None if sys.stdout.isatty() else EVAL_WIDTH)
    for window in settings.windows:
        console.print(eval_table(report, window))
    for line in [*summary_lines(report), *notes]:
        console.print(line)
    console.print(f"{runs} runs in {seconds:.0f} s")
    console.print(f"numbers: {json_path}")
    if chart_path is not None:
        console.print(f"chart:   {chart_path}")
    if page_path is not None:
        console.print(f"page:    {page_path}")
    return EXIT_OK


def eval_table(report: EvalReport, window: int) -> Table:
    """One window: a row per corpus and policy, a column per measure (`metrics.COLUMNS`)."""
    table = Table(
        title=f"window {window:,} tokens",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
    )
    table.add_column("corpus", no_wrap=True)
    table.add_column("policy", no_wrap=True)
    for column in COLUMNS:
        # Headers over two lines ("far" over "in view"), so a row stays one line wide.
        header = (
            column.header.replace(": ", "\n")
            if ": " in column.header
            else (column.header.replace(" ", "\n", 1))
        )
        width = max(map(len, header.splitlines()))
        table.add_column(header, justify="right", min_width=width)
    for number, corpus in enumerate(report.corpora):
        if number:
            table.add_section()
        for row, totals in enumerate(report.totals_for(corpus, window)):
            table.add_row(
                corpus if row == 0 else "",
                totals.label,
                *(column.text(totals) for column in COLUMNS),
            )
    return table


def summary_lines(report: EvalReport) -> list[str]:
    """What the tables count, corpus by corpus, and what the categories mean."""
    lines = []
    for corpus in report.corpora:
        s = report.corpus_summary(corpus)
        lines.append(
            f"{corpus}: {s['conversations']} sessions, {s['messages']:,} messages, "
            f"{s['requests']:,} requests; facts: {s['far_facts']:,} far, "
            f"{s['near_facts']:,} near (current task or last {report.settings.rule.near_turns}"
            " turns)"
        )
    for totals in report.totals:
        if totals.summary_requests:
            costs = ", ".join(
                f"{usd(totals.summary_cost(name) or 0.0)} at {name}'s prices"
                for name in PRICING_NAMES
            )
            lines.append(
                f"{totals.label}, {totals.corpus}, {totals.window:,} tokens: "
                f"{totals.summary_requests:,} summary requests, {costs} (in its cost)"
            )
    compared = ", ".join(policy.label for policy in report.policies)
    answered = "; ".join(
        f"{corpus} {window:,}: {found[0].answered_requests:,} of {found[0].requests:,}"
        for corpus in report.corpora
        for window in report.settings.windows
        if (found := report.totals_for(corpus, window))
    )
    lines.append(
        f"{ANSWERED}: tokens sent and cost on the requests every policy compared here "
        f"({compared}) answered, the same requests for each ({answered}); the raw totals "
        "count every request a policy answered, and a refused request sends nothing."
    )
    searching = any(t.offers_search for t in report.totals)
    lines.append(
        "in view: the value is in a message of the view; ledger/summary: only in the "
        "policy's notice or summary; recoverable: the view names the recall id of a message "
        "holding it, or a search with the task's words finds one in its top "
        f"{report.settings.search_limit} (search: {'yes' if searching else 'n/a'}); "
        "lost: none of these, or the request was refused."
    )
    return lines


def _policies(args: argparse.Namespace) -> list[Policy]:
    chosen = [builtin_policy(name) for name in dict.fromkeys(args.policy or BUILTIN_POLICIES)]
    keys = {policy.key for policy in chosen}
    for path in args.config:
        config = load_config_file(path)
        key = _unique(_config_key(Path(path).stem), keys)
        keys.add(key)
        try:
            chosen.append(config_policy(key, config))
        except ConfigError as error:
            raise InputError(display_path(path), str(error)) from None
    return chosen


def _config_key(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "config"


def _unique(key: str, taken: set[str]) -> str:
    candidate, serial = key, 2
    while candidate in taken:
        candidate, serial = f"{key}-{serial}", serial + 1
    return candidate


def _inputs(
    args: argparse.Namespace, notes: list[str]
) -> tuple[list[EvalConversation], list[dict[str, Any]]]:
    """The conversations to replay, and how each input was made (for the JSON)."""
    conversations: list[EvalConversation] = []
    inputs: list[dict[str, Any]] = []
    for path in args.files:
        read = read_conversation(path, args.format, max_bytes=args.max_bytes)
        conversations.append(
            EvalConversation(read.source, FILES_CORPUS, read.messages, read.places)
        )
        inputs.append({"file": read.source, "format": read.format, "messages": len(read.messages)})
    corpora = args.corpus or ([] if args.files else ["long-horizon", "bfcl"])
    for corpus in dict.fromkeys(corpora):
        if corpus == "long-horizon":
            settings = CorpusSettings(seed=args.seed, sessions=args.sessions)
            conversations.extend(generate_corpus(settings))
            inputs.append({"corpus": corpus, "seed": args.seed, "sessions": args.sessions})
            continue
        if not bfcl_available():
            if args.corpus:  # asked for by name: say so and stop
                raise InputError("--corpus bfcl", BFCL_INSTALL)
            notes.append(f"bfcl: not replayed, {BFCL_INSTALL}")
            continue
        sessions = bfcl_sessions(chain=args.bfcl_chain, limit=args.bfcl_limit)
        conversations.extend(sessions)
        inputs.append(
            {
                "corpus": sessions[0].corpus if sessions else "bfcl",
                "category": "long_context",
                "chain": args.bfcl_chain,
                "limit": args.bfcl_limit,
            }
        )
    if not conversations:
        raise InputError("eval", "nothing to replay: give FILEs or a --corpus")
    return conversations, inputs


@contextmanager
def _context_logs_muted() -> Iterator[None]:
    """contextfold's own warnings (a summary that did not fit, a margin waived) are part of
    what a policy did, not news for the reader of the tables."""
    logger = logging.getLogger("contextfold")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


@contextmanager
def _progress(total: int, *, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    with progress_bar(total, "runs", shown=not quiet) as on_done:
        yield None if on_done is None else lambda done, _total: on_done(done)
