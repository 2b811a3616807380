"""The cost planner's rule, held against the cost model itself: compacting at the optimal peak
is the cheapest cycle a simulated session can run, at Anthropic's and OpenAI's prices."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.compaction.cost_plan import (
    CacheWatch,
    PassOption,
    PeakRule,
    RequestSizes,
    cheapest_option,
    decide,
    optimal_peak,
    plan_request,
    reached_below,
    rewrite_price,
    still_pays,
)
from contextfold.compaction.cost_plan import cycle_cost as option_cost
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


# -- which pass: the cycle each option starts, by its cost ----------------------------------


def test_a_cycle_costs_its_reads_and_its_rewrite_spread_over_its_requests() -> None:
    sonnet = PRICES[0]
    read, extra = sonnet.cache_read, sonnet.cache_write - sonnet.cache_read
    option = PassOption("deep", after=6_000, kept=1_000)
    # The next pass at the optimal peak for this floor and rewrite: the reads average the
    # floor and the peak, the rewrite of 5,000 tokens is spread over the cycle's requests.
    span = math.sqrt(2 * extra / read * 5_000 * 400)
    expected = read * (6_000 + span / 2) + extra * 5_000 / (span / 400)
    assert option_cost(sonnet, option, 400, trigger=100_000) == pytest.approx(expected)
    # That is read x floor + sqrt(2 x read x extra x rewritten x growth).
    closed = read * 6_000 + math.sqrt(2 * read * extra * 5_000 * 400)
    assert option_cost(sonnet, option, 400, trigger=100_000) == pytest.approx(closed)
    # The trigger comes first: the cycle ends there.
    capped = read * (6_000 + 1_000 / 2) + extra * 5_000 / (1_000 / 400)
    assert option_cost(sonnet, option, 400, trigger=7_000) == pytest.approx(capped)
    # Over the trigger: the next request would compact again, never chosen.
    assert option_cost(sonnet, option, 400, trigger=5_999) == math.inf
    # No growth: only the reads count (the rewrite is spread over a cycle without end).
    assert option_cost(sonnet, option, 0, trigger=100_000) == pytest.approx(read * 6_000)


def test_a_pass_that_keeps_the_cached_prefix_wins_where_it_leaves_little_more() -> None:
    sonnet, gpt = PRICES
    deep = PassOption("deep", after=9_400, kept=1_100)
    newest = PassOption("newest", after=10_700, kept=7_800)
    # Rewriting 8,300 tokens to take out 1,300 more than the other option does not pay.
    assert cheapest_option(sonnet, [deep, newest], 470, trigger=14_100) is newest
    # Where it leaves much more, the deep pass wins: its reads are fewer on every request.
    far = PassOption("newest", after=30_000, kept=28_000)
    assert cheapest_option(sonnet, [deep, far], 470, trigger=40_000) is deep
    # An option over the trigger is never chosen, and the first stands for equals.
    over = PassOption("newest", after=15_000, kept=14_000)
    assert cheapest_option(gpt, [deep, over], 470, trigger=14_100) is deep
    assert cheapest_option(gpt, [deep, deep._replace(name="twin")], 470, 14_100) is deep
    with pytest.raises(ValueError, match="at least one option"):
        cheapest_option(sonnet, [], 470, 14_100)


@settings(max_examples=200, deadline=None)
@given(
    after=st.integers(0, 100_000),
    kept=st.integers(0, 100_000),
    more=st.integers(0, 50_000),
    growth=st.floats(0, 5_000),
    trigger=st.integers(1, 200_000),
)
def test_a_cycle_costs_more_the_more_it_rewrites_and_the_more_it_leaves(
    after: int, kept: int, more: int, growth: float, trigger: int
) -> None:
    for prices in PRICES:
        option = PassOption("a", after, min(kept, after))
        cost = option_cost(prices, option, growth, trigger)
        assert cost >= 0
        # Keeping less of the prefix never makes a cycle cheaper...
        rewrites_more = option._replace(kept=max(0, option.kept - more))
        assert option_cost(prices, rewrites_more, growth, trigger) >= cost * (1 - 1e-9)
        # ...nor leaving more of the view with the same prefix kept.
        leaves_more = option._replace(after=after + more)
        assert option_cost(prices, leaves_more, growth, trigger) >= cost * (1 - 1e-9)
        if after > trigger:
            assert cost == math.inf


def test_a_cost_pass_reaches_its_target_under_the_bands_middle_with_room_for_a_few_requests() -> (
    None
):
    # Slow growth: the middle of the band between the target and the trigger.
    assert reached_below(5_000, 9_000, 50.0) == 7_000
    # Faster growth: as far as four requests of it fit under the trigger.
    assert reached_below(5_000, 9_000, 700.0) == 9_000 - 4 * 700
    # Never under the configured target, however fast the view grows.
    assert reached_below(5_000, 9_000, 5_000.0) == 5_000
    # No growth: the middle.
    assert reached_below(5_000, 9_000, 0.0) == 7_000


@given(
    target=st.integers(0, 200_000),
    band=st.integers(0, 200_000),
    growth=st.floats(0, 1e6, allow_nan=False),
)
def test_what_a_cost_pass_counts_as_reached_lies_between_the_target_and_the_middle(
    target: int, band: int, growth: float
) -> None:
    trigger = target + band
    reached = reached_below(target, trigger, growth)
    assert target <= reached <= max(target, (target + trigger) // 2)


def test_the_ledger_the_view_carries_rides_half_on_the_bands_middle() -> None:
    # The hold a deep pass weighs the view against carries half the ledger: a pass that
    # stopped there has not missed.
    assert reached_below(5_000, 9_000, 50.0, ledger=800) == 7_400
    # Still never closer to the trigger than four requests of growth.
    assert reached_below(5_000, 9_000, 700.0, ledger=800) == 9_000 - 4 * 700
    # A negative ledger figure counts as none.
    assert reached_below(5_000, 9_000, 50.0, ledger=-800) == 7_000


@given(
    target=st.integers(0, 200_000),
    band=st.integers(0, 200_000),
    growth=st.floats(0, 1e6, allow_nan=False),
    ledger=st.integers(0, 50_000),
)
def test_with_a_ledger_what_a_pass_counts_as_reached_stays_under_the_trigger(
    target: int, band: int, growth: float, ledger: int
) -> None:
    trigger = target + band
    reached = reached_below(target, trigger, growth, ledger)
    assert reached >= reached_below(target, trigger, growth)
    assert reached <= max(target, trigger)


SONNET = prices_for("claude-sonnet-4-5")


def steady(size: int, floor: int | None = None) -> RequestSizes:
    """A view of ``size`` tokens, 8 requests after a pass that left 2,000 (head 500),
    under a trigger of 20,000."""
    return RequestSizes(size, 20_000, 6_000, 500, 2_000, 8, floor)


def test_an_early_pass_that_lands_near_where_it_started_does_not_pay() -> None:
    rule = PeakRule(SONNET)
    sizes = steady(15_000)
    # The rule fires on the floor the last pass reached...
    assert plan_request(rule, sizes, warm=True) == "optimal_peak"
    # ... and the pass pays where it gets near that floor,
    assert still_pays(rule, sizes, 2_500)
    # but not where protection holds it far above it: rewriting 14,000 tokens to save
    # 1,000 costs more than the reads it saves before the trigger.
    assert not still_pays(rule, sizes, 14_000)


def test_the_floor_an_early_pass_reached_is_what_the_rule_expects_until_a_pass_commits() -> None:
    rule = PeakRule(SONNET)
    # Having found it could not go below 14,000, the rule does not fire again at once ...
    assert plan_request(rule, steady(15_200, floor=14_000), warm=True) == ""
    # ... nor while the view stays near that floor, the trigger a hard bound still.
    assert plan_request(rule, steady(19_000, floor=14_000), warm=True) == ""
    assert plan_request(rule, steady(20_001, floor=14_000), warm=True) == "trigger"
    # A cold cache: whatever the floor, a pass rewrites nothing the next request would read.
    assert plan_request(rule, steady(15_200, floor=14_000), warm=False) == "cold_cache"


def test_a_committed_pass_forgets_the_floor_a_declined_one_reached() -> None:
    watch = CacheWatch()
    watch.floor = 14_000
    watch.delivered(100.0, passed=False)
    assert watch.floor == 14_000
    watch.delivered(101.0, passed=True)
    assert watch.floor is None
