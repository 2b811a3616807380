"""The two subcommands: turn parsed options into a run, a printout and files on disk."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from itertools import compress
from pathlib import Path
from typing import Any

from amplifier_core.llm_errors import ContextLengthError
from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from contextfold.amplifier.doc_tool import MIN_RESULT_CHARS
from contextfold.cli.chart import Series, write_size_chart
from contextfold.cli.config import load_config_file, parse_overrides
from contextfold.cli.demo import (
    DemoDoesNotFit,
    DemoResult,
    DemoSettings,
    RunSummary,
    demo_runs,
    run_demo,
)
from contextfold.cli.errors import (
    EXIT_DOES_NOT_FIT,
    EXIT_OK,
    MIN_DEMO_WINDOW,
    InputError,
)
from contextfold.cli.files import check_output_option, display_path
from contextfold.cli.inspector_page import demo_run, replay_run, write_inspector_page
from contextfold.cli.output import fail, progress_bar, stdout_guarded
from contextfold.cli.readers import read_conversation
from contextfold.cli.replay import ReplayError, ReplayResult, _row_columns, replay_messages
from contextfold.cli.report import (
    demo_table,
    output_folder,
    replay_heading,
    replay_rows_table,
    replay_totals_table,
    write_json,
)
from contextfold.config import ContextConfig
from contextfold.errors import ConfigError
from contextfold.prices import PROVIDER_LABELS, REFERENCE_PRICING

UNMANAGED_COLOR = "#7b1fa2"
MANAGED_COLOR = "#1565c0"
SUMMARIZE_COLOR = "#2e7d32"
SERVER_EDITING_COLOR = "#ef6c00"
DEMO_WIDTH = 160  # columns of the demo's printout when stdout is not a terminal
# A replay this long shows a progress bar (on a terminal, without --quiet); shorter ones end
# before a bar would be worth drawing.
PROGRESS_MIN_MESSAGES = 5_000
# -- demo ------------------------------------------------------------------------------------


def run_demo_command(args: argparse.Namespace) -> int:
    if args.window < MIN_DEMO_WINDOW:
        return fail(
            f"--window {args.window} is too small: the model's 1,024-token reply reserve "
            f"leaves no room for the task; use at least {MIN_DEMO_WINDOW}"
        )
    if args.result_chars < MIN_RESULT_CHARS:
        return fail(f"--result-chars must be at least {MIN_RESULT_CHARS}, got {args.result_chars}")
    settings = DemoSettings(
        window=args.window,
        steps=args.steps,
        result_chars=args.result_chars,
        store=args.store,
        tools=args.tools,
        cache_breakpoints=args.cache_breakpoints,
    )
    try:
        check_output_option(args.out)
        if args.store is not None:
            _check_store(args.store)
    except InputError as error:
        return fail(str(error))

    # Four runs side by side need about 125 columns; a terminal's own width is kept.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else DEMO_WIDTH)
    labels = {spec.key: spec.label for spec in demo_runs(settings)}
    try:
        with _ProgressBars(labels, settings.steps + 1, quiet=args.quiet) as on_request:
            result = asyncio.run(run_demo(settings, on_request=on_request))
    except DemoDoesNotFit as error:
        return fail(
            f"the task cannot fit a {settings.window:,}-token window even fully compacted; "
            f"raise --window or lower --result-chars. {_first_line(error)}",
            EXIT_DOES_NOT_FIT,
        )

    data = result.to_dict() | {"mount_plans": result.mount_plans()}
    try:
        folder = output_folder(args.out, "demo")
        json_path = write_json(folder / "demo.json", data)
        chart_path = None if args.no_chart else _demo_chart(result, folder / "requests.png")
        page_path = None
        page_run = demo_run(result)
        if page_run is not None:
            page_path = write_inspector_page(
                folder / "inspector.html", "contextfold demo: with context-fold", [page_run]
            )
    except InputError as error:
        return fail(str(error))

    with stdout_guarded():
        console.print(demo_table(result))
        console.print(_demo_verdict(result))
        for note in result.notes:
            console.print(note)
        _print_outputs(console, json_path, chart_path, folder, page_path)
    return EXIT_OK


def _print_outputs(
    console: Any,
    json_path: Path,
    chart_path: Path | None,
    folder: Path,
    page_path: Path | None = None,
) -> None:
    """Where a command wrote its numbers, chart and page, as the last lines it prints."""
    console.print(f"numbers: {json_path}")
    if chart_path is not None:
        console.print(f"chart:   {chart_path}")
    if page_path is not None:
        console.print(f"page:    {page_path}")
    console.print(f"output folder: {folder}")


class _ProgressBars:
    """A progress bar per run, advanced per model request; silent when quiet or not a tty."""

    def __init__(self, labels: dict[str, str], total: int, *, quiet: bool) -> None:
        self.labels = labels
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
        for key, label in self.labels.items():
            self.tasks[key] = self.bar.add_task(label, total=self.total)

        def on_request(run: str) -> None:
            self.bar.advance(self.tasks[run])

        return on_request

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


def _demo_chart(result: DemoResult, path: Path) -> Path:
    unmanaged, managed = result.unmanaged, result.managed
    series = [
        Series(unmanaged.label, [p.tokens for p in unmanaged.points], UNMANAGED_COLOR, dashed=True)
    ]
    colors = {"summarize": SUMMARIZE_COLOR, "clear_tool_uses": SERVER_EDITING_COLOR}
    for run in result.runs[1:]:
        color = colors.get(run.key, MANAGED_COLOR)
        series.append(
            Series(
                run.label,
                [p.tokens for p in run.points],
                color,
                marks=[i for i, p in enumerate(run.points) if p.compacted],
            )
        )
    return write_size_chart(
        path,
        series,
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
    if result.settings.tools:
        served = managed.requests - managed.refused
        legacy = (
            f"let {unmanaged.refused} request(s) over the window (refused by the provider, "
            "then refitted)"
            if unmanaged.refused
            else "kept every request inside the window (it learns the schemas' size from usage)"
        )
        return (
            f"With {result.settings.tools} tools whose schemas ride on every request, the "
            f"message-only budget {legacy}, its largest request {unmanaged.largest_request:,} "
            f"tokens after {unmanaged.compactions} compactions; the measured request let "
            f"{managed.refused} over, its largest {managed.largest_request:,} after "
            f"{managed.compactions} compactions, with {managed.count_calls} whole-request "
            f"counts for {served} requests ({managed.count_calls / max(1, served):.2f} per "
            "request)."
        )
    fits = managed.largest_request <= managed.input_limit
    verdict = (
        f"Without compaction the largest request was {unmanaged.largest_request:,} tokens, "
        f"{unmanaged.largest_request / managed.input_limit:.1f}x the input limit. "
        f"With context-fold it was {managed.largest_request:,} "
        f"({'inside' if fits else 'OVER'} the limit) after {managed.compactions} compactions, "
        f"and the history still holds all {managed.history_messages} messages."
    )
    threshold = result.run("threshold")
    if threshold is not None:
        verdict += "\n" + _threshold_verdict(threshold, managed)
    summarized = result.summarized
    if summarized is not None:
        verdict += "\n" + _summarize_verdict(summarized, unmanaged)
    edited = result.server_edited
    if edited is not None:
        verdict += "\n" + _server_editing_verdict(edited)
    return verdict + "\n" + _cost_verdict(result)


def _threshold_verdict(run: RunSummary, managed: RunSummary) -> str:
    fits = run.largest_request <= run.input_limit
    changes = ", ".join(
        f"{(managed.costs[name] - run.costs[name]) / run.costs[name]:+.0%} at "
        f"{PROVIDER_LABELS[name]}'s prices"
        for name in REFERENCE_PRICING
        if run.costs.get(name) and name in managed.costs
    )
    return (
        f"With the threshold planner (compaction at the trigger) the largest request was "
        f"{run.largest_request:,} ({'inside' if fits else 'OVER'} the limit) after "
        f"{run.compactions} compactions; context-fold's defaults, timed and sized by the "
        f"prompt cache's prices, beside it: {changes}."
    )


def _server_editing_verdict(run: RunSummary) -> str:
    cleared = max((p.cleared_tool_uses for p in run.points), default=0)
    fits = run.largest_request <= run.input_limit
    return (
        f"With the provider's clear_tool_uses (the whole history sent, old tool results "
        f"cleared by the server) the largest request was {run.largest_request:,} "
        f"({'inside' if fits else 'OVER'} the limit), up to {cleared} tool results cleared "
        f"per request, {run.refused} refused."
    )


def _cost_verdict(result: DemoResult) -> str:
    """Which run was cheapest at each pricing, and how the others compare with it."""
    parts = []
    for name in REFERENCE_PRICING:
        priced = sorted((run.costs.get(name, 0.0), run.label) for run in result.runs)
        cheapest, label = priced[0]
        parts.append(
            f"at {PROVIDER_LABELS[name]}'s prices the cheapest run was {label} (${cheapest:.4f})"
        )
    breakpoints = " (cache_control breakpoints marked)" if result.settings.cache_breakpoints else ""
    return "Cost" + breakpoints + ": " + "; ".join(parts) + "."


def _summarize_verdict(run: RunSummary, unmanaged: RunSummary) -> str:
    fits = run.largest_request <= run.input_limit
    saving = 1 - run.total_tokens / unmanaged.total_tokens if unmanaged.total_tokens else 0.0
    summary_cost = ", ".join(
        f"${usd:.4f} at {name}'s prices" for name, usd in run.summary_costs.items()
    )
    if run.summary_aligned:
        summary_cost += (
            f"; {run.summary_aligned} of them repeated the conversation's prompt, "
            f"{run.summary_cache_read_tokens:,} tokens read from the cache"
        )
    recall = (
        f"{run.recall_identical} of {run.recall_checked} tool results came back byte-identical "
        "when recalled by id"
    )
    return (
        f"With the summarize ladder the largest request was {run.largest_request:,} "
        f"({'inside' if fits else 'OVER'} the limit); {run.summary_calls} summarizer calls "
        f"wrote {run.summaries_written} summaries and {run.summaries_reused} were reused, "
        f"costing {run.summary_tokens:,} tokens ({summary_cost}), counted in its total "
        f"({saving:.0%} below the run without compaction); {recall}."
    )


# -- replay ----------------------------------------------------------------------------------


def run_replay_command(args: argparse.Namespace) -> int:
    # The command reads, replays and reports one conversation and exits: everything it
    # builds lives to the end, so the cyclic collector would only walk it again and again
    # (a fifth of a million-message replay) to find next to nothing (measured: the same peak
    # memory either way).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _replay_command(args)
    finally:
        if collecting:
            gc.enable()


def _replay_command(args: argparse.Namespace) -> int:
    source = display_path(args.file)
    try:
        check_output_option(args.out)
        config, settings = _replay_config(args)
        conversation = read_conversation(args.file, args.format, max_bytes=args.max_bytes)
        if args.window is not None and args.max_output_tokens >= args.window:
            raise InputError(
                "--max-output-tokens",
                f"{args.max_output_tokens} must be below --window {args.window}",
            )
        total = len(conversation.messages)
        with _replay_progress(total, quiet=args.quiet) as on_progress:
            result = replay_messages(
                conversation.messages,
                config,
                args.window,
                max_output_tokens=args.max_output_tokens,
                places=conversation.places,
                on_progress=on_progress,
                inspect=args.html,
            )
    except InputError as error:
        return fail(str(error))
    except ReplayError as error:
        return fail(f"{source}, {error}")
    except ContextLengthError as error:
        return fail(f"{source}: does not fit: {_first_line(error)}", EXIT_DOES_NOT_FIT)

    # What the command keeps is let go before the chart is drawn: the messages here, the
    # report's data once written, the rows once the printout and the chart's lines are made
    # of them. matplotlib's parsers leave exception tracebacks in reference cycles, and a
    # traceback keeps every frame below it alive with its locals until the collector runs
    # (off during the command), which then walked a million messages and their copies.
    replayed, file_format = conversation.source, conversation.format
    del conversation
    try:
        folder = output_folder(args.out, f"replay-{_folder_safe(Path(args.file).stem)}")
        data = (
            {"source": replayed, "format": file_format, "effective_config": config.to_dict()}
            | result.to_dict()
            | {"config": settings}
        )
        json_path = write_json(folder / "replay.json", data)
        del data
        page_path = None
        if args.html:
            page_path = write_inspector_page(
                folder / "inspector.html",
                f"contextfold replay: {Path(replayed).name}",
                [replay_run(result, Path(replayed).name)],
            )
        printout: list[RenderableType] = [replay_heading(result, replayed, file_format)]
        if not args.quiet:
            printout.append(replay_rows_table(result))
        printout.append(replay_totals_table(result))
        chart = None if args.no_chart else _replay_chart(result, replayed)
        del result
        chart_path = None if chart is None else write_size_chart(folder / "requests.png", **chart)
    except InputError as error:
        return fail(str(error))

    with stdout_guarded():
        console = Console(highlight=False)
        for part in printout:
            console.print(part)
        _print_outputs(console, json_path, chart_path, folder, page_path)
    return EXIT_OK


def _folder_safe(name: str) -> str:
    """A file's stem as part of a folder name: printable ASCII, no surprises in a shell."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "conversation"


