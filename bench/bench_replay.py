"""Is ``contextfold replay`` linear? Time it on synthetic conversations of short messages.

For each size the same conversation is run twice, side by side:

- **core**: a bare ``ContextFold``: ``add_message`` for every message and a request before
  every assistant message and at the end, exactly the calls the replay makes and nothing else.
  This is the floor: the replay cannot be cheaper. The replay asks for its views through
  ``_request_view_shared`` (the request path without the per-request copy of the view, since
  it only reads them); ``--copying`` times the core through the public
  ``get_messages_for_request`` instead, whose copy costs in proportion to the view.
- **replay**: ``contextfold.cli.replay.replay_messages``, which adds the per-request report row,
  the prefix-reuse measurement and the totals. Its context manager is the real ``ContextFold``
  with a stopwatch around each call, so the replay's **own** time (total minus the time spent
  inside the context manager) is measured in the same run, not estimated by subtraction.

Printed per size: the times, the replay's own time per message, and how each per-message cost
grew against the smallest size (about 1.0x when linear, about N2/N1 when quadratic). Times are
medians of ``--reps`` runs; nothing is asserted about wall-clock time.

    uv run python bench/bench_replay.py                         # 10k, 20k, 100k, 1M messages
    uv run python bench/bench_replay.py --sizes 10000,20000 --reps 3
    uv run python bench/bench_replay.py --window 8000 --json bench/out/replay-speed.json

``--command`` also times the ``contextfold replay`` command itself on each size, end to end:
the conversation is written as a JSONL file and ``contextfold replay FILE -q`` runs in a
child process (through the console script's entry point), reading the file, replaying, and
writing the JSON report and the chart, as a user runs it. Its wall time and peak memory are
printed beside the library replay's in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import contextfold.cli.replay as replay_module
from contextfold import ContextFold
from contextfold.cli.replay import ReplayModel, replay_messages

DEFAULT_SIZES = (10_000, 20_000, 100_000, 1_000_000)
DEFAULT_MAX_OUTPUT_TOKENS = 4096


def short_conversation(size: int) -> list[dict[str, Any]]:
    """``size`` short messages: a system prompt, then rounds of a user question, an assistant
    tool call, its (short) result and a short answer. Deterministic."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    turn = 0
    while len(messages) < size:
        call_id = f"call_{turn}"
        messages.extend(
            [
                {"role": "user", "content": f"What is item {turn}?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"item": {turn}}}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": f"item {turn}: ok"},
                {"role": "assistant", "content": f"Item {turn} is ok."},
            ]
        )
        turn += 1
    # Cut where a tool call has its result, so the conversation stays well formed.
    while messages[size - 1].get("tool_calls"):
        size -= 1
    return messages[:size]


async def core_only(
    messages: list[dict[str, Any]],
    window: int | None,
    max_output_tokens: int,
    copying: bool = False,
) -> None:
    """The context manager's calls a replay makes, and nothing else (``copying``: the public
    request, which copies every view, in place of the replay's own)."""
    context = ContextFold({})
    model = ReplayModel(window, max_output_tokens) if window is not None else None
    request = context.get_messages_for_request if copying else context._request_view_shared
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and index > 0:
            await request(provider=model)
        await context.add_message(dict(message))
    await request(provider=model)
    await (context.get_messages() if copying else context._history_shared())


