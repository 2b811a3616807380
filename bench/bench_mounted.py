"""The steady request path through the kernel against the plain library, side by side.

A request that needs no compaction is token arithmetic on cached totals plus one list copy in
the library. Mounted in Amplifier's kernel with hooks listening to contextfold's events, the
same request also builds the event payloads and crosses into the kernel's hook registry. This
bench measures what that costs, per call, in one run:

library            ``ContextFold`` with no event listener (nothing is built for events)
library+listener   ``ContextFold(on_event=...)`` with a callback that receives every event
mounted-quiet      ``mount()`` into the real kernel's coordinator (``MockCoordinator``, the
                   Rust coordinator with tracking), no handler for any contextfold event
mounted            the same with a handler registered for every contextfold event through
                   ``coordinator.hooks.register``
mounted-session    the same inside a whole ``AmplifierSession`` (loop-fold, provider-scripted)

Histories of 1,000 and 10,000 messages (``bench_requests.make_history``, seeded), admitted
untimed with the heuristic counter (the steady path reads cached costs, whatever counted them);
every request passes ``token_budget`` so large that nothing compacts. Calls are timed in
batches, the variants interleaved batch by batch so they share the machine's state, and the
median per call is reported. The goal checked: the mounted steady path within
1.5x of the library path. ``--profile`` adds a cProfile of the mounted path. Run::

    uv run python bench/bench_mounted.py
    uv run python bench/bench_mounted.py --sizes 1000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench_requests import HUGE_BUDGET, make_history

GOAL_RATIO = 1.5
CONFIG = {"token_counter": "heuristic"}


@dataclass
class Variant:
    name: str
    request: Callable[[], Awaitable[Any]]
    events: list[int]  # events delivered to the listener, to show it really listens
    close: Callable[[], Awaitable[None]] | None = None


async def _library(history: list[dict[str, Any]], *, listen: bool) -> Variant:
    from contextfold import ContextFold

    seen = [0]

    async def on_event(event: str, data: dict[str, Any]) -> None:
        seen[0] += 1

    context = ContextFold(CONFIG, on_event=on_event if listen else None)
    await context.set_messages(history)
    return Variant(
        "library+listener" if listen else "library",
        lambda: context.get_messages_for_request(token_budget=HUGE_BUDGET),
        seen,
    )


def _listen_to_every_event(hooks: Any, seen: list[int]) -> None:
    from amplifier_core.models import HookResult

    from contextfold.events import ALL_EVENTS

    async def handler(event: str, data: dict[str, Any]) -> HookResult:
        seen[0] += 1
        return HookResult(action="continue")

    for event in ALL_EVENTS:
        hooks.register(event, handler, priority=100, name=f"bench-{event}")


async def _mounted(history: list[dict[str, Any]], *, listen: bool = True) -> Variant:
    from amplifier_core.testing import MockCoordinator

    from contextfold.amplifier import mount

    coordinator = MockCoordinator()
    seen = [0]
    if listen:
        _listen_to_every_event(coordinator.hooks, seen)
    cleanup = await mount(coordinator, CONFIG)
    context = coordinator.get("context")
    await context.set_messages(history)
    return Variant(
        "mounted" if listen else "mounted-quiet",
        lambda: context.get_messages_for_request(token_budget=HUGE_BUDGET),
        seen,
        cleanup,
    )


async def _mounted_session(history: list[dict[str, Any]]) -> Variant:
    from amplifier_core import AmplifierSession

    plan = {
        "session": {
            "orchestrator": "loop-fold",
            "context": {"module": "context-fold", "config": CONFIG},
        },
        "providers": [{"module": "provider-scripted", "config": {"script": [{"text": "ok"}]}}],
    }
    session = AmplifierSession(plan)
    await session.initialize()
    seen = [0]
    _listen_to_every_event(session.coordinator.hooks, seen)
    context = session.coordinator.get("context")
    await context.set_messages(history)
    return Variant(
        "mounted-session",
        lambda: context.get_messages_for_request(token_budget=HUGE_BUDGET),
        seen,
        session.cleanup,
    )


async def _drain() -> None:
    """Wait for tasks the requests left behind, so work moved off the request path (an emit
    scheduled rather than awaited) is still counted in the batch that caused it."""
    current = asyncio.current_task()
    while pending := [t for t in asyncio.all_tasks() if t is not current and not t.done()]:
        await asyncio.wait(pending, timeout=1.0)


async def _time_batch(request: Callable[[], Awaitable[Any]], calls: int) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            await request()
        await _drain()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


async def measure(n: int, calls: int, batches: int) -> dict[str, float]:
    history = make_history(n)
    variants = [
        await _library(history, listen=False),
        await _library(history, listen=True),
        await _mounted(history, listen=False),
        await _mounted(history),
        await _mounted_session(history),
    ]
    try:
        for variant in variants:
            await variant.request()  # warm-up: the first request emits context:budget
        samples: dict[str, list[float]] = {v.name: [] for v in variants}
        for _ in range(batches):
            for variant in variants:  # interleaved: every variant sees the same conditions
                samples[variant.name].append(await _time_batch(variant.request, calls))
        for variant in variants:
            if variant.name not in ("library", "mounted-quiet"):
                # The warm-up's budget and report reach the listener; a steady request that
                # changes nothing emits nothing (report_events: changes, the default).
                assert variant.events[0] > 0, f"{variant.name}: the listener heard nothing"
        return {name: statistics.median(times) for name, times in samples.items()}
    finally:
        for variant in variants:
            if variant.close is not None:
                await variant.close()


async def profile(n: int, calls: int, top: int) -> str:
    history = make_history(n)
    variant = await _mounted(history)
    try:
        await variant.request()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            await variant.request()
        profiler.disable()
    finally:
        if variant.close is not None:
            await variant.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="history sizes (default 1000,10000)")
    parser.add_argument("--calls", type=int, default=200, help="requests per timed batch")
    parser.add_argument("--batches", type=int, default=7, help="timed batches per variant")
    parser.add_argument("--profile", action="store_true", help="cProfile the mounted path too")
    parser.add_argument("--top", type=int, default=25, help="profile rows to print")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "").replace(",", "")) for s in args.sizes.split(",") if s]

    print(
        f"steady request path, per call (median of {args.batches} batches of {args.calls}); "
        f"Python {platform.python_version()}, {platform.machine()}"
    )
    names = ("library", "library+listener", "mounted-quiet", "mounted", "mounted-session")
    header = f"{'n':>7}" + "".join(f"  {name:>16}" for name in names)
    print(header)
    print("-" * len(header))
    worst = 0.0
    for n in sizes:
        times = asyncio.run(measure(n, args.calls, args.batches))
        lib = times["library"]
        print(f"{n:>7,}" + "".join(f"  {_us(times[name]):>16}" for name in names))
        print(f"{'':>7}" + "".join(f"  {times[name] / lib:>15.2f}x" for name in names))
        worst = max(worst, times["mounted"] / lib, times["mounted-session"] / lib)
    verdict = "PASS" if worst <= GOAL_RATIO else "FAIL"
    print(
        f"\n{verdict}: mounted steady path, handlers on every event, within {GOAL_RATIO}x "
        f"of the library path (worst {worst:.2f}x)"
    )
    if args.profile:
        print(f"\ncProfile of the mounted path, n={sizes[-1]:,}, {args.calls} calls:\n")
        print(asyncio.run(profile(sizes[-1], args.calls, args.top)))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
