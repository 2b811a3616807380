"""The summarize rung's summary size: left unset it follows the effective budget (3%, between
200 and 1,000 tokens); set, it is kept exactly. Blocks stay fixed by history alone."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import ConfigError, ContextFold
from contextfold.compaction.ladder import build_ladder, rung_settings
from contextfold.compaction.rungs import DropOldest
from contextfold.compaction.summarize import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    FRAMING_TOKENS,
    MIN_SCALED_OUTPUT_TOKENS,
    Summarize,
    scaled_output_tokens,
    sized_ladder,
)
from contextfold.summaries import scripted_summarizer
from support import SYSTEM, human, tool_round


@pytest.mark.parametrize(
    ("budget", "size"),
    [
        (11_392, 341),  # the demo's 16,000-token window: 3 % of its budget
        (3_000, MIN_SCALED_OUTPUT_TOKENS),  # never below the floor
        (33_333, 999),
        (200_000, DEFAULT_MAX_OUTPUT_TOKENS),  # never above the old fixed size
    ],
)
def test_the_default_size_is_a_share_of_the_budget_within_bounds(budget: int, size: int) -> None:
    assert scaled_output_tokens(budget) == size
    sized = Summarize().for_budget(budget)
    assert sized.max_output_tokens == size
    assert sized.reserve == size + FRAMING_TOKENS
    assert sized.scales  # still the default: another budget resizes it again
    assert sized.for_budget(200_000).max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS


@pytest.mark.parametrize("size", [50, 400, 1_000, 4_000])
def test_an_explicit_size_is_kept_exactly(size: int) -> None:
    rung = Summarize(max_output_tokens=size, max_input_tokens=16_000)
    assert not rung.scales
    for budget in (3_000, 11_392, 200_000):
        assert rung.for_budget(budget) is rung
    assert rung.reserve == size + FRAMING_TOKENS
    assert rung.span_budget == (16_000 - 2 * size) // 2


def test_an_unsized_rung_reserves_the_old_default_until_a_budget_is_known() -> None:
    rung = Summarize()
    assert rung.scales and rung.max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS
    assert rung.reserve == DEFAULT_MAX_OUTPUT_TOKENS + FRAMING_TOKENS
    assert isinstance(rung.max_output_tokens, int)  # what a summarizer folder is given


def test_blocks_do_not_move_with_the_budget() -> None:
    # Blocks are fixed by history alone, so a resumed session or another worker finds the same
    # records whatever budget it runs under: a scaled size counts at its ceiling.
    rung = Summarize(max_input_tokens=9_000)
    spans = {rung.for_budget(budget).span_budget for budget in (3_000, 11_392, 200_000)}
    assert spans == {rung.span_budget} == {(9_000 - 2 * DEFAULT_MAX_OUTPUT_TOKENS) // 2}


def test_the_ladder_builds_a_scaling_rung_unless_the_size_is_set() -> None:
    scaled, exact = (
        build_ladder([rung])[0]
        for rung in ("summarize", {"name": "summarize", "max_output_tokens": 1_000})
    )
    assert isinstance(scaled, Summarize) and scaled.scales
    assert isinstance(exact, Summarize) and not exact.scales
    assert exact.for_budget(11_392).max_output_tokens == 1_000
    assert "max_output_tokens" in rung_settings("summarize")
    with pytest.raises(ConfigError, match="max_output_tokens"):
        build_ladder([{"name": "summarize", "max_output_tokens": 10}])


def test_sized_ladder_resizes_only_the_summarize_rung() -> None:
    drop = DropOldest()
    ladder = (Summarize(), drop)
    sized = sized_ladder(ladder, 11_392)
    assert sized[1] is drop
    assert isinstance(sized[0], Summarize) and sized[0].max_output_tokens == 341
    assert sized_ladder(ladder, 200_000)[0] is ladder[0]  # already at the ceiling


class AskedSizes:
    """The offline digest, recording the summary size each call asks for."""

    def __init__(self) -> None:
        self.inner = scripted_summarizer()
        self.asked: list[int] = []

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.asked.append(max_tokens)
        return await self.inner(messages, max_tokens)


async def _summarize_run(rung: Any, budget: int) -> tuple[ContextFold, AskedSizes]:
    summarizer = AskedSizes()
    context = ContextFold(
        token_counter="heuristic",
        strategies=["strip_thinking", rung, "drop_oldest"],
        summarizer=summarizer,
    )
    await context.add_message(SYSTEM)
    await context.add_message(human("Research the topics one by one."))
    for n in range(40):
        for message in tool_round(n, result_chars=2_400):
            await context.add_message(message)
        await context.get_messages_for_request(token_budget=budget)
    return context, summarizer


async def test_a_pass_asks_the_summarizer_for_the_budgets_size() -> None:
    context, summarizer = await _summarize_run(
        {"name": "summarize", "max_input_tokens": 8_000}, 11_392
    )
    assert context.summary_stats.written > 0
    assert set(summarizer.asked) == {341}
    view = await context.get_messages_for_request(token_budget=11_392)
    summary = next(m for m in view if (m.get("metadata") or {}).get("summary"))
    assert context.counter.count_message(summary) <= 341 + FRAMING_TOKENS


async def test_a_pass_asks_for_the_size_that_was_set() -> None:
    context, summarizer = await _summarize_run(
        {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 500}, 11_392
    )
    assert context.summary_stats.written > 0
    assert set(summarizer.asked) == {500}
