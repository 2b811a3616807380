"""Budget derivation in the contract's priority order, the cap, and the context:budget event."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from amplifier_core.models import ModelInfo, ProviderInfo

from contextfold import ContextConfig, ContextFold, derive_budget
from support import SYSTEM, human


class Provider:
    def __init__(self, model_info=None, defaults=None, raises=False) -> None:
        self._model_info = model_info
        self._defaults = defaults
        self._raises = raises
        self.name = "fake"

    def get_model_info(self):
        if self._raises:
            raise RuntimeError("boom")
        return self._model_info

    def get_info(self):
        return ProviderInfo(id="fake", display_name="Fake", defaults=self._defaults or {})


MI = ModelInfo(id="m-1", display_name="M", context_window=200_000, max_output_tokens=32_000)


async def test_priority_order_and_formula() -> None:
    cfg = ContextConfig()
    d = await derive_budget(cfg, token_budget=5_000, provider=Provider(MI))
    assert (d.source, d.effective_budget) == ("explicit", 5_000)
    d = await derive_budget(cfg, provider=Provider(MI))
    assert d.source == "provider_model_info"
    # The contract's formula is reported; the provider's input limit (the window less the
    # whole output allowance) less the same margin is what the budget may use.
    assert d.derived_budget == 200_000 - 16_000 - 4096
    assert d.input_limit == 200_000 - 32_000 and d.safety_margin == 4096
    assert d.effective_budget == 200_000 - 32_000 - 4096 and d.bound == "input_limit"
    assert d.model == "m-1"
    d = await derive_budget(
        cfg, provider=Provider(None, {"context_window": 1_048_576, "max_output_tokens": 65_536})
    )
    assert d.source == "provider_defaults"
    assert (d.reserved_output, d.derived_budget) == (32_768, 1_048_576 - 32_768 - 4096)
    assert d.effective_budget == 1_048_576 - 65_536 - 4096
    d = await derive_budget(cfg, provider=Provider(None, {}))
    assert (d.source, d.effective_budget) == ("max_tokens_fallback", 200_000)
    d = await derive_budget(cfg)
    assert d.source == "max_tokens_fallback"
    d = await derive_budget(cfg, provider=Provider(MI, raises=True))  # a broken provider
    assert d.source == "max_tokens_fallback"


async def test_max_tokens_is_a_cap_on_every_path() -> None:
    cfg = ContextConfig(max_tokens=50_000)
    for kwargs in ({"token_budget": 80_000}, {"provider": Provider(MI)}, {}):
        d = await derive_budget(cfg, **kwargs)
        assert d.effective_budget == 50_000 and d.capped
    above = ContextConfig(max_tokens=10_000_000)
    d = await derive_budget(above, provider=Provider(MI))
    assert d.effective_budget == 200_000 - 32_000 - 4096 and not d.capped
    assert d.bound == "input_limit"
    # Between the input limit and the contract's formula, max_tokens changes nothing.
    between = await derive_budget(ContextConfig(max_tokens=170_000), provider=Provider(MI))
    assert between.effective_budget == d.effective_budget and not between.capped


async def test_async_and_dict_model_info() -> None:
    class AsyncProvider:
        async def get_model_info(self):
            return {"id": "a", "context_window": 10_000, "max_output_tokens": 2000}

    d = await derive_budget(ContextConfig(), provider=AsyncProvider())
    # A 10,000 window keeps 1/32 of itself as the margin, not 4,096 of it.
    assert d.safety_margin == 312
    assert d.effective_budget == 10_000 - 2000 - 312


@pytest.mark.parametrize("bad", [0, -1, 1.5, "100", True])
async def test_bad_token_budget(bad: object) -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.add_message(human("x"))
    with pytest.raises(ValueError, match="token_budget"):
        await ctx.get_messages_for_request(token_budget=bad)  # type: ignore[arg-type]


async def test_budget_event_payload_only_on_change_and_only_when_delivered() -> None:
    events: list = []
    ctx = ContextFold(
        max_tokens=500_000, token_counter="heuristic", on_event=lambda e, d: events.append((e, d))
    )
    await ctx.set_messages([SYSTEM, human("hi")])
    provider = Provider(None, {"context_window": 1_048_576, "max_output_tokens": 65_536})
    for _ in range(3):
        await ctx.get_messages_for_request(provider=provider)
    budget = [d for e, d in events if e == "context:budget"]
    assert len(budget) == 1
    assert {
        k: budget[0][k]
        for k in (
            "source",
            "context_window",
            "max_output_tokens",
            "reserved_output",
            "derived_budget",
            "max_tokens",
            "max_tokens_fallback",
            "capped",
            "effective_budget",
        )
    } == {
        "source": "provider_defaults",
        "context_window": 1_048_576,
        "max_output_tokens": 65_536,
        "reserved_output": 32_768,
        "derived_budget": 1_011_712,
        "max_tokens": 500_000,
        "max_tokens_fallback": 200_000,
        "capped": True,
        "effective_budget": 500_000,
    }
    await ctx.get_messages_for_request(token_budget=400_000)
    assert [d["source"] for e, d in events if e == "context:budget"] == [
        "provider_defaults",
        "explicit",
    ]
    # A failed request leaves no budget trace.
    events.clear()
    with pytest.raises(Exception, match="cannot go without"):
        await ctx.get_messages_for_request(token_budget=3)
    assert not [e for e, _ in events if e == "context:budget"]


async def test_provider_without_window_logs(caplog: pytest.LogCaptureFixture) -> None:
    d = await derive_budget(ContextConfig(), provider=SimpleNamespace(name="bare"))
    assert d.source == "max_tokens_fallback"
    assert "publishes no context window" in caplog.text


async def test_a_forced_refit_caps_later_requests_so_the_overflow_does_not_repeat() -> None:
    events: list = []
    ctx = ContextFold(token_counter="heuristic", on_event=lambda e, d: events.append((e, d)))
    await ctx.set_messages([SYSTEM, human("go")])
    provider = Provider(MI)
    await ctx.get_messages_for_request(provider=provider)
    derived = ctx.last_report.budget
    # The provider refused a request we believed fit; the loop refits to 50,000.
    await ctx.get_messages_for_request(token_budget=50_000, provider=provider, hard_fit=True)
    await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget == 50_000 < derived
    budget_events = [d for e, d in events if e == "context:budget"]
    assert budget_events[-1]["refit_cap"] == 50_000 and budget_events[-1]["capped"] is True
    # An explicit budget is the caller's word and is not capped.
    await ctx.get_messages_for_request(token_budget=80_000)
    assert ctx.last_report.budget == 80_000
    # A later, smaller refit lowers the cap; a larger one never raises it.
    await ctx.get_messages_for_request(token_budget=40_000, provider=provider, hard_fit=True)
    await ctx.get_messages_for_request(token_budget=90_000, provider=provider, hard_fit=True)
    await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget == 40_000


async def test_the_refit_cap_yields_when_the_required_core_cannot_fit_under_it() -> None:
    """A session dies only when it must: the cap a refit taught is a lesson, not a limit the
    provider stated, so a request whose required core exceeds it goes out at the budget."""
    ctx = ContextFold(token_counter="heuristic")
    provider = Provider(MI)
    await ctx.set_messages([SYSTEM, human("go")])
    await ctx.get_messages_for_request(token_budget=2_000, provider=provider, hard_fit=True)
    await ctx.add_message(human("x " * 4_000))  # a last human prompt larger than the cap
    view = await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget > 2_000 and view[-1]["content"].startswith("x ")
    # Where the core does fit under the cap, the cap holds.
    await ctx.add_message({"role": "assistant", "content": "ok"})
    await ctx.add_message(human("short"))
    await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget == 2_000


SMALL = ModelInfo(id="m-small", display_name="S", context_window=8_000, max_output_tokens=1_000)


async def test_a_core_over_the_margin_but_under_the_input_limit_goes_out_at_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Degrade before refusing: the safety margin is for the estimate's error. A last human
    prompt that fits the provider's input limit (8,000 - 1,000) but not the budget with its
    margin (8,000 - 1,000 - 4,096) is sent, fitted to the limit, with one warning and the
    waiver on the budget event; a smaller one goes back under the margin."""
    events: list = []
    ctx = ContextFold(
        token_counter="exact", safety_margin=4096, on_event=lambda e, d: events.append((e, d))
    )
    provider = Provider(SMALL)
    await ctx.set_messages([SYSTEM, human("go")])
    await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget == 8_000 - 1_000 - 4_096
    prompt = human("word " * 5_000)  # about 5,000 tokens: over 2,904, under 7,000
    await ctx.add_message({"role": "assistant", "content": "ok"})
    await ctx.add_message(prompt)
    with caplog.at_level("WARNING", logger="contextfold.manager"):
        view = await ctx.get_messages_for_request(provider=provider)
        await ctx.get_messages_for_request(provider=provider)
    assert view[-1]["content"] == prompt["content"]
    assert ctx.last_report.budget == 7_000 and ctx.last_report.tokens_after <= 7_000
    budget = [d for e, d in events if e == "context:budget"][-1]
    assert budget["margin_waived"] is True and budget["effective_budget"] == 7_000
    assert budget["bound"] == "input_limit" and budget["input_limit"] == 7_000
    assert caplog.text.count("safety margin") == 1  # once, not on every request
    # Under the margin again: the margin holds again.
    await ctx.add_message({"role": "assistant", "content": "done"})
    await ctx.add_message(human("short"))
    await ctx.get_messages_for_request(provider=provider)
    assert ctx.last_report.budget == 8_000 - 1_000 - 4_096
    assert [d for e, d in events if e == "context:budget"][-1]["margin_waived"] is False


