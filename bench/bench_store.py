"""What durability costs: session-store appends and resumes beside the in-memory store.

Measured side by side in one run, on this machine's disk and a PostgreSQL server started
for the run (the machine's own binaries on a Unix socket in a temp dir, as the tests do):

append       ``append`` throughput with 1 session, and with 8 sessions appended to
             concurrently from one process (8 asyncio tasks, one store), for memory://,
             sqlite:/// (WAL, synchronous=FULL: one fsync per acknowledged append) and
             postgresql:// (one commit per append). Per-message time and ratio to memory.
resume       ``open_session`` of a 10,000-message session (messages, their token costs and
             classifications read back; every other message a ~2 KB tool result) beside
             what a resume without stored costs would pay: counting every message again
             with the exact o200k counter, and re-admitting every message into a fresh
             ``ContextFold``. Then to the first view: a resume through ``ContextFold``
             (history rebuilt from stored costs and classifications, the sticky state
             taken up) beside a resume without a store (``set_messages`` counting every
             message, then a compaction pass), and beside the same resume from rows without
             classifications (a version 2 store: every message inspected again). Each
             first-view figure is the best of ``--repeats`` runs, taken in turns.
foreign      SQLite: the CPU time of the first compacting request of a session (a summarize
             ladder, the offline summarizer) in a store holding no other session's summary
             records, beside the same request in a store holding ``--foreign-records`` of
             them (1,000,000 by default, one of them unreadable), best of 2 x ``--repeats``
             each, in turns. A context looks records up by key (its own session's, each
             summary block's covered hash), never by reading the store's: the ratio stays
             near 1.
fleet        PostgreSQL: 8 worker processes append a fixed count each to 64 shared sessions,
             each from its own (often stale) idea of a session's last seq; a lost race is a
             ConcurrentUpdateError and the worker retries at the seq it reports. Afterwards
             every session must be gapless and every message stored exactly once: zero lost,
             zero duplicated, conflicts counted.

Run::

    uv run python bench/bench_store.py
    uv run python bench/bench_store.py --messages 500 --fleet-count 100 --no-postgres \
        --foreign-records 100000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from contextfold.store import ConcurrentUpdateError, SessionStore, open_store

ROOT = Path(__file__).resolve().parent.parent
FLEET_SESSIONS = 64


def load_server_helper() -> ModuleType:
    """tests/store_support.py, which knows how to start a throwaway PostgreSQL."""
    spec = importlib.util.spec_from_file_location(
        "_store_support", ROOT / "tests" / "store_support.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def payload(n: int) -> str:
    # A typical short chat turn (~300 bytes of JSON).
    return json.dumps(
        {
            "role": "assistant" if n % 2 else "user",
            "content": f"message {n}: " + "the agent reads the file and reports back. " * 6,
            "metadata": {"timestamp": "2026-01-01T00:00:00Z"},
        }
    )


def agent_turn(n: int) -> str:
    """Resume material shaped like an agent's log: every other message a ~2 KB tool result."""
    if n % 2 == 0:
        return payload(n)
    lines = "\n".join(f"src/module_{n}_{i}.py: def handler_{i}(request): ..." for i in range(40))
    return json.dumps({"role": "tool", "tool_call_id": f"call_{n}", "content": lines})


async def append_rate(store: SessionStore, sessions: int, per_session: int, tag: str) -> float:
    """Seconds per appended message, ``sessions`` sessions appended to concurrently."""

    async def one(session_id: str) -> None:
        seq = 0
        for n in range(per_session):
            seq = await store.append(session_id, seq, payload(n), 60)

    started = time.perf_counter()
    await asyncio.gather(*(one(f"{tag}-{s}") for s in range(sessions)))
    return (time.perf_counter() - started) / (sessions * per_session)


