"""The public API used with types, as the docs use it: checked by ``mypy --strict`` in CI.

Every value the API hands back is held to the type it promises (``assert_type``), and the
calls it must refuse carry a ``type: ignore`` naming the error: strict mode reports an
ignore that silences nothing, so an exported signature that loses its types (returns Any,
or takes anything) fails the check either way. ``tests/test_typing_public_api.py`` runs
this file too, so the usage is real, not only well typed. Not collected as tests itself.

    uv run mypy --strict tests/typing_public_api.py
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, assert_type

import contextfold
from contextfold import (
    ALL_EVENTS,
    BUDGET,
    CALIBRATION,
    COMPACTION,
    INGRESS_TRUNCATED,
    RELAXATION_ORDER,
    REPAIRED,
    REPORT,
    SUMMARY,
    BudgetDecision,
    CalibratedCounter,
    ConcurrentUpdateError,
    ConfigError,
    ContextConfig,
    ContextFold,
    ContextLengthError,
    ExactCounter,
    HeuristicCounter,
    Kind,
    MessageValidationError,
    RecallError,
    Relaxation,
    Repair,
    RequestReport,
    SearchHit,
    StoreError,
    SummaryStats,
    TokenCounter,
    afit,
    build_counter,
    derive_budget,
    fit,
    strip_metadata,
)


class WordCounter:
    """A counter of one's own: any object with these members is a `TokenCounter`."""

    name = "words"
    request_overhead = 3

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Mapping[str, Any]) -> int:
        return 4 + self.count_text(json.dumps(message.get("content")))

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        return self.count_text(json.dumps(list(tools)))


async def summarize(messages: list[dict[str, Any]], max_tokens: int) -> str:
    """A summarizer of one's own (the `contextfold.summaries.Summarizer` protocol)."""
    return f"{len(messages)} messages about deploys"


async def agent_loop() -> list[str]:
    """Getting started: three calls around the model call, then what the context reports."""
    seen: list[str] = []

    def on_event(name: str, payload: dict[str, Any]) -> None:
        seen.append(name)

    context = ContextFold(max_tokens=8_000, on_event=on_event, summarizer=summarize)
    assert_type(context.config, ContextConfig)
    assert_type(context.counter, TokenCounter)
    await context.add_message({"role": "system", "content": "You are a log analyst."})
    await context.add_message({"role": "user", "content": "Find the first failing deploy."})
    for day in range(30):
        call = {
            "id": f"call_{day}",
            "type": "function",
            "function": {"name": "read_log", "arguments": json.dumps({"day": day})},
        }
        await context.add_message({"role": "assistant", "content": None, "tool_calls": [call]})
        await context.add_message(
            {
                "role": "tool",
                "tool_call_id": f"call_{day}",
                "content": f"day {day}: deploy ok, 3 warnings. " * 60,
            }
        )
        view = await context.get_messages_for_request()
        assert_type(view, list[dict[str, Any]])
        assert_type(strip_metadata(view), list[dict[str, Any]])
        usage = {"input_tokens": 1_000 + 40 * day, "output_tokens": 20}
        await context.on_llm_response({"usage": usage, "model": "gpt-4o"})

    report = context.last_report
    assert_type(report, RequestReport | None)
    assert report is not None
    assert_type(report.tokens_after, int)
    assert_type(report.applied, list[str])
    assert_type(report.to_dict(), dict[str, Any])
    history = await context.get_messages()
    assert_type(history, list[dict[str, Any]])
    assert len(history) == 62  # nothing lost
    assert_type(await context.recall("r2"), str)
    assert_type(await context.recall("r2", max_tokens=50, offset=10), str)
    hits = await context.search("day 3 deploy", limit=3)
    assert_type(hits, list[SearchHit])
    for hit in hits:
        assert_type(hit.recall_id, str)
        assert_type(hit.snippet, str)
    await context.pin("r2")
    assert_type(context.pins, list[str])
    assert context.pins == ["r2"]
    await context.unpin("r2")
    assert_type(await context.get_messages_for_request(token_budget=4_000), list[dict[str, Any]])
    assert_type(context.kinds(), list[Kind])
    assert context.kinds()[1] is Kind.HUMAN
    assert_type(context.repairs, list[Repair])
    assert_type(context.message_count, int)
    assert_type(context.summary_stats, SummaryStats)
    assert_type(context.last_view_estimate, int | None)
    assert_type(context.human_prompt_indices(), tuple[int | None, int | None])
    await context.set_messages(history[:2])
    assert context.message_count == 2
    await context.clear()
    async with ContextFold(max_tokens=4_000) as scoped:
        assert_type(scoped, ContextFold)
    await context.aclose()
    return seen


