"""What OpenTelemetry costs a steady request, as ratios against ``opentelemetry: off`` in one run.

A steady request is ``get_messages_for_request`` on a history that needs no compaction (the
histories of ``bench_requests.py``: 100 and 1,000 messages). Each mode is its own context
over the same history; the modes are timed in alternation, round after round, and each
mode's figure is the median of its rounds (microseconds per request), so a machine busy with
something else slows every mode alike. Printed: each mode against ``off``, by the medians and
by each mode's best round (the round least disturbed by other work on a shared machine).

Modes, in two phases (a process can set OpenTelemetry's global tracer provider only once):

1. before any SDK is set up: ``off``, and ``auto`` with the API alone (its default no-op
   provider: nothing can record);
2. with the SDK's tracer provider set: ``off`` again, ``auto`` under a caller's span that is
   not sampled (the caller's trace was dropped: nothing records), ``auto`` as a root span the
   sampler drops (ALWAYS_OFF; the SDK decides per span), and ``auto`` recording every request
   to an exporter that discards them (the price of tracing, for reference).

    uv run python bench/bench_otel.py
    uv run python bench/bench_otel.py --sizes 100 --rounds 30 --json bench/out/otel.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_requests import make_history
from contextfold import ContextFold

BUDGET = 10_000_000  # nothing compacts: every request is steady
REQUESTS_PER_ROUND = 20


class Mode:
    def __init__(
        self, name: str, setting: str, scope: Callable[[], AbstractContextManager[Any]]
    ) -> None:
        self.name = name
        self.setting = setting
        self.scope = scope
        self.context: Any = None
        self.samples: list[float] = []


async def prepared(history: Sequence[dict[str, Any]], setting: str) -> Any:
    context = ContextFold(opentelemetry=setting)
    for message in history:
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)  # warm
    return context


async def run_phase(history: Sequence[dict[str, Any]], modes: list[Mode], rounds: int) -> None:
    for mode in modes:
        mode.context = await prepared(history, mode.setting)
    for number in range(rounds):
        # Alternate the order, so no mode always runs first after a collection.
        order = modes if number % 2 == 0 else list(reversed(modes))
        for mode in order:
            request = mode.context.get_messages_for_request
            with mode.scope():
                gc.collect()
                gc.disable()
                start = time.perf_counter()
                for _ in range(REQUESTS_PER_ROUND):
                    await request(token_budget=BUDGET)
                seconds = time.perf_counter() - start
                gc.enable()
            mode.samples.append(seconds / REQUESTS_PER_ROUND * 1e6)


def unsampled_parent() -> AbstractContextManager[Any]:
    from opentelemetry import trace

    span = trace.NonRecordingSpan(
        trace.SpanContext(trace_id=7, span_id=9, is_remote=True, trace_flags=trace.TraceFlags(0))
    )
    return trace.use_span(span)


def install_sdk() -> Callable[[bool], None]:
    """The SDK's provider, globally; returns a switch between recording and dropping."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class Switch(Sampler):
        on = False

        def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
            return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP)

        def get_description(self) -> str:
            return "switch"

    switch = Switch()
    provider = TracerProvider(sampler=switch)
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)

    def set_recording(on: bool) -> None:
        switch.on = on

    return set_recording


def recording_scope(set_recording: Callable[[bool], None]) -> Callable[[], Any]:
    class Scope:
        def __enter__(self) -> None:
            set_recording(True)

        def __exit__(self, *exc: object) -> None:
            set_recording(False)

    return Scope


def rows_of(size: int, modes: list[Mode]) -> Iterator[dict[str, Any]]:
    base = statistics.median(modes[0].samples)
    best_base = min(modes[0].samples)
    for mode in modes:
        median = statistics.median(mode.samples)
        best = min(mode.samples)
        yield {
            "messages": size,
            "mode": mode.name,
            "us_per_request": round(median, 2),
            "vs_off": round(median / base, 3),
            "best_us_per_request": round(best, 2),
            "best_vs_off": round(best / best_base, 3),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="history sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=151, help="timed rounds per mode")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    histories = {size: make_history(size) for size in sizes}
    rows: list[dict[str, Any]] = []

    for size in sizes:
        first = [Mode("off", "off", nullcontext), Mode("auto, API only", "auto", nullcontext)]
        asyncio.run(run_phase(histories[size], first, args.rounds))
        rows.extend(rows_of(size, first))
    set_recording = install_sdk()
    for size in sizes:
        second = [
            Mode("off (SDK set)", "off", nullcontext),
            Mode("auto, caller's trace not sampled", "auto", unsampled_parent),
            Mode("auto, root span dropped by the sampler", "auto", nullcontext),
            Mode("auto, recording (for reference)", "auto", recording_scope(set_recording)),
        ]
        asyncio.run(run_phase(histories[size], second, args.rounds))
        rows.extend(rows_of(size, second))

    print(
        f"steady request with OpenTelemetry: Python {sys.version.split()[0]}, median of "
        f"{args.rounds} rounds of {REQUESTS_PER_ROUND} requests per mode"
    )
    print("| messages | mode | µs per request (median) | vs off | best round | vs off |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['messages']:,} | {row['mode']} | {row['us_per_request']:.1f} | "
              f"{row['vs_off']:.3f}x | {row['best_us_per_request']:.1f} | "
              f"{row['best_vs_off']:.3f}x |")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
