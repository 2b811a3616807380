"""The two subcommands: turn parsed options into a run, a printout and files on disk."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from amplifier_core.llm_errors import ContextLengthError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from contextfold import ConfigError, ContextConfig
from contextfold.amplifier.doc_tool import MIN_RESULT_CHARS
from contextfold.cli import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_OK
from contextfold.cli.chart import Series, write_size_chart
from contextfold.cli.config import load_config_file, parse_overrides
from contextfold.cli.demo import DemoDoesNotFit, DemoResult, DemoSettings, mount_plan, run_demo
from contextfold.cli.readers import InputError, read_conversation
from contextfold.cli.replay import ReplayError, ReplayResult, replay_messages
from contextfold.cli.report import (
    check_output_option,
    demo_table,
    output_folder,
    replay_heading,
    replay_rows_table,
    replay_totals_table,
    write_json,
)

MIN_DEMO_WINDOW = 6_000
UNMANAGED_COLOR = "#7b1fa2"
MANAGED_COLOR = "#1565c0"


def fail(message: str, status: int = EXIT_BAD_INPUT) -> int:
    """Print one line on stderr and return the exit status."""
    print(f"contextfold: error: {message}", file=sys.stderr)
    return status


# -- demo ------------------------------------------------------------------------------------


def run_demo_command(args: argparse.Namespace) -> int:
    if args.window < MIN_DEMO_WINDOW:
        return fail(
            f"--window {args.window} is too small: context-fold keeps a 4,096-token safety "
            f"margin and half the reply reserve out of the budget; use at least {MIN_DEMO_WINDOW}"
        )
    if args.result_chars < MIN_RESULT_CHARS:
        return fail(f"--result-chars must be at least {MIN_RESULT_CHARS}, got {args.result_chars}")
    settings = DemoSettings(window=args.window, steps=args.steps, result_chars=args.result_chars)
    try:
        check_output_option(args.out)
    except InputError as error:
        return fail(str(error))

    console = Console(highlight=False)
    try:
        with _ProgressBars(settings.steps + 1, quiet=args.quiet) as on_request:
            result = asyncio.run(run_demo(settings, on_request=on_request))
    except DemoDoesNotFit as error:
        return fail(
            f"the task cannot fit a {settings.window:,}-token window even fully compacted; "
            f"raise --window or lower --result-chars. {_first_line(error)}",
            EXIT_DOES_NOT_FIT,
        )

    try:
        folder = output_folder(args.out, "demo")
    except InputError as error:
        return fail(str(error))
    data = result.to_dict() | {
        "mount_plans": {
            "unmanaged": mount_plan(settings, managed=False),
            "managed": mount_plan(settings, managed=True),
        }
    }
    json_path = write_json(folder / "demo.json", data)
    chart_path = None if args.no_chart else _demo_chart(result, folder / "requests.png")

    console.print(demo_table(result))
    console.print(_demo_verdict(result))
    _print_outputs(console, json_path, chart_path, folder)
    return EXIT_OK


def _print_outputs(console: Any, json_path: Path, chart_path: Path | None, folder: Path) -> None:
    """Where a command wrote its numbers and chart, as the last lines it prints."""
    console.print(f"numbers: {json_path}")
    if chart_path is not None:
        console.print(f"chart:   {chart_path}")
    console.print(f"output folder: {folder}")


class _ProgressBars:
    """A progress bar per run, advanced per model request; silent when quiet or not a tty."""

    def __init__(self, total: int, *, quiet: bool) -> None:
        self.total = total
        self.bar = Progress(
            TextColumn("{task.description:<20}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("requests"),
            console=Console(stderr=True),
            transient=True,
            disable=quiet,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> Any:
        self.bar.start()
        labels = {"unmanaged": "without compaction", "managed": "with context-fold"}
        for key, label in labels.items():
            self.tasks[key] = self.bar.add_task(label, total=self.total)

        def on_request(run: str) -> None:
            self.bar.advance(self.tasks[run])

        return on_request

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


def _demo_chart(result: DemoResult, path: Path) -> Path:
    unmanaged, managed = result.unmanaged, result.managed
    return write_size_chart(
        path,
        [
            Series(
                unmanaged.label, [p.tokens for p in unmanaged.points], UNMANAGED_COLOR, dashed=True
            ),
            Series(
                managed.label,
                [p.tokens for p in managed.points],
                MANAGED_COLOR,
                marks=[i for i, p in enumerate(managed.points) if p.compacted],
            ),
        ],
        window=managed.input_limit,
        window_label=(
            f"input limit ({managed.input_limit:,} = {result.settings.window:,} window "
            f"- {result.settings.max_output_tokens:,} output)"
        ),
        trigger=managed.trigger,
        title=(
            f"contextfold demo: {result.settings.steps} tool-using steps, "
            f"{result.settings.window:,}-token window"
        ),
        y_label="request size (tokens, as the provider counts them)",
    )


def _demo_verdict(result: DemoResult) -> str:
    managed, unmanaged = result.managed, result.unmanaged
    fits = managed.largest_request <= managed.input_limit
    return (
        f"Without compaction the largest request was {unmanaged.largest_request:,} tokens, "
        f"{unmanaged.largest_request / managed.input_limit:.1f}x the input limit. "
        f"With context-fold it was {managed.largest_request:,} "
        f"({'inside' if fits else 'OVER'} the limit) after {managed.compactions} compactions, "
        f"and the history still holds all {managed.history_messages} messages."
    )


# -- replay ----------------------------------------------------------------------------------


def run_replay_command(args: argparse.Namespace) -> int:
    try:
        check_output_option(args.out)
        config = _replay_config(args)
        conversation = read_conversation(args.file, args.format)
        if args.window is not None and args.max_output_tokens >= args.window:
            raise InputError(
                "--max-output-tokens",
                f"{args.max_output_tokens} must be below --window {args.window}",
            )
        result = replay_messages(
            conversation.messages,
            config,
            args.window,
            max_output_tokens=args.max_output_tokens,
            places=conversation.places,
        )
    except InputError as error:
        return fail(str(error))
    except ReplayError as error:
        return fail(f"{args.file}, {error}")
    except ContextLengthError as error:
        return fail(f"{args.file}: does not fit: {_first_line(error)}", EXIT_DOES_NOT_FIT)

    try:
        folder = output_folder(args.out, f"replay-{Path(args.file).stem}")
    except InputError as error:
        return fail(str(error))
    data = {
        "source": conversation.source,
        "format": conversation.format,
        "effective_config": ContextConfig.from_mapping(config).to_dict(),
    } | result.to_dict()
    json_path = write_json(folder / "replay.json", data)
    chart_path = (
        None
        if args.no_chart
        else _replay_chart(result, conversation.source, folder / "requests.png")
    )

    console = Console(highlight=False)
    console.print(replay_heading(result, conversation.source, conversation.format))
    if not args.quiet:
        console.print(replay_rows_table(result))
    console.print(replay_totals_table(result))
    _print_outputs(console, json_path, chart_path, folder)
    return EXIT_OK


def _replay_config(args: argparse.Namespace) -> dict[str, Any]:
    """File config, then ``--set`` overrides, each validated so an error names its source."""
    config: dict[str, Any] = {}
    if args.config:
        config = load_config_file(args.config)
        try:
            ContextConfig.from_mapping(config)
        except ConfigError as error:
            raise InputError(args.config, str(error)) from None
    overrides = parse_overrides(args.overrides)
    merged = config | overrides
    try:
        ContextConfig.from_mapping(merged)
    except ConfigError as error:
        shown = " ".join(f"{key}={value!r}" for key, value in overrides.items())
        raise InputError(f"--set {shown}".rstrip(), str(error)) from None
    return merged


def _replay_chart(result: ReplayResult, source: str, path: Path) -> Path:
    rows = result.rows
    window, budget = result.window, result.totals.budget
    # Without a window the budget is the only limit there is, so it takes the window's line.
    limit_label = f"context window ({window:,})" if window else f"budget ({budget:,})"
    return write_size_chart(
        path,
        [
            Series(
                "full history (no compaction)",
                [r.history_tokens for r in rows],
                UNMANAGED_COLOR,
                dashed=True,
            ),
            Series(
                "sent by context-fold",
                [r.tokens_after for r in rows],
                MANAGED_COLOR,
                marks=[i for i, r in enumerate(rows) if r.compacted],
            ),
        ],
        window=window or budget,
        window_label=limit_label,
        trigger=result.totals.trigger,
        budget=budget if window else None,
        title=f"contextfold replay: {Path(source).name}",
        y_label="request size (tokens, context-fold's estimate)",
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
