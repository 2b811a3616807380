"""No request over the provider's input limit, whatever the output allowance (issue 24).

Providers refuse a request whose input is over ``context_window - max_output_tokens``
(Anthropic does; ``provider-scripted`` does too). The main contract's formula keeps only half
of the output allowance out of the budget, so with a large allowance the budget was above
what the provider accepts: a 200,000/64,000 session under a loop that ends on the first
overflow died at request 34, a 32,000/16,000 one earlier. The budget is now capped by the
input limit, with the margin kept below it as below the window.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.models import ModelInfo
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextfold import ContextConfig, ContextFold, ContextLengthError, derive_budget
from contextfold.amplifier.scripted_provider import ScriptedProvider
from contextfold.tokens import ExactCounter
from support import SYSTEM, human, prose, reply, tool_round

TRUTH = ExactCounter("o200k_base")
FINAL_TEXT = "All topics are covered."


class InfoProvider:
    """A provider as far as budgets go: what its model info says, as a vendor provider's
    ``get_model_info`` returns it (an amplifier-core ``ModelInfo``, or a mapping that may
    state ``max_input_tokens``)."""

    name = "info"

    def __init__(self, info: Any) -> None:
        self.info = info

    def get_model_info(self) -> Any:
        return self.info


# -- whole sessions under a loop that ends on the first overflow -------------------------------


def loop_basic_plan(
    steps: int, *, context_window: int, max_output_tokens: int, result_chars: int
) -> dict[str, Any]:
    """A long tool-using prompt under loop-fold with ``overflow: raise`` (what Amplifier's
    ``loop-basic`` does: the first provider overflow ends the session), context-fold with its
    defaults, and a provider that refuses input over its window less the output allowance."""
    return {
        "session": {
            "orchestrator": {
                "module": "loop-fold",
                "config": {"overflow": "raise", "max_iterations": steps + 5},
            },
            "context": {"module": "context-fold", "config": {}},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {"steps": steps, "final_text": FINAL_TEXT},
                    "context_window": context_window,
                    "max_output_tokens": max_output_tokens,
                    "strict_sequence": True,
                },
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": result_chars}}],
        "hooks": [],
    }


async def run_to_the_end(plan: dict[str, Any]) -> tuple[ScriptedProvider, Any, int]:
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        answer = await session.execute("Research every topic on the list, then summarise.")
        assert answer == FINAL_TEXT
        provider = session.coordinator.get("providers")["scripted"]
        context = session.coordinator.get("context")
        history = await context.get_messages()
    finally:
        await session.cleanup()
    return provider, context, sum(TRUTH.count_message(m) for m in history)


@pytest.mark.parametrize(
    ("context_window", "max_output_tokens", "steps", "result_chars"),
    [
        pytest.param(200_000, 64_000, 60, 20_000, id="200k-64k", marks=pytest.mark.slow),
        pytest.param(32_000, 16_000, 60, 6_000, id="32k-16k"),
    ],
)
async def test_a_large_output_allowance_never_puts_a_request_over_the_input_limit(
    context_window: int, max_output_tokens: int, steps: int, result_chars: int
) -> None:
    plan = loop_basic_plan(
        steps,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        result_chars=result_chars,
    )
    provider, context, history_tokens = await run_to_the_end(plan)
    limit = context_window - max_output_tokens
    records = provider.records
    assert len(records) == steps + 1 and not [r.index for r in records if r.rejected]
    assert max(r.request_tokens for r in records) <= limit
    # The session did press on the limit: history is far larger than one request may be,
    # and the budget the context ran on sits under the limit, not under the window.
    assert history_tokens > 1.5 * limit
    report = context.last_report
    assert report.budget < limit < context_window - max_output_tokens // 2 - 4096


# -- the property: no delivered view over the provider's input limit -----------------------------

COUNTERS = st.sampled_from(["exact", "calibrated", "calibrated, odd readings"])
READINGS = st.sampled_from([1, 0.5, 1.0, 1.1, 3.0, 40.0])


@st.composite
def models(draw: st.DrawFn) -> dict[str, Any]:
    window = draw(st.integers(1_500, 40_000) | st.sampled_from([128_000, 200_000]))
    output = draw(st.integers(0, window - 1_000))
    return {
        "window": window,
        "output": output,
        "stated": draw(st.none() | st.integers(1_000, window)),
        "max_tokens": draw(st.none() | st.integers(1_000, 2 * window)),
        "margin": draw(st.none() | st.integers(0, 6_000)),
        "fraction": draw(st.sampled_from([0.0, 0.5, 1.0])),
        # The view may run right up to the budget: no hysteresis, no notice reserve.
        "tight": draw(st.booleans()),
    }


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["tools", "tools", "reply", "human"]),
        st.floats(0.02, 0.25),  # the new content's size, as a share of the input limit
        READINGS,
    ),
    min_size=3,
    max_size=14,
)


async def run_against_the_limit(model: dict[str, Any], counter: str, steps: list) -> None:
    window, output = model["window"], model["output"]
    info: dict[str, Any] = {"id": "m", "context_window": window, "max_output_tokens": output}
    limit = window - output
    if model["stated"] is not None:
        info["max_input_tokens"] = model["stated"]
        limit = min(limit, model["stated"])
    config: dict[str, Any] = {
        "token_counter": "exact" if counter == "exact" else "calibrated",
        "output_reserve_fraction": model["fraction"],
    }
    if model["max_tokens"] is not None:
        config["max_tokens"] = model["max_tokens"]
    if model["margin"] is not None:
        config["safety_margin"] = model["margin"]
    if model["tight"]:
        config |= {"compact_threshold": 1.0, "target_usage": 1.0}
        config |= {"compaction_notice_enabled": False}
    provider = InfoProvider(info)
    room = min(limit, model["max_tokens"] or limit, 30_000)
    ctx = ContextFold(config)
    await ctx.add_message(SYSTEM)
    await ctx.add_message(human("Research the topics and report."))
    for n, (kind, share, reading) in enumerate(steps):
        chars = max(1, int(share * room * 4))  # about 4 characters a token
        if kind == "tools":
            for message in tool_round(n, calls=1 + n % 2, result_chars=chars):
                await ctx.add_message(message)
        elif kind == "reply":
            await ctx.add_message(reply(prose(n, chars)))
        else:
            await ctx.add_message(human(prose(n, max(1, chars // 4))))
        try:
            view = await ctx.get_messages_for_request(provider=provider)
        except ContextLengthError:
            event("refused: the required core alone is over the limit")
            continue
        cost = TRUTH.count_request(view)  # messages and the reply priming, counted exactly
        assert cost <= limit, (cost, limit, model, ctx.last_report)
        if model["max_tokens"] is not None:
            assert cost <= model["max_tokens"]
        event(f"headroom {min(9, (limit - cost) * 10 // max(limit, 1))}0%")
        actual = cost if counter != "calibrated, odd readings" else max(1, int(cost * reading))
        await ctx.on_llm_response({"usage": {"input_tokens": actual}, "model": "m"})


@pytest.mark.slow
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(models(), COUNTERS, STEPS)
def test_no_delivered_view_exceeds_the_providers_input_limit(
    model: dict[str, Any], counter: str, steps: list
) -> None:
    asyncio.run(run_against_the_limit(model, counter, steps))


# -- the derivation ----------------------------------------------------------------------------


async def test_the_budget_event_says_which_bound_decided() -> None:
    events: list = []
    ctx = ContextFold(on_event=lambda e, d: events.append((e, d)))
    await ctx.set_messages([SYSTEM, human("go")])
    claude = ModelInfo(
        id="sonnet", display_name="S", context_window=200_000, max_output_tokens=64_000
    )
    await ctx.get_messages_for_request(provider=InfoProvider(claude))
    budget = [d for e, d in events if e == "context:budget"][-1]
    # The contract's fields, as the reference reports them...
    assert budget["derived_budget"] == 200_000 - 32_000 - 4096 == 163_904
    assert (budget["reserved_output"], budget["capped"]) == (32_000, False)
    # ...and what decided: the provider's input limit less the same margin.
    assert budget["input_limit"] == 136_000 and budget["safety_margin"] == 4096
    assert budget["effective_budget"] == 136_000 - 4096 and budget["bound"] == "input_limit"


async def test_a_stated_input_limit_caps_the_budget_below_the_implied_one() -> None:
    stated = {"id": "m", "context_window": 400_000, "max_output_tokens": 128_000}
    d = await derive_budget(ContextConfig(), provider=InfoProvider(stated))
    assert d.input_limit == 272_000 and d.effective_budget == 272_000 - 4096
    stated["max_input_tokens"] = 200_000
    d = await derive_budget(ContextConfig(), provider=InfoProvider(dict(stated)))
    assert d.input_limit == 200_000 and d.effective_budget == 200_000 - 4096
    # A stated limit above the implied one does not raise it; in a ModelInfo's defaults too.
    info = ModelInfo(
        id="m",
        display_name="M",
        context_window=100_000,
        max_output_tokens=20_000,
        defaults={"max_input_tokens": 90_000},
    )
    d = await derive_budget(ContextConfig(), provider=InfoProvider(info))
    assert d.input_limit == 80_000
    info = info.model_copy(update={"defaults": {"max_input_tokens": 50_000}})
    d = await derive_budget(ContextConfig(), provider=InfoProvider(info))
    assert d.input_limit == 50_000 and d.effective_budget == 50_000 - 3_125
    # Nonsense there is no limit at all.
    for bad in (0, -5, "lots", True, None):
        odd = {**stated, "max_input_tokens": bad}
        d = await derive_budget(ContextConfig(), provider=InfoProvider(odd))
        assert d.input_limit == 272_000


async def test_max_tokens_and_a_refit_cap_still_decide_below_the_limit() -> None:
    info = {"id": "m", "context_window": 200_000, "max_output_tokens": 64_000}
    d = await derive_budget(ContextConfig(max_tokens=100_000), provider=InfoProvider(info))
    assert (d.effective_budget, d.bound, d.capped) == (100_000, "max_tokens", True)
    refit = d.with_refit_cap(60_000)
    assert (refit.effective_budget, refit.bound) == (60_000, "refit_cap")
    # The waiver goes to the input limit, never above max_tokens or the limit itself.
    assert d.at_input_limit() is d
    wide = await derive_budget(ContextConfig(), provider=InfoProvider(info))
    edge = wide.at_input_limit()
    assert (edge.effective_budget, edge.bound, edge.margin_waived) == (136_000, "input_limit", True)
