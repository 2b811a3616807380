"""The inspector's data model: every request's derived view is the view the context sent.

Each run records the passes (`ViewRecorder`), then `Inspection.view_of` derives every
request's view from its pass and the messages admitted after it; the truth is the context's
own view at that request, each message identified by identity (a history message, a
shortened or cleared stand-in, the notice, the summary)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support import SYSTEM, hook_note, human, reply, tool_round

from contextfold import ContextFold
from contextfold.inspection import (
    CLEARED_STATUS,
    KEPT,
    NOTICE,
    SUMMARY,
    ViewRecorder,
    inspect_views,
    preview,
)
from contextfold.summaries import scripted_summarizer


def conversation(
    rounds: int, seed: int, *, shape: str = "amplifier", hook_notes: bool = True
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, human("Research every topic and summarise.")]
    for n in range(rounds):
        round_messages = tool_round(
            n, calls=1 + (n + seed) % 3, result_chars=400 + (n * 37 + seed) % 1600, shape=shape
        )
        if hook_notes and shape == "amplifier" and (n + seed) % 7 == 3 and len(round_messages) > 2:
            # A hook note while the group still waits for a result: its own unit, after it.
            round_messages.insert(2, hook_note(f"note {n}"))
        messages.extend(round_messages)
        if (n + seed) % 4 == 1:
            messages.append(reply(f"Progress {n}: " + "word " * (20 + n % 30)))
            messages.append(human(f"Go on with topic {n + 1}."))
    return messages


def truth(context: ContextFold, view: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    """What each message of the context's own view is: (kept|changed|notice|summary, index)."""
    state = context._state
    entries = {id(e.view): i for i, e in enumerate(state.history.entries) if e.view is not None}
    swaps = {id(swap): i for i, (swap, _cost) in state.sticky.state.truncated.items()}
    items: list[tuple[str, int | None]] = []
    for message in view:
        if message is state.sticky.notice:
            items.append((NOTICE, None))
        elif message is state.sticky.state.summary:
            items.append((SUMMARY, None))
        elif id(message) in swaps:
            items.append(("changed", swaps[id(message)]))
        elif id(message) in entries:
            items.append((KEPT, entries[id(message)]))
        else:
            # A view-only result for a call left unanswered: not a history message.
            assert message.get("metadata", {}).get("source") == "context-fold", message
    return items


def derived(items: list[Any]) -> list[tuple[str, int | None]]:
    return [(item.status if item.status in (KEPT, NOTICE, SUMMARY) else "changed", item.index)
            for item in items]  # fmt: skip


async def replay(messages: list[dict[str, Any]], context: ContextFold) -> tuple[Any, list[Any]]:
    """Drive ``context`` as `contextfold replay` does; the inspection and the true views."""
    recorder = ViewRecorder(context._state)
    counts: list[int] = []
    truths: list[list[tuple[str, int | None]]] = []

    async def request(count: int) -> None:
        view = await context._request_view_shared()
        counts.append(count)
        truths.append(truth(context, view))
        recorder.after_request(len(counts))

    for index, message in enumerate(messages):
        if message.get("role") == "assistant" and index > 0:
            await request(index)
        await context.add_message(message)
    await request(len(messages))
    inspection = inspect_views(context._state.history, recorder.passes, counts)
    return inspection, truths


@pytest.mark.parametrize("shape", ["amplifier", "openai", "anthropic"])
async def test_every_request_view_is_derived_exactly(shape: str) -> None:
    context = ContextFold(max_tokens=6000, protected_tool_results=2)
    inspection, truths = await replay(conversation(60, 1, shape=shape), context)
    assert len(inspection.passes) >= 3  # the run compacted, more than once
    assert any(p.dropped for p in inspection.passes)
    assert any(p.changed for p in inspection.passes)
    for request, expected in enumerate(truths, start=1):
        assert derived(inspection.view_of(request)) == expected, f"request {request}"


