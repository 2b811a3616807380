"""provider-scripted's prompt caches (the automatic prefix rule, Anthropic's breakpoint rules)
and its server-side ``clear_tool_uses``, against amplifier-core's real types and kernel; and
the pure reproduction of ``clear_tool_uses`` they share with the eval."""

from __future__ import annotations

from typing import Any

import pytest
from amplifier_core.message_models import ChatRequest, Message

from contextfold.amplifier.scripted_provider import ScriptedProvider
from contextfold.cache_marks import mark_message
from contextfold.cli.demo import DemoSettings, demo_runs, run_session
from contextfold.context_editing import PLACEHOLDER, ClearToolUses, clear_tool_uses
from contextfold.tokens import ExactCounter
from support import SYSTEM, agent_run, human, prose, tool_round

COUNTER = ExactCounter()


def request(messages: list[dict[str, Any]]) -> ChatRequest:
    return ChatRequest(messages=[Message.model_validate(m) for m in messages])


def marked(messages: list[dict[str, Any]], *positions: int) -> list[dict[str, Any]]:
    out = list(messages)
    for position in positions:
        out[position] = mark_message(out[position])
    return out


def turns(count: int, chars: int = 1_200) -> list[dict[str, Any]]:
    """A system prompt, a task and ``count`` text exchanges of about ``chars`` each."""
    messages = [SYSTEM, human("Keep a log of the readings.")]
    for n in range(count):
        messages.append({"role": "assistant", "content": f"Reading {n}: {prose(n, chars)}"})
        messages.append(human(f"Next reading {n}."))
    return messages


def size(messages: list[dict[str, Any]]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


async def send(provider: ScriptedProvider, messages: list[dict[str, Any]]) -> Any:
    await provider.complete(request(messages))
    return provider.records[-1]


# -- the automatic rule ----------------------------------------------------------------------


async def test_without_marks_the_shared_prefix_is_read_and_the_rest_written() -> None:
    provider = ScriptedProvider({"script": {"steps": 5}})
    history = turns(6)
    first = await send(provider, history[:8])
    second = await send(provider, history)
    assert first.cache_rule == second.cache_rule == "automatic"
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, size(history[:8]))
    assert second.prefix_tokens == second.cache_read_tokens == size(history[:8])
    assert second.cache_write_tokens == size(history) - size(history[:8])
    assert second.fresh_tokens == 0 and second.request_tokens == size(history)


# -- the breakpoint rules --------------------------------------------------------------------


async def test_marks_are_not_billed_and_do_not_change_the_prefix() -> None:
    provider = ScriptedProvider({"script": {"steps": 5}})
    history = turns(6)
    plain = await send(ScriptedProvider({"script": {"steps": 5}}), history)
    first = await send(provider, marked(history, len(history) - 1))
    assert first.cache_rule == "breakpoints"
    assert first.request_tokens == plain.request_tokens  # the marks cost nothing
    # The mark moves to the newest message; the previous request's prefix still matches.
    grown = [*history, {"role": "assistant", "content": "Noted."}, human("One more.")]
    second = await send(provider, marked(grown, len(grown) - 1))
    assert second.cache_read_tokens == size(history) == second.prefix_tokens
    assert second.cache_write_tokens == size(grown) - size(history)
    assert second.fresh_tokens == 0


async def test_reads_reach_back_twenty_blocks_from_a_mark_and_no_further() -> None:
    provider = ScriptedProvider({"script": {"steps": 9}})
    history = turns(20)  # 42 messages of one block each
    await send(provider, marked(history, len(history) - 1))
    # Change a message 25 blocks before the newest mark: the lookback never reaches the
    # part still cached before it, so nothing is read, though most of the prefix matches.
    edited = list(history)
    edited[17] = {"role": "assistant", "content": "Reading rewritten."}
    far = await send(provider, marked(edited, len(edited) - 1))
    assert far.prefix_tokens == size(history[:17]) > 1_024
    assert far.cache_read_tokens == 0
    assert far.cache_write_tokens == size(edited)
    # A mark just before the change (the stable prefix's) lets the cache be read up to it.
    again = list(history)
    again[17] = {"role": "assistant", "content": "Reading rewritten once more."}
    near = await send(provider, marked(again, 16, len(again) - 1))
    assert near.cache_read_tokens == size(history[:17])
    assert near.cache_write_tokens == size(again) - size(history[:17])


