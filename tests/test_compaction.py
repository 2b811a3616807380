"""Compaction as an ephemeral, sticky view: trigger, target, ladder order, protection, notice."""

from __future__ import annotations

import math

import pytest

from contextfold import ContextFold, ContextLengthError
from contextfold.messages import NOTICE_SOURCE
from support import SYSTEM, agent_run, assert_pairing, human, reply, tool_round, unstamped


def make(**settings) -> tuple[ContextFold, list]:
    events: list = []
    settings.setdefault("token_counter", "heuristic")
    ctx = ContextFold(settings, on_event=lambda e, d: events.append((e, d)))
    return ctx, events


def is_notice(m: dict) -> bool:
    return (m.get("metadata") or {}).get("compaction_notice") is True


def is_own(m: dict) -> bool:
    """The notice, the ledger's pages, a summary: what contextfold writes into the view."""
    return (m.get("metadata") or {}).get("source") == NOTICE_SOURCE


def real(view: list[dict]) -> list[dict]:
    return [m for m in view if not is_own(m)]


async def test_under_trigger_the_view_is_the_history() -> None:
    ctx, events = make()
    history = agent_run(6)
    await ctx.set_messages(history)
    view = await ctx.get_messages_for_request(token_budget=200_000)
    assert view == history and view is not await ctx.get_messages_for_request(token_budget=200_000)
    assert ctx.last_report.compacted is False and ctx.last_report.level == 0
    assert not [e for e, _ in events if e == "context:compaction"]


async def test_protection_takes_precedence_over_target() -> None:
    # protected_recent=0.30 of ~100 messages of ~700 tokens: above target, but in the lower
    # half of the band, where soft protection holds.
    ctx, _ = make()
    await ctx.set_messages(agent_run(30))
    view = await ctx.get_messages_for_request(token_budget=40_000)
    r = ctx.last_report
    assert r.compacted and r.target < r.tokens_after <= (r.target + r.trigger) / 2 + 800
    assert r.relaxed == []
    history = await ctx.get_messages()
    recent = history[-30:]
    assert view[-30:] == recent  # the recent 30% reach the model untouched


async def test_trigger_and_target_hysteresis() -> None:
    ctx, events = make(protected_recent=0.1)
    await ctx.set_messages(agent_run(30))
    budget = 20_000
    view = await ctx.get_messages_for_request(token_budget=budget)
    r = ctx.last_report
    usable = budget - 800
    assert r.trigger == int(0.92 * usable) and r.target == int(0.50 * usable)
    assert r.compacted and r.tokens_before > r.trigger
    assert r.tokens_after <= r.target + 800  # the notice rides on its own reserve
    assert r.tokens_after <= budget
    [(_, data)] = [(e, d) for e, d in events if e == "context:compaction"]
    assert set(data) >= {
        "before_tokens",
        "after_tokens",
        "before_messages",
        "after_messages",
        "removed",
        "truncated",
        "level",
        "budget",
        "trigger",
        "target",
    }
    assert data["before_tokens"] == r.tokens_before and data["after_tokens"] == r.tokens_after
    assert data["budget"] == budget
    assert_pairing(view)


async def test_truncation_is_preferred_over_removal() -> None:
    ctx, _ = make(protected_recent=0.1)
    history = agent_run(12, result_chars=6000)
    await ctx.set_messages(history)
    # Budget chosen so shortening old results alone is enough.
    size = ctx.last_report  # no request yet
    assert size is None
    await ctx.get_messages_for_request(token_budget=1_000_000)
    total = ctx.last_report.tokens_after
    view = await ctx.get_messages_for_request(token_budget=int(total / 0.92 * 0.8) + 800)
    r = ctx.last_report
    assert r.compacted and r.applied == ["truncate_tool_results"] and r.level == 1
    assert len(real(view)) == len(history)  # nothing removed
    shortened = [
        m
        for m in view
        if isinstance(m.get("content"), str) and "omitted from this view" in m["content"]
    ]
    assert shortened and all(m["role"] == "tool" for m in shortened)


