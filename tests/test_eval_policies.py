"""The eval's policies: their invariants (no split tool group; within the window by exact
count, or a refusal) and each one's own behaviour."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold import ConfigError
from contextfold.evaluation import (
    BUILTIN_POLICIES,
    ContextFoldPolicy,
    ContextSimple,
    NaiveDropOldest,
    ObservationMasking,
    Refusal,
    ServerClearToolUses,
    builtin_policy,
    config_policy,
    default_policies,
)
from contextfold.evaluation.baselines import MASK_STUB
from contextfold.evaluation.counts import ContentCounts, ExactCounts
from contextfold.tokens import ExactCounter
from support import assert_pairing

COUNTER = ExactCounter()


def counts() -> ExactCounts:
    return ExactCounts(ContentCounts(COUNTER))


def human(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "metadata": {"source": "user"}}


def group(n: int, calls: int, chars: int, *, anthropic: bool = False) -> list[dict[str, Any]]:
    ids = [f"g{n}_{k}" for k in range(calls)]
    text = " ".join(f"w{n}x{i}" for i in range(chars // 6))[:chars]
    if anthropic:
        return [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": i, "name": "f", "input": {"n": n}} for i in ids
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": text} for i in ids
                ],
            },
        ]
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": i,
                    "type": "function",
                    "function": {"name": "f", "arguments": json.dumps({"n": n})},
                }
                for i in ids
            ],
        },
        *({"role": "tool", "tool_call_id": i, "content": text} for i in ids),
    ]


async def views_of(policy: Any, messages: list[dict[str, Any]], window: int) -> list[Any]:
    """The view (or the Refusal) at every request, as the eval asks for them."""
    session = policy.start(window, counts())
    out: list[Any] = []
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and index > 0:
            try:
                out.append(list((await session.request()).messages))
            except Refusal as refusal:
                out.append(refusal)
        await session.add(message)
    return out


def run(policy: Any, messages: list[dict[str, Any]], window: int) -> list[Any]:
    return asyncio.run(views_of(policy, messages, window))


session_shapes = st.lists(
    st.tuples(
        st.integers(1, 3),  # calls in the group
        st.integers(10, 2_500),  # characters per result
        st.booleans(),  # a human prompt before it
        st.booleans(),  # Anthropic blocks
    ),
    min_size=2,
    max_size=14,
)


def build(shapes: list[tuple[int, int, bool, bool]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        human("Go."),
    ]
    for n, (calls, chars, prompt, anthropic) in enumerate(shapes):
        if prompt:
            messages.append(human(f"Next task {n}."))
        messages += group(n, calls, chars, anthropic=anthropic)
    messages.append({"role": "assistant", "content": "Done."})
    return messages


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=session_shapes, window=st.sampled_from([600, 1_500, 4_000]))
def test_no_policy_splits_a_tool_group_and_fitting_policies_fit_by_exact_count(
    shapes: list[tuple[int, int, bool, bool]], window: int
) -> None:
    messages = build(shapes)
    fitting = (
        NaiveDropOldest(),
        ObservationMasking(keep_last=2),
        ServerClearToolUses(),
        ContextFoldPolicy(),
    )
    for policy in fitting:
        for view in run(policy, messages, window):
            if isinstance(view, Refusal):
                continue
            assert_pairing(view)
            assert counts().request(view) <= window, policy.label
    # context-simple fits by its own estimate, not the exact count: only its groups are held.
    for view in run(ContextSimple(), messages, window):
        assert_pairing(view)


# -- naive drop-oldest ----------------------------------------------------------------------


def test_naive_drops_the_oldest_groups_whole_and_keeps_system_messages() -> None:
    messages = [
        {"role": "system", "content": "S."},
        human("Go."),
        *group(0, 2, 1_500),
        *group(1, 1, 1_500),
        *group(2, 1, 1_500),
        {"role": "assistant", "content": "end"},
    ]
    view = run(NaiveDropOldest(), messages, 1_200)[-1]
    assert view[0] == messages[0]
    assert human("Go.") not in view  # nothing is protected, not even the prompt
    assert view[1:] == messages[-3:-1]  # the newest group alone, nothing older
    assert counts().request(view) <= 1_200


def test_naive_refuses_when_the_newest_group_alone_does_not_fit() -> None:
    messages = [human("Go."), *group(0, 1, 9_000), {"role": "assistant", "content": "end"}]
    outcome = run(NaiveDropOldest(), messages, 1_000)[-1]
    assert isinstance(outcome, Refusal)
    assert "1,000-token window" in str(outcome)


def test_naive_sends_everything_when_it_fits() -> None:
    messages = [human("Go."), *group(0, 1, 100), {"role": "assistant", "content": "end"}]
    assert run(NaiveDropOldest(), messages, 50_000)[-1] == messages[:-1]


# -- observation masking -------------------------------------------------------------------


def test_masking_keeps_the_last_n_results_and_stubs_the_older_ones_calls_kept() -> None:
    messages = [human("Go.")]
    for n in range(5):
        messages += group(n, 1, 800)
    messages.append({"role": "assistant", "content": "end"})
    view = run(ObservationMasking(keep_last=2), messages, 100_000)[-1]
    results = [m for m in view if m["role"] == "tool"]
    assert [m["content"] == MASK_STUB for m in results] == [True, True, True, False, False]
    assert all(m.get("tool_calls") for m in view if m["role"] == "assistant")
    assert len(view) == len(messages) - 1


def test_masking_stubs_nothing_while_fewer_than_n_results_exist() -> None:
    messages = [
        human("Go."),
        *group(0, 1, 800),
        *group(1, 1, 800),
        {"role": "assistant", "content": "e"},
    ]
    view = run(ObservationMasking(keep_last=10), messages, 100_000)[-1]
    assert all(m["content"] != MASK_STUB for m in view if m["role"] == "tool")


def test_masking_stubs_anthropic_tool_result_blocks_and_then_drops_oldest_if_needed() -> None:
    messages = [human("Go.")]
    for n in range(4):
        messages += group(n, 2, 2_000, anthropic=True)
    messages.append({"role": "assistant", "content": "end"})
    roomy = run(ObservationMasking(keep_last=1), messages, 100_000)[-1]
    stubbed = [
        b
        for m in roomy
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
    ]
    assert sum(b["content"] == MASK_STUB for b in stubbed) == 6  # 8 results, the last unit kept
    limit = counts().request(roomy) - 1  # one token short: the oldest unit must go
    tight = run(ObservationMasking(keep_last=1), messages, limit)[-1]
    assert counts().request(tight) <= limit and tight == roomy[1:]  # the prompt was oldest


def test_masking_refuses_a_bad_setting() -> None:
    with pytest.raises(ValueError, match="keep_last"):
        ObservationMasking(keep_last=-1)


# -- context-simple -------------------------------------------------------------------------


def test_context_simple_leaves_a_view_under_its_trigger_alone() -> None:
    messages = [
        {"role": "system", "content": "S."},
        human("Go."),
        *group(0, 1, 400),
        {"role": "assistant", "content": "e"},
    ]
    assert run(ContextSimple(), messages, 50_000)[-1] == messages[:-1]


def test_context_simple_truncates_the_oldest_results_first() -> None:
    messages = [{"role": "system", "content": "S."}, human("Go.")]
    for n in range(12):
        messages += group(n, 1, 9_000 if n < 2 else 40)
    # A long last prompt takes the view over the trigger; truncating the oldest quarter of
    # the results (level 1) brings it under the target.
    messages += [human("Now " + "please " * 1_500), {"role": "assistant", "content": "end"}]
    view = run(ContextSimple(), messages, 8_000)[-1]
    assert len(view) == len(messages)  # nothing removed (the notice took the reply's place)
    assert view[1]["metadata"]["source"] == "context-compaction"
    assert "level 1 of 8" in view[1]["content"]
    results = [m["content"] for m in view if m["role"] == "tool"]
    assert [r.startswith("[truncated: about") for r in results] == [True] * 2 + [False] * 10


def test_context_simple_removes_old_groups_keeps_the_last_prompt_and_stays_sticky() -> None:
    messages = [{"role": "system", "content": "S."}, human("Go.")]
    for n in range(12):
        messages += group(n, 1, 3_000)
    messages += [
        human("And now?"),
        {"role": "assistant", "content": "end"},
        human("More."),
        {"role": "assistant", "content": "end"},
    ]
    views = run(ContextSimple(), messages, 8_000)
    compacted = views[-2]
    assert compacted[0]["role"] == "system"
    assert compacted[1]["metadata"]["source"] == "context-compaction"  # its notice, after it
    calls = [m["tool_call_id"] for m in compacted if m["role"] == "tool"]
    assert calls[0] != "g0_0" and calls[-1] == "g11_0"  # the oldest groups left, whole
    assert human("And now?") in compacted  # the last user message is never removed
    assert_pairing(compacted)
    # Sticky: the next request starts from the reduced view (nothing removed comes back).
    later = [m["tool_call_id"] for m in views[-1] if m["role"] == "tool"]
    assert later == calls


def test_context_simple_never_refuses_even_when_it_cannot_fit() -> None:
    messages = [human("Go."), *group(0, 1, 40_000), {"role": "assistant", "content": "end"}]
    view = run(ContextSimple(), messages, 4_000)[-1]
    assert not isinstance(view, Refusal)
    assert counts().request(view) > 4_000


# -- contextfold as a policy ------------------------------------------------------------------


def test_contextfold_runs_with_its_budget_capped_at_the_window() -> None:
    policy = config_policy("mine", {"max_tokens": 6_000, "compact_threshold": 0.8})
    assert policy.settings_for(8_000)["max_tokens"] == 6_000
    assert policy.settings_for(4_000)["max_tokens"] == 4_000
    assert ContextFoldPolicy().settings_for(4_000) == {"max_tokens": 4_000}
    assert policy.label == "contextfold, mine"


def test_a_summarize_ladder_gets_the_offline_summarizer_and_a_summarizer_key_is_set_aside() -> None:
    policy = config_policy(
        "ladder",
        {"strategies": ["summarize", "drop_oldest"], "summarizer": {"provider": "scripted"}},
    )
    assert "summarizer" not in policy.config
    assert policy.summarizes
    messages = [{"role": "system", "content": "S."}, human("Go.")]
    for n in range(20):
        messages += group(n, 1, 3_000)
    messages.append({"role": "assistant", "content": "end"})
    views = run(policy, messages, 8_000)
    summaries = [
        m
        for view in views
        if not isinstance(view, Refusal)
        for m in view
        if (m.get("metadata") or {}).get("summary")
    ]
    assert summaries, "the summarize rung never ran"


def test_a_bad_contextfold_config_is_refused_when_the_policy_is_made() -> None:
    with pytest.raises(ConfigError, match="compact_threshold"):
        config_policy("bad", {"compact_threshold": 7})
    with pytest.raises(ConfigError, match="unknown config key"):
        ContextFoldPolicy(config={"compact_treshold": 0.5})


def test_every_builtin_policy_is_found_by_its_key() -> None:
    for name in BUILTIN_POLICIES:
        assert builtin_policy(name).key == name
    assert [p.key for p in default_policies()] == list(BUILTIN_POLICIES)
    with pytest.raises(ValueError, match="unknown policy 'nope'; the built-in policies are naive"):
        builtin_policy("nope")


# -- server-side clear_tool_uses --------------------------------------------------------------


def test_clear_tool_uses_sends_everything_until_half_the_window_then_clears_all_but_three() -> None:
    from contextfold.context_editing import PLACEHOLDER

    messages = [{"role": "system", "content": "You are an agent."}, human("Go.")]
    for n in range(10):
        messages += group(n, 1, 900)
    messages.append({"role": "assistant", "content": "Done."})
    views = run(ServerClearToolUses(), messages, 4_000)
    requests = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    cleared_any = False
    for index, view in zip(requests, views, strict=True):
        history = messages[:index]
        assert not isinstance(view, Refusal) and counts().request(view) <= 4_000
        if counts().request(history) <= 2_000:  # 100,000 of 200,000: half the window
            assert view == history
            continue
        results = [m for m in view if m["role"] == "tool"]
        # Over the trigger: the oldest results cleared, all but the newest three tool uses.
        cleared = [m["content"] == PLACEHOLDER for m in results]
        assert cleared == [True] * (len(results) - 3) + [False] * 3
        cleared_any = True
    assert cleared_any


def test_clear_tool_uses_refuses_what_still_does_not_fit_and_offers_no_search() -> None:
    messages = [{"role": "system", "content": "You are an agent."}, human("Go.")]
    for n in range(4):
        messages += group(n, 1, 3_000)  # the newest three alone are over a small window
    messages.append({"role": "assistant", "content": "Done."})
    views = run(ServerClearToolUses(), messages, 1_500)
    assert isinstance(views[-1], Refusal)
    assert not ServerClearToolUses().start(1_500, counts()).offers_search
    with pytest.raises(ValueError, match="keep"):
        ServerClearToolUses(settings={"keep": -1})


def test_every_request_is_priced_and_the_totals_add_up() -> None:
    from contextfold.costing import PricedRequest, request_cost
    from contextfold.evaluation import EvalConversation, EvalSettings, evaluate
    from contextfold.evaluation.runner import PRICINGS, REQUEST_FIELDS
    from support import agent_run

    conversation = EvalConversation("one", "files", agent_run(12, result_chars=1_500))
    report = evaluate(
        [conversation], [NaiveDropOldest(), ContextFoldPolicy()], EvalSettings(windows=(4_000,))
    )
    assert REQUEST_FIELDS[-3:] == ("cost_anthropic_usd", "cost_openai_usd", "facts")
    for run_result, totals in zip(report.runs, report.totals, strict=True):
        previous = None
        for record in run_result.requests:
            if record.refused:
                assert record.costs == (0.0, 0.0)
                previous = None
                continue
            this = PricedRequest(record.tokens, record.cached_tokens)
            expected = tuple(request_cost(p, this, previous).usd for p in PRICINGS)
            assert record.costs == pytest.approx(expected)
            previous = this
        assert totals.cost("anthropic") == pytest.approx(
            sum(r.costs[0] for r in run_result.requests)
        )
        assert totals.cost("openai") == pytest.approx(sum(r.costs[1] for r in run_result.requests))
        assert totals.cost("gemini") is None
        row = run_result.to_dict()["requests"][3]
        assert row[REQUEST_FIELDS.index("cost_openai_usd")] == round(
            run_result.requests[3].costs[1], 8
        )