async def bench_appends(urls: dict[str, str], messages: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for sessions in (1, 8):
        per_session = max(1, messages // sessions)
        base = None
        for name, url in urls.items():
            store = await open_store(url)
            await append_rate(store, 1, 5, f"warm{sessions}")  # connect, migrate, warm up
            seconds = await append_rate(store, sessions, per_session, f"run{sessions}")
            await store.close()
            base = seconds if base is None else base
            rows.append(
                {
                    "store": name,
                    "sessions": sessions,
                    "messages": sessions * per_session,
                    "us_per_message": seconds * 1e6,
                    "messages_per_s": 1 / seconds,
                    "x_memory": seconds / base,
                }
            )
    return rows


async def bench_resume(url: str, size: int, repeats: int) -> dict[str, object]:
    from contextfold.tokens import build_counter

    store = await open_store(url)
    await store.append_many("resume", 0, [(agent_turn(n), 60) for n in range(size)])
    await store.close()
    store = await open_store(url)
    started = time.perf_counter()
    session = await store.open_session("resume")
    messages = [stored.message for stored in session.messages]
    load = time.perf_counter() - started
    await store.close()
    counter = build_counter("exact")
    started = time.perf_counter()
    for message in messages:
        counter.count_message(message)
    count = time.perf_counter() - started
    readmit = await readmission_seconds(messages)
    resumed, fresh, uninspected = await first_view_seconds(url, messages, repeats)
    return {
        "messages": size,
        "load_s": load,
        "recount_s": count,
        "ratio": load / count,
        "readmit_s": readmit,
        "readmit_ratio": load / readmit,
        "repeats": repeats,
        "first_view_s": resumed,
        "fresh_first_view_s": fresh,
        "first_view_ratio": resumed / fresh,
        "uninspected_first_view_s": uninspected,
        "uninspected_first_view_ratio": uninspected / fresh,
    }


async def first_view_seconds(
    url: str, messages: list[dict[str, object]], repeats: int
) -> tuple[float, float, float]:
    """To the first view, best of ``repeats`` each, in turns: a resume through the context
    itself (history rebuilt from stored costs and classifications, the sticky state taken
    up, nothing counted or inspected); a resume without a store (``set_messages`` counting
    every message, then a compaction pass); and a resume of the same rows without their
    classifications, as a store written before they were kept (every message inspected)."""
    import sqlite3

    from contextfold import ContextFold

    budget = 200_000
    builder = ContextFold(store=url, session_id="resume-view")
    await builder.set_messages(messages)
    expected = await builder.get_messages_for_request(token_budget=budget)  # state saved
    # The same session again, its classifications dropped (rows as version 2 wrote them).
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO cf_sessions (session_id, last_seq, generation, history_sha256)"
            " SELECT 'resume-old', last_seq, generation, history_sha256"
            " FROM cf_sessions WHERE session_id = 'resume-view'"
        )
        raw.execute(
            "INSERT INTO cf_messages (session_id, seq, message_json, cost, info_json,"
            " cost_counter) SELECT 'resume-old', seq, message_json, cost, NULL, cost_counter"
            " FROM cf_messages WHERE session_id = 'resume-view'"
        )
        raw.execute(
            "INSERT INTO cf_documents SELECT 'resume-old', kind, seq, body_json"
            " FROM cf_documents WHERE session_id = 'resume-view'"
        )
    best = {"resumed": float("inf"), "fresh": float("inf"), "uninspected": float("inf")}
    for _ in range(repeats):
        for kind, session_id in (("resumed", "resume-view"), ("uninspected", "resume-old")):
            started = time.perf_counter()
            resumed = ContextFold(store=url, session_id=session_id)
            view = await resumed.get_messages_for_request(token_budget=budget)
            best[kind] = min(best[kind], time.perf_counter() - started)
            if view != expected:
                raise SystemExit(f"the {kind} resume delivered another view")
            del resumed, view
        started = time.perf_counter()
        fresh = ContextFold()
        await fresh.set_messages(messages)
        view = await fresh.get_messages_for_request(token_budget=budget)
        best["fresh"] = min(best["fresh"], time.perf_counter() - started)
        if view != expected:
            raise SystemExit("the resume without a store delivered another view")
        del fresh, view
    return best["resumed"], best["fresh"], best["uninspected"]


async def readmission_seconds(messages: list[dict[str, object]]) -> float:
    """What a resume costs today: a fresh ContextFold admitting every message again."""
    from contextfold import ContextFold

    context = ContextFold()
    started = time.perf_counter()
    for message in messages:
        await context.add_message(dict(message))
    return time.perf_counter() - started


FOREIGN_LADDER = [
    "strip_thinking",
    "truncate_tool_results",
    {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400},
    "drop_oldest",
]


def foreign_rows(count: int) -> Iterator[tuple[str, str, str]]:
    """``count`` summary records of 1,000 other sessions, as the store writes them, in the
    order of their keys (the unique index then grows at its end: minutes become seconds)."""
    keys = sorted(hashlib.sha256(n.to_bytes(8, "big")).hexdigest() for n in range(count))
    for n, key in enumerate(keys):
        session = f"foreign-{n % 1000}"
        record = (
            f'{{"schema_version":1,"text":"summary {n}","history_ids":[1,2],'
            f'"message_count":2,"covered_hash":"{key}","previous_hash":null,'
            f'"summarizer":"scripted","prompt_id":"p","prompt_version":1,"tokens":3,'
            f'"session_id":"{session}","created_at":"2026-01-01T00:00:00+00:00"}}'
        )
        yield key, session, record


async def first_compacting_request(url: str, seed: int) -> float:
    """CPU seconds (every thread of the process: the SQLite calls run on the store's own) to
    the first view of a new session that compacts and summarizes. CPU time, not wall time:
    the request waits for a few fsyncs (the records and the state it writes), which on a
    shared disk vary tenfold from one to the next and would drown the work compared here.
    Each ``seed`` makes another conversation of the same shape and size (nothing cached from
    one helps the next)."""
    from contextfold import ContextFold
    from contextfold.summaries import scripted_summarizer

    context = ContextFold(
        store=url,
        session_id=f"mine-{seed}",
        strategies=FOREIGN_LADDER,
        summarizer=scripted_summarizer(),
        token_counter="heuristic",
    )
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": f"Task {seed}: read every file."},
    ]
    for n in range(60):
        call = f"call_{seed}_{n}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call, "tool": "read", "arguments": {"n": n}}],
            }
        )
        result = json.loads(agent_turn(2 * n + 1))["content"].replace("module_", f"m{seed}_")
        messages.append({"role": "tool", "tool_call_id": call, "content": result})
    await context.set_messages(messages)
    started = time.process_time()
    await context.get_messages_for_request(token_budget=8_000)
    elapsed = time.process_time() - started
    report = context.last_report
    if report is None or not report.compacted or not context.summary_stats.calls:
        raise SystemExit("the first request did not compact with a summary")
    return elapsed


