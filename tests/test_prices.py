"""The price table, the ``prices`` config key and the cost model (`contextfold.costing`)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold import ConfigError, ContextConfig, ContextFold
from contextfold.costing import (
    PricedRequest,
    billed_cost,
    price_columns,
    request_cost,
    session_cost,
)
from contextfold.prices import (
    PRICE_TABLE,
    PRICE_TABLE_DATE,
    PRICE_TABLE_SOURCES,
    Prices,
    find_prices,
    prices_for,
    reference_prices,
)

SONNET = prices_for("claude-sonnet-4-5")
GPT5 = prices_for("gpt-5")

# -- the table -------------------------------------------------------------------------------


def test_the_table_carries_the_published_multipliers() -> None:
    providers = {prices.provider for prices in PRICE_TABLE}
    assert providers == {"anthropic", "openai", "google"}
    for prices in PRICE_TABLE:
        ratio = prices.cache_read / prices.input
        if prices.provider == "anthropic":
            # Read 0.1x, five-minute write 1.25x, one-hour write 2x: Anthropic's published
            # multipliers (its table rounds Haiku 3's to cents), and breakpoint caching.
            assert ratio == pytest.approx(0.1, abs=0.021)
            assert prices.cache_write_5m == pytest.approx(1.25 * prices.input, abs=0.013)
            assert prices.cache_write_1h == pytest.approx(2 * prices.input)
            assert prices.caching == "explicit"
        elif prices.provider == "openai":
            assert 0.1 - 1e-9 <= ratio <= 0.5 + 1e-9, prices.name  # cached input 0.1x-0.5x
            assert prices.cache_write_5m == prices.input and prices.caching == "automatic"
        else:
            assert ratio == pytest.approx(0.25)  # Gemini's implicit caching
            assert prices.cache_write_5m == prices.input and prices.caching == "implicit"
        assert prices.output > prices.input > 0 and prices.min_cacheable_tokens >= 1024
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", PRICE_TABLE_DATE)
    assert set(PRICE_TABLE_SOURCES) == providers


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("anthropic/claude-opus-4-1", "claude-opus-4-1"),
        ("claude-sonnet-4@20250514", "claude-sonnet-4"),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("GPT-4.1-mini", "gpt-4.1-mini"),
        ("openai/gpt-5", "gpt-5"),
        ("o4-mini-2025-04-16", "o4-mini"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
    ],
)
def test_a_model_id_finds_its_family(model: str, family: str) -> None:
    found = find_prices(model)
    assert found is not None and found.name == family


@pytest.mark.parametrize("model", ["gpt-5.4", "o1-mini", "claude-sonnet-9", "llama-3", "", 42])
def test_an_unknown_model_finds_nothing_rather_than_a_neighbour(model: object) -> None:
    assert find_prices(model) is None  # type: ignore[arg-type]


def test_the_reference_pair_is_anthropic_then_openai() -> None:
    assert [p.provider for p in reference_prices()] == ["anthropic", "openai"]
    assert reference_prices() == (SONNET, GPT5)


# -- the prices key --------------------------------------------------------------------------


def test_prices_name_a_provider_a_family_or_give_figures() -> None:
    assert prices_for("anthropic") == SONNET and prices_for("OpenAI") == GPT5
    assert prices_for("gemini-2.5-flash").provider == "google"
    custom = prices_for({"input": 2, "output": 8, "cache_read": 0.5})
    assert (custom.input, custom.cache_read, custom.cache_write_5m) == (2, 0.5, 2)
    assert custom.caching == "automatic" and custom.name == "custom"
    # A family with some figures overridden, and a one-hour cache.
    hour = prices_for({"model": "claude-sonnet-4-5", "input": 2.5, "cache_lifetime": "1h"})
    assert hour.input == 2.5 and hour.cache_lifetime == 3600
    assert hour.cache_write == SONNET.cache_write_1h  # the one-hour write price applies
    assert SONNET.cache_write == SONNET.cache_write_5m


def test_the_config_key_holds_checked_prices_and_round_trips() -> None:
    config = ContextConfig.from_mapping({"prices": {"model": "gpt-4.1", "output": 9}})
    assert isinstance(config.prices, Prices) and config.prices.output == 9
    assert ContextConfig.from_mapping(config.to_dict()).prices == config.prices
    assert ContextFold(prices="anthropic").config.prices == SONNET
    assert ContextConfig().prices is None  # no prices unless asked


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("gpt-9000", "no prices known for 'gpt-9000'"),
        ("claude-sonet-4-5", "Did you mean 'claude-sonnet-4-5'"),
        (42, "a provider or model name"),
        ({"input": 3}, "output missing"),
        ({"input": -1, "output": 3}, "input must be a price"),
        ({"input": float("nan"), "output": 3}, "input must be a price"),
        ({"input": True, "output": 3}, "input must be a price"),
        ({"input": 3, "output": 15, "cache_reed": 0.3}, "Did you mean 'cache_read'"),
        ({"model": "anthropic", "cache_lifetime": "2d"}, "cache_lifetime must be"),
        ({"model": "anthropic", "cache_lifetime": "2h"}, "over an hour"),
        ({"model": "gpt-5", "cache_lifetime": 0}, "positive number of seconds"),
        ({"model": "anthropic", "caching": "magic"}, "caching='magic' is not one of"),
        (
            {"input": 1, "output": 2, "caching": "explicit", "cache_lifetime": "1h"},
            "cache_write_1h",
        ),
        ({"model": 7}, "model must be a model or provider name"),
        ({"model": "gpt-5", "min_cacheable_tokens": -1}, "min_cacheable_tokens"),
        ({"model": "gpt-5", "min_cacheable_tokens": 10**400}, "min_cacheable_tokens"),
        ({"input": 10**400, "output": 3}, "<int of 1329 bits>"),
        ({"model": "gpt-5", "cache_lifetime": 10**400}, "over a day"),
        ({"model": "gpt-5", "cache_lifetime": "9" * 40 + "h"}, "over a day"),
        ({"model": "gpt-5", "cache_lifetime": 2.5}, "cache_lifetime must be"),
        ({"model": "gpt-5", "name": ""}, "name must be"),
        ({1: 2}, "unknown key 1"),
    ],
)
def test_bad_prices_are_a_config_error_saying_what_to_give(value: object, fragment: str) -> None:
    with pytest.raises(ConfigError, match="prices") as caught:
        ContextConfig.from_mapping({"prices": value})
    assert fragment in str(caught.value)
    assert len(str(caught.value)) < 800


# -- the cost model --------------------------------------------------------------------------


def test_a_request_after_another_reads_the_shared_prefix_and_writes_the_rest() -> None:
    first = PricedRequest(10_000, 0, output_tokens=200)
    second = PricedRequest(12_000, 10_000, output_tokens=100)
    cold = request_cost(SONNET, first)
    assert (cold.fresh_tokens, cold.cache_read_tokens, cold.cache_write_tokens) == (0, 0, 10_000)
    assert cold.cold and cold.usd == pytest.approx((10_000 * 3.75 + 200 * 15) / 1e6)
    warm = request_cost(SONNET, second, first)
    assert (warm.cache_read_tokens, warm.cache_write_tokens, warm.fresh_tokens) == (
        10_000,
        2_000,
        0,
    )
    assert warm.usd == pytest.approx((10_000 * 0.3 + 2_000 * 3.75 + 100 * 15) / 1e6)
    # OpenAI: the rest is fresh input, no write surcharge.
    openai = request_cost(GPT5, second, first)
    assert (openai.cache_read_tokens, openai.cache_write_tokens, openai.fresh_tokens) == (
        10_000,
        0,
        2_000,
    )
    assert openai.usd == pytest.approx((10_000 * 0.125 + 2_000 * 1.25 + 100 * 10) / 1e6)


def test_the_cache_goes_cold_after_its_lifetime_and_short_prompts_are_never_cached() -> None:
    first = PricedRequest(10_000, 0, at=0.0)
    in_time = request_cost(SONNET, PricedRequest(11_000, 10_000, at=299.0), first)
    late = request_cost(SONNET, PricedRequest(11_000, 10_000, at=301.0), first)
    assert in_time.cache_read_tokens == 10_000 and not in_time.cold
    assert late.cache_read_tokens == 0 and late.cold and late.cache_write_tokens == 11_000
    # A one-hour lifetime (at the one-hour write price) keeps it warm.
    hourly = SONNET.with_lifetime("1h")
    kept = request_cost(hourly, PricedRequest(11_000, 10_000, at=3000.0), first)
    assert kept.cache_read_tokens == 10_000
    assert kept.usd == pytest.approx((10_000 * 0.3 + 1_000 * 6.0) / 1e6)
    # Under the minimum cacheable length nothing is written, so nothing is read next.
    short = PricedRequest(900, 0)
    assert request_cost(SONNET, short).fresh_tokens == 900
    assert request_cost(SONNET, PricedRequest(1_500, 900), short).cache_read_tokens == 0
    # A clock going backwards is no evidence of a warm cache.
    assert request_cost(SONNET, PricedRequest(11_000, 10_000, at=-5.0), first).cold


def test_billed_usage_prices_what_the_provider_reported() -> None:
    usd = billed_cost(
        SONNET, fresh=100, cache_read=5_000, cache_write=1_000, cache_write_1h=500, output=50
    )
    assert usd == pytest.approx((100 * 3 + 5_000 * 0.3 + 1_000 * 3.75 + 500 * 6 + 50 * 15) / 1e6)


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 50_000),
        st.integers(0, 60_000),
        st.one_of(st.none(), st.floats(0, 10_000, allow_nan=False)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(requests_strategy, st.sampled_from(PRICE_TABLE), st.sampled_from([None, 60, 300, 3600]))
def test_the_column_path_prices_exactly_as_the_session_does(
    draws: list[tuple[int, int, float | None]], prices: Prices, lifetime: int | None
) -> None:
    """A replay prices hundreds of thousands of requests with `price_columns`: it must
    agree with `session_cost` request by request, and every bill adds up."""
    requests = [PricedRequest(size, shared, 0, at) for size, shared, at in draws]
    session = session_cost(prices, requests, lifetime=lifetime)
    columns = price_columns(
        prices, [r.tokens for r in requests], [r.prefix_tokens for r in requests],
        [r.at for r in requests], lifetime=lifetime,
    )  # fmt: skip
    assert columns.usd == pytest.approx([cost.usd for cost in session.requests])
    assert columns.cache_read_tokens == session.cache_read_tokens
    assert columns.cache_write_tokens == session.cache_write_tokens
    assert columns.fresh_tokens == session.fresh_tokens
    for request, cost in zip(requests, session.requests, strict=True):
        assert cost.input_tokens == request.tokens  # every input token is billed once
        assert cost.cache_read_tokens <= min(request.prefix_tokens, request.tokens)
        assert cost.usd >= 0 and math.isfinite(cost.usd)
        # No cache can make a request cost more than writing all of it.
        assert cost.usd <= request.tokens * max(prices.input, prices.cache_write) / 1e6 + 1e-12


def test_the_docs_table_is_the_shipped_table() -> None:
    """docs/pricing.md lists every family with its figures, as `PRICE_TABLE` holds them."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "pricing.md").read_text("utf-8")
    assert f"**{PRICE_TABLE_DATE}**" in page

    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    for prices in PRICE_TABLE:
        row = (
            f"| `{prices.name}` | {prices.provider} | {prices.caching} | {figure(prices.input)} "
            f"| {figure(prices.cache_read)} | {figure(prices.cache_write_5m)} "
            f"| {figure(prices.cache_write_1h)} | {figure(prices.output)} "
            f"| {prices.min_cacheable_tokens:,} |"
        )
        assert row in page, row
