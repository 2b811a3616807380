"""The eval's fact rule on hand-made sessions: what is a fact, near or far, and bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold.evaluation import FactRule, find_steps
from contextfold.evaluation.facts import candidate_values, occurs

SYSTEM = {"role": "system", "content": "You are an agent. Support line: SUP-0001."}


def human(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "metadata": {"source": "user"}}


def call(name: str, arguments: Any, text: str = "", call_id: str = "c1") -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
        ],
    }


def result(content: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def facts_at(messages: list[dict[str, Any]], index: int, **rule: Any) -> dict[str, Any]:
    """value -> Fact for the step at message ``index``."""
    steps = {s.message_index: s for s in find_steps(messages, FactRule(**rule))}
    return {fact.value: fact for fact in steps[index].facts}


def filler(n: int, call_id: str) -> list[dict[str, Any]]:
    return [call("noop", {"page": n}, call_id=call_id), result(f"page {n}: nothing", call_id)]


def test_a_value_from_a_tool_result_used_in_the_next_call_is_a_near_fact() -> None:
    messages = [
        SYSTEM,
        human("Find the late order."),
        call("search_orders", {"status": "late"}),
        result("ORD-48231 delivered\nORD-48213 late\nORD-42813 delivered"),
        call("get_order", {"order_id": "ORD-48213"}, call_id="c2"),
        result("order ORD-48213: 1284.50 EUR", "c2"),
    ]
    facts = facts_at(messages, 4)
    assert set(facts) == {"ORD-48213"}
    fact = facts["ORD-48213"]
    assert fact.sources == (3,)
    assert fact.near
    assert fact.kind == "argument"


def test_values_in_the_system_prompt_or_never_seen_before_are_not_facts() -> None:
    messages = [
        SYSTEM,
        human("Open a ticket."),
        call("lookup", {"q": "x"}),
        result("escalate to SUP-0001 with case CASE-7781"),
        call("create_ticket", {"support": "SUP-0001", "case": "CASE-7781", "new_id": "TCK-5555"}),
    ]
    assert set(facts_at(messages, 4)) == {"CASE-7781"}


def test_a_value_counts_only_as_a_whole_never_inside_a_longer_id() -> None:
    assert occurs("ORD-4821", "see ORD-4821.")
    assert not occurs("ORD-4821", "see ORD-48213")
    assert not occurs("4821", "ORD-48213")
    assert occurs("1284.50", "total $1284.50, paid")
    messages = [
        human("Check it."),
        call("a", {"q": "z"}),
        result("ORD-48213 only"),
        call("get_order", {"order_id": "ORD-4821"}, call_id="c2"),
    ]
    assert facts_at(messages, 3) == {}


def test_far_means_older_than_the_current_task_and_the_last_n_turns() -> None:
    messages = [
        human("Task one: find the invoice."),
        call("list", {"p": 1}, call_id="a1"),
        result("invoice INV-2024-40897 was paid twice", "a1"),
        *filler(1, "f1"),
        *filler(2, "f2"),
        *filler(3, "f3"),
        human("Task two: void the duplicate you found."),
        call("void", {"invoice": "INV-2024-40897"}, call_id="v1"),
    ]
    step = len(messages) - 1
    # Three turns back with a window of two turns, and before the current task: far.
    assert not facts_at(messages, step, near_turns=2)["INV-2024-40897"].near
    # The last five turns reach back to it: near, though an earlier task found it.
    assert facts_at(messages, step, near_turns=5)["INV-2024-40897"].near
    # near_turns=0: only the current task counts.
    assert not facts_at(messages, step, near_turns=0)["INV-2024-40897"].near


def test_a_value_seen_again_in_the_current_task_is_near_by_its_latest_source() -> None:
    messages = [
        human("Task one."),
        call("a", {"q": 1}, call_id="a1"),
        result("email: dana.whitfield@post.example", "a1"),
        *filler(1, "f1"),
        *filler(2, "f2"),
        human("Task two."),
        call("b", {"q": 2}, call_id="b1"),
        result("contact on file: dana.whitfield@post.example", "b1"),
        call("send", {"to": "dana.whitfield@post.example"}, call_id="b2"),
    ]
    fact = facts_at(messages, len(messages) - 1, near_turns=1)["dana.whitfield@post.example"]
    assert fact.sources == (2, 9)
    assert fact.near


def test_identifier_like_spans_of_every_kind_are_found_in_text_and_prose_arguments() -> None:
    text = (
        'Refund "Dana Whitfield" $1,284.50 on 2024-03-14 for ORD-48213, see '
        "https://status.example/incidents/INC-20417 and /var/log/billing/worker-3.log, "
        "mail dana@post.example; code E4021, account 4455667."
    )
    found = dict(candidate_values({"role": "assistant", "content": text}))
    assert found["https://status.example/incidents/INC-20417"] == "url"
    assert found["dana@post.example"] == "email"
    assert found["/var/log/billing/worker-3.log"] == "path"
    assert found["2024-03-14"] == "date"
    assert found["1,284.50"] == "amount"
    assert found["ORD-48213"] == "id"
    assert found["E4021"] == "id"
    assert found["4455667"] == "id"
    assert found["Dana Whitfield"] == "quoted"
    # A URL's own id is part of the URL, not a span of its own.
    assert "INC-20417" not in found


def test_apostrophes_are_not_quotes() -> None:
    # Read as quotes, "Let's ... John's" made "s check John" a value the user wrote: the
    # ledger listed it first and the fact rule asked for it.
    text = "Let's check John's account, and Mary's order 'Blue Widget' (or 'Red-2')."
    found = dict(candidate_values({"role": "user", "content": text}))
    assert found == {"Blue Widget": "quoted", "Red-2": "id"}
    assert candidate_values({"role": "user", "content": "I'm sure it's far, don't go."}) == []


def test_plain_words_and_short_numbers_are_never_candidates() -> None:
    message = call("list", {"order": "asc", "folder": "documents", "limit": 50, "flag": True})
    assert candidate_values(message) == []


def test_a_float_argument_matches_the_amount_as_written_with_two_decimals() -> None:
    messages = [
        human("Refund it."),
        call("get", {"id": "ORD-1"}),
        result("total 1284.50 EUR"),
        call("refund", {"amount": 1284.5, "count": 12345}, call_id="c2"),
    ]
    assert set(facts_at(messages, 3)) == {"1284.50"}


def test_an_id_inside_a_longer_fact_of_the_same_step_is_left_to_it() -> None:
    messages = [
        human("Link it."),
        call("get", {"id": "x1"}),
        result("page https://status.example/incidents/INC-20417 for INC-20417"),
        call(
            "ticket",
            {"url": "https://status.example/incidents/INC-20417", "id": "INC-20417"},
            call_id="c2",
        ),
    ]
    assert set(facts_at(messages, 3)) == {"https://status.example/incidents/INC-20417"}
    # Alone, the id is a fact.
    messages[3] = call("ticket", {"id": "INC-20417"}, call_id="c2")
    assert set(facts_at(messages, 3)) == {"INC-20417"}


def test_escaped_json_results_and_anthropic_blocks_are_read_as_the_values_they_hold() -> None:
    messages = [
        human("Open the file."),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {"dir": "/"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": json.dumps({"files": ["/srv/café/Menu-2024.txt"]}),
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "maybe ORD-99999", "signature": "s"},
                {"type": "text", "text": "Reading it."},
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "read",
                    "input": {"path": "/srv/café/Menu-2024.txt"},
                },
            ],
        },
    ]
    # json.dumps escaped the é as \u00e9: found through the decoded values.
    assert "\\u00e9" in messages[2]["content"][0]["content"]
    facts = facts_at(messages, 3)
    assert set(facts) == {"/srv/café/Menu-2024.txt"}
    assert facts["/srv/café/Menu-2024.txt"].sources == (2,)


def test_hook_notes_do_not_start_a_task() -> None:
    messages = [
        human("Task one."),
        call("a", {"q": 1}, call_id="a1"),
        result("token TOK-7731", "a1"),
        *filler(1, "f1"),
        {"role": "user", "content": "reminder: be brief", "metadata": {"source": "hook"}},
        call("use", {"token": "TOK-7731"}, call_id="u1"),
    ]
    steps = {s.message_index: s for s in find_steps(messages, FactRule(near_turns=0))}
    step = steps[len(messages) - 1]
    assert step.task_start == 0
    assert step.task_prompt == "Task one."
    assert step.facts[0].near


def test_bad_input_is_read_as_far_as_it_can_be_and_never_raises() -> None:
    messages: list[Any] = [
        human("Go."),
        "not a message",
        {"role": "tool", "tool_call_id": "zz", "content": 12345},
        {"role": "assistant", "content": None, "tool_calls": "not a list"},
        {"role": "assistant", "content": [42, None, {"type": "text"}]},
        result("found KEY-4242 and more"),
        call("use", "{not json: KEY-4242", call_id="c9"),  # unreadable arguments: read as text
        {"role": 7, "content": {"odd": True}},
        call("deep", {"a": [[[[{"b": "KEY-4242"}]]]]}, call_id="c10"),
    ]
    steps = {s.message_index: s for s in find_steps(messages)}
    assert [f.value for f in steps[6].facts] == ["KEY-4242"]
    assert [f.value for f in steps[8].facts] == ["KEY-4242"]
    assert steps[3].facts == () and steps[4].facts == ()


def test_nesting_too_deep_is_not_read_and_does_not_raise() -> None:
    deep: Any = "KEY-1"
    for _ in range(5_000):
        deep = [deep]
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "tool": "x", "arguments": {"v": deep}}],
    }
    assert candidate_values(message) == []


def test_the_rule_refuses_what_is_not_a_session_or_a_setting() -> None:
    with pytest.raises(TypeError, match="list of chat messages"):
        find_steps("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of chat messages"):
        find_steps({"role": "user"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="near_turns"):
        FactRule(near_turns=-1)
    with pytest.raises(ValueError, match="near_turns"):
        FactRule(near_turns=True)  # type: ignore[arg-type]


def test_every_assistant_message_but_a_first_one_is_a_step() -> None:
    messages = [
        {"role": "assistant", "content": "Hello."},
        human("Hi."),
        {"role": "assistant", "content": "How can I help?"},
        human("Bye."),
        {"role": "assistant", "content": "Bye."},
    ]
    assert [s.message_index for s in find_steps(messages)] == [2, 4]
