"""The replay's fast paths (issue 8 part 3): the uncopied request view and the prefix tracker
that reads a view grown in place. Each must give exactly what the copying path gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextfold import ContextFold
from contextfold.cli.replay import (
    ReplayModel,
    _PrefixTracker,
    replay_messages,
    replay_messages_async,
)
from contextfold.views import detached
from support import SYSTEM, agent_run, human


def count(message: Any) -> int:
    return len(json.dumps(message, sort_keys=True))


async def test_shared_view_is_the_contexts_own_and_public_view_a_copy() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages([SYSTEM, human("go")])
    shared = await ctx._request_view_shared()
    public = await ctx.get_messages_for_request()
    assert public == shared
    assert all(a is not b for a, b in zip(public, shared, strict=True))
    # Without a re-plan the shared list is the sticky view: a new message appears at its end.
    await ctx.add_message({"role": "assistant", "content": "ok"})
    again = await ctx._request_view_shared()
    assert again is shared and again[-1]["content"] == "ok"


async def test_shared_view_under_a_system_prompt_factory_is_not_the_sticky_list() -> None:
    ctx = ContextFold(token_counter="heuristic")
    await ctx.set_messages([SYSTEM, human("go")])
    await ctx.set_system_prompt_factory(lambda: "fresh prompt")
    shared = await ctx._request_view_shared()
    public = await ctx.get_messages_for_request()
    assert shared == public
    assert shared[0]["content"] == "fresh prompt"


def test_tracker_on_a_list_grown_in_place_matches_the_tracker_on_copies() -> None:
    """The replay hands the tracker the context's own list, which later admissions grow in
    place; the figures must be those of comparing snapshot copies, request by request."""
    messages = [{"role": "user", "content": f"m{i} " * (i % 5 + 1)} for i in range(40)]
    sticky = messages[:10]
    live, copies = _PrefixTracker(count), _PrefixTracker(count)
    seen_live: list[tuple[int, int]] = []
    seen_copies: list[tuple[int, int]] = []

    def deliver(view: list[dict[str, Any]]) -> None:
        seen_live.append(live.advance(view))  # the live list, grown in place later
        seen_copies.append(copies.advance(detached(view)))  # a snapshot at delivery time

    deliver(sticky)
    sticky.extend(messages[10:14])  # admitted in place, after the delivery
    deliver(sticky)
    # A compaction: the oldest dropped, one shortened, a new list from then on.
    sticky = [messages[0], {"role": "user", "content": "short"}, *messages[5:14]]
    deliver(sticky)
    sticky.extend(messages[14:20])
    deliver(sticky)
    sticky.append(messages[20])
    deliver(sticky)
    sticky = list(sticky)  # re-assembled with identical content
    deliver(sticky)

    assert seen_live == seen_copies
    assert seen_live[1] == (10, sum(count(m) for m in messages[:10]))


async def test_replay_views_are_the_shared_ones_and_history_is_untouched() -> None:
    messages = agent_run(20, result_chars=1200)
    before = json.dumps(messages, sort_keys=True)
    result = await replay_messages_async(messages, {}, 8_000)
    assert json.dumps(messages, sort_keys=True) == before
    assert result.totals.compactions > 0
    assert result.totals.history_kept
    # The rows agree with a replay driven through the public, copying request path.
    ctx = ContextFold({})
    model = ReplayModel(8_000, 4096)
    public: list[int] = []
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and index > 0:
            public.append(len(await ctx.get_messages_for_request(provider=model)))
        await ctx.add_message(dict(message))
    public.append(len(await ctx.get_messages_for_request(provider=model)))
    assert [row.messages_after for row in result.rows] == public


async def test_costs_read_from_admission_equal_costs_counted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prefix figures take a new message's cost from its admission; counting every
    message again instead gives the same rows."""
    messages = agent_run(16, result_chars=900)
    fast = await replay_messages_async(messages, {}, 8_000)
    monkeypatch.setattr(ContextFold, "_newest_view_cost", lambda self: (None, 0))
    counted = await replay_messages_async(messages, {}, 8_000)
    assert fast.to_dict() == counted.to_dict()
    assert any(row.prefix_tokens for row in fast.rows)


def test_row_dicts_are_asdict_plus_over_budget_and_costs() -> None:
    from dataclasses import asdict

    result = replay_messages(agent_run(12, result_chars=1500), {}, 8_000)
    rows = result.to_dict()["rows"]
    expected = [
        asdict(row)
        | {"over_budget": row.over_budget}
        | {priced.key: round(priced.requests[i], 8) for priced in result.costs}
        for i, row in enumerate(result.rows)
    ]
    assert [priced.key for priced in result.costs] == ["cost_anthropic_usd", "cost_openai_usd"]
    assert rows == expected
    assert [list(row) for row in rows] == [list(row) for row in expected]  # same key order
    assert rows[0]["applied"] is not result.rows[0].applied


def test_a_replay_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    from contextfold.cli import replay as replay_module
    from contextfold.cli.replay import replay_messages

    messages = [{"role": "system", "content": "s"}]
    for n in range(3 * replay_module.PROGRESS_EVERY):
        messages.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n}"})
    before = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    replay_messages(messages, window=8_000)
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == before
    # Objects the application froze itself stay frozen: the replay does not unfreeze them.
    kept = [object() for _ in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        replay_messages(messages, window=8_000)
        # Neither unfrozen nor frozen further (a frozen object may still die by refcount).
        assert frozen - 1_000 <= gc.get_freeze_count() <= frozen
        assert gc.get_threshold() == before[1]
    finally:
        gc.unfreeze()
    del kept


def test_the_replay_command_turns_the_collector_back_on(tmp_path) -> None:
    import gc
    import json

    from contextfold.cli import main

    path = tmp_path / "conv.json"
    path.write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    )
    assert gc.isenabled()
    assert main(["replay", str(path), "-q", "--no-chart", "--out", str(tmp_path / "out")]) == 0
    assert gc.isenabled()


async def test_the_shared_history_is_what_get_messages_copies() -> None:
    from contextfold import ContextFold

    context = ContextFold()
    for n in range(5):
        await context.add_message({"role": "user", "content": f"q{n}", "metadata": {"k": [n]}})
        await context.add_message({"role": "assistant", "content": f"a{n}"})
    shared = await context._history_shared()
    assert shared == await context.get_messages()
