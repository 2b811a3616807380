"""``planner: cost`` keeps at least the facts the defaults keep, through the public API.

Four rules of the cost planner, each found where it kept fewer facts than the threshold
planner in ``contextfold eval``: a pass the peak rule fires early is committed only where
it still pays at the floor it reached (a pass that lands near where it started rewrites the
view for nothing), and its limit is the trigger (it yields no soft protection for ending
high in the band); a deep pass holds the current task against the middle of the band with
half the ledger on top, as any other pass does; and it holds the newest results a later
message drew a value from as it holds their units. Scored here on the sessions where each
showed: far and near facts in view (and in the ledger) at least the defaults'.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from contextfold import ContextFold
from contextfold.evaluation.bfcl import bfcl_available, bfcl_sessions
from contextfold.evaluation.longhorizon import CorpusSettings, generate_corpus
from contextfold.evaluation.policies import builtin_policy, config_policy
from contextfold.evaluation.runner import EvalConversation, EvalSettings, Totals, evaluate
from support import human, prose, unstamped
from test_cost_planner_working_set import after_an_earlier_task

BUDGET = 12_000


def cost_context() -> ContextFold:
    return ContextFold(
        {"planner": "cost", "prices": "claude-sonnet-4-5", "token_counter": "heuristic"}
    )


def check_round(step: int) -> list[dict[str, Any]]:
    call = f"call_check_{step}"
    return [
        {
            "role": "assistant",
            "content": f"Checking file {step}.",
            "tool_calls": [{"id": call, "tool": "inspect_file", "arguments": {"n": step}}],
        },
        {"role": "tool", "tool_call_id": call, "content": prose(200 + step, 1_200)},
    ]


async def test_an_early_pass_that_would_save_little_is_not_committed() -> None:
    # An earlier task, then a current one the cost planner holds whole: a pass before the
    # trigger would take out almost nothing and rewrite the whole view (the prompt cache's
    # write price on all of it). The view waits for the trigger instead.
    context = await after_an_earlier_task()
    await context.add_message(human("Check the new files one by one."))
    compacted = []
    previous: list[dict[str, Any]] = []
    for step in range(16):
        for message in check_round(step):
            await context.add_message(message)
        view = unstamped(await context.get_messages_for_request(token_budget=BUDGET))
        report = context.last_report
        assert report.tokens_after <= BUDGET
        if report.compacted:
            compacted.append(report)
            assert report.compacted_by != "optimal_peak" or (
                report.tokens_after < report.tokens_before * 0.8
            ), "an early pass saved next to nothing"
        elif previous:
            assert view[: len(previous)] == previous  # the cached prefix, untouched
        previous = view
    # The trigger fired once, early in the task; no early pass since.
    assert [r.compacted_by for r in compacted] == ["trigger"]


def scores(totals: Totals) -> tuple[int, int, int]:
    """Far in view; far in view or in the ledger; near in view."""
    in_view = totals.count("far", "in_view")
    return (
        in_view,
        in_view + totals.count("far", "ledger_or_summary"),
        totals.count("near", "in_view"),
    )


def defaults_and_cost(conversation: EvalConversation, window: int) -> tuple[Totals, Totals]:
    # Both planners named, whichever is the default (the threshold one was until 0.2).
    policies = [builtin_policy("threshold"), config_policy("cost", {"planner": "cost"})]
    report = evaluate([conversation], policies, EvalSettings(windows=(window,)))
    defaults, cost = report.totals_for(conversation.corpus, window)
    assert (defaults.policy, cost.policy) == ("threshold", "cost")
    return defaults, cost


@pytest.mark.parametrize("session", [3, 6])
def test_a_deep_pass_holds_the_task_with_the_ledger_riding_on_the_band(session: int) -> None:
    # The unseen corpus's sessions where deep passes shortened the listing the task's next
    # steps copied ids out of, to bring a view carrying the ledger a few tokens under a
    # hold that did not count it (`contextfold eval --corpus long-horizon --seed 7`).
    corpus = generate_corpus(CorpusSettings(seed=7, sessions=8))
    defaults, cost = defaults_and_cost(corpus[session], 4_000)
    assert cost.facts("near") > 0
    mine, theirs = scores(cost), scores(defaults)
    assert mine[2] >= theirs[2]  # near facts in view
    if session == 3:
        assert mine[1] >= theirs[1]  # far facts in view or the ledger


@cache
def bfcl_corpus() -> tuple[EvalConversation, ...]:
    return tuple(bfcl_sessions(chain=5))


def bfcl_session(prefix: str) -> EvalConversation:
    return next(s for s in bfcl_corpus() if s.id.startswith(prefix))


@pytest.mark.skipif(not bfcl_available(), reason="bfcl-eval is not installed")
@pytest.mark.parametrize(
    "first",
    [
        # An early pass that took the task's earlier results out on a large newest one.
        "multi_turn_long_context_105",
        "multi_turn_long_context_125",
        # A booking whose id the agent had used, among the newest results: a deep pass cut
        # the middle (its fare class) out of it.
        "multi_turn_long_context_180",
    ],
)
def test_the_cost_planner_keeps_the_defaults_facts_on_bfcl_sessions(first: str) -> None:
    defaults, cost = defaults_and_cost(bfcl_session(first), 8_000)
    mine, theirs = scores(cost), scores(defaults)
    assert mine[0] >= theirs[0] and mine[2] >= theirs[2]
