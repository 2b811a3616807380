"""A compaction pass visits only what it can change: shortening rungs look at the messages
history lists as long (`History.long_texts`), and the rungs of a round share one list of
the view's entries. Neither may change what a pass decides."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold, ContextLengthError
from contextfold.compaction import rungs
from contextfold.compaction.planner import notice_header_cost, view_raw_total
from contextfold.compaction.working import FoldState, WorkingView
from contextfold.conventions import stamp_timestamp
from contextfold.history import LONG_TEXT_CHARS, History
from contextfold.messages import Kind, text_length
from contextfold.tokens import HeuristicCounter
from test_properties import configs, conversations, faulty_conversations

MOMENT = datetime(2026, 12, 1, tzinfo=UTC)


async def views(
    history: list[dict[str, Any]], budgets: list[int], config: dict[str, Any]
) -> list[Any]:
    """The views a growing conversation gets at each budget (an error where one is refused)."""
    context = ContextFold(config)
    seen: list[Any] = []
    for message, budget in zip(history, budgets, strict=False):
        # Stamped once, at a fixed time: the two runs must differ in nothing else.
        await context.add_message(stamp_timestamp(message, now=MOMENT))
        try:
            seen.append(await context.get_messages_for_request(token_budget=budget))
        except ContextLengthError as error:
            seen.append(("refused", error.required_tokens))
        # The running total a pass starts from is the walked total of the sticky view.
        assert context._state.sticky.raw == view_raw_total(
            context._state.history, context._state.sticky.state
        )
        # What history lists for passes is what its entries say.
        entries = context._state.history.entries
        assert context._state.history.thinking_entries == {
            i for i, e in enumerate(entries) if e.info.thinking
        }
        assert context._state.history.pinned_entries == {
            i
            for i, e in enumerate(entries)
            if e.info.kind is Kind.SYSTEM or e.info.loaded_tool_state
        }
        # The notice header's cost, kept once per role, is what this history would give.
        cfg = context.config
        assert context._planner.header_cost(context._state) == notice_header_cost(
            context._state.history, context.counter, cfg.truncate_chars, cfg.compaction_notice_role
        )
    return seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=conversations(),
    budgets=st.lists(st.integers(300, 12_000), min_size=60, max_size=60),
    config=configs,
)
def test_skipping_short_messages_changes_no_view(
    history: list[dict[str, Any]], budgets: list[int], config: dict[str, Any]
) -> None:
    fast = asyncio.run(views(history, budgets, config))
    with pytest.MonkeyPatch.context() as patch:
        # Every kept entry offered to the rungs, as before the lists existed.
        patch.setattr(WorkingView, "kept_among", lambda work, indexes: work.kept_entries())
        slow = asyncio.run(views(history, budgets, config))
    assert fast == slow


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.one_of(conversations(), faulty_conversations()),
    budgets=st.lists(st.integers(300, 12_000), min_size=60, max_size=60),
    config=configs,
)
def test_removing_turns_together_changes_no_view(
    history: list[dict[str, Any]], budgets: list[int], config: dict[str, Any]
) -> None:
    """drop_oldest removes its turns in one update; one at a time gave the same views."""
    fast = asyncio.run(views(history, budgets, config))

    def one_at_a_time(work: WorkingView, unit_indexes: Any, raw_cost: int, rung: str) -> None:
        for unit_index in unit_indexes:
            work.remove_unit(unit_index, rung)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WorkingView, "remove_units", one_at_a_time)
        slow = asyncio.run(views(history, budgets, config))
    assert fast == slow


@settings(max_examples=200, deadline=None)
@given(
    units=st.integers(1, 40),
    removed=st.sets(st.integers(0, 39)),
    listed=st.sets(st.integers(0, 79)),
)
def test_kept_among_is_the_kept_entries_that_are_listed(
    units: int, removed: set[int], listed: set[int]
) -> None:
    """Whichever side it walks, `kept_among` is `kept_entries` filtered by the list."""
    history = History(HeuristicCounter(), 10_000)
    for n in range(units):
        history.append(history.prepare({"role": "user", "content": f"q{n}"}))
        history.append(history.prepare({"role": "assistant", "content": f"a{n}"}))
    state = FoldState(removed_units={u for u in removed if u < 2 * units})
    work = WorkingView(history, state, None, HeuristicCounter(), 0, 0)  # type: ignore[arg-type]
    listed = {i for i in listed if i < 2 * units}
    assert work.kept_among(listed) == [i for i in work.kept_entries() if i in listed]


def test_history_lists_exactly_the_long_messages() -> None:
    async def run() -> None:
        context = ContextFold({"token_counter": "heuristic"})
        texts = ["x" * LONG_TEXT_CHARS, "y" * (LONG_TEXT_CHARS + 1), "", "short"]
        for text in texts:
            await context.add_message({"role": "user", "content": text})
        await context.add_message(
            {"role": "user", "content": [{"type": "text", "text": "z" * 300}]}
        )
        history = context._state.history
        expected = {
            i for i, e in enumerate(history.entries) if text_length(e.view) > LONG_TEXT_CHARS
        }
        assert history.long_texts == expected == {1, 4}

    asyncio.run(run())


def test_a_pass_over_short_messages_looks_at_none_of_them(monkeypatch) -> None:
    looked: list[int] = []
    original = rungs._may_shorten

    def counting(work: WorkingView, index: int, *args: Any) -> bool:
        looked.append(index)
        return original(work, index, *args)

    monkeypatch.setattr(rungs, "_may_shorten", counting)

    async def run() -> None:
        context = ContextFold({"token_counter": "heuristic"})
        for turn in range(400):
            await context.add_message({"role": "user", "content": f"What is item {turn}?"})
            await context.add_message({"role": "assistant", "content": f"Item {turn} is ok."})
        await context.get_messages_for_request(token_budget=1_000)
        assert context.last_report.compacted
        assert context.last_report.applied == ["drop_least_used"]

    asyncio.run(run())
    assert looked == []
