"""The real-usage token meter: always recorded, drives the trigger in actual mode, calibrates."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from amplifier_core.message_models import Usage

from contextfold import ContextFold
from support import agent_run


def usage(input_tokens: int, cache_write: int = 0, cache_read: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "output_tokens": 10,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
    }


async def test_meter_records_input_plus_cache_writes_in_every_mode() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(3))
    await ctx.get_messages_for_request(token_budget=100_000)
    await ctx.on_llm_response({"usage": usage(100, cache_write=4000, cache_read=90), "model": "m"})
    await ctx.get_messages_for_request(token_budget=100_000)
    stats = ctx.token_meter_stats
    assert stats.mode == "estimate" and stats.source == "estimate"
    assert stats.last_actual == 4100  # cache reads are inside input_tokens: not added again
    assert stats.drift is not None and stats.drift > 0
    # A Usage model (as a provider's ChatResponse carries) works as well as a dict.
    await ctx.on_llm_response(
        {"response": {"usage": Usage(input_tokens=5, output_tokens=1, total_tokens=6)}}
    )
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 5
    # Payloads without usage are ignored, never an error.
    await ctx.on_llm_response({"status": "error"})
    await ctx.on_llm_response({"usage": {"input_tokens": "lots"}})


async def test_actual_mode_uses_the_real_figure_for_the_trigger() -> None:
    history = agent_run(10)
    est = ContextFold(token_counter="heuristic")
    act = ContextFold(token_counter="heuristic", token_meter="actual")
    for ctx in (est, act):
        await ctx.set_messages(history)
        await ctx.get_messages_for_request(token_budget=100_000)
    size = est.last_report.tokens_after
    budget = int(size / 0.92 * 1.3) + 800  # the estimate sits well under the trigger
    for ctx in (est, act):
        await ctx.get_messages_for_request(token_budget=budget)
        # The provider reports twice what we estimated (say, tool schemas and framing).
        await ctx.on_llm_response({"usage": usage(2 * size), "model": "m"})
        await ctx.add_message({"role": "assistant", "content": "thinking aloud"})
        await ctx.get_messages_for_request(token_budget=budget)
    assert not est.last_report.compacted and est.last_report.size_source == "estimate"
    assert act.last_report.compacted and act.last_report.size_source == "actual"
    assert act.token_meter_stats.measured >= 2 * size


async def test_actual_mode_before_any_response_falls_back_to_estimate() -> None:
    ctx = ContextFold(token_counter="heuristic", token_meter="actual")
    await ctx.set_messages(agent_run(3))
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.last_report.size_source == "estimate"


async def test_calibration_learns_from_responses_and_survives_set_messages() -> None:
    events: list = []
    ctx = ContextFold(token_counter="calibrated", on_event=lambda e, d: events.append((e, d)))
    await ctx.set_messages(agent_run(4))
    for _ in range(12):
        await ctx.get_messages_for_request(token_budget=100_000)
        raw = ctx.token_meter_stats.raw_estimate
        await ctx.on_llm_response({"usage": usage(int(raw * 1.15)), "model": "gpt-4o"})
    await ctx.get_messages_for_request(token_budget=100_000)
    assert abs(ctx.last_report.ratio - 1.15) < 0.05
    calibration = [d for e, d in events if e == "context:calibration"]
    assert len(calibration) == 12 and calibration[-1]["model"] == "gpt-4o"
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    assert abs(ctx.last_report.ratio - 1.15) < 0.05  # learned ratio kept across resume


async def test_failing_event_handler_never_breaks_a_request(caplog) -> None:
    def explode(event: str, data: dict) -> None:
        raise RuntimeError("observer bug")

    ctx = ContextFold(token_counter="heuristic", on_event=explode)
    await ctx.set_messages(agent_run(30))
    view = await ctx.get_messages_for_request(token_budget=12_000)
    assert view and ctx.last_report.compacted
    assert "observer bug" in caplog.text or "failed; ignored" in caplog.text


async def test_sdk_usage_shapes_are_understood() -> None:
    from anthropic.types import Usage as AnthropicUsage
    from openai.types.completion_usage import CompletionUsage, PromptTokensDetails

    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    # Anthropic: input_tokens is only the uncached part.
    anthropic = AnthropicUsage(
        input_tokens=10,
        output_tokens=5,
        cache_creation_input_tokens=300,
        cache_read_input_tokens=2000,
    )
    await ctx.on_llm_response({"usage": anthropic, "model": "claude-x"})
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 2310
    # OpenAI: prompt_tokens already includes cached tokens.
    openai = CompletionUsage(
        prompt_tokens=1234,
        completion_tokens=5,
        total_tokens=1239,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=1000),
    )
    await ctx.on_llm_response({"usage": openai, "model": "gpt-4o"})
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 1234


async def test_zero_usage_is_recorded_but_not_learned_from() -> None:
    ctx = ContextFold(token_counter="calibrated")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    await ctx.on_llm_response({"usage": usage(0), "model": "gpt-4o"})
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 0 and ctx.last_report.ratio == 1.0


BAD_READINGS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    "1234",
    "lots",
    -5,
    True,
    10**400,
    complex(3, 1),
    [100],
]


@pytest.mark.parametrize("bad", BAD_READINGS, ids=lambda v: repr(v)[:12])
@pytest.mark.parametrize("field", ["input_tokens", "prompt_tokens", "cache_write_tokens"])
async def test_a_bad_usage_figure_is_no_reading_and_one_warning(
    bad: object, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    events: list = []
    ctx = ContextFold(token_counter="calibrated", on_event=lambda e, d: events.append(e))
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    raw = ctx.token_meter_stats.raw_estimate
    await ctx.on_llm_response({"usage": usage(int(raw * 1.2)), "model": "gpt-4o"})
    await ctx.get_messages_for_request(token_budget=100_000)
    learned = ctx.last_report.ratio
    payload = usage(raw) | {field: bad}
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        await ctx.on_llm_response({"usage": payload, "model": "gpt-4o"})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"usage.{field}=" in warnings[0].getMessage()
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.last_report.ratio == learned
    if field == "input_tokens":
        assert ctx.token_meter_stats.last_actual == int(raw * 1.2)  # the earlier reading stands
    else:
        # The other figures still make a reading; the bad one counts as absent.
        assert ctx.token_meter_stats.last_actual == raw


@pytest.mark.parametrize("payload", ["usage", 42, None, {"usage": "lots"}, {"usage": 7.5}])
async def test_a_payload_that_is_not_usage_is_ignored_with_a_warning(
    payload: object, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        await ctx.on_llm_response(payload)  # type: ignore[arg-type]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual is None


async def test_bad_cached_token_figure_of_an_sdk_object_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    details = SimpleNamespace(cached_tokens=float("nan"))
    sdk_usage = SimpleNamespace(prompt_tokens=1234, prompt_tokens_details=details)
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        await ctx.on_llm_response({"usage": sdk_usage, "model": "gpt-4o"})
    assert "usage.prompt_tokens_details.cached_tokens=nan" in caplog.text
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 1234


async def test_good_figures_of_other_numeric_types_are_read() -> None:
    from decimal import Decimal
    from fractions import Fraction

    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    for value, expected in ((Decimal("900"), 900), (Fraction(1801, 2), 900), (901.0, 901)):
        await ctx.on_llm_response({"usage": usage(value), "model": "m"})  # type: ignore[arg-type]
        await ctx.get_messages_for_request(token_budget=100_000)
        assert ctx.token_meter_stats.last_actual == expected


async def _schema_session(schemas: int, budget: int, *, turns: int = 40) -> dict:
    """A tool loop whose provider bills each request's messages exactly (o200k) plus
    ``schemas`` tokens of tool schemas, reported as usage after every request. No ledger:
    its pages grow with what passes take out, and the comparison is of the counters."""
    ctx = ContextFold(token_counter="calibrated", ledger_share=0)
    await ctx.add_message({"role": "system", "content": "You are terse."})
    await ctx.add_message({"role": "user", "content": "Look up the items."})
    compactions, billed = 0, []
    for turn in range(turns):
        view = await ctx.get_messages_for_request(token_budget=budget)
        compactions += ctx.last_report.compacted
        exact = sum(ctx.counter.count_message(m) for m in view) + ctx.counter.request_overhead
        billed.append(exact + schemas)
        await ctx.on_llm_response({"usage": usage(exact + schemas), "model": "gpt-4o"})
        call = f"call_{turn}"
        await ctx.add_message(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"},
                    }
                ],
            }
        )
        await ctx.add_message(
            {"role": "tool", "tool_call_id": call, "content": f"item {turn} " * 120}
        )
    return {
        "compactions": compactions,
        "billed": billed,
        "ratio": ctx.counter.ratio("gpt-4o"),
        "fixed": ctx.counter.fixed("gpt-4o"),
        "estimate": ctx.last_report.tokens_before,
        "raw": ctx.token_meter_stats.raw_estimate,
    }


async def test_tool_schemas_take_their_size_from_the_budget_not_a_share_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2,000 tokens of schemas on every request: read as a ratio they looked like a 3x
    # under-count (its bound) and left a third of the budget to the messages.
    learned = await _schema_session(2_000, 6_000)
    assert learned["fixed"] == 2_000 and learned["ratio"] == pytest.approx(1.0)
    assert learned["estimate"] == learned["raw"] + 2_000  # every size carries the fixed part
    # The honest budget: no request the provider billed was over it, schemas included.
    assert max(learned["billed"]) <= 6_000
    # The same session with the fixed part switched off: the ratio alone (pinned at its
    # bound) compacts more often for the same budget (7 passes against 10).
    from contextfold.tokens import CalibratedCounter

    monkeypatch.setattr(CalibratedCounter, "_fit", lambda self, state: False)
    # ... and a reading beyond the bound raising the ratio to it, as before rule 6.
    monkeypatch.setattr(
        CalibratedCounter,
        "_beyond_the_bound",
        lambda self, state, estimated, actual: self._update(state, self._log_max),
    )
    ratio_only = await _schema_session(2_000, 6_000)
    assert ratio_only["fixed"] == 0 and ratio_only["ratio"] > 2.5
    assert learned["compactions"] * 4 <= ratio_only["compactions"] * 3


# -- every cache field the SDKs report -------------------------------------------------------


async def test_anthropic_cache_writes_split_by_lifetime_are_read() -> None:
    """A usage that reports its writes only split by lifetime (``cache_creation``) still
    counts them: the request occupied input, reads and both kinds of writes."""
    from anthropic.types import CacheCreation
    from anthropic.types import Usage as AnthropicUsage

    from contextfold.meter import read_usage

    split = AnthropicUsage(
        input_tokens=10,
        output_tokens=5,
        cache_read_input_tokens=2_000,
        cache_creation=CacheCreation(ephemeral_5m_input_tokens=300, ephemeral_1h_input_tokens=40),
    )
    assert read_usage({"usage": split, "model": "claude-x"}) == (2_350, 2_000, 340, "claude-x")
    as_dict = {
        "input_tokens": 10,
        "cache_creation": {"ephemeral_5m_input_tokens": 300},
    }
    assert read_usage({"usage": as_dict}) == (310, 0, 300, None)
    # The total, when given, is the writes (the split only details it).
    both = split.model_copy(update={"cache_creation_input_tokens": 340})
    assert read_usage({"usage": both})[:3] == (2_350, 2_000, 340)
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages(agent_run(2))
    await ctx.get_messages_for_request(token_budget=100_000)
    await ctx.on_llm_response({"usage": split, "model": "claude-x"})
    await ctx.get_messages_for_request(token_budget=100_000)
    assert ctx.token_meter_stats.last_actual == 2_350


def test_openai_responses_and_langchain_cached_tokens_are_read() -> None:
    from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
    from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
    from openai.types.responses import ResponseUsage
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

    from contextfold.meter import read_usage

    responses = ResponseUsage(
        input_tokens=5_000,
        input_tokens_details=InputTokensDetails(cached_tokens=4_096, cache_write_tokens=600),
        output_tokens=20,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=5_020,
    )
    # input_tokens already counts the cached and the written parts.
    assert read_usage({"usage": responses, "model": "gpt-5"}) == (5_000, 4_096, 600, "gpt-5")
    chat = CompletionUsage(
        prompt_tokens=1_234,
        completion_tokens=5,
        total_tokens=1_239,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=1_000, cache_write_tokens=200),
    )
    assert read_usage({"usage": chat}) == (1_234, 1_000, 200, None)
    langchain = UsageMetadata(
        input_tokens=3_000,
        output_tokens=7,
        total_tokens=3_007,
        input_token_details=InputTokenDetails(cache_read=2_000, cache_creation=500),
    )
    assert read_usage({"usage": langchain}) == (3_000, 2_000, 500, None)


@pytest.mark.parametrize(
    ("usage", "where"),
    [
        (
            {"input_tokens": 10, "cache_creation": {"ephemeral_1h_input_tokens": "x"}},
            "cache_creation.",
        ),
        (
            {"input_tokens": 10, "input_tokens_details": {"cached_tokens": -3}},
            "input_tokens_details.",
        ),
        (
            {"input_tokens": 10, "input_token_details": {"cache_read": float("nan")}},
            "input_token_details.",
        ),
    ],
)
def test_a_bad_nested_cache_figure_is_ignored_with_one_warning(
    usage: dict, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    from contextfold.meter import read_usage

    with caplog.at_level(logging.WARNING, logger="contextfold"):
        parsed = read_usage({"usage": usage})
    assert parsed is not None and parsed[0] == 10 and parsed[1] == parsed[2] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"usage.{where}" in warnings[0]
