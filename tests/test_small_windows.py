"""Small windows under a loop that ends on the first overflow (issue 18, items 14-16).

Sessions run in the real amplifier-core kernel as Amplifier's ``loop-basic`` runs them:
``loop-fold`` with ``overflow: raise`` (the first provider overflow ends the session) and
``provider-scripted``, which refuses input over its window less the output allowance.
context-fold runs with its defaults unless a test says otherwise.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from amplifier_core import AmplifierSession
from amplifier_core.models import HookResult, ModelInfo

from contextfold import ContextFold, ContextLengthError, derive_budget
from contextfold.compaction.newest_results import RESULTS_SHARE
from contextfold.config import ContextConfig
from contextfold.tokens import ExactCounter
from support import SYSTEM, human, prose

TRUTH = ExactCounter("o200k_base")
FINAL_TEXT = "All topics are covered."
PROMPT = "Research every topic on the list, one lookup at a time, then summarise."


def plan(
    steps: int,
    *,
    context_window: int,
    max_output_tokens: int = 1_024,
    result_chars: int,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "session": {
            "orchestrator": {
                "module": "loop-fold",
                "config": {"overflow": "raise", "max_iterations": steps + 5},
            },
            "context": {"module": "context-fold", "config": context or {}},
        },
        "providers": [
            {
                "module": "provider-scripted",
                "config": {
                    "script": {"steps": steps, "final_text": FINAL_TEXT},
                    "context_window": context_window,
                    "max_output_tokens": max_output_tokens,
                    "strict_sequence": True,
                },
            }
        ],
        "tools": [{"module": "tool-doc-lookup", "config": {"result_chars": result_chars}}],
        "hooks": [],
    }


async def run(plan_: dict[str, Any], prompt: str = PROMPT) -> tuple[Any, Any, list[dict]]:
    """Run ``prompt`` to its end; the provider, the context and every compaction event."""
    session = AmplifierSession(plan_)
    await session.initialize()
    compactions: list[dict[str, Any]] = []

    async def record(event: str, data: dict[str, Any]) -> HookResult:
        compactions.append(dict(data))
        return HookResult()

    session.coordinator.hooks.register("context:compaction", record, name="rec-compaction")
    try:
        assert await session.execute(prompt) == FINAL_TEXT
        provider = session.coordinator.get("providers")["scripted"]
        context = session.coordinator.get("context")
    finally:
        await session.cleanup()
    return provider, context, compactions


def assert_all_accepted(provider: Any, requests: int) -> None:
    records = provider.records
    assert len(records) == requests and not [r.index for r in records if r.rejected]
    assert not [(r.index, r.request_tokens) for r in records if r.request_tokens > r.window]
    assert all(r.sequence.ok for r in records)


# -- item 14: a protected floor near the budget and the notice ----------------------------------


def dense_prompt(chars: int = 18_000) -> str:
    """A first prompt of ``chars`` characters that costs about half as many tokens (ids and
    hashes, then prose): with the system message and a call group, about 9,100 of the
    budget's 10,000 tokens are required core."""
    ids = " ".join(hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in range(1_000))
    return (ids[:13_000] + " " + prose(1, chars))[:chars]


@pytest.mark.parametrize("notice", [True, False], ids=["notice", "no-notice"])
async def test_a_floor_near_the_budget_does_not_compact_every_request(notice: bool) -> None:
    # max_tokens 10,000, trigger 0.80, target 0.50, an 18,000-character first prompt, then
    # small call groups: with the notice on, every request compacted (12 in 12, each
    # rewriting the prompt prefix) because the notice's reserve left the messages no room
    # above the floor; with it off, 2.
    context = {
        "max_tokens": 10_000,
        "compact_threshold": 0.80,
        "target_usage": 0.50,
        "compaction_notice_enabled": notice,
    }
    prompt = dense_prompt()
    assert len(prompt) == 18_000 and TRUTH.count_text(prompt) > 8_500
    steps = 11
    provider, _, compactions = await run(
        plan(steps, context_window=200_000, result_chars=300, context=context), prompt
    )
    assert_all_accepted(provider, steps + 1)
    assert len(compactions) <= 2, [c["before_tokens"] for c in compactions]


# -- item 15: one big tool result in a small window ---------------------------------------------


async def test_one_200_kb_tool_result_does_not_end_a_16k_session() -> None:
    # The default ingress cap (131,072 bytes, about 27,600 tokens) keeps more than the window
    # holds, and the newest group is required core: the next request used to be refused.
    steps = 2
    provider, context, compactions = await run(
        plan(steps, context_window=16_000, result_chars=200_000)
    )
    assert_all_accepted(provider, steps + 1)
    history = await context.get_messages()
    results = [m for m in history if m["role"] == "tool"]
    assert len(results) == steps
    # History keeps each result as admitted (clipped only by the ingress cap)...
    assert all(len(m["content"].encode()) > 100_000 for m in results)
    # ...and the view carried it shortened: the pass says so.
    assert any("newest_results_shortened" in c["relaxed"] for c in compactions)


SMALL = ModelInfo(id="m", display_name="M", context_window=16_000, max_output_tokens=1_024)


class Model:
    """The model info a provider publishes (all a budget reads of it)."""

    def get_model_info(self) -> ModelInfo:
        return SMALL


