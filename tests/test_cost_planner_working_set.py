"""``planner: cost`` keeps the current task's working set, through the public API.

A cost pass goes deep (`compaction.cost_plan`), but not through the task being worked on:
what a later turn of the current task drew a value from stays whole while the view is under
the middle of the configured band, as with the threshold planner, and a current task that
fits there stays whole (the result it reads next is among its messages, drawn on or not
yet). Where passes come every few requests anyway, a pass is the threshold planner's. And
whatever it holds, the cost planner never sends a view over the budget.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from support import SYSTEM, human, prose, tool_round, unstamped
from test_properties import check_view, configs, conversations, views_as_asked

SONNET = "claude-sonnet-4-5"
BUDGET = 12_000


def cost_context(**settings: Any) -> ContextFold:
    return ContextFold(
        {"planner": "cost", "prices": SONNET, "token_counter": "heuristic"}, **settings
    )


def paths(task: int, count: int) -> list[str]:
    return [
        f"/srv/exports/eu-west-{task}/2024-04-{day:02d}/orders-{day}{task}7.csv"
        for day in range(1, count + 1)
    ]


def listing_round(task: int, files: list[str]) -> list[dict[str, Any]]:
    """The agent lists a directory: a result of many paths it will check one by one."""
    call = f"call_list_{task}"
    rows = "\n".join(f"{path}  {1000 + k * 37} KB" for k, path in enumerate(files))
    return [
        {
            "role": "assistant",
            "content": f"Listing /srv/exports/eu-west-{task}.",
            "tool_calls": [{"id": call, "tool": "list_files", "arguments": {"task": task}}],
        },
        {"role": "tool", "tool_call_id": call, "content": f"{len(files)} files\n{rows}"},
    ]


def check_round(task: int, step: int, path: str) -> list[dict[str, Any]]:
    """The agent checks one listed path (copying it out of the listing): a bulky result."""
    call = f"call_check_{task}_{step}"
    return [
        {
            "role": "assistant",
            "content": f"Checking {path}.",
            "tool_calls": [{"id": call, "tool": "inspect_file", "arguments": {"path": path}}],
        },
        {
            "role": "tool",
            "tool_call_id": call,
            "content": f"path: {path}\nrows: {4000 + step}\n" + prose(task * 100 + step, 1_200),
        },
    ]


async def request(context: ContextFold) -> list[dict[str, Any]]:
    return unstamped(await context.get_messages_for_request(token_budget=BUDGET))


async def after_an_earlier_task() -> ContextFold:
    """A cost-planned context ten rounds into an earlier task: what a pass takes out."""
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Research every topic and summarise."))
    for n in range(10):
        for message in tool_round(n, result_chars=2_400):
            await context.add_message(message)
        await request(context)
    return context


async def test_a_cost_pass_leaves_a_current_task_that_fits_whole() -> None:
    context = await after_an_earlier_task()
    files = paths(2, 20)
    task: list[dict[str, Any]] = [
        human("Find the EU-WEST-2 export of 2024-04-15 and count its rows.")
    ]
    for message in task:
        await context.add_message(message)
    rounds = [listing_round(2, files)] + [check_round(2, k, files[k]) for k in range(6)]
    passes = []
    for messages in rounds:
        for message in messages:
            await context.add_message(message)
        task.extend(messages)
        view = await request(context)
        report = context.last_report
        if report.compacted:
            passes.append(report)
        # Every message of the current task is in the view as it was admitted: the listing
        # the agent copies paths out of, and the results it has not drawn on yet.
        for message in task:
            assert message in view, message["content"][:60]
    # The cost planner compacted in the task, deep (the soft protections a cost pass does
    # not pay for yielded from the start): the earlier task went, under the target.
    assert passes
    for report in passes:
        assert report.relaxed[:2] == ["recent", "recent_tool_results_shortened"]
        assert report.tokens_after < report.target


async def test_a_long_task_keeps_what_it_draws_on_through_deep_passes() -> None:
    # One prompt, then a long run: larger than the band's middle, so the task itself is
    # compacted; the listing it keeps copying paths out of stays whole.
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Check every EU-WEST-3 export and count its rows."))
    files = paths(3, 40)
    listing = listing_round(3, files)
    for message in listing:
        await context.add_message(message)
    await request(context)
    deep = 0
    for k in range(40):
        for message in check_round(3, k, files[k]):
            await context.add_message(message)
        view = await request(context)
        report = context.last_report
        assert listing[1] in view, f"the listing left the view at check {k}"
        if report.compacted and report.compacted_by in ("optimal_peak", "trigger"):
            deep += 1
            # Deep still: under the configured target, the older checks gone.
            assert report.tokens_after < report.target
    assert deep >= 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # The property suite's conversations: tool groups of every shape, replies, hooks,
    # thinking, and new human prompts (sessions of several tasks).
    history=conversations(),
    budget=st.integers(2_000, 20_000),
    config=configs,
    prices=st.sampled_from([SONNET, "gpt-5", "gemini-2.5-flash"]),
)
def test_the_cost_planner_keeps_every_view_invariant_on_growing_conversations(
    history: list[dict[str, Any]], budget: int, config: dict[str, Any], prices: str
) -> None:
    async def run() -> None:
        ctx = ContextFold({**config, "planner": "cost", "prices": prices})
        async for admitted, view in views_as_asked(ctx, history, budget):
            if view is not None:
                # The budget by a fresh recount, atomic groups, protected content intact.
                check_view(ctx, admitted, unstamped(view), budget)
        assert unstamped(await ctx.get_messages()) == history

    asyncio.run(run())


async def passes_of(planner: str) -> list[tuple[str, int, int]]:
    """Tasks of three rounds in a 6,000-token window, each result about a fifth of it: the
    view grows past the band between target and trigger in fewer than four requests."""
    context = ContextFold({"planner": planner, "prices": SONNET, "token_counter": "heuristic"})
    await context.add_message(SYSTEM)
    await context.add_message(human("Research every topic and summarise."))
    reports = []
    for n in range(40):
        if n % 3 == 2:
            await context.add_message(human(f"Next, the topics of group {n}."))
        for message in tool_round(n, result_chars=3_000):
            await context.add_message(message)
        await context.get_messages_for_request(token_budget=6_000)
        report = context.last_report
        reports.append((report.compacted_by, report.tokens_before, report.tokens_after))
    return reports


async def test_where_passes_come_every_few_requests_a_cost_pass_is_the_threshold_planners() -> None:
    # There the pass's target is lowered so it leaves room for a few requests (`cadence`):
    # a deep pass on top of that cost more and kept fewer of the current task's facts.
    cost, threshold = await passes_of("cost"), await passes_of("threshold")
    assert sum(1 for by, _, _ in threshold if by) >= 5
    assert cost == threshold


async def test_a_cost_pass_ending_under_the_bands_middle_is_not_floor_bound() -> None:
    # The current task is held whole while it fits under the middle of the configured band,
    # so a deep pass can end above the target. Under the middle it has not missed: the next
    # pass is the cost model's again (not floor-bound, which would wait for the budget).
    # (A pass before the trigger that would take out next to nothing is not committed: the
    # deep pass here is the trigger's, after a second task, the first one's checks to go.)
    context = await after_an_earlier_task()
    held_above_target = []
    for task, checks in ((2, 6), (3, 16)):
        files = paths(task, 30)
        await context.add_message(
            human(f"Find the EU-WEST-{task} export of 2024-04-15 and count its rows.")
        )
        rounds = [listing_round(task, files)]
        rounds += [check_round(task, k, files[k]) for k in range(checks)]
        for messages in rounds:
            for message in messages:
                await context.add_message(message)
            await request(context)
            report = context.last_report
            middle = (report.target + report.trigger) // 2
            deep = report.relaxed[:2] == ["recent", "recent_tool_results_shortened"]
            if deep and report.target < report.tokens_after <= middle:
                held_above_target.append(report)
                assert not report.floor_bound
    assert held_above_target