def _stopwatch(name: str) -> Callable[..., Any]:
    """``ContextFold.<name>``, with the time spent inside it added to
    `TimedContextFold.elapsed`."""
    method = getattr(ContextFold, name)

    async def wrapped(self: ContextFold, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await method(self, *args, **kwargs)
        finally:
            TimedContextFold.elapsed += time.perf_counter() - start

    wrapped.__name__ = name
    return wrapped


class TimedContextFold(ContextFold):
    """The real context manager, with a stopwatch around the calls a replay makes."""

    elapsed = 0.0  # seconds inside the context manager, for the run in progress

    add_message = _stopwatch("add_message")
    get_messages_for_request = _stopwatch("get_messages_for_request")
    _request_view_shared = _stopwatch("_request_view_shared")
    get_messages = _stopwatch("get_messages")
    _history_shared = _stopwatch("_history_shared")


def timed(run: Callable[[], Any], reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        gc.collect()
        gc.disable()  # as timeit does: the collector's pauses are not the code's cost
        try:
            start = time.perf_counter()
            run()
            samples.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return samples


@dataclass(frozen=True)
class Row:
    messages: int
    requests: int
    compactions: int
    core_s: float  # the bare context manager, run alone
    replay_s: float  # the whole replay
    replay_own_s: float  # the replay minus the time inside its context manager
    peak_rss_mb: float  # the process's peak resident memory after this size ran

    @property
    def core_us_per_message(self) -> float:
        return self.core_s / self.messages * 1e6

    @property
    def own_us_per_message(self) -> float:
        return self.replay_own_s / self.messages * 1e6


def measure(size: int, window: int | None, reps: int, copying: bool = False) -> Row:
    messages = short_conversation(size)
    outcome: dict[str, Any] = {}
    inside: list[float] = []

    def replay() -> None:
        TimedContextFold.elapsed = 0.0
        replay_module.ContextFold = TimedContextFold  # type: ignore[misc]
        try:
            outcome["result"] = replay_messages(
                messages, {}, window, max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS
            )
        finally:
            replay_module.ContextFold = ContextFold  # type: ignore[misc]
        inside.append(TimedContextFold.elapsed)

    core = timed(
        lambda: asyncio.run(core_only(messages, window, DEFAULT_MAX_OUTPUT_TOKENS, copying)), reps
    )
    replayed = timed(replay, reps)
    own = [total - core_part for total, core_part in zip(replayed, inside, strict=True)]
    totals = outcome["result"].totals
    return Row(
        len(messages),
        totals.requests,
        totals.compactions,
        statistics.median(core),
        statistics.median(replayed),
        statistics.median(own),
        peak_rss_mb(),
    )


@dataclass(frozen=True)
class CommandRun:
    messages: int
    file_mb: float  # the JSONL file the command read
    wall_s: float  # the whole command: start-up, reading, replay, report, chart
    peak_rss_mb: float  # the child process's peak resident memory


_CONSOLE = "from contextfold.cli.entry import console; console()"


def time_command(size: int, window: int | None) -> CommandRun:
    """``contextfold replay`` on ``size`` short messages, in a child process, end to end."""
    with tempfile.TemporaryDirectory(prefix="contextfold-bench-") as folder:
        path = Path(folder) / f"short-{size}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for message in short_conversation(size):
                out.write(json.dumps(message) + "\n")
        # The console script's entry point, which leaves without interpreter teardown (as
        # the installed ``contextfold`` command does).
        command = [sys.executable, "-c", _CONSOLE, "replay", str(path), "-q"]
        command += ["--out", str(Path(folder) / "out")]
        if window is not None:
            command += ["--window", str(window)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # The largest child so far (sizes run smallest first, so this is this size's peak).
        peak = max(peak, before)
        scale = 1024 * 1024 if sys.platform == "darwin" else 1024
        return CommandRun(size, path.stat().st_size / 1e6, wall, peak / scale)


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (sizes run smallest first, so after
    the largest it is that size's peak: its conversation, history and replay rows together)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def extrapolate(rows: list[Row], size: int) -> float | None:
    """The core-alone time at ``size``, from the growth between the last two sizes measured
    (a power law: exponent 1 when linear, 2 when quadratic); None before two sizes ran."""
    if len(rows) < 2:
        return None
    first, last = rows[-2], rows[-1]
    exponent = math.log(last.core_s / first.core_s) / math.log(last.messages / first.messages)
    return last.core_s * (size / last.messages) ** max(exponent, 1.0)


def _seconds(value: float) -> str:
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def print_table(rows: list[Row]) -> None:
    base = rows[0]
    print(
        "| messages | requests | compactions | core alone | per msg | replay | replay's own "
        "| own per msg | own per msg vs first | core per msg vs first | peak RSS |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.messages:,} | {row.requests:,} | {row.compactions:,} "
            f"| {_seconds(row.core_s)} | {row.core_us_per_message:.1f} µs "
            f"| {_seconds(row.replay_s)} | {_seconds(row.replay_own_s)} "
            f"| {row.own_us_per_message:.1f} µs "
            f"| {row.own_us_per_message / base.own_us_per_message:.2f}x "
            f"| {row.core_us_per_message / base.core_us_per_message:.2f}x "
            f"| {row.peak_rss_mb:,.0f} MiB |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(size) for size in DEFAULT_SIZES),
        help="comma-separated conversation sizes in messages (default 10k, 20k, 100k, 1M)",
    )
    parser.add_argument(
        "--window", type=int, default=None, help="model window in tokens (default: none)"
    )
    parser.add_argument("--reps", type=int, default=1, help="repetitions per size (median)")
    parser.add_argument(
        "--cap",
        type=float,
        default=900.0,
        help="skip a size whose core-alone time extrapolates above this many seconds (default 900)",
    )
    parser.add_argument(
        "--copying",
        action="store_true",
        help="time the core through the public get_messages_for_request, which copies every "
        "view (default: the replay's own request path, which does not)",
    )
    parser.add_argument(
        "--command",
        action="store_true",
        help="also time the contextfold replay command end to end on each size (a JSONL "
        "file, a child process, report and chart written)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = [int(part.replace("_", "")) for part in args.sizes.split(",") if part.strip()]

    print(
        f"contextfold replay speed: Python {platform.python_version()}, "
        f"window {args.window if args.window else 'none (budget 200,000)'}, "
        f"median of {args.reps}, core via "
        f"{'get_messages_for_request' if args.copying else '_request_view_shared'}",
        flush=True,
    )
    # Load the tokenizer and warm the interpreter first, so the smallest size is not charged
    # for one-time start-up and the per-message ratios compare like with like.
    asyncio.run(
        core_only(short_conversation(2_000), args.window, DEFAULT_MAX_OUTPUT_TOKENS, args.copying)
    )
    replay_messages(short_conversation(2_000), {}, args.window)
    rows: list[Row] = []
    commands: list[CommandRun] = []
    for size in sizes:
        estimate = extrapolate(rows, size)
        if estimate is not None and estimate > args.cap:
            print(
                f"  {size:,} messages: skipped; the context manager alone would take about "
                f"{_seconds(estimate)} (extrapolated from the sizes above), over --cap "
                f"{args.cap:,.0f} s",
                flush=True,
            )
            continue
        row = measure(size, args.window, args.reps, args.copying)
        rows.append(row)
        print(
            f"  {row.messages:,} messages: core alone {_seconds(row.core_s)}, "
            f"replay {_seconds(row.replay_s)} (its own work {_seconds(row.replay_own_s)}), "
            f"peak RSS {row.peak_rss_mb:,.0f} MiB",
            flush=True,
        )
        if args.command:
            run = time_command(size, args.window)
            commands.append(run)
            print(
                f"  {run.messages:,} messages: the contextfold replay command, end to end "
                f"({run.file_mb:,.1f} MB file): {_seconds(run.wall_s)}, "
                f"{run.wall_s / row.replay_s:.2f}x the library replay, "
                f"peak RSS {run.peak_rss_mb:,.0f} MiB",
                flush=True,
            )
    print()
    print_table(rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        records = [
            asdict(row)
            | {
                "core_us_per_message": row.core_us_per_message,
                "own_us_per_message": row.own_us_per_message,
            }
            for row in rows
        ]
        summary = {
            "window": args.window,
            "copying": args.copying,
            "rows": records,
            "command": [asdict(run) for run in commands],
        }
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
