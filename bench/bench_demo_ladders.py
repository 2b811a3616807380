"""The demo's task under other ladders and settings, measured in the real kernel.

``contextfold demo`` runs one long agent task (80 lookups of 3,000 characters, 16,000-token
window) without compaction, with context-fold's defaults and with the summarize ladder
(summarize first, compacting late and deep); ``--steps``, ``--result-chars`` and ``--window``
change the task. This bench runs the
same sessions (``contextfold.cli.demo.run_session``: the demo's own mount plan, hooks and
measurements, so the two never disagree) and, with ``--sweep``, the summarize ladder under
settings a user would try for prompt caching: where the rung sits, when compaction starts and
stops, how much recent content is protected, the safety margin, the notice,
``clear_tool_results`` ahead of the summary, and the rung's old fixed 1,000-token summary.
Per run:

- tokens sent in total: chat requests plus summary requests, in and out (the summarizer's
  cost counts);
- input served from the prompt cache: cache reads over the input of chat requests;
- the largest request, compactions, summaries written and reused, requests over the window.

The caching goal: with the summarize ladder, at least 85 % of the input from the cache and
total tokens at least 60 % below the uncompacted run. The bench says which run, if any, meets
it, names the best summarizing run, and gives the bound this task puts on any compaction that
rewrites the view after its head (`cache_bound`), from the run's own figures.

Resuming: after each summarizing run a fresh ``ContextFold`` with the same summary store is
given the whole transcript (``set_messages``) and asked for as many views as the run made chat
requests; the summarizer calls it makes for spans the run already summarized should be 0.

    uv run python bench/bench_demo_ladders.py
    uv run python bench/bench_demo_ladders.py --sweep --json bench/out/demo_ladders.json
    uv run python bench/bench_demo_ladders.py --sweep --steps 40 --result-chars 6000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from contextfold.cli.demo import (
    DemoSettings,
    RunSpec,
    RunSummary,
    demo_runs,
    run_session,
    summarize_config,
)

CACHE_GOAL = 0.85  # share of chat input served from the prompt cache
SAVING_GOAL = 0.60  # total tokens below the uncompacted run

EARLY = ("strip_thinking", "summarize", "truncate_tool_results", "drop_oldest")
SUMMARY_ONLY = ("strip_thinking", "summarize", "drop_oldest")
CLEAR_FIRST = (
    "strip_thinking",
    {"name": "clear_tool_results", "keep_last": 1},
    "summarize",
    "drop_oldest",
)
# Compact at the limit and deep: fewer passes, each rewriting a smaller view.
AT_THE_LIMIT = {"compact_threshold": 0.99, "target_usage": 0.2}
PROTECT_LESS = {"protected_recent": 0.05, "protected_tool_results": 1}
# The budget near the provider's own input limit (window - 1,024 output - 512 reserve
# fraction of it) and no notice rewriting the prefix: the most room a view can have.
WHOLE_WINDOW = {
    "compact_threshold": 1.0,
    "target_usage": 0.05,
    "safety_margin": 512,
    "compaction_notice_enabled": False,
    **PROTECT_LESS,
}


def summarize_variant(
    label: str = "summarize ladder",
    *,
    rung: Mapping[str, Any] | None = None,
    ladder: Sequence[Any] | None = None,
    **context_settings: Any,
) -> RunSpec:
    """The summarize run as the demo makes it (the session's provider-scripted summarizes),
    with ``rung``, ``ladder`` and further context keys."""
    return RunSpec(label, label, summarize_config(rung=rung, ladder=ladder, **context_settings))


def base_variants(settings: DemoSettings | None = None) -> tuple[RunSpec, ...]:
    """The demo's own runs: without compaction, with context-fold, summarize ladder (the
    provider's clear_tool_uses is no ladder of ours, and the threshold planner no other ladder:
    both left out here)."""
    return demo_runs(
        replace(settings or DemoSettings(), server_editing=False, threshold_planner=False)
    )


def sweep_variants() -> tuple[RunSpec, ...]:
    """Settings a user would try for prompt caching (see the module)."""
    return (
        summarize_variant(
            "summary 1,000 (old default)", rung={"name": "summarize", "max_output_tokens": 1_000}
        ),
        summarize_variant("summarize first", ladder=EARLY),
        summarize_variant("summarize first, 0.99/0.2", ladder=EARLY, **AT_THE_LIMIT),
        summarize_variant("summary only, 0.99/0.2", ladder=SUMMARY_ONLY, **AT_THE_LIMIT),
        summarize_variant(
            "summary only, 0.99/0.2, protect less",
            ladder=SUMMARY_ONLY,
            **AT_THE_LIMIT,
            **PROTECT_LESS,
        ),
        summarize_variant(
            "clear first, 0.99/0.2, protect less",
            ladder=CLEAR_FIRST,
            **AT_THE_LIMIT,
            **PROTECT_LESS,
        ),
        summarize_variant("summarize first, whole window", ladder=EARLY, **WHOLE_WINDOW),
        summarize_variant("summary only, whole window", ladder=SUMMARY_ONLY, **WHOLE_WINDOW),
        summarize_variant("clear first, whole window", ladder=CLEAR_FIRST, **WHOLE_WINDOW),
    )


@dataclass
class ResumeResult:
    """A fresh context given the run's transcript and summary store."""

    requests: int
    summarizer_calls: int
    records_reused: int
    records_written: int
    records_before: int  # records in the store when the resume started
    repeat_calls: int  # calls whose span ends within what the run had already summarized
    error: str | None = None  # the resume raised this (a bug to report, not a figure)


