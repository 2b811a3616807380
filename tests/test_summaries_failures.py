"""A summarizer's failure is never the user's problem, and never becomes a summary."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from contextfold.summaries import (
    AnswerCutOff,
    InMemorySummaryStore,
    SummaryFailure,
    SummaryFolder,
    scripted_summarizer,
    summarize_span,
)
from contextfold.tokens import build_counter

COUNTER = build_counter("exact")
SPAN = [
    {"role": "user", "content": "Rename src/app.py to src/main.py and rerun job 88."},
    {"role": "assistant", "content": "Renamed. Job 88 is queued."},
]
ERROR_TEXT = "Error code: 529 - overloaded_error: the service is overloaded"


async def raises(messages: list[dict[str, Any]], max_tokens: int) -> str:
    raise RuntimeError(ERROR_TEXT)


async def hangs(messages: list[dict[str, Any]], max_tokens: int) -> str:
    await asyncio.Event().wait()  # never answers
    raise AssertionError("unreachable")


async def empty(messages: list[dict[str, Any]], max_tokens: int) -> str:
    return "  \n "


async def oversized(messages: list[dict[str, Any]], max_tokens: int) -> str:
    return "word " * (max_tokens * 2)


async def not_text(messages: list[dict[str, Any]], max_tokens: int) -> Any:
    return {"summary": "a dict is not a summary"}


async def none(messages: list[dict[str, Any]], max_tokens: int) -> Any:
    return None


async def cut_off(messages: list[dict[str, Any]], max_tokens: int) -> str:
    raise AnswerCutOff("stop_reason 'max_tokens'")


async def own_timeout(messages: list[dict[str, Any]], max_tokens: int) -> str:
    raise TimeoutError("upstream read timed out")


FAILING = [
    (raises, "error"),
    (hangs, "timeout"),
    (empty, "empty"),
    (oversized, "oversized"),
    (not_text, "not_text"),
    (none, "not_text"),
    (cut_off, "cut_off"),
    (own_timeout, "error"),
]


@pytest.mark.parametrize(("summarizer", "reason"), FAILING)
async def test_every_failure_is_a_typed_result(summarizer: Any, reason: str) -> None:
    result = await summarize_span(summarizer, SPAN, max_tokens=50, counter=COUNTER, timeout=0.05)
    assert isinstance(result, SummaryFailure)
    assert result.reason == reason
    assert result.detail
    assert result.summarizer == summarizer.__qualname__


@pytest.mark.parametrize(("summarizer", "reason"), FAILING)
async def test_a_failed_fold_writes_nothing_and_leaves_the_span_untouched(
    summarizer: Any, reason: str
) -> None:
    store = InMemorySummaryStore()
    folder = SummaryFolder(
        summarizer, max_input_tokens=2_000, max_output_tokens=50, timeout=0.05, store=store
    )
    span = copy.deepcopy(SPAN)
    result = await folder.fold(None, span, [4, 5])
    assert result.record is None
    assert result.failure is not None and result.failure.reason == reason
    assert result.calls == 1 and result.written == ()
    assert await store.records() == []
    assert span == SPAN  # the caller's messages are not modified


async def test_the_error_text_never_becomes_a_summary() -> None:
    store = InMemorySummaryStore()
    folder = SummaryFolder(raises, max_input_tokens=2_000, max_output_tokens=50, store=store)
    result = await folder.fold(None, SPAN, [0, 1])
    assert result.record is None and ERROR_TEXT in result.failure.detail  # type: ignore[union-attr]
    assert all(ERROR_TEXT not in r.text for r in await store.records())
    # The same span then folds normally with a working summarizer: nothing stale blocks it.
    working = SummaryFolder(
        scripted_summarizer(), max_input_tokens=2_000, max_output_tokens=50, store=store
    )
    recovered = await working.fold(None, SPAN, [0, 1])
    assert recovered.record is not None and "job 88" in recovered.record.text.lower()


async def test_a_failure_mid_span_keeps_the_chunks_already_folded() -> None:
    calls = 0
    good = scripted_summarizer()

    async def fails_on_second(messages: list[dict[str, Any]], max_tokens: int) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("boom")
        return await good(messages, max_tokens)

    span = [{"role": "user", "content": f"step {i}: " + "detail " * 150} for i in range(6)]
    store = InMemorySummaryStore()
    folder = SummaryFolder(fails_on_second, max_input_tokens=700, max_output_tokens=60, store=store)
    result = await folder.fold(None, span, range(6))
    assert result.record is None and result.failure is not None
    assert result.calls == 2 and len(result.written) == 1
    assert [r.history_ids for r in await store.records()] == [result.written[0].history_ids]


async def test_cancellation_of_the_caller_propagates() -> None:
    task = asyncio.ensure_future(
        summarize_span(hangs, SPAN, max_tokens=50, counter=COUNTER, timeout=None)
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_good_answer_is_stripped_and_returned() -> None:
    async def fine(messages: list[dict[str, Any]], max_tokens: int) -> str:
        return "\n Renamed src/app.py; job 88 queued. \n"

    assert (
        await summarize_span(fine, SPAN, max_tokens=50, counter=COUNTER)
        == "Renamed src/app.py; job 88 queued."
    )


async def test_an_answer_exactly_at_the_limit_is_accepted() -> None:
    text = "Renamed src/app.py to src/main.py; job 88 queued."
    limit = COUNTER.count_text(text)

    async def exact(messages: list[dict[str, Any]], max_tokens: int) -> str:
        return text

    assert await summarize_span(exact, SPAN, max_tokens=limit, counter=COUNTER) == text
    over = await summarize_span(exact, SPAN, max_tokens=limit - 1, counter=COUNTER)
    assert isinstance(over, SummaryFailure) and over.reason == "oversized"


@pytest.mark.parametrize("max_tokens", [0, -5, True, 2.5])
async def test_bad_limits_are_refused(max_tokens: Any) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        await summarize_span(empty, SPAN, max_tokens=max_tokens, counter=COUNTER)


async def test_bad_timeouts_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        await summarize_span(empty, SPAN, max_tokens=5, counter=COUNTER, timeout=0)