async def big_result_context() -> tuple[ContextFold, str]:
    ctx = ContextFold()
    await ctx.set_messages([SYSTEM, human("Read the log and tell me how the run ended.")])
    # About 24,000 tokens, under the ingress cap (131,072 bytes): over the window anyway.
    text = "\n".join(f"line {i}: " + prose(i, 60) for i in range(1_500)) + "\nRUN ENDED: OK"
    await ctx.add_message(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "tool": "read_log", "arguments": {"path": "run.log"}}],
        }
    )
    await ctx.add_message({"role": "tool", "tool_call_id": "c1", "content": text})
    return ctx, text


async def test_the_newest_result_is_shortened_in_the_view_with_a_way_to_read_the_rest() -> None:
    ctx, text = await big_result_context()
    assert TRUTH.count_text(text) > 20_000 and len(text.encode()) < 131_072
    view = await ctx.get_messages_for_request(provider=Model())
    budget = ctx.last_report.budget
    assert TRUTH.count_request(view) <= budget <= 16_000 - 1_024
    # The call and its answer stay paired, the answer keeps its head and its tail...
    assert [m["role"] for m in view] == ["system", "user", "assistant", "tool"]
    assert view[-1]["tool_call_id"] == "c1" and view[-2]["tool_calls"][0]["id"] == "c1"
    shown = view[-1]["content"]
    assert shown.startswith("line 0: ") and shown.endswith("RUN ENDED: OK")
    # ...to its share of the budget: read once, the rest by recall (see `newest_results`)...
    assert budget * RESULTS_SHARE / 2 < TRUTH.count_text(shown) <= budget * RESULTS_SHARE + 60
    # ...and the marker says how to read the middle: recall by id, from an offset.
    found = re.search(r'context_recall\("(r\d+)", offset=(\d+)\) returns it', shown)
    assert found, shown[len(shown) // 2 - 300 : len(shown) // 2 + 300]
    rid, offset = found.group(1), int(found.group(2))
    assert shown[:offset] == text[:offset]
    assert (await ctx.recall(rid, offset=offset)).startswith(text[offset : offset + 200])
    # History keeps the result whole.
    assert (await ctx.get_messages())[-1]["content"] == text
    assert ctx.last_report.relaxed[-1] == "newest_results_shortened"


def prompt_of(tokens: int) -> str:
    """Prose that counts ``tokens`` as a human message, give or take a few."""
    low, high = 0, tokens * 8
    while low < high:
        middle = (low + high + 1) // 2
        if TRUTH.count_message(human(prose(3, middle))) <= tokens:
            low = middle
        else:
            high = middle - 1
    return prose(3, low)


async def test_a_group_that_cannot_fit_even_shortened_is_refused_with_history_untouched() -> None:
    ctx = ContextFold()
    # A last human prompt that alone nearly fills the input limit (14,976) leaves the
    # result no room for even its shortest form.
    await ctx.set_messages([SYSTEM, human(prompt_of(14_900))])
    await ctx.add_message(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "tool": "t"}]}
    )
    await ctx.add_message({"role": "tool", "tool_call_id": "c1", "content": prose(4, 80_000)})
    before = await ctx.get_messages()
    with pytest.raises(ContextLengthError, match="cannot go without"):
        await ctx.get_messages_for_request(provider=Model())
    assert await ctx.get_messages() == before


# -- item 16: an 8,000-token window ---------------------------------------------------------------


async def test_a_small_window_keeps_most_of_its_input_limit() -> None:
    # The contract's fixed 4,096-token margin is 2 % of a 200,000 window and left an
    # 8,000-token one (1,024 output tokens) a 3,392-token budget: 49 % of its input limit.
    eight = {"id": "m", "context_window": 8_000, "max_output_tokens": 1_024}

    class Eight:
        def get_model_info(self) -> dict[str, Any]:
            return eight

    d = await derive_budget(ContextConfig(), provider=Eight())
    assert (d.input_limit, d.safety_margin) == (6_976, 250)
    assert d.effective_budget == 6_976 - 250 and d.effective_budget > 0.95 * d.input_limit
    # The reference's margin still holds for large windows; a configured one as given.
    large = {"id": "m", "context_window": 200_000, "max_output_tokens": 8_192}
    eight.update(large)
    assert (await derive_budget(ContextConfig(), provider=Eight())).safety_margin == 4_096
    eight.update(context_window=8_000, max_output_tokens=1_024)
    given = await derive_budget(ContextConfig(safety_margin=4_096), provider=Eight())
    assert given.effective_budget == 6_976 - 4_096


@pytest.mark.slow
async def test_an_8k_window_with_1300_token_results_compacts_every_few_requests() -> None:
    # 200 lookups of about 1,300 tokens each: the window holds four or five of them. A pass
    # came on 163 of 201 requests; now the budget keeps most of the input limit, and passes
    # that come every request or two go deeper, so the next leaves room for several.
    steps = 200
    provider, context, compactions = await run(
        plan(steps, context_window=8_000, result_chars=6_000)
    )
    assert_all_accepted(provider, steps + 1)
    assert len(compactions) <= (steps + 1) * 3 // 10, len(compactions)
    assert context.last_report.budget == 6_726
