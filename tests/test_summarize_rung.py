"""The summarize rung: turns leave the view and one summary stands for them; one summarizer
call per pass at most, none when cheaper rungs reach the target, and a failing summarizer
falls through to the next rung with nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold import ConfigError, ContextFold
from contextfold.summaries import InMemorySummaryStore, scripted_summarizer
from support import SYSTEM, agent_run, assert_pairing, human, tool_round, unstamped

SUMMARIZE = {"name": "summarize", "max_input_tokens": 8_000, "max_output_tokens": 400}
LADDER = ["strip_thinking", "truncate_tool_results", SUMMARIZE, "drop_oldest"]


class Counting:
    """A summarizer that counts its calls around the offline digest."""

    def __init__(self) -> None:
        self.inner = scripted_summarizer()
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls += 1
        return await self.inner(messages, max_tokens)


class Failing:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls += 1
        raise RuntimeError("summarizer backend is down")


def is_summary(message: dict[str, Any]) -> bool:
    return bool((message.get("metadata") or {}).get("summary"))


def make(
    summarizer: Any, store: InMemorySummaryStore | None = None, **settings: Any
) -> tuple[ContextFold, list]:
    events: list = []
    settings.setdefault("token_counter", "heuristic")
    settings.setdefault("strategies", LADDER)
    context = ContextFold(
        settings,
        summarizer=summarizer,
        summary_store=store,
        on_event=lambda e, d: events.append((e, d)),
    )
    return context, events


async def grow(context: ContextFold, rounds: range, *, budget: int) -> list[list[dict]]:
    views = []
    for n in rounds:
        for message in tool_round(n, result_chars=1_500):
            await context.add_message(message)
        views.append(await context.get_messages_for_request(token_budget=budget))
    return views


async def test_old_turns_are_replaced_by_one_summary_after_the_head() -> None:
    summarizer = Counting()
    context, events = make(summarizer)
    await context.set_messages([SYSTEM, human("Look up every topic and compare.")])
    views = await grow(context, range(30), budget=8_000)
    summaries = [d for e, d in events if e == "context:summary"]
    assert summaries and all("failure" not in d for d in summaries)
    view = views[-1]
    assert_pairing(view)
    assert unstamped(view[:2]) == [SYSTEM, human("Look up every topic and compare.")]
    [summary] = [m for m in view if is_summary(m)]
    assert view.index(summary) == 2  # right after the head, where the summarized turns were
    assert summary["content"].startswith('<context-summary covers="r2-')
    assert "lookup" in summary["content"]  # the digest names the calls it stands for
    # One call per pass, at most; the summary folds the previous one in.
    assert summarizer.calls == len(summaries) == context.summary_stats.calls
    assert context.last_report.tokens_after <= 8_000
    # History keeps everything.
    assert len(await context.get_messages()) == 2 + 60


async def test_the_summary_is_byte_stable_until_the_next_pass() -> None:
    context, events = make(Counting())
    await context.set_messages([SYSTEM, human("go")])
    # 14 rounds: with the ledger on, the notice reserves a twenty-fifth of the budget, and
    # the first pass that summarizes comes after 13.
    views = await grow(context, range(14), budget=8_000)
    passes = len([e for e, _ in events if e == "context:summary"])
    assert passes >= 1
    before = await context.get_messages_for_request(token_budget=8_000)
    await context.add_message({"role": "assistant", "content": "noted"})
    after = await context.get_messages_for_request(token_budget=8_000)
    assert not context.last_report.compacted
    assert after[: len(before)] == before
    assert views  # the run compacted with a summary


async def test_no_summarizer_call_when_cheaper_rungs_reach_the_target() -> None:
    summarizer = Counting()
    context, events = make(summarizer, protected_recent=0.1)
    history = agent_run(12, result_chars=6000)
    await context.set_messages(history)
    await context.get_messages_for_request(token_budget=1_000_000)
    total = context.last_report.tokens_after
    # Shortening old results alone brings this budget's view under target.
    view = await context.get_messages_for_request(token_budget=int(total / 0.92 * 0.8) + 800)
    assert context.last_report.compacted
    assert context.last_report.applied == ["truncate_tool_results"]
    assert len([m for m in view if not is_summary(m)]) >= len(history)
    assert summarizer.calls == 0 and not [e for e, _ in events if e == "context:summary"]


async def test_a_failing_summarizer_falls_through_to_the_next_rung() -> None:
    store = InMemorySummaryStore()
    summarizer = Failing()
    context, events = make(summarizer, store)
    await context.set_messages([SYSTEM, human("go")])
    views = await grow(context, range(30), budget=8_000)
    failures = [d for e, d in events if e == "context:summary"]
    assert failures and all(d["failure"]["reason"] == "error" for d in failures)
    assert "backend is down" in failures[0]["failure"]["detail"]
    assert summarizer.calls == len(failures) == context.summary_stats.failures
    assert not [m for v in views for m in v if is_summary(m)]  # never written as a summary
    assert await store.records() == []
    assert "drop_oldest" in context.last_report.applied or any(
        "drop_oldest" in d.get("applied", []) for e, d in events if e == "context:compaction"
    )
    assert context.last_report.tokens_after <= 8_000
    assert_pairing(views[-1])


async def test_the_same_run_on_the_same_store_reuses_every_summary() -> None:
    store = InMemorySummaryStore()
    first = Counting()
    context, _ = make(first, store)
    await context.set_messages([SYSTEM, human("go")])
    await grow(context, range(20), budget=8_000)
    assert first.calls >= 1
    # Another worker given the same conversation and the same records makes no call.
    second = Counting()
    again, _ = make(second, store)
    await again.set_messages([SYSTEM, human("go")])
    for n in range(20):
        for message in tool_round(n, result_chars=1_500):
            await again.add_message(message)
        await again.get_messages_for_request(token_budget=8_000)
    assert second.calls == 0 and again.summary_stats.reused >= 1


def test_summarize_needs_a_summarizer() -> None:
    with pytest.raises(ConfigError, match="summarizer"):
        ContextFold(strategies=LADDER)
    with pytest.raises(ConfigError, match="max_output_tokens"):
        ContextFold(
            strategies=[{"name": "summarize", "max_input_tokens": 1_000, "max_output_tokens": 900}],
            summarizer=Counting(),
        )


async def test_a_whole_session_summarizes_through_a_mounted_provider() -> None:
    from amplifier_core import AmplifierSession

    plan = {
        "session": {
            "orchestrator": "loop-fold",
            "context": {
                "module": "context-fold",
                "config": {
                    "max_tokens": 9_000,
                    "strategies": LADDER,
                    "summarizer": {"provider": "scripted"},
                },
            },
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {"script": {"steps": 24, "tool": "lookup", "argument": "topic"}},
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": 1_500}}],
    }
    async with AmplifierSession(plan) as session:
        await session.execute("Look up twenty-four topics.")
        context = session.coordinator.get("context")
        provider = session.coordinator.get("providers")["scripted"]
        view = await context.get_messages_for_request(provider=provider)
    summaries = [r for r in provider.records if r.purpose == "summary"]
    assert summaries and context.summary_stats.calls == len(summaries)
    assert context.summary_stats.failures == 0
    assert [m for m in view if is_summary(m)]
    chats = [r for r in provider.records if r.purpose != "summary"]
    assert all(not r.rejected and r.request_tokens <= r.window for r in chats)
    assert_pairing(view)


async def test_a_bad_summarizer_config_is_refused_at_mount() -> None:
    from amplifier_core.testing import MockCoordinator

    from contextfold.amplifier import mount

    with pytest.raises(ConfigError, match="unknown keys"):
        await mount(MockCoordinator(), {"strategies": LADDER, "summarizer": {"provder": "x"}})
    with pytest.raises(ConfigError, match="prompt_file"):
        await mount(
            MockCoordinator(),
            {"strategies": LADDER, "summarizer": {"prompt_file": "/nonexistent/prompt.md"}},
        )


async def test_a_resumed_transcript_reuses_every_summary_already_made() -> None:
    """Blocks are fixed by history alone: a resume summarizes the same spans and finds their
    records, so it calls the summarizer only for what was never summarized."""
    store = InMemorySummaryStore()
    first = Counting()
    # The threshold planner: a cost pass goes deep and drops the turns after its one
    # summarized block, and the summary never grows past them (one summary in all).
    context, _ = make(first, store, planner="threshold")
    await context.set_messages([SYSTEM, human("Look up every topic.")])
    await grow(context, range(30), budget=8_000)
    summarized = context.summary_stats.written
    assert summarized >= 2
    transcript = await context.get_messages()

    resumed_summarizer = Counting()
    resumed, events = make(resumed_summarizer, store, planner="threshold")
    await resumed.set_messages(transcript)
    view = await resumed.get_messages_for_request(token_budget=8_000)
    assert resumed_summarizer.calls <= 1  # at most the one span never summarized before
    assert resumed.summary_stats.reused >= summarized - 1
    [summary] = [m for m in view if is_summary(m)]
    assert_pairing(view)
    assert resumed.last_report.tokens_after <= 8_000
    # Once caught up, the resume goes on like the original: one call per new block.
    await grow(resumed, range(30, 40), budget=8_000)
    assert resumed_summarizer.calls <= 1 + len([e for e, _ in events if e == "context:summary"])
    assert summary["content"].startswith('<context-summary covers="r2-')