async def test_removal_keeps_groups_whole_and_protection_intact() -> None:
    ctx, _ = make()
    history = agent_run(40, result_chars=3000)
    await ctx.set_messages(history)
    view = await ctx.get_messages_for_request(token_budget=12_000)
    r = ctx.last_report
    assert "drop_least_used" in r.applied and r.level == 3
    assert_pairing(view)
    kept = real(view)
    assert kept[0] == SYSTEM and kept[1] == history[1]  # system + first human prompt
    assert kept[-1] == history[-1]
    # The last five tool results reach the model complete.
    results = [m for m in history if m["role"] == "tool"][-5:]
    for m in results:
        assert m in view
    # Sticky: the next request reuses the same reduced view, byte for byte.
    again = await ctx.get_messages_for_request(token_budget=12_000)
    assert again == view and ctx.last_report.compacted is False


async def test_sticky_prefix_grows_without_recompaction() -> None:
    ctx, _ = make()
    await ctx.set_messages(agent_run(40, result_chars=3000))
    first = await ctx.get_messages_for_request(token_budget=12_000)
    await ctx.add_message(reply("short note"))
    second = await ctx.get_messages_for_request(token_budget=12_000)
    assert second[: len(first)] == first and len(second) == len(first) + 1
    # Growth past the trigger compacts again, from the sticky state (never un-compacts).
    for n in range(100, 140):
        for m in tool_round(n, result_chars=3000):
            await ctx.add_message(m)
        view = await ctx.get_messages_for_request(token_budget=12_000)
        assert_pairing(view)
        assert ctx.last_report.tokens_after <= 12_000
    assert unstamped(await ctx.get_messages())[-1] == m  # history keeps everything


async def test_notice_tells_what_was_compacted() -> None:
    ctx, _ = make()
    await ctx.set_messages(agent_run(40, result_chars=3000))
    view = await ctx.get_messages_for_request(token_budget=12_000)
    [notice] = [m for m in view if is_notice(m)]
    assert notice["role"] == "user" and notice["metadata"]["compaction_notice"] is True
    text = notice["content"]
    assert "removed from this view" in text and "assistant called lookup(topic=" in text
    assert ctx.counter.count_message(notice) <= 800
    # Never inside a tool-call group.
    i = view.index(notice)
    assert view[i - 1]["role"] != "assistant" or not view[i - 1].get("tool_calls")

    quiet, _ = make(compaction_notice_enabled=False)
    await quiet.set_messages(agent_run(40, result_chars=3000))
    assert not [
        m for m in await quiet.get_messages_for_request(token_budget=12_000) if is_notice(m)
    ]


async def test_protected_floor_over_budget_raises_and_commits_nothing() -> None:
    ctx, events = make()
    history = [SYSTEM, human("x" * 40_000), *tool_round(1, result_chars=2000)]
    await ctx.set_messages(history)
    with pytest.raises(ContextLengthError) as err:
        await ctx.get_messages_for_request(token_budget=5_000)
    assert err.value.budget == 5_000 and err.value.required_tokens > 5_000
    assert "5,000" in str(err.value) and "cannot go without" in str(err.value)
    assert "message 1 (human, first human prompt)" in str(err.value)
    assert not [e for e, _ in events if e in ("context:compaction", "context:report")]
    assert await ctx.get_messages_for_request(token_budget=200_000) == history


async def test_an_oversized_protected_tool_result_is_shortened_in_the_view() -> None:
    # The newest group's result is required, but its content may be shortened in the view
    # (head and tail, with its recall id) rather than the request refused.
    ctx, _ = make()
    history = [SYSTEM, human("read"), *tool_round(1, result_chars=60_000)]
    await ctx.set_messages(history)
    view = await ctx.get_messages_for_request(token_budget=8_000)
    assert ctx.last_report.tokens_after <= 8_000
    assert view[-1]["tool_call_id"] == history[-1]["tool_call_id"]
    assert 'context_recall("r3", offset=' in view[-1]["content"]
    assert (await ctx.get_messages())[-1]["content"] == history[-1]["content"]


async def test_oversized_protected_tool_result_error_names_the_fix() -> None:
    # With no room even for a shortened result, the refusal says what to change.
    ctx, _ = make()
    await ctx.set_messages([SYSTEM, human("read"), *tool_round(1, result_chars=60_000)])
    with pytest.raises(ContextLengthError, match="max_tool_result_bytes") as err:
        await ctx.get_messages_for_request(token_budget=120)
    assert "message 3 (tool_result" in str(err.value)


