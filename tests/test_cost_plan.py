"""The cost planner's rule, held against the cost model itself: compacting at the optimal peak
is the cheapest cycle a simulated session can run, at Anthropic's and OpenAI's prices."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.compaction.cost_plan import decide, optimal_peak, rewrite_price
from contextfold.costing import PricedRequest, session_cost
from contextfold.prices import prices_for

PRICES = [prices_for("claude-sonnet-4-5"), prices_for("gpt-5")]


def cycle_cost(prices, floor: int, peak: float, growth: int, requests: int = 600) -> float:
    """The bill of a session growing by ``growth`` a request and compacted back to
    ``floor`` tokens whenever it reaches ``peak``: a steady request shares all but what it
    added with the one before; the request after a pass shares only its first 1,200 tokens
    (the system prompt and the task, which a pass leaves as they are)."""
    system = 1_200
    size, sent = floor, []
    for _ in range(requests):
        grown = size + growth
        if grown >= peak:
            sent.append(PricedRequest(floor, prefix_tokens=system))
            size = floor
        else:
            sent.append(PricedRequest(grown, prefix_tokens=size))
            size = grown
    return session_cost(prices, sent).usd


@pytest.mark.parametrize("prices", PRICES, ids=lambda p: p.name)
@pytest.mark.parametrize(("floor", "growth"), [(4_000, 600), (8_000, 300), (20_000, 1_500)])
def test_the_optimal_peak_is_the_cheapest_cycle(prices, floor: int, growth: int) -> None:
    best = optimal_peak(prices, floor, growth, head=1_200)
    at_best = cycle_cost(prices, floor, best, growth)
    for factor in (0.6, 0.8, 1.25, 1.6, 2.5):
        other = floor + (best - floor) * factor
        assert at_best <= cycle_cost(prices, floor, other, growth) * 1.01, factor


def test_anthropic_rewrites_cost_a_write_and_openai_fresh_input() -> None:
    anthropic, openai = PRICES
    assert rewrite_price(anthropic) == anthropic.cache_write
    assert rewrite_price(openai) == openai.input
    # 1.25x write, 0.1x read: peak = floor + sqrt(23 x floor x growth).
    expected = 4_000 + math.sqrt(23 * 2_800 * 600)
    assert optimal_peak(anthropic, 4_000, 600, head=1_200) == pytest.approx(expected)


def test_no_growth_or_a_free_rewrite_never_compacts() -> None:
    anthropic = PRICES[0]
    assert optimal_peak(anthropic, 4_000, 0) == math.inf
    free = anthropic.with_lifetime("5m")
    free = type(free)(**{**free.to_dict(), "cache_write_5m": free.cache_read})
    assert optimal_peak(free, 4_000, 600) == math.inf


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 200_000),
    growth=st.floats(0, 5_000),
    after=st.integers(0, 100_000),
    trigger=st.integers(1, 200_000),
    warm=st.booleans(),
)
def test_the_trigger_is_a_hard_bound_and_nothing_compacts_to_no_gain(
    size: int, growth: float, after: int, trigger: int, warm: bool
) -> None:
    decision = decide(
        PRICES[0], size=size, growth=growth, after=after, head=0, trigger=trigger, warm=warm
    )
    if size > trigger:
        assert decision.compact and decision.reason == "trigger"
    elif size <= after:
        assert not decision.compact
    elif not warm:
        assert decision.compact and decision.reason == "cold_cache"
