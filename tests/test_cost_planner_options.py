"""``planner: cost`` chooses which pass by what the cycle it starts costs, and keeps what the
conversation keeps coming back to, through the public API: a pass that shortens only the
newest results, the prompt's cached prefix kept, where that costs less than a deep pass; a
deep pass that holds the earlier messages a later one drew a value from."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.tokens import HeuristicCounter
from support import SYSTEM, human, prose, unstamped
from test_properties import check_view

SONNET = "claude-sonnet-4-5"
BUDGET = 60_000


def cost_context() -> ContextFold:
    return ContextFold({"planner": "cost", "prices": SONNET, "token_counter": "heuristic"})


def call(n: int, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{n}", "tool": "lookup", "arguments": arguments}],
    }


def result(n: int, chars: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{n}", "content": f"ID-{n:05d} " + prose(n, chars)}


def drawn_on_every_other(n: int) -> list[dict[str, Any]]:
    """A round whose call names the id the previous result gave, every other round: half
    the results are drawn on (a deep pass holds them), half are not."""
    ref = f"ID-{n - 1:05d}" if n % 2 else f"t{n}"
    return [call(n, {"ref": ref}), result(n, 2_000)]


def shared_prefix(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> int:
    shared = 0
    for old, new in zip(before, after, strict=False):
        if old != new:
            break
        shared += 1
    return shared


def assert_paired(view: list[dict[str, Any]]) -> None:
    answered: set[str] = set()
    for message in view:
        for tool_call in message.get("tool_calls") or []:
            answered.add(tool_call["id"])
        if message.get("role") == "tool":
            assert message["tool_call_id"] in answered


async def test_a_pass_that_keeps_the_cached_prefix_is_chosen_where_it_costs_less() -> None:
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Look every reference up and summarise."))
    previous: list[dict[str, Any]] | None = None
    kept_prefix: list[int] = []
    for n in range(140):
        for message in drawn_on_every_other(n):
            await context.add_message(message)
        view = await context.get_messages_for_request(token_budget=BUDGET)
        report = context.last_report
        assert report.tokens_after <= BUDGET
        assert_paired(view)
        # A cost pass (one the peak rule fired, where it pays, or the trigger's).
        cost_pass = report.compacted_by in ("optimal_peak", "trigger")
        if report.compacted and cost_pass and previous:
            shared = shared_prefix(previous, view)
            if shared > len(previous) // 2:
                kept_prefix.append(n)
                # What it changed after the prefix it kept is the newest results, each
                # shortened with its recall id named; the call groups all stay.
                # (the round just admitted, the last two messages, aside).
                changed = [m for m in view[shared:-2] if m not in previous]
                assert changed
                assert all(m["role"] == "tool" for m in changed)
                assert all("context_recall(" in m["content"] for m in changed)
                assert len(view) == len(previous) + 2
        previous = view
    # The deep pass rewrites the view from the notice on; here, where the earlier messages
    # are held anyway, one pass kept the prefix the provider had cached instead.
    assert kept_prefix


DRAWN_BACK = 7  # rounds between a result and the round that draws on it
ROUNDS = 200


def result_with_mid_value(n: int) -> dict[str, Any]:
    """A result whose id is in its head and whose other value (a payment id) is mid-way:
    shortening the result (head and tail) takes the payment id out of the view."""
    content = f"ID-{n:05d} {prose(n, 1_000)} PAY-{n:05d}x {prose(n + 1, 1_000)}"
    return {"role": "tool", "tool_call_id": f"c{n}", "content": content}


def ledger_text(view: list[dict[str, Any]]) -> str:
    return " ".join(m["content"] for m in view if (m.get("metadata") or {}).get("ledger") is True)


async def test_what_a_pass_keeping_the_cached_prefix_shortened_is_listed_by_the_next_pass() -> None:
    # A pass that keeps the cached prefix leaves the ledger as it was (a new page would
    # change the prefix); the results it shortened, still in the view with their payment id
    # cut, are listed by the next pass that lists: the value, or the message's recall id
    # among those whose values did not fit (nothing is taken out silently).
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Look every reference up and summarise."))
    previous: list[dict[str, Any]] | None = None
    shortened_by_kept_prefix: set[str] = set()
    checked = 0
    for n in range(ROUNDS):
        # Every other round draws on a result some rounds back, which a pass that kept the
        # cached prefix may have shortened by then: a deep pass holds it, shortened.
        ref = f"ID-{n - DRAWN_BACK:05d}" if n % 2 else f"t{n}"
        await context.add_message(call(n, {"ref": ref}))
        await context.add_message(result_with_mid_value(n))
        view = await context.get_messages_for_request(token_budget=BUDGET)
        report = context.last_report
        assert report.tokens_after <= BUDGET
        if not (report.compacted and previous):
            previous = view
            continue
        shared = shared_prefix(previous, view)
        if shared > len(previous) // 2:  # it kept the prefix, the ledger's pages with it
            for message in view[shared:-2]:
                if message.get("role") == "tool" and message not in previous:
                    assert "PAY-" not in message["content"]
                    shortened_by_kept_prefix.add(message["tool_call_id"])
        else:
            ledger = ledger_text(view)
            for message in view:
                if message.get("tool_call_id") not in shortened_by_kept_prefix:
                    continue
                if "PAY-" in message["content"]:
                    continue  # given back whole: nothing to list
                number = int(message["tool_call_id"][1:])
                named = re.search(r'context_recall\("(r[0-9]+)"\)', message["content"])
                assert named is not None
                assert f"PAY-{number:05d}x" in ledger or re.search(rf"\b{named.group(1)}\b", ledger)
                checked += 1
            shortened_by_kept_prefix.clear()
        previous = view
    assert checked


async def test_a_deep_pass_holds_what_a_later_message_drew_on_in_an_earlier_task() -> None:
    context = cost_context()
    await context.add_message(SYSTEM)
    await context.add_message(human("Find the order for the customer."))
    for n in range(8):
        await context.add_message(call(n, {"page": n}))
        await context.add_message(result(n, 2_000))
    await context.add_message({"role": "assistant", "content": "Found ID-00003."})
    passes = 0
    for task in range(1, 60):
        await context.add_message(human(f"Next request, number {task}."))
        for step in range(2):
            n = 100 * task + step
            # One later task draws on the id an earlier task's page gave.
            arguments = {"order": "ID-00003"} if n == 200 else {"step": n}
            await context.add_message(call(n, arguments))
            await context.add_message(result(n, 2_000))
            view = await context.get_messages_for_request(token_budget=BUDGET)
            report = context.last_report
            assert report.tokens_after <= BUDGET
            assert_paired(view)
            if not (report.compacted and report.compacted_by == "optimal_peak"):
                continue
            passes += 1
            ids = {m.get("tool_call_id") for m in view if m.get("role") == "tool"}
            # The page the conversation drew on stays; the pages nobody used since leave.
            assert "c3" in ids
            assert not ids & {"c0", "c1", "c2", "c4", "c5", "c6", "c7"}
    assert passes >= 2


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rounds=st.lists(
        st.tuples(st.integers(0, 3), st.integers(200, 4_000), st.booleans()),
        min_size=10,
        max_size=70,
    ),
    budget=st.integers(3_000, 30_000),
    prices=st.sampled_from([SONNET, "gpt-5"]),
)
def test_cost_passes_of_either_kind_keep_every_view_invariant(
    rounds: list[tuple[int, int, bool]], budget: int, prices: str
) -> None:
    """Rounds that draw on an earlier result or not, results of any size, new tasks now and
    then: whichever pass the planner chooses, every view fits the budget by a fresh
    recount, keeps every call with its results, and history stays as it was admitted."""

    async def run() -> None:
        context = ContextFold({"planner": "cost", "prices": prices, "token_counter": "heuristic"})
        admitted = [SYSTEM, human("Look every reference up.")]
        for message in admitted:
            await context.add_message(message)
        for n, (back, chars, new_task) in enumerate(rounds):
            if new_task and n % 5 == 0:
                admitted.append(human(f"Next request, number {n}."))
                await context.add_message(admitted[-1])
            arguments = {"ref": f"ID-{n - back:05d}"} if back and n >= back else {"step": n}
            for message in (call(n, arguments), result(n, chars)):
                admitted.append(message)
                await context.add_message(message)
            view = unstamped(await context.get_messages_for_request(token_budget=budget))
            check_view(context, admitted, view, budget)
        assert unstamped(await context.get_messages()) == admitted

    asyncio.run(run())


def result_with_values(n: int) -> dict[str, Any]:
    """A result holding an order id, an email and an invoice id, none of them in its head
    alone: a pass that takes it out has values to list."""
    content = f"ORD-{n:05d} {prose(n, 800)} user{n}@mail{n}.example INV-2024-{n:05d} " + prose(
        n + 1, 800
    )
    return {"role": "tool", "tool_call_id": f"c{n}", "content": content}


async def ledger_tokens_at_most(planner: str, budget: int) -> int:
    """The largest ledger, in tokens, over a session of thirty tasks of six lookups."""
    context = ContextFold({"planner": planner, "prices": SONNET, "token_counter": "heuristic"})
    counter = HeuristicCounter()
    await context.add_message(SYSTEM)
    largest = 0
    for task in range(30):
        await context.add_message(human(f"Task {task}: look the references up."))
        for k in range(6):
            n = task * 10 + k
            await context.add_message(call(n, {"ref": f"t{n}"}))
            await context.add_message(result_with_values(n))
            view = await context.get_messages_for_request(token_budget=budget)
            assert context.last_report.tokens_after <= budget
            pages = [m for m in view if (m.get("metadata") or {}).get("ledger") is True]
            largest = max(largest, sum(counter.count_message(m) for m in pages))
    return largest


async def test_a_deep_pass_gives_the_ledger_part_of_the_room_it_frees() -> None:
    # A deep pass goes below the band's middle and takes more values out, in more passes:
    # half of the room it leaves under that middle goes to the ledger, beyond its share of
    # the budget (up to that share again), where the threshold planner keeps to the share.
    budget, share = 12_000, 0.12
    assert await ledger_tokens_at_most("threshold", budget) <= budget * share
    assert budget * share < await ledger_tokens_at_most("cost", budget) <= 2 * budget * share