async def test_hard_fit_targets_the_budget_itself() -> None:
    ctx, _events = make()
    await ctx.set_messages(agent_run(40, result_chars=3000))
    await ctx.get_messages_for_request(token_budget=60_000)
    normal = ctx.last_report
    view = await ctx.get_messages_for_request(token_budget=20_000, hard_fit=True)
    r = ctx.last_report
    assert r.hard_fit and r.trigger == r.target == 20_000 - 800
    assert r.tokens_after <= 20_000
    # A hard fit stops near the budget instead of going down to target_usage.
    assert r.tokens_after > 0.5 * (20_000 - 800)
    assert normal.tokens_after >= r.tokens_after
    assert_pairing(view)


async def test_disabled_compaction_returns_everything() -> None:
    ctx, _events = make(compaction_enabled=False)
    history = agent_run(40, result_chars=3000)
    await ctx.set_messages(history)
    assert await ctx.get_messages_for_request(token_budget=5_000) == history
    assert ctx.last_report.tokens_after > 5_000 and not ctx.last_report.compacted


THINKING = {"type": "thinking", "thinking": "plan " * 800, "signature": "c2lnbmVk"}


def thinking_round(n: int) -> list[dict]:
    """An Anthropic assistant turn with signed thinking and a tool call, then its result."""
    return [
        {
            "role": "assistant",
            "content": [
                dict(THINKING),
                {"type": "tool_use", "id": f"t{n}", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "r" * 3000}],
        },
    ]


async def test_only_the_newest_turn_keeps_its_thinking_and_it_goes_back_intact() -> None:
    """Anthropic's rule: the thinking of the turn whose tool results are sent goes back
    unmodified; earlier turns' thinking may be left out (all of a message's or none), and
    earlier turns may leave whole."""
    ctx, _ = make(protected_recent=0.0, protected_tool_results=0)
    messages = [SYSTEM, human("old task")]
    for n in range(10):
        messages.extend(thinking_round(n))
    messages.append(human("new task"))
    for n in range(10, 13):
        messages.extend(thinking_round(n))
    await ctx.set_messages(messages)
    view = await ctx.get_messages_for_request(token_budget=12_000)
    assert_pairing(view)
    assert "strip_thinking" in ctx.last_report.applied
    assistants = [m for m in view if m["role"] == "assistant"]
    for m in assistants[:-1]:
        types = [b["type"] for b in m["content"]]
        assert "thinking" not in types  # stripped whole ...
        assert types == ["tool_use"]  # ... and nothing else touched
    newest = assistants[-1]
    assert newest == messages[-2]  # byte-identical, thinking included
    assert view[-1] == messages[-1]
    # History still holds every thinking block.
    assert await ctx.get_messages() == messages


async def test_thinking_is_left_out_before_anything_lossy() -> None:
    # The threshold planner stops at the target (a cost pass goes on, past the cheapest rung).
    ctx, _events = make(protected_recent=0.0, protected_tool_results=0, planner="threshold")
    messages = [SYSTEM, human("task")]
    for n in range(8):
        messages.extend(thinking_round(n))
    await ctx.set_messages(messages)
    full = await ctx.get_messages_for_request(token_budget=1_000_000)
    # Just over the trigger: the cheapest rung comes first and does most of the work.
    # (The notice's reserve is a twenty-fifth of the budget with the ledger on.)
    budget = math.floor((ctx.last_report.tokens_after - 50) / (0.92 * 0.96))
    view = await ctx.get_messages_for_request(token_budget=budget)
    r = ctx.last_report
    assert r.compacted and r.applied[0] == "strip_thinking" and "drop_least_used" not in r.applied
    assert r.tokens_after <= r.target + 800
    assert len(real(view)) == len(full)  # nothing removed


async def test_loaded_tool_state_and_reminders_are_kept() -> None:
    ctx, _ = make(protected_recent=0.0, protected_tool_results=0)
    state = {
        "role": "user",
        "content": "Loaded tools: lookup, grep",
        "metadata": {"source": "hook", "loaded_tools": ["lookup", "grep"]},
    }
    reminder_body = "<system-reminder>Keep answers short.</system-reminder>"
    reminder = {
        "role": "user",
        "content": reminder_body,
        "metadata": {"ephemeral": True, "persisted": True, "source": "hook"},
    }
    messages = [SYSTEM, human("task"), state, reminder]
    for n in range(30):
        messages.extend(tool_round(n, result_chars=3000))
    await ctx.set_messages(messages)
    view = await ctx.get_messages_for_request(token_budget=8_000)
    assert state in view and reminder not in view  # the reminder is not pinned by default
    view = await ctx.get_messages_for_request(
        token_budget=8_000, required_reminders=[reminder_body]
    )
    assert state in view and reminder in view  # restored for this request
    assert_pairing(view)
    # Per request, never a pin (as the reference module): the next request may leave it out.
    view = await ctx.get_messages_for_request(token_budget=8_000)
    assert state in view and reminder not in view
    with pytest.raises(ValueError, match="not in admitted history"):
        await ctx.get_messages_for_request(token_budget=10_000, required_reminders=["<other/>"])