@dataclass
class LadderRun:
    """One measured run (`RunSummary`, the demo's record) and its resume, if measured."""

    run: RunSummary
    resume: ResumeResult | None = None

    @property
    def label(self) -> str:
        return self.run.label

    def to_dict(self) -> dict[str, Any]:
        resume = asdict(self.resume) if self.resume else None
        return self.run.to_dict() | {"resume": resume}


async def run_variant(settings: DemoSettings, spec: RunSpec, *, resume: bool) -> LadderRun:
    """One whole AmplifierSession of the demo's task under ``spec``."""
    from contextfold import ContextFold
    from contextfold.summaries import scripted_summarizer

    resumed: list[ResumeResult | None] = []

    async def after_run(context: Any, provider: Any) -> None:
        requests = sum(1 for r in provider.records if r.purpose == "chat" and not r.rejected)
        try:
            result = await _resume(context, provider, requests, ContextFold, scripted_summarizer)
        except Exception as error:  # reported beside the figures, the run itself stands
            result = ResumeResult(requests, 0, 0, 0, 0, 0, f"{type(error).__name__}: {error}")
        resumed.append(result)

    run = await run_session(settings, spec, after_run=after_run if resume else None)
    return LadderRun(run, resumed[0] if resumed else None)


async def _resume(
    context: Any, provider: Any, requests: int, context_class: Any, summarizer: Any
) -> ResumeResult | None:
    """A fresh context with the run's summary store resumes the transcript: how many
    summarizer calls does it make for spans the run already summarized?"""
    store = getattr(context, "summary_store", None)
    if store is None:
        return None
    before = await store.records()
    covered = max((max(r.history_ids) for r in before), default=-1)
    known = {r.covered_hash for r in before}
    fresh = context_class(context.config, summarizer=summarizer(), summary_store=store)
    await fresh.set_messages(await context.get_messages())
    for _ in range(requests):
        await fresh.get_messages_for_request(provider=provider)
    stats = fresh.summary_stats
    # Every call writes one record (or fails, counted apart); a record written now that ends
    # within the run's summarized span is a span summarized twice.
    new = [r for r in await store.records() if r.covered_hash not in known]
    repeats = sum(1 for r in new if max(r.history_ids) <= covered)
    return ResumeResult(requests, stats.calls, stats.reused, stats.written, len(before), repeats)


def saving(run: RunSummary, uncompacted: RunSummary) -> float:
    return 1 - run.total_tokens / uncompacted.total_tokens if uncompacted.total_tokens else 0.0


def meets_goal(run: RunSummary, uncompacted: RunSummary) -> bool:
    return (
        run.cache_share >= CACHE_GOAL
        and saving(run, uncompacted) >= SAVING_GOAL
        and run.completed
        and not run.overflowed
    )


def goal_line(run: RunSummary, uncompacted: RunSummary) -> str:
    verdict = "meets" if meets_goal(run, uncompacted) else "misses"
    return (
        f"{run.label}: {run.cache_share:.1%} of chat input from the cache (goal "
        f"{CACHE_GOAL:.0%}), {run.total_tokens:,} tokens in total, "
        f"{saving(run, uncompacted):.0%} below the uncompacted run's "
        f"{uncompacted.total_tokens:,} (goal {SAVING_GOAL:.0%}): {verdict} the caching goal."
    )


def best_line(runs: Sequence[RunSummary], uncompacted: RunSummary) -> str | None:
    """The summarizing run that served most from the cache while writing summaries."""
    candidates = [
        r for r in runs if r.summarizes and r.summaries_written and r.completed and not r.overflowed
    ]
    if not candidates:
        return None
    best = max(candidates, key=lambda r: r.cache_share)
    per_request = uncompacted.uncached_tokens / uncompacted.requests
    bound = 1 - 2 * per_request / best.largest_request
    return (
        f"best summarizing run: {best.label}: {best.cache_share:.1%} from the cache, "
        f"{saving(best, uncompacted):.0%} below the uncompacted run, "
        f"{best.summaries_written} summaries written, largest request "
        f"{best.largest_request:,} (the bound 1 - 2N/H at that H: {bound:.1%})."
    )