async def test_the_input_limit_is_the_last_resort_not_a_way_around_a_cap_or_the_limit() -> None:
    provider = Provider(SMALL)
    prompt = human("word " * 5_000)
    # max_tokens is the user's cap: waiving the margin never goes above it.
    capped = ContextFold(token_counter="exact", safety_margin=4096, max_tokens=4_000)
    await capped.set_messages([SYSTEM, prompt])
    with pytest.raises(Exception, match="cannot go without"):
        await capped.get_messages_for_request(provider=provider)
    # An explicit budget is the caller's word: no waiver.
    explicit = ContextFold(token_counter="exact")
    await explicit.set_messages([SYSTEM, prompt])
    with pytest.raises(Exception, match="effective budget is 3,000"):
        await explicit.get_messages_for_request(token_budget=3_000, provider=provider)
    # Over the provider's input limit itself: refused, history untouched.
    huge = ContextFold(token_counter="exact")
    await huge.set_messages([SYSTEM, human("word " * 9_000)])
    before = await huge.get_messages()
    with pytest.raises(Exception, match="effective budget is 7,000"):
        await huge.get_messages_for_request(provider=provider)
    assert await huge.get_messages() == before


async def test_the_input_limit_decision_keeps_every_bound() -> None:
    cfg = ContextConfig(safety_margin=4096)
    d = await derive_budget(cfg, provider=Provider(SMALL))
    edge = d.at_input_limit()
    assert edge.effective_budget == 7_000 and edge.margin_waived and not d.margin_waived
    assert edge.at_input_limit().effective_budget == 7_000
    explicit = await derive_budget(cfg, token_budget=3_000, provider=Provider(SMALL))
    assert explicit.at_input_limit() is explicit
    fallback = await derive_budget(cfg)
    assert fallback.at_input_limit() is fallback
    assert d.with_refit_cap(5_000).at_input_limit().effective_budget == 5_000
    small_cap = await derive_budget(
        ContextConfig(safety_margin=4096, max_tokens=2_000), provider=Provider(SMALL)
    )
    assert small_cap.at_input_limit() is small_cap  # the cap is below the margin's budget


