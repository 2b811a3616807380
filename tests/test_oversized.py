"""A tool result larger than the window: read once, shortened to a share of the budget, and
once the agent has answered it, cut to the head any old result keeps, its values in the
ledger and the whole of it a recall away (nothing silently lost); the ledger lists what the
agent drew from such a result, not its look-alikes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ContextFold
from contextfold.compaction.newest_results import RESULTS_SHARE
from contextfold.tokens import ExactCounter
from support import SYSTEM, assert_pairing, human, prose
from test_ledger import pages_of, silently_lost

TRUTH = ExactCounter("o200k_base")
BUDGET = 8_000
BUILD = "BUILD-58213"  # a value only the middle of the big result holds


def call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "tool": tool, "arguments": arguments}],
    }


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def big_log(lines: int = 1_500) -> str:
    """About 24,000 tokens of log: three times the window; ``BUILD`` in its middle."""
    rows = [f"line {i}: " + prose(i, 60) for i in range(lines)]
    rows[20] = f"line 20: artifact {BUILD} uploaded"
    return "\n".join(rows) + "\nRUN ENDED: OK"


async def read_big_log() -> tuple[ContextFold, str]:
    """A session whose newest call returned ``big_log``, and the request that sends it."""
    context = ContextFold({"token_counter": "exact"})
    await context.set_messages([SYSTEM, human("Read the run log and say how it ended.")])
    text = big_log()
    await context.add_message(call("c1", "read_log", path="run.log"))
    await context.add_message(result("c1", text))
    return context, text


def tool_message(view: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    return next(m for m in view if m.get("role") == "tool" and m["tool_call_id"] == call_id)


async def test_the_newest_result_is_shortened_to_its_share_of_the_budget() -> None:
    context, text = await read_big_log()
    assert TRUTH.count_text(text) > 3 * BUDGET
    view = await context.get_messages_for_request(token_budget=BUDGET)
    report = context.last_report
    assert report is not None and report.relaxed[-1] == "newest_results_shortened"
    shown = tool_message(view, "c1")["content"]
    # Head and tail, read once: a share of the budget, not the whole room left.
    assert shown.startswith("line 0: ") and shown.endswith("RUN ENDED: OK")
    assert TRUTH.count_text(shown) <= BUDGET * RESULTS_SHARE + 60
    assert report.tokens_after <= BUDGET // 4
    # The middle is a recall away, from the offset the marker names.
    found = re.search(r'context_recall\("(r\d+)", offset=(\d+)\) returns it', shown)
    assert found and BUILD not in shown
    offset = int(found.group(2))
    assert (await context.recall(found.group(1), offset=offset)).startswith(text[offset:][:100])


async def test_once_answered_it_is_cut_to_its_head_with_its_values_in_the_ledger() -> None:
    context, text = await read_big_log()
    await context.get_messages_for_request(token_budget=BUDGET)
    await context.add_message(
        {"role": "assistant", "content": "The run ended OK: exit code E-0042."}
    )
    await context.add_message(human("Now list the open tickets."))
    view = await context.get_messages_for_request(token_budget=BUDGET)
    report = context.last_report
    assert report is not None and report.compacted_by == "oversized"
    assert_pairing(view)
    # The call keeps its answer, cut to the head an old result keeps, naming its recall id.
    shown = tool_message(view, "c1")["content"]
    assert shown.startswith("line 0: ") and len(shown) < 400
    assert 'context_recall("r3")' in shown
    # What it held and the view no longer shows is in the ledger, after that recall id...
    lines = [line for page in pages_of(view) for line in page["content"].splitlines()]
    assert any(line.strip().startswith("r3:") and BUILD in line for line in lines), lines
    assert silently_lost(await context.get_messages(), view) == []
    # ...the whole of it a recall away, and history keeps it as admitted.
    page = await context.recall("r3")
    assert BUILD in page and text.startswith(page[: page.index("\n[... recall cut")])
    assert (await context.get_messages())[3]["content"] == text
    assert report.tokens_after <= BUDGET // 4


async def test_the_cut_runs_once_and_the_next_requests_build_on_it() -> None:
    context, _ = await read_big_log()
    await context.get_messages_for_request(token_budget=BUDGET)
    await context.add_message(
        {"role": "assistant", "content": "The run ended OK: exit code E-0042."}
    )
    first = await context.get_messages_for_request(token_budget=BUDGET)
    assert context.last_report is not None and context.last_report.compacted_by == "oversized"
    for n in range(3):
        await context.add_message(call(f"t{n}", "list_tickets", page=n))
        await context.add_message(result(f"t{n}", f"TCK-{n:04d} open"))
        view = await context.get_messages_for_request(token_budget=BUDGET)
        report = context.last_report
        assert report is not None and not report.compacted and report.compacted_by == ""
        assert view[: len(first)] == first  # the prefix stays byte-stable


async def test_a_result_still_being_answered_is_not_cut() -> None:
    # A second request before the agent answers (a retry) sends the same view: the group
    # is still the one the request sends back, so nothing runs again.
    context, _ = await read_big_log()
    first = await context.get_messages_for_request(token_budget=BUDGET)
    again = await context.get_messages_for_request(token_budget=BUDGET)
    assert again == first
    assert context.last_report is not None and not context.last_report.compacted


async def test_a_resumed_session_cuts_it_as_the_last_process_would_have(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'agent.db'}"
    first = ContextFold(store=store, session_id="s1", token_counter="exact")
    await first.set_messages([SYSTEM, human("Read the run log and say how it ended.")])
    await first.add_message(call("c1", "read_log", path="run.log"))
    await first.add_message(result("c1", big_log()))
    await first.get_messages_for_request(token_budget=BUDGET)
    await first.add_message({"role": "assistant", "content": "The run ended OK: exit code E-0042."})
    # Another process opens the session (the first one crashed here, say): it knows the
    # carried result from the saved view alone, and cuts it as the first would have.
    resumed = ContextFold(store=store, session_id="s1", token_counter="exact")
    view = await resumed.get_messages_for_request(token_budget=BUDGET)
    assert resumed.last_report is not None and resumed.last_report.compacted_by == "oversized"
    assert view == await first.get_messages_for_request(token_budget=BUDGET)
    assert len(tool_message(view, "c1")["content"]) < 400


def quote(n: int) -> str:
    """A one-line JSON quote: a price, then hundreds of look-alike averages."""
    averages = [round(200 + (k * 37 + n) % 5_000 / 100, 2) for k in range(300)]
    return json.dumps({"price": 725.89 + n, "volume": 1.789, "MA(5)": averages})


async def test_the_ledger_lists_the_value_drawn_from_a_listing_not_its_look_alikes() -> None:
    context = ContextFold({"token_counter": "exact"})
    await context.set_messages([SYSTEM, human("Buy 50 QUAS at the current price.")])
    for n in range(6):
        price = f"{725.89 + n:.2f}"
        await context.add_message(call(f"q{n}", "get_stock_info", symbol="QUAS"))
        await context.add_message(result(f"q{n}", quote(n)))
        await context.add_message(call(f"o{n}", "place_order", symbol="QUAS", price=price))
        await context.add_message(result(f"o{n}", f"order ORD-{12_446 + n} placed"))
        await context.add_message({"role": "assistant", "content": f"Placed at {price}."})
        await context.add_message(human(f"Next order, please ({n})."))
        view = await context.get_messages_for_request(token_budget=3_000)
    listed = " ".join(page["content"] for page in pages_of(view))
    assert "725.89" in listed  # the price the agent drew from the oldest quote (its call)
    averages = {str(v) for n in range(6) for v in json.loads(quote(n))["MA(5)"]}
    assert not [value for value in re.split(r"[;\s]+", listed) if value in averages]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    lines=st.integers(min_value=1_100, max_value=1_800),
    budget=st.sampled_from([4_000, 8_000, 16_000]),
    answers=st.integers(min_value=1, max_value=3),
)
async def test_an_answered_oversized_result_is_never_carried_long_nor_lost(
    lines: int, budget: int, answers: int
) -> None:
    context = ContextFold({"token_counter": "exact"})
    await context.set_messages([SYSTEM, human("Read the run log and say how it ended.")])
    await context.add_message(call("c1", "read_log", path="run.log"))
    await context.add_message(result("c1", big_log(lines)))
    view = await context.get_messages_for_request(token_budget=budget)
    for n in range(answers):
        await context.add_message({"role": "assistant", "content": f"Step {n} done."})
        view = await context.get_messages_for_request(token_budget=budget)
        report = context.last_report
        assert report is not None and report.tokens_after <= budget
        assert n == 0 or not report.compacted  # cut once, then the view builds on it
        assert_pairing(view)
        shown = tool_message(view, "c1")["content"]
        assert TRUTH.count_text(shown) <= max(200, budget * RESULTS_SHARE + 60)
        assert silently_lost(await context.get_messages(), view) == []


async def test_the_measured_request_cuts_it_once_answered_as_the_estimate_path_does() -> None:
    """`token_meter: actual` with the orchestrator's own count (`get_measured_request_view`)
    runs the same one pass once the result is answered, and says why."""
    context = ContextFold({"token_counter": "exact", "token_meter": "actual", "max_tokens": BUDGET})
    await context.set_messages([SYSTEM, human("Read the run log and say how it ended.")])
    text = big_log()
    await context.add_message(call("c1", "read_log", path="run.log"))
    await context.add_message(result("c1", text))
    counted: list[int] = []

    async def count_view(view: list[dict[str, Any]]) -> dict[str, Any]:
        count = sum(context.counter.count_message(m) for m in view)
        counted.append(count)
        return {
            "dispatch": len(counted),
            "budget_decision": {
                "effective_budget": BUDGET,
                "estimated_input_tokens": count,
                "input_limit_tokens": BUDGET,
                "measurement": {"kind": "provider_count", "source": "test", "input_tokens": count},
            },
        }

    async def measured() -> dict[str, Any]:
        envelope = await context.get_measured_request_view(
            provider=None, retain_contents=[], count_view=count_view
        )
        if envelope["transaction"] is not None:
            assert await envelope["transaction"].commit() is True
        return envelope

    first = await measured()
    assert first["outcome"] != "not_needed"
    assert BUILD not in tool_message(first["base_view"], "c1")["content"]
    await context.add_message(
        {"role": "assistant", "content": "The run ended OK: exit code E-0042."}
    )
    await context.add_message(human("Now list the open tickets."))
    answered = await measured()
    report = context.last_report
    assert report is not None and report.compacted_by == "oversized"
    view = answered["base_view"]
    assert_pairing(view)
    shown = tool_message(view, "c1")["content"]
    assert shown.startswith("line 0: ") and len(shown) < 400
    lines = [line for page in pages_of(view) for line in page["content"].splitlines()]
    assert any(line.strip().startswith("r3:") and BUILD in line for line in lines), lines
    assert silently_lost(await context.get_messages(), view) == []
    # Once: the next request builds on it, with nothing to cut and one count.
    calls = len(counted)
    again = await measured()
    assert again["outcome"] == "not_needed" and len(counted) == calls + 1
    assert again["base_view"] == view