async def test_anthropic_view_is_valid_for_the_sdk() -> None:
    from anthropic.types import MessageParam
    from pydantic import TypeAdapter

    from contextfold import strip_metadata

    ctx, _ = make()
    history = agent_run(30, result_chars=3000, shape="anthropic")
    await ctx.set_messages(history)
    view = await ctx.get_messages_for_request(token_budget=10_000)
    assert ctx.last_report.compacted
    assert_pairing(view)
    body = [m for m in strip_metadata(view) if m["role"] != "system"]
    TypeAdapter(list[MessageParam]).validate_python(body)


async def test_openai_view_is_valid_for_the_sdk() -> None:
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    from contextfold import strip_metadata

    ctx, _ = make()
    await ctx.set_messages(agent_run(30, result_chars=3000, shape="openai"))
    view = await ctx.get_messages_for_request(token_budget=10_000)
    assert ctx.last_report.compacted
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(strip_metadata(view))


async def test_a_floor_near_the_trigger_yields_to_the_middle_of_the_band_once() -> None:
    """A pass that would park the view just under the trigger would run again a turn later,
    rewriting the prefix every time: soft protection yields to the middle of the band, and
    the next pass waits for the hard limit."""
    ctx, events = make(protected_recent=0.0, protected_tool_results=3)
    probe = tool_round(0, result_chars=4000)
    per_round = sum(ctx.counter.count_message(m) for m in probe)
    head = ctx.counter.count_message(SYSTEM) + ctx.counter.count_message(human("go"))
    floor = head + 3 * per_round  # the last three results and their calls are protected
    usable = math.ceil(floor / 0.97)  # floor between the trigger (0.92) and the limit
    budget = usable + 800
    await ctx.add_message(SYSTEM)
    await ctx.add_message(human("go"))
    for n in range(6):
        for m in tool_round(n, result_chars=4000):
            await ctx.add_message(m)
    view = await ctx.get_messages_for_request(token_budget=budget)
    r = ctx.last_report
    assert r.compacted and r.floor_bound
    assert r.relaxed == ["recent", "recent_tool_results_shortened"]
    notice = sum(ctx.counter.count_message(m) for m in view if is_notice(m))
    assert r.tokens_after - notice <= (r.target + r.trigger) / 2
    # Recent results were shortened, never removed: their calls are all still there.
    assert [m["tool_call_id"] for m in view if m["role"] == "tool"] == [
        "call_3_0",
        "call_4_0",
        "call_5_0",
    ]
    # Additions that keep the view under the limit do not re-run a pass...
    passes = len([e for e, _ in events if e == "context:compaction"])
    for n in range(10, 12):
        for m in tool_round(n, result_chars=400):
            await ctx.add_message(m)
        before = await ctx.get_messages_for_request(token_budget=budget)
        assert not ctx.last_report.compacted
    assert len([e for e, _ in events if e == "context:compaction"]) == passes
    # ...and a view that outgrows the limit (the budget, less the notice it carries) is
    # compacted again.
    for n in range(90, 95):
        for m in tool_round(n, result_chars=4000):
            await ctx.add_message(m)
        view = await ctx.get_messages_for_request(token_budget=budget)
        assert ctx.last_report.tokens_after <= budget
        if ctx.last_report.compacted:
            break
        assert ctx.last_report.tokens_before <= budget
    assert ctx.last_report.compacted and ctx.last_report.tokens_before > budget
    assert view[:2] == before[:2]
    assert_pairing(view)