async def test_summaries_and_their_ranges_are_in_the_views() -> None:
    context = ContextFold(
        max_tokens=6000,
        strategies=["strip_thinking", "summarize", "truncate_tool_results", "drop_oldest"],
        summarizer=scripted_summarizer(),
    )
    # No hook notes inside call groups here: a summary covers history in order.
    inspection, truths = await replay(conversation(50, 2, hook_notes=False), context)
    summarized = [p for p in inspection.passes if p.summarized]
    assert summarized and all(p.summary for p in summarized)
    for request, expected in enumerate(truths, start=1):
        assert derived(inspection.view_of(request)) == expected, f"request {request}"
    # The summary's item carries the summary's text as the view sends it.
    last = len(truths)
    items = [i for i in inspection.view_of(last) if i.status == SUMMARY]
    assert items and items[0].text == inspection.pass_of(last).summary


async def test_cleared_results_and_notice_text_as_the_view_carries_them() -> None:
    # The threshold planner's passes clear results; a cost pass goes deep and drops them.
    context = ContextFold(
        max_tokens=6000,
        strategies=["clear_tool_results", "drop_oldest"],
        protected_tool_results=1,
        planner="threshold",
    )
    inspection, truths = await replay(conversation(40, 3), context)
    cleared = [
        (p, index)
        for p in inspection.passes
        for index, (status, _text) in p.changed.items()
        if status == CLEARED_STATUS
    ]
    assert cleared
    state = context._state
    notice = state.sticky.notice
    last = inspection.passes[-1]
    # The ledger's pages stand right before the notice: the notice's slot carries both.
    pages = [page["content"] for page in state.sticky.state.ledger.pages]
    assert pages and notice is not None
    assert last.notice == "\n".join([*pages, notice["content"]])
    # Dropped ranges are named by recall ids the notice can name too.
    for first, final in last.dropped:
        assert 0 <= first <= final < len(inspection.messages)
    for request, expected in enumerate(truths, start=1):
        assert derived(inspection.view_of(request)) == expected


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rounds=st.integers(min_value=1, max_value=45),
    seed=st.integers(min_value=0, max_value=50),
    budget=st.sampled_from([3000, 4500, 8000]),
    threshold=st.sampled_from([0.6, 0.8, 0.92]),
)
async def test_derived_views_match_for_any_run(
    rounds: int, seed: int, budget: int, threshold: float
) -> None:
    context = ContextFold(max_tokens=budget, compact_threshold=threshold, target_usage=0.4)
    inspection, truths = await replay(conversation(rounds, seed), context)
    assert len(inspection.request_messages) == len(truths)
    for request, expected in enumerate(truths, start=1):
        assert derived(inspection.view_of(request)) == expected


def test_view_of_refuses_a_request_it_does_not_have() -> None:
    from contextfold.inspection import Inspection

    inspection = Inspection(messages=[], passes=[], request_messages=[0])
    assert inspection.view_of(1) == []
    for bad in (0, 2, -1):
        with pytest.raises(ValueError, match=r"not in 1\.\.1"):
            inspection.view_of(bad)


def test_preview_reads_every_shape_and_clips() -> None:
    assert preview({"role": "user", "content": "hello"}) == "hello"
    assert preview({"role": "user", "content": "x" * 500}, 10) == "x" * 9 + "…"
    calls = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"tool": "grep", "arguments": {"q": 1}}],
    }
    assert preview(calls) == 'grep({"q": 1})'
    blocks = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "a",
                "content": [{"type": "text", "text": "ok"}],
            },
            {"type": "thinking", "thinking": "secret", "signature": "s"},
        ],
    }
    assert preview(blocks) == "ok [thinking]"
    assert preview(None) == "" and preview("plain") == "plain"
    assert preview({"content": 7}) == ""


@given(
    st.lists(st.integers(min_value=0, max_value=60), max_size=12),
    st.lists(st.integers(min_value=0, max_value=60), max_size=12),
)
def test_runs_without_is_the_set_difference(removed: list[int], taken: list[int]) -> None:
    from contextfold.compaction.unitset import UnitSet
    from contextfold.inspection import _runs_without

    kept = _runs_without(UnitSet(removed).runs(), UnitSet(taken).runs())
    members = [u for start, end in kept for u in range(start, end)]
    assert members == sorted(set(removed) - set(taken))
    assert all(start < end for start, end in kept)