async def bench_foreign(workdir: Path, count: int, repeats: int) -> dict[str, object]:
    import sqlite3

    from contextfold.store import SqliteStore

    urls = {}
    for name in ("clean", "crowded"):
        path = workdir / f"{name}.db"
        store = SqliteStore(path)
        await store.open()  # the schema
        await store.close()
        urls[name] = f"sqlite:///{path}"
    crowded = workdir / "crowded.db"
    started = time.perf_counter()
    with sqlite3.connect(crowded) as raw:
        raw.execute("PRAGMA cache_size = -262144")  # 256 MB: the indexes stay in memory
        raw.executemany(
            "INSERT INTO cf_summaries (covered_hash, session_id, record_json) VALUES (?, ?, ?)",
            foreign_rows(count),
        )
        # One unreadable record of another session: a scan would fail on it.
        raw.execute(
            "INSERT INTO cf_summaries (covered_hash, session_id, record_json)"
            ' VALUES (?, \'foreign-damaged\', \'{"schema_version": 1, "text": "cut\')',
            ("f" * 64,),
        )
    filled = time.perf_counter() - started
    best = {"clean": float("inf"), "crowded": float("inf")}
    seeds = iter(range(1_000_000))
    for url in urls.values():  # warm up: imports, the tokenizer
        await first_compacting_request(url, next(seeds))
    for turn in range(repeats):
        for name in sorted(urls, reverse=turn % 2 == 1):  # each store first half the time
            best[name] = min(best[name], await first_compacting_request(urls[name], next(seeds)))
    return {
        "records": count,
        "fill_s": filled,
        "clean_s": best["clean"],
        "crowded_s": best["crowded"],
        "ratio": best["crowded"] / best["clean"],
        "repeats": repeats,
    }


