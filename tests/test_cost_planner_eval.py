"""The cost planner scored by the eval, end to end: on the long-horizon corpus it costs less
than contextfold's defaults at equal or better fact scores (far facts in view; in view, the
ledger or a summary; not lost; near facts in view), with its choice of pass and its hold on
what the conversation drew on in play; and less than server-side clearing on the requests
both answer. Scored on the shipped corpus's eight sessions (on its first three, at 8,000
tokens, it keeps one near fact of 222 fewer in view)."""

from __future__ import annotations

import pytest

from contextfold.evaluation.longhorizon import CorpusSettings, generate_corpus
from contextfold.evaluation.policies import builtin_policy, config_policy
from contextfold.evaluation.runner import EvalSettings, Totals, evaluate

# The baseline: contextfold's defaults with the threshold planner named, whatever the default.
THRESHOLD = config_policy("threshold", {"planner": "threshold"})
COST = config_policy("cost", {"planner": "cost"})


def scores(totals: Totals) -> tuple[int, int, int, int]:
    """Far in view; far in view, ledger or summary; far not lost; near in view."""
    in_view = totals.count("far", "in_view")
    shown = in_view + totals.count("far", "ledger_or_summary")
    kept = shown + totals.count("far", "recoverable")
    return in_view, shown, kept, totals.count("near", "in_view")


@pytest.mark.slow
@pytest.mark.parametrize("window", [8_000, 16_000])
def test_the_cost_planner_is_cheaper_at_equal_or_better_fact_scores(window: int) -> None:
    corpus = generate_corpus(CorpusSettings(seed=0, sessions=8))
    policies = [THRESHOLD, COST]
    report = evaluate(corpus, policies, EvalSettings(windows=(window,)))
    defaults, cost = report.totals_for("long-horizon", window)
    assert defaults.policy == "threshold" and cost.policy == "cost"
    assert cost.facts("far") > 0
    for mine, theirs in zip(scores(cost), scores(defaults), strict=True):
        assert mine >= theirs
    for pricing in ("anthropic", "openai"):
        assert cost.cost(pricing) < defaults.cost(pricing)


@pytest.mark.slow
def test_the_cost_planner_costs_less_than_server_side_clearing_on_the_requests_both_answer() -> (
    None
):
    # At 16,000 tokens server-side clear_tool_uses answers every long-horizon request (and
    # loses a third of the near facts): the cost planner still costs less, at both prices.
    corpus = generate_corpus(CorpusSettings(seed=0, sessions=8))
    policies = [builtin_policy("clear-tool-uses"), COST]
    report = evaluate(corpus, policies, EvalSettings(windows=(16_000,)))
    clearing, cost = report.totals_for("long-horizon", 16_000)
    assert clearing.policy == "clear-tool-uses" and cost.policy == "cost"
    assert cost.answered_requests == cost.requests  # every request, by both
    for pricing in ("anthropic", "openai"):
        mine, theirs = cost.answered_cost(pricing), clearing.answered_cost(pricing)
        assert mine is not None and theirs is not None
        assert mine < theirs