async def test_fresh_input_after_the_last_mark_and_nothing_cached_under_the_minimum() -> None:
    provider = ScriptedProvider({"script": {"steps": 5}, "cache_min_tokens": 1_024})
    history = turns(8)
    record = await send(provider, marked(history, 1))  # only the head marked
    head = size(history[:2])
    assert head < 1_024  # too short to cache
    assert record.cache_write_tokens == 0 and record.cache_read_tokens == 0
    assert record.fresh_tokens == size(history)
    bigger = ScriptedProvider({"script": {"steps": 5}, "cache_min_tokens": 100})
    record = await send(bigger, marked(history, 5))
    assert record.cache_write_tokens == size(history[:6])
    assert record.fresh_tokens == size(history) - size(history[:6])


@pytest.mark.slow
async def test_the_demo_with_breakpoints_is_billed_by_them_in_the_real_kernel() -> None:
    settings = DemoSettings(steps=24, window=12_000, cache_breakpoints=True, summarize=False)
    specs = {spec.key: spec for spec in demo_runs(settings)}
    assert all(spec.context_config["cache_breakpoints"] == "anthropic" for spec in specs.values())
    run = await run_session(settings, specs["managed"])
    assert run.completed and run.compactions > 0
    served = [p for p in run.points if not p.rejected]
    assert all(p.breakpoints for p in served)
    for point in served:
        assert point.cache_read_tokens + point.cache_write_tokens <= point.tokens
        assert point.cache_read_tokens <= max(point.prefix_tokens, 0) or point.request == 1
    # Between passes the newest-turn mark reads the whole previous request back.
    steady = [p for p, before in zip(served[1:], served, strict=False) if not p.compacted]
    assert steady and all(
        p.cache_read_tokens == p.prefix_tokens for p in steady[1:] if p.prefix_tokens >= 1_024
    )
    # Unmarked, the same run is billed by the automatic rule.
    plain = await run_session(
        DemoSettings(steps=24, window=12_000, summarize=False),
        demo_runs(DemoSettings(steps=24, window=12_000, summarize=False))[1],
    )
    assert not any(p.breakpoints for p in plain.points)
    assert [p.tokens for p in plain.points] == [p.tokens for p in run.points]


# -- server-side clear_tool_uses -------------------------------------------------------------


def test_clear_tool_uses_keeps_the_newest_three_and_leaves_its_input_alone() -> None:
    history = [SYSTEM, human("Look things up.")]
    for n in range(6):
        history.extend(tool_round(n, result_chars=800))
    before = [dict(m) for m in history]
    edit = ClearToolUses(trigger=1_000)
    edited = clear_tool_uses(history, edit, COUNTER.count_message)
    assert history == before  # nothing given is changed
    results = [m for m in edited.messages if m["role"] == "tool"]
    assert [m["content"] == PLACEHOLDER for m in results] == [True] * 3 + [False] * 3
    assert edited.cleared_uses == 3 and edited.applied
    assert edited.tokens == size(edited.messages) == size(history) - edited.cleared_tokens
    # Under the trigger nothing happens; under clear_at_least neither.
    assert not clear_tool_uses(history, ClearToolUses(), COUNTER.count_message).applied
    stingy = ClearToolUses(trigger=1_000, clear_at_least=10**6)
    assert clear_tool_uses(history, stingy, COUNTER.count_message).messages == history
    # Excluded tools keep their results; clear_tool_inputs empties the calls too.
    spared = clear_tool_uses(
        history, ClearToolUses(trigger=1_000, exclude_tools=("lookup",)), COUNTER.count_message
    )
    assert not spared.applied
    inputs = clear_tool_uses(
        history, ClearToolUses(trigger=1_000, clear_tool_inputs=True), COUNTER.count_message
    )
    calls = [m for m in inputs.messages if m.get("tool_calls")]
    assert [c["tool_calls"][0]["arguments"] for c in calls][:3] == [{}] * 3