def fleet_worker(url: str, worker: int, count: int, seed: int) -> None:
    """One fleet process: ``count`` appends to random shared sessions; prints a summary."""

    async def run() -> None:
        store = await open_store(url)
        rng = random.Random(seed)
        known: dict[str, int] = {}  # this worker's idea of each session's last seq
        conflicts = 0
        for n in range(count):
            session_id = f"fleet-{rng.randrange(FLEET_SESSIONS)}"
            message = json.dumps({"role": "user", "content": f"w{worker}-{n}"})
            seq = known.get(session_id, 0)
            while True:
                try:
                    known[session_id] = await store.append(session_id, seq, message, 1)
                    break
                except ConcurrentUpdateError as conflict:
                    conflicts += 1
                    seq = conflict.actual_seq
        await store.close()
        print(json.dumps({"worker": worker, "appended": count, "conflicts": conflicts}))

    asyncio.run(run())


def bench_fleet(url: str, workers: int, count: int) -> dict[str, object]:
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--fleet-worker", url, str(w), str(count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    reports = []
    for process in processes:
        out, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise SystemExit(f"a fleet worker failed with exit code {process.returncode}")
        reports.append(json.loads(out))
    elapsed = time.perf_counter() - started

    async def audit() -> tuple[int, int, int]:
        store = await open_store(url)
        seen: dict[str, int] = {}
        gaps = 0
        for info in await store.list_sessions():
            if not info.session_id.startswith("fleet-"):
                continue
            session = await store.open_session(info.session_id)
            seqs = [stored.seq for stored in session.messages]
            gaps += seqs != list(range(1, len(seqs) + 1))
            for stored in session.messages:
                content = stored.message["content"]
                seen[content] = seen.get(content, 0) + 1
        await store.close()
        expected = {f"w{w}-{n}" for w in range(workers) for n in range(count)}
        lost = len(expected - seen.keys())
        duplicated = sum(times - 1 for times in seen.values() if times > 1)
        return lost, duplicated, gaps

    lost, duplicated, gaps = asyncio.run(audit())
    return {
        "workers": workers,
        "sessions": FLEET_SESSIONS,
        "appended": sum(r["appended"] for r in reports),
        "conflicts": sum(r["conflicts"] for r in reports),
        "lost": lost,
        "duplicated": duplicated,
        "sessions_with_gaps": gaps,
        "seconds": elapsed,
    }