def test_awaitable_is_recognised_as_inspect_does() -> None:
    import inspect
    import types

    from contextfold.budget import _awaitable

    async def coroutine_function() -> int:
        return 1

    @types.coroutine
    def generator_coroutine():  # type: ignore[no-untyped-def]
        yield

    class Future:
        def __await__(self):  # type: ignore[no-untyped-def]
            yield

    def plain_generator():  # type: ignore[no-untyped-def]
        yield

    made = coroutine_function()
    cases = [made, generator_coroutine(), Future(), plain_generator(), MI, {"a": 1}, None, 5]
    try:
        for value in cases:
            assert _awaitable(value) is inspect.isawaitable(value), value
    finally:
        made.close()


async def test_a_steady_provider_gets_the_same_decision_and_a_change_a_new_one() -> None:
    cfg = ContextConfig()
    first = await derive_budget(cfg, provider=Provider(MI))
    assert await derive_budget(cfg, provider=Provider(MI)) is first
    other = ModelInfo(id="m-1", display_name="M", context_window=100_000, max_output_tokens=8_000)
    changed = await derive_budget(cfg, provider=Provider(other))
    assert changed.effective_budget == 100_000 - 8_000 - 3_125 and changed is not first
    capped = await derive_budget(ContextConfig(max_tokens=50_000), provider=Provider(other))
    assert capped.effective_budget == 50_000  # another config is another decision
    async_info = Provider(MI)

    async def model_info() -> ModelInfo:
        return MI

    async_info.get_model_info = model_info  # type: ignore[method-assign]
    assert (
        await derive_budget(cfg, provider=async_info)
    ).effective_budget == first.effective_budget
