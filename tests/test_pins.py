"""Pins: a message admitted with ``metadata.pinned: true``, or pinned later by id, stays in the
view whole (a tool result with its call group) and yields only when the view without its
notice cannot otherwise fit the budget; pins survive a durable resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold, ContextLengthError, RecallError
from contextfold.compaction.relaxation import RELAXATION_ORDER
from store_support import PostgresServer
from support import SYSTEM, assert_pairing, human, prose, reply, tool_round
from test_properties import check_view, configs, conversations, required_core_cost


def long_run(rounds: int = 24) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, human("Research every topic.")]
    for n in range(rounds):
        messages += tool_round(n, result_chars=1500)
    return messages


def pinned(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "metadata": {**(message.get("metadata") or {}), "pinned": True}}


def carries(view: list[dict[str, Any]], message: dict[str, Any]) -> bool:
    """Whether the view carries ``message`` whole (its content as admitted)."""
    return any(
        m.get("role") == message["role"] and m.get("content") == message["content"] for m in view
    )


async def test_a_message_admitted_pinned_stays_whole_through_every_pass() -> None:
    plain = long_run()
    messages = [pinned(m) if i == 5 else m for i, m in enumerate(plain)]  # r5: a tool result
    context = ContextFold(max_tokens=4000)
    unpinned = ContextFold(max_tokens=4000)
    for message, same in zip(messages, plain, strict=True):
        await context.add_message(message)
        await unpinned.add_message(same)
        if message["role"] == "tool":
            view = await context.get_messages_for_request()
            assert_pairing(view)
            if len(context.kinds()) > 5:
                assert carries(view, messages[5])
                assert carries(view, messages[4])  # its call group stays with it
    assert context.pins == ["r5"]
    assert context.last_report.removed_total > 0  # passes took turns out all along
    # Without the pin, the same session had left it out long ago.
    assert not carries(await unpinned.get_messages_for_request(), plain[5])


async def test_a_message_pinned_later_comes_back_whole_and_stays() -> None:
    messages = long_run()
    context = ContextFold(max_tokens=4000)
    await context.set_messages(messages)
    view = await context.get_messages_for_request()
    assert not carries(view, messages[3])
    await context.pin("r3")
    assert context.pins == ["r3"]
    view = await context.get_messages_for_request()
    assert carries(view, messages[3]) and carries(view, messages[2])
    assert_pairing(view)
    for message in tool_round(99, result_chars=1500) + tool_round(100, result_chars=1500):
        await context.add_message(message)
        view = await context.get_messages_for_request()
        assert carries(view, messages[3])
    # Unpinned, it is compacted again like any other old result.
    await context.unpin("r3")
    assert context.pins == []
    for n in range(101, 110):
        for message in tool_round(n, result_chars=1500):
            await context.add_message(message)
        view = await context.get_messages_for_request()
    assert not carries(view, messages[3])


async def test_pins_yield_last_and_only_as_far_as_the_budget_needs() -> None:
    messages = [SYSTEM, human("Keep these notes at hand.")]
    notes = [pinned(reply(f"Note {n}: " + prose(n, 2400))) for n in range(3)]
    messages += notes
    messages += long_run(6)[2:]
    messages.append(human("Go on."))
    # Room for every pin: they stay whole, whatever else must go.
    roomy = ContextFold(max_tokens=6000)
    await roomy.set_messages(messages)
    view = await roomy.get_messages_for_request()
    assert all(carries(view, note) for note in notes)
    assert "pins" not in roomy.last_report.relaxed
    # Room for a little less: the oldest pin yields, shortened (not removed) as far as the
    # budget needs, with the id that recalls it; the newer ones stay whole.
    tight = ContextFold(max_tokens=1600)
    await tight.set_messages(messages)
    view = await tight.get_messages_for_request()
    assert "pins" in tight.last_report.relaxed
    assert not carries(view, notes[0]) and carries(view, notes[1]) and carries(view, notes[2])
    [cut] = [m for m in view if str(m.get("content")).startswith("Note 0:")]
    assert 'context_recall("r2")' in cut["content"]
    recount = sum(tight.counter.count_message(m) for m in view) + tight.counter.request_overhead
    assert recount <= 1600
    assert_pairing(view)
    # Pins yield only after every other soft protection, before the required core.
    order = list(RELAXATION_ORDER)
    assert order.index("pins") == order.index("current_prompt_turns") + 1
    assert order[-1] == "newest_results_shortened"


async def test_pins_never_turn_a_request_that_fits_into_an_error() -> None:
    messages = [SYSTEM, human("Start.")]
    messages += [pinned(reply(prose(n, 8000))) for n in range(4)]
    messages.append(human("Continue."))
    context = ContextFold(max_tokens=1500)
    await context.set_messages(messages)
    view = await context.get_messages_for_request()  # no ContextLengthError
    assert "pins" in context.last_report.relaxed
    assert carries(view, messages[-1])


async def test_a_pin_that_cannot_fit_is_not_planned_again_on_every_request() -> None:
    # r2 calls 30 tools at once: even shortened, its group is far too big for the window,
    # so pinned it yields back out whole; no pass may try again on every request.
    wide = tool_round(0, calls=30, result_chars=1200)
    messages = [SYSTEM, human("Start."), *wide, *long_run(6)[2:], human("Continue.")]
    context = ContextFold(max_tokens=1500)
    await context.set_messages(messages)
    await context.get_messages_for_request()
    await context.pin("r2")
    await context.get_messages_for_request()
    assert "pins" in context.last_report.relaxed
    view = await context.get_messages_for_request()
    assert not carries(view, messages[2])
    for _ in range(3):  # no compaction storm: the same view, no pass
        again = await context.get_messages_for_request()
        assert not context.last_report.compacted and again == view


@pytest.mark.parametrize(
    ("rid", "kind", "text"),
    [
        ("r999", "unknown_id", "unknown id 'r999'"),
        ("999", "malformed_id", "is not a recall id"),
        ("", "malformed_id", "is not a recall id"),
        (41, "malformed_id", "a recall id is a string"),
        ("r2", "invalid_argument", "history only"),
    ],
)
async def test_pinning_what_history_cannot_pin_is_a_recall_error(
    rid: Any, kind: str, text: str
) -> None:
    context = ContextFold(max_tokens=4000)
    history_only = {
        "role": "user",
        "content": "kept for the record",
        "metadata": {"amplifier_public_reference_only": True},
    }
    await context.set_messages([SYSTEM, human("Hi."), history_only, reply("Hello.")])
    for change in (context.pin, context.unpin):
        with pytest.raises(RecallError) as caught:
            await change(rid)
        assert caught.value.kind == kind and text in str(caught.value)
    assert context.pins == []


async def test_a_replaced_or_cleared_history_keeps_only_its_own_metadata_pins() -> None:
    context = ContextFold(max_tokens=4000)
    await context.set_messages(long_run(4))
    await context.pin("r3")
    replacement = long_run(4)
    replacement[5] = pinned(replacement[5])
    await context.set_messages(replacement)
    assert context.pins == ["r5"]
    await context.clear()
    assert context.pins == []
    # Only the boolean pins: a string or a number does not.
    await context.set_messages(
        [SYSTEM, human("Hi."), {**reply("a"), "metadata": {"pinned": "true"}}, reply("b")]
    )
    assert context.pins == []


# -- durable sessions ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(shared_postgres: PostgresServer) -> PostgresServer:
    return shared_postgres  # one server for the run (tests/conftest.py)


async def check_resume(url: str) -> None:
    messages = long_run()
    messages[7] = pinned(messages[7])
    first = ContextFold(max_tokens=4000, store=url, session_id="s")
    for message in messages:
        await first.add_message(message)
    await first.get_messages_for_request()
    await first.pin("r3")
    await first.unpin("r7")  # a metadata pin removed by id stays removed
    assert first.pins == ["r3"]
    resumed = ContextFold(max_tokens=4000, store=url, session_id="s")
    view = await resumed.get_messages_for_request()
    assert resumed.pins == ["r3"]
    assert carries(view, messages[3]) and not carries(view, messages[7])
    # A message admitted after the save keeps the pin its metadata asks for.
    late = pinned(reply("A late note worth keeping: " + prose(5, 1500)))
    await resumed.add_message(late)
    again = ContextFold(max_tokens=4000, store=url, session_id="s")
    await again.get_messages_for_request()
    assert again.pins == ["r3", f"r{len(messages)}"]


async def test_pins_survive_a_resume_from_sqlite(tmp_path: Path) -> None:
    await check_resume(f"sqlite:///{tmp_path / 'pins.db'}")


@pytest.mark.slow
async def test_pins_survive_a_resume_from_postgresql(server: PostgresServer) -> None:
    await check_resume(server.fresh_database("pins"))


# -- properties -----------------------------------------------------------------------------


@st.composite
def pinned_conversations(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int]]:
    history = draw(conversations())
    chosen = draw(st.sets(st.integers(1, max(1, len(history) - 1)), max_size=6))
    by_metadata = {i for i in chosen if i < len(history) and draw(st.booleans())}
    history = [pinned(m) if i in by_metadata else m for i, m in enumerate(history)]
    by_id = sorted(i for i in chosen if i < len(history) and i not in by_metadata)
    return history, by_id


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pinned_conversations(), budget=st.integers(300, 30_000), config=configs)
def test_no_pin_splits_a_call_group_and_every_view_fits(case, budget, config) -> None:
    history, by_id = case

    async def run() -> None:
        ctx = ContextFold(config)
        await ctx.set_messages(history)
        for i in by_id:
            await ctx.pin(f"r{i}")
        try:
            view = await ctx.get_messages_for_request(token_budget=budget)
        except ContextLengthError:
            event("required core over budget")
            # Pins never cause a refusal: only the required core does.
            assert required_core_cost(ctx, history) > budget * 0.95
            return
        check_view(ctx, history, view, budget)  # within budget, groups whole and paired
        if "pins" not in ctx.last_report.relaxed:
            event("pins kept")
            for rid in ctx.pins:
                assert carries(view, history[int(rid[1:])]), rid
        else:
            event("pins yielded")

    asyncio.run(run())