def table(rows: list[dict[str, object]], columns: list[tuple[str, str, Callable[..., str]]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(fmt(row[key]) for key, _, fmt in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="appends per measurement")
    parser.add_argument("--resume-size", type=int, default=10_000)
    parser.add_argument(
        "--repeats", type=int, default=5, help="first-view runs per kind (the best is kept)"
    )
    parser.add_argument(
        "--foreign-records",
        type=int,
        default=1_000_000,
        help="other sessions' summary records in the crowded store",
    )
    parser.add_argument("--fleet-workers", type=int, default=8)
    parser.add_argument("--fleet-count", type=int, default=500, help="appends per worker")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite and memory only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--fleet-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fleet_worker:
        url, worker, count = args.fleet_worker
        fleet_worker(url, int(worker), int(count), seed=int(worker))
        return

    helper = load_server_helper()
    server = None
    if not args.no_postgres:
        reason = helper.postgres_unavailable()
        if reason:
            print(f"PostgreSQL skipped: {reason}")
        else:
            server = helper.PostgresServer("bench").start()
    workdir = Path(tempfile.mkdtemp(prefix="cf-bench-store-"))
    try:
        urls = {"memory": "memory://", "sqlite": f"sqlite:///{workdir}/bench.db"}
        if server is not None:
            urls["postgresql"] = server.url
        appends = asyncio.run(bench_appends(urls, args.messages))
        resume = asyncio.run(
            bench_resume(f"sqlite:///{workdir}/resume.db", args.resume_size, args.repeats)
        )
        foreign = asyncio.run(bench_foreign(workdir, args.foreign_records, 2 * args.repeats))
        fleet = None
        if server is not None:
            fleet = bench_fleet(
                server.fresh_database("fleet"), args.fleet_workers, args.fleet_count
            )
    finally:
        if server is not None:
            server.stop()
        for leftover in workdir.iterdir():
            leftover.unlink()
        workdir.rmdir()

    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")
    print("\nAppends (one durable append per message):\n")
    print(
        table(
            appends,
            [
                ("store", "store", str),
                ("sessions", "sessions", str),
                ("messages", "messages", str),
                ("us_per_message", "µs / message", lambda v: f"{v:,.1f}"),
                ("messages_per_s", "messages / s", lambda v: f"{v:,.0f}"),
                ("x_memory", "× memory", lambda v: f"{v:,.0f}"),
            ],
        )
    )
    print(
        f"\nResume of {resume['messages']:,} messages from SQLite: load {resume['load_s']:.3f} s, "
        f"re-counting them exactly {resume['recount_s']:.3f} s; load / recount = "
        f"{resume['ratio']:.1%}; re-admitting them into a fresh ContextFold "
        f"{resume['readmit_s']:.3f} s; load / re-admission = {resume['readmit_ratio']:.1%}."
    )
    print(f"\nTo the first view (best of {resume['repeats']} each, the same view every time):\n")
    print(
        table(
            [
                {
                    "how": "resume through ContextFold (stored costs and classifications)",
                    "s": resume["first_view_s"],
                    "x": resume["first_view_ratio"],
                },
                {
                    "how": "resume of rows without classifications (a version 2 store)",
                    "s": resume["uninspected_first_view_s"],
                    "x": resume["uninspected_first_view_ratio"],
                },
                {
                    "how": "re-admission without a store (set_messages, counting)",
                    "s": resume["fresh_first_view_s"],
                    "x": 1.0,
                },
            ],
            [
                ("how", "how", str),
                ("s", "seconds", lambda v: f"{v:.3f}"),
                ("x", "of re-admission", lambda v: f"{v:.1%}"),
            ],
        )
    )
    print(f"\nresume / re-admission = {resume['first_view_ratio']:.1%} (goal under 10%)")
    print(
        f"\nFirst compacting request (summarize ladder, CPU time, best of {foreign['repeats']}): "
        f"{foreign['clean_s']:.3f} s in a store without other sessions' summary records, "
        f"{foreign['crowded_s']:.3f} s beside {foreign['records']:,} of them (one unreadable); "
        f"crowded / clean = {foreign['ratio']:.2f} (writing them took {foreign['fill_s']:.1f} s)."
    )
    if fleet is not None:
        print(
            f"\nFleet on PostgreSQL: {fleet['workers']} processes, {fleet['sessions']} sessions, "
            f"{fleet['appended']:,} appends in {fleet['seconds']:.1f} s; conflicts "
            f"{fleet['conflicts']:,} (each retried); lost {fleet['lost']}, duplicated "
            f"{fleet['duplicated']}, sessions with a gap {fleet['sessions_with_gaps']}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"appends": appends, "resume": resume, "foreign": foreign, "fleet": fleet},
                indent=2,
            )
        )
    if fleet is not None and (fleet["lost"] or fleet["duplicated"] or fleet["sessions_with_gaps"]):
        raise SystemExit("the fleet lost or duplicated messages")


if __name__ == "__main__":
    main()