def cache_bound(
    uncompacted: RunSummary,
    runs: Sequence[RunSummary],
    input_limit: int,
    budget: int | None = None,
) -> str:
    """What prompt-cache share a compaction of this task can reach, in a sawtooth model.

    Every token the task adds is sent uncached once: ``N`` a request on average (the
    uncompacted run's uncached input over its requests). A compacted view grows from ``P``
    to at most ``H`` by ``N`` a request, and each pass re-sends the ``P`` tokens after the
    head uncached (a summary, a removal or a clear changes the prefix right after what
    earlier passes left, and everything after that point is new to the cache). Over a cycle
    of ``(H - P) / N`` requests the views sum to ``(H + P) (H - P) / 2N`` and the uncached
    input to ``H - P + P = H``, so the share is at most ``1 - 2 N H / (H^2 - P^2)``, highest
    as ``P`` goes to 0: ``1 - 2N / H``. ``H`` is at most the provider's input limit, and
    with default settings at most context-fold's ``budget``.
    """
    new = uncompacted.uncached_tokens
    requests = uncompacted.requests
    per_request = new / requests
    largest = max(run.largest_request for run in runs)
    bound = 1 - 2 * per_request / largest
    at_limit = 1 - 2 * per_request / input_limit
    at_budget = (
        f"{1 - 2 * per_request / budget:.1%} for views as large as context-fold's default "
        f"budget (H = {budget:,}), "
        if budget
        else ""
    )
    needed = 2 * per_request / (1 - CACHE_GOAL)
    reach = "above" if needed > input_limit else "within"
    return (
        f"cache bound: {new:,} new tokens over {requests} requests (N = {per_request:,.0f} a "
        f"request); a compaction that rewrites the view after its head serves at most "
        f"1 - 2N/H from the cache: {bound:.1%} for the largest view measured here "
        f"(H = {largest:,}), {at_budget}{at_limit:.1%} for views as large as the provider's "
        f"input limit (H = {input_limit:,}). {CACHE_GOAL:.0%} needs views of about "
        f"{needed:,.0f} tokens, "
        f"{reach} the input limit."
    )


def resume_line(run: LadderRun) -> str:
    resume = run.resume
    if resume is None:
        return f"{run.label}: resume not measured (no summary store found on the context)."
    if resume.error is not None:
        return f"{run.label}: the resume FAILED: {resume.error}"
    return (
        f"{run.label}, resumed from its transcript with its {resume.records_before} summary "
        f"records, {resume.requests} requests: {resume.summarizer_calls} summarizer calls "
        f"({resume.repeat_calls} for spans already summarized), {resume.records_reused} "
        f"records reused, {resume.records_written} written."
    )


def print_runs(
    runs: Sequence[RunSummary], lines: Sequence[str], seconds: float, settings: DemoSettings
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 190)
    table = Table(
        title=f"The demo's task ({settings.steps} lookups of {settings.result_chars:,} characters, "
        f"{settings.window:,}-token window), one run per row"
    )
    columns = {
        "run": lambda r: r.label,
        "chat reqs": lambda r: str(r.requests),
        "summary reqs": lambda r: str(r.summary_requests),
        "tokens chat": lambda r: f"{r.tokens_sent:,}",
        "tokens summary": lambda r: f"{r.summary_tokens:,}",
        "tokens total": lambda r: f"{r.total_tokens:,}",
        "from cache": lambda r: f"{r.cache_share:.1%}",
        "largest": lambda r: f"{r.largest_request:,}",
        "over window": lambda r: str(sum(1 for p in r.points if p.overflowed)),
        "compactions": lambda r: str(r.compactions),
        "summaries written/reused": lambda r: f"{r.summaries_written}/{r.summaries_reused}",
        "done": lambda r: "yes" if r.completed else "NO",
    }
    for name in columns:
        table.add_column(name, justify="left" if name == "run" else "right")
    for run in runs:
        table.add_row(*(render(run) for render in columns.values()))
    console.print(table)
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"wall time {seconds:.1f} s", highlight=False)


async def measure(settings: DemoSettings, sweep: bool) -> list[LadderRun]:
    variants = base_variants(settings) + (sweep_variants() if sweep else ())
    return [await run_variant(settings, variant, resume=variant.summarizes) for variant in variants]


def report_lines(runs: Sequence[LadderRun], input_limit: int) -> list[str]:
    measured = [r.run for r in runs]
    uncompacted, compacted = measured[0], measured[1:]
    lines = [goal_line(run, uncompacted) for run in compacted]
    best = best_line(compacted, uncompacted)
    if best is not None:
        lines.append(best)
    lines.append(cache_bound(uncompacted, compacted, input_limit, measured[1].budget))
    lines += [resume_line(run) for run in runs if run.run.summarizes]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sweep", action="store_true", help="also try other settings of the summarize ladder"
    )
    parser.add_argument("--json", type=Path, help="also write the runs to this JSON file")
    defaults = DemoSettings()
    parser.add_argument("--steps", type=int, default=defaults.steps, help="lookups in the task")
    parser.add_argument(
        "--result-chars",
        type=int,
        default=defaults.result_chars,
        help="characters a lookup returns",
    )
    parser.add_argument("--window", type=int, default=defaults.window, help="the model's window")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    settings = DemoSettings(window=args.window, steps=args.steps, result_chars=args.result_chars)
    runs = asyncio.run(measure(settings, args.sweep))
    input_limit = settings.window - settings.max_output_tokens
    lines = report_lines(runs, input_limit)
    print_runs([r.run for r in runs], lines, time.perf_counter() - started, settings)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"runs": [run.to_dict() for run in runs], "lines": lines}
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