def _replay_progress(
    total: int, *, quiet: bool
) -> AbstractContextManager[Callable[[int], None] | None]:
    """A progress bar over admitted messages for a long replay, on a terminal only."""
    return progress_bar(total, "messages", shown=not quiet and total >= PROGRESS_MIN_MESSAGES)


def _replay_config(args: argparse.Namespace) -> tuple[ContextConfig, dict[str, Any]]:
    """File config, then ``--set`` overrides, validated once (so a config warning prints once).

    Returns the checked config and the keys as given (recorded in the JSON). When the merged
    config is refused, the file is checked on its own to say where the bad value came from.
    """
    file_config: dict[str, Any] = load_config_file(args.config) if args.config else {}
    overrides = parse_overrides(args.overrides)
    merged = file_config | overrides
    try:
        return ContextConfig.from_mapping(merged), merged
    except ConfigError as error:
        problem = str(error)
    if args.config:
        try:
            with _config_warnings_muted():  # already printed by the check above
                ContextConfig.from_mapping(file_config)
        except ConfigError as error:
            raise InputError(display_path(args.config), str(error)) from None
    shown = " ".join(f"{key}={value!r}" for key, value in overrides.items())
    raise InputError(f"--set {shown}".rstrip(), problem)


@contextmanager
def _config_warnings_muted() -> Iterator[None]:
    logger = logging.getLogger(ContextConfig.__module__)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def _replay_chart(result: ReplayResult, source: str) -> dict[str, Any]:
    """The replay's chart: what `write_size_chart` is given, but the path."""
    history, sent, compacted = _row_columns(
        result.rows, "history_tokens", "tokens_after", "compacted"
    )
    window, budget = result.window, result.totals.budget
    # Without a window the budget is the only limit there is, so it takes the window's line.
    limit_label = f"context window ({window:,})" if window else f"budget ({budget:,})"
    return dict(
        series=[
            Series(
                "full history (no compaction)",
                history,
                UNMANAGED_COLOR,
                dashed=True,
            ),
            Series(
                "sent by context-fold",
                sent,
                MANAGED_COLOR,
                marks=list(compress(range(len(compacted)), compacted)),
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


# -- sessions ----------------------------------------------------------------------------------


def _check_store(url: str) -> None:
    from contextfold.store.base import StoreError
    from contextfold.store.urls import store_from_url

    try:
        store_from_url(url)
    except StoreError as error:
        raise InputError("--store", str(error)) from None
