"""Issue 7, whole sessions: the cases where a real Amplifier session must not end.

Each test runs a whole session in the real amplifier-core kernel the way Amplifier's own
``loop-basic`` runs it: ``loop-fold`` with ``overflow: raise`` (a provider overflow ends the
session, no refit), and ``provider-scripted`` with ``strict_sequence: true`` (every request is
checked the way OpenAI and Anthropic check it and refused on a sequence fault). A session
passes only if it finishes, no request the provider measured was over its window, and the
provider accepted every request. Numbers in test names are the cases of issue 7.
"""

from __future__ import annotations

from typing import Any

import pytest
from amplifier_core import AmplifierSession

from contextfold.amplifier.scripted_provider import ScriptedProvider
from contextfold.tokens import ExactCounter

FINAL_TEXT = "All topics are covered."
PROMPT = "Research every topic on the list, one lookup at a time, then summarise."


def session_plan(
    steps: int,
    *,
    context_window: int,
    provider: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    hooks: list[dict[str, Any]] | None = None,
    result_chars: int = 1_500,
) -> dict[str, Any]:
    """One human prompt, ``steps`` tool steps, the loop-basic-like loop, a strict provider."""
    return {
        "session": {
            "orchestrator": {
                "module": "loop-fold",
                "config": {"overflow": "raise", "max_iterations": steps + 5, **(loop or {})},
            },
            # Exact counting: the test is that no request exceeds the provider's window.
            "context": {"module": "context-fold", "config": {"token_counter": "exact"}},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {"steps": steps, "final_text": FINAL_TEXT},
                    "context_window": context_window,
                    "max_output_tokens": 1_024,
                    "strict_sequence": True,
                    **(provider or {}),
                },
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": result_chars}}],
        "hooks": hooks or [],
    }


async def run_session(plan: dict[str, Any]) -> tuple[ScriptedProvider, list[dict[str, Any]]]:
    """Run the prompt to the end; return the provider (with its records) and the history."""
    session = AmplifierSession(plan)
    await session.initialize()
    try:
        assert await session.execute(PROMPT) == FINAL_TEXT
        provider = session.coordinator.get("providers")["scripted"]
        history = await session.coordinator.get("context").get_messages()
    finally:
        await session.cleanup()
    return provider, history


def assert_every_request_accepted(provider: ScriptedProvider, steps: int) -> None:
    records = provider.records
    assert len(records) == steps + 1  # one request per step and one for the final answer
    assert [r.index for r in records if r.rejected] == []
    over = [(r.index, r.request_tokens) for r in records if r.request_tokens > r.window]
    assert over == [], f"requests over the {records[0].window}-token window: {over}"
    faults = [(r.index, r.sequence.faults) for r in records if not r.sequence.ok]
    assert faults == []


# -- 7.1: signed thinking must not pin every turn of a long single-prompt run ---------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("steps", "context_window"),
    [(30, 16_000), (120, 64_000)],
    ids=["30-steps-16k", "120-steps-64k"],
)
async def test_7_1_a_long_thinking_run_finishes_in_its_window(
    steps: int, context_window: int
) -> None:
    plan = session_plan(
        steps, context_window=context_window, provider={"reply_shape": "anthropic-thinking"}
    )
    provider, history = await run_session(plan)
    assert_every_request_accepted(provider, steps)
    # The run did press on the window: history holds more than one request may carry.
    counter = ExactCounter()
    assert sum(counter.count_message(m) for m in history) > provider.records[-1].window
    thinking_turns = [
        m
        for m in history
        if m["role"] == "assistant"
        and any(b.get("type") == "thinking" for b in m["content"] if isinstance(b, dict))
    ]
    assert len(thinking_turns) == steps + 1  # history is the record: every signed turn kept
    # Every request checked the newest turn's signed thinking (Anthropic's rule) and passed.
    assert all(r.sequence.thinking_turn is not None for r in provider.records[1:])


# -- 7.2: a hook's injection stored between calls and results -------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("role", ["system", "user"])
async def test_7_2_an_injection_per_tool_call_never_ends_the_run(role: str) -> None:
    steps = 60
    plan = session_plan(
        steps,
        context_window=16_000,
        loop={"injections": "immediate"},
        hooks=[{"module": "hooks-context-inject", "config": {"role": role}}],
    )
    provider, history = await run_session(plan)
    assert_every_request_accepted(provider, steps)
    # The kernel stored each note the moment its hook returned, between call and result:
    # the context had to deliver them after the group, not the loop.
    between = [
        i
        for i, m in enumerate(history)
        if m["role"] == role
        and m.get("metadata", {}).get("source") == "hook"
        and history[i - 1].get("tool_calls")
    ]
    assert len(between) == steps


# -- 7.3: call ids numbered per response -----------------------------------------------------


async def test_7_3_per_response_call_ids_do_not_end_the_run() -> None:
    steps = 40
    plan = session_plan(steps, context_window=16_000, provider={"call_ids": "per_response"})
    provider, history = await run_session(plan)
    assert_every_request_accepted(provider, steps)
    ids = [c["id"] for m in history for c in m.get("tool_calls") or []]
    assert set(ids) == {"call_0"} and len(ids) == steps  # history keeps the ids as sent