async def refusals() -> None:
    """What the API raises, each with the attributes it documents."""
    context = ContextFold(ContextConfig(max_tokens=2_000), counter=WordCounter())
    try:
        await context.add_message({"role": "robot", "content": "beep"})
    except MessageValidationError as error:
        assert_type(error.field, str)
        assert_type(error.index, int | None)
        assert error.field == "role"
    else:
        raise AssertionError("an unknown role was admitted")
    try:
        await context.recall("r99")
    except RecallError as error:
        assert isinstance(error, ValueError)
    else:
        raise AssertionError("an unknown recall id was answered")
    await context.add_message({"role": "system", "content": "rule " * 3_000})
    try:
        await context.get_messages_for_request()
    except ContextLengthError as error:
        assert_type(error.model, str | None)
    else:
        raise AssertionError("a system prompt over the budget was sent")
    try:
        ContextFold(compact_threshold=2.0)
    except ConfigError as error:
        assert isinstance(error, ValueError)
    else:
        raise AssertionError("a threshold over 1 was accepted")
    assert issubclass(ConcurrentUpdateError, StoreError)


async def budgets_and_counters() -> None:
    """The budget a request gets, and the counters that size it."""
    decision = await derive_budget(ContextConfig(max_tokens=6_000), token_budget=9_000)
    assert_type(decision, BudgetDecision)
    assert_type(decision.effective_budget, int)
    assert_type(decision.context_window, int | None)
    assert decision.capped and decision.effective_budget == 6_000  # max_tokens caps it
    assert_type(decision.to_event(), dict[str, Any])

    message = {"role": "user", "content": "How many tokens is this?"}
    counters: list[TokenCounter] = [
        HeuristicCounter(),
        ExactCounter("o200k_base"),
        CalibratedCounter(HeuristicCounter()),
        build_counter("exact", model="gpt-4o"),
        WordCounter(),
    ]
    for counter in counters:
        assert_type(counter.name, str)
        assert_type(counter.count_message(message), int)
        assert_type(counter.count_text("plain text"), int)
        assert_type(counter.count_tools([]), int)
    calibrated = CalibratedCounter(ExactCounter())
    assert_type(calibrated.base, TokenCounter)
    assert_type(calibrated.snapshot(), dict[str, dict[str, Any]])


def vocabulary() -> None:
    """The names the API reports with: events, relaxation steps, message kinds."""
    for event in (*ALL_EVENTS, BUDGET, CALIBRATION, COMPACTION, INGRESS_TRUNCATED):
        assert_type(event, str)
    assert {REPAIRED, REPORT, SUMMARY} <= set(ALL_EVENTS)
    for label in RELAXATION_ORDER:
        assert_type(label, str)
    assert_type(Relaxation.RECENT.label, str)
    assert_type(Relaxation.CURRENT_PROMPT_TURNS.steps(), list[str])
    assert_type(Kind("tool_result"), Kind)
    assert_type(contextfold.__version__, str)


def one_list() -> list[dict[str, Any]]:
    """A one-off: `fit` from plain code (the docs' "One list, one view")."""
    messages = [{"role": "system", "content": "You answer briefly."}]
    for turn in range(50):
        messages.append({"role": "user", "content": f"question {turn}: " + "why " * 60})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "because " * 60})
    view = fit(messages, 3_000)
    assert_type(view, list[dict[str, Any]])
    assert view[0]["content"] == "You answer briefly."
    return view


async def one_list_async() -> list[dict[str, Any]]:
    view = await afit([{"role": "user", "content": "hi"}], 1_000, strategies=["drop_oldest"])
    assert_type(view, list[dict[str, Any]])
    return view


async def refused_by_the_types(context: ContextFold, report: RequestReport) -> None:
    """Never run: calls the types must refuse. Each ignore names the error it expects, and
    strict mode reports it as unused when the call is accepted."""
    fit([{"role": "user", "content": "hi"}], "3000")  # type: ignore[arg-type]
    await afit(42, 1_000)  # type: ignore[arg-type]
    await context.add_message("hello")  # type: ignore[arg-type]
    await context.set_messages(3)  # type: ignore[arg-type]
    await context.recall(2)  # type: ignore[arg-type]
    await context.get_messages_for_request(token_budget="4k")  # type: ignore[arg-type]
    await context.on_llm_response("1200 tokens")  # type: ignore[arg-type]
    ContextFold(on_event="print")  # type: ignore[arg-type]
    ContextFold(counter="heuristic")  # type: ignore[arg-type]
    ContextFold(store=3)  # type: ignore[arg-type]
    ContextConfig(max_tokens="8k")  # type: ignore[arg-type]
    await derive_budget({"max_tokens": 8_000})  # type: ignore[arg-type]
    strip_metadata("view")  # type: ignore[arg-type]
    build_counter(3)  # type: ignore[arg-type]
    HeuristicCounter().count_message("text")  # type: ignore[arg-type]
    CalibratedCounter("heuristic")  # type: ignore[arg-type]
    report.tokens_after.upper()  # type: ignore[attr-defined]
    context.kinds()[0].value + 1  # type: ignore[operator]


async def main() -> None:
    events = await agent_loop()
    assert {BUDGET, CALIBRATION, COMPACTION, REPORT} <= set(events)  # 30 days overflow 8k
    await refusals()
    await budgets_and_counters()
    vocabulary()
    await one_list_async()


if __name__ == "__main__":
    asyncio.run(main())
    one_list()