async def test_a_pass_never_makes_a_fitting_request_bigger() -> None:
    # One small removable message and a large protected rest: removing it saves less
    # than the notice would cost.
    ctx, events = make(protected_recent=0.0, protected_tool_results=2)
    messages = [
        SYSTEM,
        human("go"),
        reply("ok"),
        *tool_round(1, result_chars=6000),
        *tool_round(2, result_chars=6000),
    ]
    await ctx.set_messages(messages)
    size = sum(ctx.counter.count_message(m) for m in messages)
    budget = math.ceil(size / 0.95) + 800  # over the trigger, under the limit
    view = await ctx.get_messages_for_request(token_budget=budget)
    assert view == messages and not ctx.last_report.compacted
    assert not [e for e, _ in events if e == "context:compaction"]


async def test_no_view_over_budget_even_when_the_notice_outgrows_its_reserve() -> None:
    ctx, _ = make(compact_threshold=1.0, compaction_notice_token_reserve=0, protected_recent=0.0)
    await ctx.set_messages(agent_run(30, result_chars=3000))
    budget = 12_000
    await ctx.get_messages_for_request(token_budget=budget)
    for n in range(400):
        await ctx.add_message(reply(f"step {n} done: " + "checked " * 25))
        view = await ctx.get_messages_for_request(token_budget=budget)
        recount = sum(ctx.counter.count_message(m) for m in view)
        assert recount <= budget, (n, recount)
        assert_pairing(view)


async def test_notice_stays_within_its_reserve_for_dense_text() -> None:
    ctx, _ = make(compaction_notice_token_reserve=200, token_counter="exact")
    messages = [SYSTEM, human("任务：" + "数据分析报告" * 20)]
    for n in range(40):
        messages.append(reply("结果" * 60 + f"第{n}步"))
        messages.append(human("继续处理下一批文件和记录" * 5))
    await ctx.set_messages(messages)
    view = await ctx.get_messages_for_request(token_budget=4_000)
    [notice] = [m for m in view if is_notice(m)]
    assert ctx.counter.count_message(notice) <= 200


async def test_notice_verbosity_and_min_level_as_in_the_reference_module() -> None:
    history = agent_run(40, result_chars=3000)
    minimal, _ = make(compaction_notice_verbosity="minimal")
    await minimal.set_messages(history)
    view = await minimal.get_messages_for_request(token_budget=12_000)
    [notice] = [m for m in view if is_notice(m)]
    assert "\n" not in notice["content"] and "compacted" in notice["content"]
    verbose, _ = make(compaction_notice_verbosity="verbose")  # read as normal
    await verbose.set_messages(history)
    [notice] = [
        m for m in await verbose.get_messages_for_request(token_budget=12_000) if is_notice(m)
    ]
    assert "Removed, in order:" in notice["content"]
    # A pass that only shortened tool results (level 1) gets no notice below min level 2.
    quiet, _ = make(compaction_notice_min_level=2, protected_recent=0.1)
    await quiet.set_messages(agent_run(12, result_chars=6000))
    await quiet.get_messages_for_request(token_budget=1_000_000)
    total = quiet.last_report.tokens_after
    view = await quiet.get_messages_for_request(token_budget=int(total / 0.92 * 0.8) + 800)
    assert quiet.last_report.level == 1 and not [m for m in view if is_notice(m)]
    # ...while removal (level 3) does.
    view = await quiet.get_messages_for_request(token_budget=9_000)
    assert quiet.last_report.level == 3 and [m for m in view if is_notice(m)]


async def test_a_thinking_copy_beside_the_content_leaves_with_the_blocks() -> None:
    """loop-streaming keeps the signed block a second time as ``thinking_block``; CLI
    transcripts carry ``thinking_text``. Leaving out earlier thinking takes those too."""
    ctx, _ = make(protected_recent=0.0, protected_tool_results=0)
    messages = [SYSTEM, human("task")]
    for n in range(8):
        assistant, result = thinking_round(n)
        assistant["thinking_block"] = dict(THINKING)
        assistant["thinking_text"] = THINKING["thinking"]
        messages += [assistant, result]
    await ctx.set_messages(messages)
    view = await ctx.get_messages_for_request(token_budget=9_000)
    assert "strip_thinking" in ctx.last_report.applied
    assistants = [m for m in view if m["role"] == "assistant"]
    assert len(assistants) > 2  # earlier turns stayed, without their thinking
    for m in assistants[:-1]:
        assert "thinking_block" not in m and "thinking_text" not in m
        assert [b["type"] for b in m["content"]] == ["tool_use"]
    assert assistants[-1] == messages[-2]  # the newest turn goes back whole