def test_clear_tool_uses_reads_anthropic_blocks_and_scales_its_trigger() -> None:
    history = [SYSTEM, human("Look things up.")]
    for n in range(5):
        history.extend(tool_round(n, calls=2, result_chars=500, shape="anthropic"))
    edited = clear_tool_uses(history, ClearToolUses(trigger=100, keep=3), COUNTER.count_message)
    blocks = [
        b
        for m in edited.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
    ]
    cleared = [b["content"] == PLACEHOLDER for b in blocks]
    assert cleared == [True] * 7 + [False] * 3 and edited.cleared_uses == 7
    assert ClearToolUses.scaled_to(8_000).trigger == 4_000  # 100,000 of 200,000: half
    assert ClearToolUses.scaled_to(200_000) == ClearToolUses()
    with pytest.raises(ValueError, match="keep"):
        ClearToolUses(keep=-1)


async def test_the_provider_clears_before_it_measures_caches_and_enforces() -> None:
    history = agent_run(20, result_chars=2_000)
    full = size(history)
    provider = ScriptedProvider(
        {
            "script": {"steps": 3},
            "context_window": 20_000,
            "max_output_tokens": 1_000,
            "context_editing": {"type": "clear_tool_uses"},
        }
    )
    assert provider.config.context_editing == ClearToolUses(trigger=10_000)
    assert full > 19_000  # over the window as sent
    record = await send(provider, history)
    assert not record.rejected and record.cleared_tool_uses > 0
    assert record.request_tokens < 19_000
    expected = clear_tool_uses(history, ClearToolUses(trigger=10_000), COUNTER.count_message)
    assert record.request_tokens == expected.tokens
    assert (await provider.count_request(request(history)))[
        "estimated_input_tokens"
    ] == expected.tokens


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"type": "clear_everything"}, "clear_tool_uses"),
        ("clear_tool_uses", "clear_tool_uses"),
        ({"type": "clear_tool_uses", "keep": -2}, "keep"),
        ({"type": "clear_tool_uses", "keep_last": 2}, "unknown keys"),
        ({"type": "clear_tool_uses", "exclude_tools": "lookup"}, "exclude_tools"),
        ({"type": "clear_tool_uses", "clear_tool_inputs": "yes"}, "clear_tool_inputs"),
    ],
)
def test_bad_context_editing_config_is_refused(spec: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match="context_editing") as caught:
        ScriptedProvider({"context_editing": spec})
    assert fragment in str(caught.value)


@pytest.mark.slow
async def test_marked_views_pass_a_strict_provider_with_signed_thinking() -> None:
    """Marks never touch signed thinking or the call/result sequence: a provider that checks
    both (strict_sequence, thinking replies) serves every marked request of a session."""
    from amplifier_core import AmplifierSession

    from contextfold.cli.demo import RunSpec, mount_plan

    settings = DemoSettings(steps=30, window=12_000, summarize=False, server_editing=False)
    spec = RunSpec(
        "managed",
        "marked, strict",
        {"report_events": "every_request", "cache_breakpoints": "anthropic"},
        provider_config={"reply_shape": "anthropic-thinking", "strict_sequence": True},
    )
    session = AmplifierSession(mount_plan(settings, spec=spec))
    try:
        await session.initialize()
        provider = session.coordinator.get("providers")["scripted"]
        text = await session.execute("Research the topics with the lookup tool.")
        history = await session.coordinator.get("context").get_messages()
    finally:
        await session.cleanup()
    assert text == "Done: I looked up all 30 topics."
    records = provider.records
    assert len(records) == 31 and not any(r.rejected for r in records)
    assert all(r.cache_rule == "breakpoints" and r.sequence.ok for r in records)
    assert "cache_control" not in str(history)
