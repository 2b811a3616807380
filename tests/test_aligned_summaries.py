"""Cache-aligned summary requests: a summarizer that takes them gets the view exactly as the
last request sent it, then one instruction naming the span; the scripted provider reads that
prefix from the conversation's cache, and the demo prices the summary requests apart."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from contextfold import ContextFold
from contextfold.summaries import render_transcript, scripted_summarizer
from contextfold.summaries.aligned import takes_aligned_requests
from contextfold.summaries.transcript import SUMMARY_REQUEST_KEY, aligned_span
from support import SYSTEM, human, tool_round

SUMMARIZE = {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400}
LADDER = ["strip_thinking", SUMMARIZE, "truncate_tool_results", "drop_oldest"]


class Recording:
    """A summarizer that keeps every request it is given (deep copies) and answers with the
    offline digest of what it renders."""

    name = "recording"

    def __init__(self, aligned: bool) -> None:
        self.aligned_requests = aligned
        self.inner = scripted_summarizer()
        self.requests: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.requests.append(copy.deepcopy(messages))
        return await self.inner(messages, max_tokens)


def canonical(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


async def run(summarizer: Recording, **settings: Any) -> list[tuple[list[dict], int]]:
    """A growing tool session; for each summarizer call, the view the request before it
    returned (as the caller got it) and how many requests had been made."""
    settings.setdefault("token_counter", "heuristic")
    # Two summaries (the second folding the first) need the threshold planner's passes: a
    # cost pass goes deep and drops the turns after its one summarized block.
    settings.setdefault("planner", "threshold")
    context = ContextFold({"strategies": LADDER, **settings}, summarizer=summarizer)
    await context.set_messages([SYSTEM, human("Look up every topic and compare.")])
    sent: list[list[dict]] = []
    for n in range(30):
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        sent.append(copy.deepcopy(await context.get_messages_for_request(token_budget=8_000)))
    assert context.summary_stats.calls == len(summarizer.requests) >= 2
    assert context.summary_stats.aligned == (
        len(summarizer.requests) if summarizer.aligned_requests else 0
    )
    return sent


@pytest.mark.parametrize("marks", ["off", "anthropic"])
async def test_the_request_repeats_the_view_as_last_sent_byte_for_byte(marks: str) -> None:
    summarizer = Recording(aligned=True)
    sent = await run(summarizer, cache_breakpoints=marks)
    for request in summarizer.requests:
        span = aligned_span(request)
        assert span is not None
        prefix = request[:-1]
        # The prefix is one of the views handed out, exactly: the one just before the pass.
        matches = [view for view in sent if canonical(view) == canonical(prefix)]
        assert matches, "the request's prefix is no view the context sent"
        instruction = request[-1]
        assert instruction["role"] == "user"
        assert instruction["metadata"][SUMMARY_REQUEST_KEY]["first"] == span.first
        assert f"messages {span.first + 1} to {span.last + 1} above" in instruction["content"]
        # The span is old turns, never the head.
        assert span.first >= 2 and span.last < len(prefix)
    # The second call folds the summary the view carries into the new one.
    later = aligned_span(summarizer.requests[-1])
    assert later is not None and later.previous is not None
    assert summarizer.requests[-1][later.previous]["content"].startswith("<context-summary")


async def test_it_renders_as_the_span_it_names() -> None:
    aligned, plain = Recording(aligned=True), Recording(aligned=False)
    await run(aligned)
    await run(plain)
    first_aligned, first_plain = aligned.requests[0], plain.requests[0]
    assert aligned_span(first_plain) is None
    # The same span either way: the first summary reads the same transcript.
    assert render_transcript(first_aligned) == render_transcript(first_plain)


async def test_a_summarizer_that_does_not_say_so_gets_the_span_alone() -> None:
    summarizer = Recording(aligned=False)
    await run(summarizer)
    assert not takes_aligned_requests(summarizer)
    for request in summarizer.requests:
        assert request[0]["role"] != "system"  # no view: the span (and the summary so far)
        assert aligned_span(request) is None


def test_a_malformed_instruction_is_no_aligned_request() -> None:
    view = [SYSTEM, human("a"), {"role": "assistant", "content": "b"}]
    for info in (
        {"first": 2, "last": 1, "previous": None},  # ends before it starts
        {"first": 1, "last": 3, "previous": None},  # past the prefix
        {"first": 1, "last": 2, "previous": 1},  # the summary inside the span
        {"first": "1", "last": 2, "previous": None},
        "r1-r2",
    ):
        request = [*view, {"role": "user", "content": "x", "metadata": {SUMMARY_REQUEST_KEY: info}}]
        assert aligned_span(request) is None
