"""``planner: cost`` through the public API: it compacts where the prompt cache's prices make a
pass cheapest (before the trigger), at once when the cache has gone cold, deep, and never over
the budget; its config is checked; and every ``context:report`` carries the request's cost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ConfigError, ContextFold
from support import SYSTEM, human, tool_round

BUDGET = 60_000
# Anthropic's multipliers (reads 0.1x, writes 1.25x), a five-minute cache.
SONNET = "claude-sonnet-4-5"


def reports_of(heard: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [data for event, data in heard if event == "context:report"]


async def run_session(
    context: ContextFold, rounds: int, *, result_chars: int = 2_000, budget: int = BUDGET
) -> list[Any]:
    """An agent task of ``rounds`` tool rounds, a request before each; the reports."""
    await context.add_message(SYSTEM)
    await context.add_message(human("Research every topic and summarise."))
    reports = []
    for n in range(rounds):
        for message in tool_round(n, result_chars=result_chars):
            await context.add_message(message)
        await context.get_messages_for_request(token_budget=budget)
        reports.append(context.last_report)
    return reports


def cost_context(**settings: Any) -> ContextFold:
    return ContextFold(
        {"planner": "cost", "prices": SONNET, "token_counter": "heuristic"}, **settings
    )


def threshold_context() -> ContextFold:
    """The baseline the cost planner is measured against: the threshold planner, named."""
    return ContextFold(planner="threshold", prices=SONNET, token_counter="heuristic")


async def test_the_cost_planner_compacts_at_the_optimal_peak_before_the_trigger() -> None:
    threshold = await run_session(threshold_context(), 120)
    cost = await run_session(cost_context(), 120)
    trigger = cost[0].trigger
    # The threshold planner waits for the trigger every time.
    passes = [r for r in threshold if r.compacted]
    assert passes and all(r.tokens_before > trigger for r in passes)
    assert {r.compacted_by for r in passes} == {"trigger"}
    # The cost planner compacts where reads plus the rewrite cost least: well before it.
    # (The first pass expects to reach only the configured target, so its peak is near the
    # trigger; once a pass has shown how deep it goes, the peak is far below.)
    early = [r for r in cost if r.compacted and r.compacted_by == "optimal_peak"]
    assert len(early) >= 4
    assert all(r.tokens_before < trigger for r in early)
    assert all(r.tokens_before < trigger / 3 for r in early[1:])
    # Passes then come at a steady size: the peak for the floor they reach and the growth.
    # (The identifier ledger's pages raise the floor a little at each pass, and the peak
    # with it: the rule alone is seen without them.)
    for later in early[2:]:
        assert later.tokens_before < early[1].tokens_before * 1.25
    plain = await run_session(cost_context(ledger_share=0), 120)
    steady = [r for r in plain if r.compacted and r.compacted_by == "optimal_peak"][1:]
    assert len(steady) >= 4
    for later in steady[1:]:
        assert later.tokens_before == pytest.approx(steady[0].tokens_before, rel=0.05)
    # And the run costs less at those prices, each request priced by the cost model.
    assert sum(r.cost_usd for r in cost) < 0.8 * sum(r.cost_usd for r in threshold)


async def test_a_cost_pass_goes_deep() -> None:
    cost = await run_session(cost_context(), 60, budget=20_000)
    threshold = await run_session(threshold_context(), 60, budget=20_000)
    deepest = min(r.tokens_after for r in cost if r.compacted)
    assert deepest < min(r.tokens_after for r in threshold if r.compacted) / 2
    assert deepest < cost[0].target


async def test_a_cost_pass_keeps_the_newest_result_groups_and_may_shorten_all_but_one() -> None:
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Research every topic and summarise."))
    checked = 0
    for n in range(60):
        for message in tool_round(n, result_chars=2_000):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=20_000)
        report = context.last_report
        if not (report.compacted and report.compacted_by == "optimal_peak"):
            continue
        results = {m["tool_call_id"]: m["content"] for m in view if m.get("role") == "tool"}
        # The newest five results (protected_tool_results) keep their call groups...
        newest = [f"call_{k}_0" for k in range(n - 4, n + 1)]
        assert all(call in results for call in newest)
        # ...the one being answered whole, the older ones shortened (head and tail, their
        # recall id named): whole, they would set the floor every later request reads.
        assert len(results[newest[-1]]) == 2_000
        shortened = [results[call] for call in newest[:-1] if len(results[call]) < 2_000]
        assert shortened and all("context_recall(" in text for text in shortened)
        assert report.relaxed[:2] == ["recent", "recent_tool_results_shortened"]
        checked += 1
    assert checked >= 3


async def steady_then(context: ContextFold, rounds: int) -> None:
    """A few rounds under any peak (a small start), each answered by a warm reading: an
    earlier task, then the current one's first rounds (a deep pass holds the current task
    whole while it is small: the earlier task is what a pass takes out)."""
    await context.add_message(SYSTEM)
    await context.add_message(human("Research every topic and summarise."))
    for n in range(rounds):
        if n == rounds - 2:
            await context.add_message(human("Now check the two newest topics again."))
        for message in tool_round(n, result_chars=2_000):
            await context.add_message(message)
        await context.get_messages_for_request(token_budget=BUDGET)
        estimate = context.last_view_estimate or 0
        await context.on_llm_response(usage(estimate, cache_read=max(0, estimate - 600)))


def usage(tokens: int, *, cache_read: int) -> dict[str, Any]:
    """An Anthropic SDK usage: uncached input apart from what the cache served."""
    return {
        "usage": {
            "input_tokens": tokens - cache_read,
            "cache_read_input_tokens": cache_read,
            "output_tokens": 20,
        },
        "model": SONNET,
    }


async def test_a_reading_with_no_cache_reads_makes_the_next_request_compact_deep() -> None:
    context = cost_context()
    await steady_then(context, 12)
    report = context.last_report
    assert report is not None and not report.compacted  # under the trigger and any peak
    await context.on_llm_response(usage(context.last_view_estimate or 0, cache_read=0))
    for message in tool_round(99, result_chars=2_000):
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)
    cold = context.last_report
    assert cold is not None and cold.compacted and cold.compacted_by == "cold_cache"
    assert cold.tokens_after < cold.tokens_before / 2
    # The threshold planner does not know about the cache: the same session does not compact.
    plain = threshold_context()
    await steady_then(plain, 12)
    await plain.on_llm_response(usage(plain.last_view_estimate or 0, cache_read=0))
    for message in tool_round(99, result_chars=2_000):
        await plain.add_message(message)
    await plain.get_messages_for_request(token_budget=BUDGET)
    assert plain.last_report is not None and not plain.last_report.compacted


async def test_the_request_after_a_pass_reading_nothing_is_not_taken_for_a_cold_cache() -> None:
    # The request after a pass reads only the head from the cache (here nothing: the head
    # is under the cacheable minimum): that reading says nothing of the cache's lifetime.
    context = cost_context()
    await steady_then(context, 12)
    await context.on_llm_response(usage(context.last_view_estimate or 0, cache_read=0))
    for message in tool_round(50, result_chars=2_000):
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)
    assert context.last_report is not None and context.last_report.compacted
    await context.on_llm_response(usage(context.last_view_estimate or 0, cache_read=0))
    for message in tool_round(51, result_chars=2_000):
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)
    assert context.last_report is not None and not context.last_report.compacted


async def test_time_beyond_the_cache_lifetime_makes_the_next_request_compact_deep() -> None:
    context = cost_context(prices={"model": SONNET, "cache_lifetime": 1})
    await steady_then(context, 12)
    for message in tool_round(99, result_chars=2_000):
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)
    assert context.last_report is not None and not context.last_report.compacted
    await asyncio.sleep(1.2)  # the provider's cache has forgotten the prefix
    for message in tool_round(100, result_chars=2_000):
        await context.add_message(message)
    await context.get_messages_for_request(token_budget=BUDGET)
    cold = context.last_report
    assert cold is not None and cold.compacted and cold.compacted_by == "cold_cache"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    budget=st.integers(1_500, 30_000),
    rounds=st.lists(
        st.tuples(
            st.integers(1, 3), st.integers(50, 6_000), st.sampled_from(["warm", "cold", "-"])
        ),
        min_size=1,
        max_size=30,
    ),
    model_prices=st.sampled_from([SONNET, "gpt-5", "gemini-2.5-flash", None]),
)
def test_the_cost_planner_never_exceeds_the_budget(
    budget: int, rounds: list[tuple[int, int, str]], model_prices: str | None
) -> None:
    async def go() -> None:
        context = ContextFold(planner="cost", prices=model_prices, token_counter="heuristic")
        await context.add_message(SYSTEM)
        await context.add_message(human("Research every topic and summarise."))
        for n, (calls, chars, reading) in enumerate(rounds):
            for message in tool_round(n, calls=calls, result_chars=chars):
                await context.add_message(message)
            try:
                view = await context.get_messages_for_request(token_budget=budget)
            except Exception as error:  # only the honest refusal: the core cannot fit
                assert type(error).__name__ == "ContextLengthError"
                return
            report = context.last_report
            assert report is not None
            assert report.tokens_after <= report.budget
            counter = context.counter
            recount = sum(counter.count_message(m) for m in view) + counter.request_overhead
            assert recount <= report.budget
            estimate = context.last_view_estimate or 0
            if reading != "-":
                read = 0 if reading == "cold" else max(0, estimate - 500)
                await context.on_llm_response(usage(estimate, cache_read=read))

    asyncio.run(go())


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"planner": "fast"}, ["planner='fast'", "threshold", "cost"]),
        ({"planner": 1}, ["planner=1", "threshold"]),
        ({"planner": "cost", "prices": "gpt-9000"}, ["gpt-9000", "provider"]),
    ],
)
def test_a_bad_planner_or_price_entry_is_refused_clearly(
    settings: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        ContextFold(settings)
    for word in words:
        assert word in str(raised.value)


async def test_a_refused_config_leaves_a_durable_session_as_it_was(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    context = ContextFold(store=url, session_id="s1", token_counter="heuristic")
    await run_session(context, 3)
    before = await context.get_messages()
    with pytest.raises(ConfigError, match="planner"):
        ContextFold(store=url, session_id="s1", planner="cheapest")
    again = ContextFold(store=url, session_id="s1", planner="cost", token_counter="heuristic")
    assert await again.get_messages() == before


async def test_every_report_carries_the_request_cost() -> None:
    heard: list[tuple[str, dict[str, Any]]] = []
    context = ContextFold(
        report_events="every_request",
        token_counter="heuristic",
        on_event=lambda event, data: heard.append((event, data)),
    )
    await run_session(context, 30, budget=20_000)
    reports = reports_of(heard)
    assert len(reports) == 30
    # No prices configured and no model: Anthropic's reference prices.
    assert {r["prices"] for r in reports} == {SONNET}
    passes = [r for r in reports if r["compacted"]]
    first_pass = reports.index(passes[0])
    steady = [r for r in reports[first_pass + 1 :] if not r["compacted"]]
    assert steady and passes
    # A steady request reads what it repeats from the cache: per token it costs a fraction
    # of a pass's request, which writes the view again.
    per_token = [r["cost_usd"] / r["tokens_after"] for r in steady]
    assert max(per_token) < min(r["cost_usd"] / r["tokens_after"] for r in passes)
    assert {r["compacted_by"] for r in passes} <= {"trigger", "budget"}
    # Priced by the config's prices when it names them.
    openai = ContextFold(prices="gpt-5", token_counter="heuristic")
    await run_session(openai, 3)
    assert openai.last_report is not None and openai.last_report.prices == "gpt-5"
    assert openai.last_report.cost_usd > 0
