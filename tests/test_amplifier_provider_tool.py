"""The scripted provider and the doc-lookup tool, against amplifier-core's real types and kernel."""

from __future__ import annotations

import re

import pytest
from amplifier_core.llm_errors import ContextLengthError, InvalidRequestError
from amplifier_core.message_models import ChatRequest, Message, ToolSpec
from amplifier_core.models import HookResult, ModelInfo, ProviderInfo
from amplifier_core.testing import MockCoordinator
from amplifier_core.validation import HookValidator, ProviderValidator, ToolValidator

from contextfold.amplifier import doc_tool, inject_hook, scripted_provider
from contextfold.amplifier.doc_tool import DocLookupTool, render_document
from contextfold.amplifier.inject_hook import ContextInjector, note_text
from contextfold.amplifier.scripted_provider import (
    EXHAUSTED_TEXT,
    SIGNATURE_CHARS,
    ScriptedProvider,
)
from contextfold.tokens import ExactCounter

LOOKUP_SPEC = ToolSpec(
    name="lookup", parameters=DocLookupTool().input_schema, description="Look up a topic."
)


def request(*messages: dict, tools: bool = True) -> ChatRequest:
    return ChatRequest(
        messages=[Message.model_validate(m) for m in messages],
        tools=[LOOKUP_SPEC] if tools else None,
    )


def exact_size(req: ChatRequest) -> int:
    """The request size counted independently of the provider (metadata is never sent)."""
    counter = ExactCounter()
    messages = [m.model_dump(exclude_none=True, exclude={"metadata"}) for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    return sum(counter.count_message(m) for m in messages) + (
        counter.count_tools(tools) if tools else 0
    )


USER = {"role": "user", "content": "Tell me about tidal energy."}


# -- scripted provider: protocol and script ---------------------------------------------


async def test_mount_registers_provider_with_model_metadata() -> None:
    coordinator = MockCoordinator()
    await scripted_provider.mount(
        coordinator, {"context_window": 50_000, "max_output_tokens": 4_000, "model": "m1"}
    )
    provider = coordinator.get("providers")["scripted"]
    info = provider.get_info()
    assert isinstance(info, ProviderInfo)
    assert info.defaults == {"model": "m1", "context_window": 50_000, "max_output_tokens": 4_000}
    model = provider.get_model_info()
    assert isinstance(model, ModelInfo)
    assert (model.id, model.context_window, model.max_output_tokens) == ("m1", 50_000, 4_000)
    assert await provider.list_models() == [model]


async def test_replays_listed_steps_with_deterministic_call_ids() -> None:
    provider = ScriptedProvider(
        {
            "script": [
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "a"}}]},
                {
                    "text": "Two more.",
                    "tool_calls": [
                        {"name": "lookup", "arguments": {"topic": "b"}},
                        {"name": "lookup", "arguments": {"topic": "c"}},
                    ],
                },
                {"text": "All done."},
            ]
        }
    )
    first = await provider.complete(request(USER))
    assert first.content == []
    assert [(c.id, c.name, c.arguments) for c in provider.parse_tool_calls(first)] == [
        ("call_0001", "lookup", {"topic": "a"})
    ]
    second = await provider.complete(request(USER))
    assert second.content[0].text == "Two more."
    assert [c.id for c in provider.parse_tool_calls(second)] == ["call_0002", "call_0003"]
    assert second.finish_reason == "tool_use"
    third = await provider.complete(request(USER))
    assert third.content[0].text == "All done."
    assert provider.parse_tool_calls(third) == []
    assert third.finish_reason == "end_turn"


async def test_generator_script_then_exhaustion_never_crashes() -> None:
    provider = ScriptedProvider(
        {"script": {"steps": 3, "tool": "lookup", "argument": "topic", "final_text": "Finished."}}
    )
    topics = []
    for _ in range(3):
        response = await provider.complete(request(USER))
        (call,) = provider.parse_tool_calls(response)
        topics.append(call.arguments["topic"])
    assert topics == ["topic 1", "topic 2", "topic 3"]
    final = await provider.complete(request(USER))
    assert final.content[0].text == "Finished."
    assert not provider.parse_tool_calls(final)
    for _ in range(2):  # past the end of the script: a closing text, every time
        extra = await provider.complete(request(USER))
        assert extra.content[0].text == EXHAUSTED_TEXT
        assert not provider.parse_tool_calls(extra)


# -- scripted provider: measurement ------------------------------------------------------


async def test_usage_identity_holds_with_a_ratio() -> None:
    provider = ScriptedProvider({"script": {"steps": 2}, "usage_ratio": 1.37})
    history = [USER]
    for turn in range(3):
        req = request(*history)
        response = await provider.complete(req)
        record = provider.records[-1]
        expected = round(exact_size(req) * 1.37)
        assert record.input_tokens + record.cache_write_tokens == expected
        assert record.request_tokens == expected
        assert response.usage.input_tokens == record.input_tokens
        assert response.usage.cache_write_tokens == record.cache_write_tokens
        assert response.usage.total_tokens == expected + record.output_tokens
        assert record.message_count == len(history)
        history += [
            {"role": "assistant", "content": f"step {turn}"},
            {"role": "user", "content": f"continue {turn}"},
        ]


async def test_cache_read_equals_previous_request_when_it_is_a_prefix() -> None:
    provider = ScriptedProvider({"script": {"steps": 3}})
    first = request(USER)
    await provider.complete(first)
    assert provider.records[0].cache_read_tokens == 0
    assert provider.records[0].cache_write_tokens == exact_size(first)

    grown = request(
        USER, {"role": "assistant", "content": "Looking."}, {"role": "user", "content": "ok"}
    )
    await provider.complete(grown)
    assert provider.records[1].cache_read_tokens == exact_size(first)
    assert provider.records[1].input_tokens == exact_size(first)  # nothing uncached
    assert provider.records[1].cache_write_tokens == exact_size(grown) - exact_size(first)

    # An edit early in the conversation (what compaction does) breaks the cached prefix there.
    edited = request(USER, {"role": "assistant", "content": "Looking (edited)."})
    await provider.complete(edited)
    assert provider.records[2].cache_read_tokens == exact_size(first)

    # Tool schemas come first in a prompt: dropping them invalidates everything.
    await provider.complete(request(USER, tools=False))
    assert provider.records[3].cache_read_tokens == 0


async def test_metadata_is_not_counted_or_cached() -> None:
    provider = ScriptedProvider({"script": {"steps": 1}})
    await provider.complete(request({**USER, "metadata": {"source": "user"}}))
    await provider.complete(request(USER))
    assert provider.records[0].request_tokens == provider.records[1].request_tokens
    assert provider.records[1].cache_write_tokens == 0


async def test_output_tokens_count_the_reply() -> None:
    provider = ScriptedProvider({"script": [{"text": "word " * 50}]})
    await provider.complete(request(USER))
    assert provider.records[0].output_tokens == ExactCounter().count_text("word " * 50)


async def test_enforce_window_refuses_like_a_real_provider() -> None:
    provider = ScriptedProvider({"context_window": 1_000, "max_output_tokens": 900})
    big = request({"role": "user", "content": render_document("tides", 2_000)})
    with pytest.raises(ContextLengthError) as caught:
        await provider.complete(big)
    error = caught.value
    assert type(error) is ContextLengthError  # the kernel's own class, like a vendor provider
    assert error.limit == 100
    assert error.requested == exact_size(big)
    assert re.search(r"limit 100\b", str(error))
    assert not error.retryable
    (record,) = provider.records
    assert (record.rejected, record.overflowed, record.window) == (True, True, 100)
    assert record.input_tokens == exact_size(big) and record.cache_write_tokens == 0

    # The refused request was not cached, and a small one still goes through.
    small = request(USER, tools=False)
    await provider.complete(small)
    assert provider.records[1].cache_read_tokens == 0
    assert not provider.records[1].overflowed


async def test_unenforced_window_serves_and_marks_overflow() -> None:
    provider = ScriptedProvider(
        {"context_window": 1_000, "max_output_tokens": 900, "enforce_window": False}
    )
    await provider.complete(request({"role": "user", "content": render_document("tides", 2_000)}))
    (record,) = provider.records
    assert record.overflowed and not record.rejected
    assert record.request_tokens > record.window


async def test_llm_events_reach_kernel_hooks() -> None:
    coordinator = MockCoordinator()
    seen: list[tuple[str, dict]] = []

    async def record(event: str, data: dict) -> HookResult:
        seen.append((event, data))
        return HookResult()

    coordinator.hooks.register("llm:request", record)
    coordinator.hooks.register("llm:response", record)
    await scripted_provider.mount(coordinator, {"script": [{"text": "hi"}], "usage_ratio": 2.0})
    provider = coordinator.get("providers")["scripted"]
    await provider.complete(request(USER))
    assert [e for e, _ in seen] == ["llm:request", "llm:response"]
    request_data, response_data = seen[0][1], seen[1][1]
    assert request_data["provider"] == "scripted" and request_data["message_count"] == 1
    # The kernel pairs the two events of one call with a correlation id.
    assert request_data["request_id"] == response_data["request_id"]
    usage = response_data["usage"]
    assert response_data["status"] == "ok" and response_data["model"] == "scripted-o200k"
    record_ = provider.records[0]
    assert usage == {
        "input_tokens": record_.input_tokens,
        "output_tokens": record_.output_tokens,
        "cache_read_tokens": record_.cache_read_tokens,
        "cache_write_tokens": record_.cache_write_tokens,
        "total_tokens": record_.request_tokens + record_.output_tokens,
    }


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"scrpt": []}, "unknown config keys ['scrpt']"),
        ({"context_window": 0}, "'context_window' must be a positive integer"),
        ({"context_window": 100, "max_output_tokens": 100}, "must be smaller than"),
        ({"usage_ratio": 0}, "'usage_ratio' must be a positive number"),
        ({"enforce_window": "yes"}, "'enforce_window' must be true or false"),
        ({"script": "hello"}, "'script' must be a list of steps"),
        ({"script": [{"text": "ok"}, {}]}, "script[1] needs a non-empty 'text'"),
        ({"script": [{"txt": "x"}]}, "script[0] has unknown keys ['txt']"),
        ({"script": [{"tool_calls": [{"arguments": {}}]}]}, "script[0].tool_calls[0] needs"),
        ({"script": [{"tool_calls": [{"name": "a", "arguments": []}]}]}, "arguments must be"),
        ({"script": {"steps": -1}}, "'steps' must be an integer >= 0"),
        ({"script": {"steps": 1, "tool": ""}}, "'tool' must be a non-empty string"),
        ({"reply_shape": "anthropic"}, "'reply_shape' must be one of ['plain', 'anthropic-"),
        ({"reply_shape": None}, "'reply_shape' must be one of"),
        ({"call_ids": "per_turn"}, "'call_ids' must be one of ['unique', 'per_response']"),
        ({"strict_sequence": 1}, "'strict_sequence' must be true or false"),
    ],
)
def test_bad_provider_config_says_what_is_wrong(config: dict, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        ScriptedProvider(config)
    assert fragment in str(caught.value)


# -- reply shapes, call ids and strict sequence checks --------------------------------------


def stored(response) -> dict:
    """The assistant turn as Amplifier's loops store it: all blocks, plus the call list."""
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in response.content],
        "tool_calls": [
            {"id": c.id, "tool": c.name, "arguments": dict(c.arguments)}
            for c in response.tool_calls or []
        ],
    }


def result_of(call_id: str, text: str = "result") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


async def test_thinking_replies_have_the_anthropic_shape_and_realistic_sizes() -> None:
    provider = ScriptedProvider({"script": {"steps": 2}, "reply_shape": "anthropic-thinking"})
    first = await provider.complete(request(USER))
    types = [b.type for b in first.content]
    assert types == ["thinking", "text", "tool_call"]  # thinking, then text, then the calls
    thinking = first.content[0]
    assert 200 <= len(thinking.thinking.split()) <= 400  # a few hundred words
    assert len(thinking.signature) == SIGNATURE_CHARS >= 300
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", thinking.signature)
    assert first.content[2].id == first.tool_calls[0].id
    # Deterministic: a fresh provider answers byte for byte the same; the next reply differs.
    again = await ScriptedProvider(
        {"script": {"steps": 2}, "reply_shape": "anthropic-thinking"}
    ).complete(request(USER))
    assert again.content[0] == thinking
    second = await provider.complete(
        request(USER, stored(first), result_of(first.tool_calls[0].id))
    )
    assert second.content[0].signature != thinking.signature
    # Thinking is output the model produced: it is billed.
    plain = ScriptedProvider({"script": {"steps": 2}})
    await plain.complete(request(USER))
    assert provider.records[0].output_tokens > plain.records[0].output_tokens + 150


async def test_plain_replies_stay_text_and_calls() -> None:
    provider = ScriptedProvider({"script": {"steps": 1}})
    response = await provider.complete(request(USER))
    assert [b.type for b in response.content] == ["text"]


async def test_per_response_call_ids_restart_every_reply() -> None:
    two_calls = {
        "tool_calls": [
            {"name": "lookup", "arguments": {"topic": "a"}},
            {"name": "lookup", "arguments": {"topic": "b"}},
        ]
    }
    provider = ScriptedProvider({"script": [two_calls, two_calls], "call_ids": "per_response"})
    first = await provider.complete(request(USER))
    second = await provider.complete(request(USER))
    assert [c.id for c in first.tool_calls] == ["call_0", "call_1"]
    assert [c.id for c in second.tool_calls] == ["call_0", "call_1"]
    unique = ScriptedProvider({"script": [two_calls, two_calls]})
    ids = [c.id for _ in range(2) for c in (await unique.complete(request(USER))).tool_calls]
    assert len(set(ids)) == 4


async def strict_provider(**config) -> tuple[ScriptedProvider, dict, str]:
    """A strict provider that already answered once with a tool call: (provider, turn, id)."""
    provider = ScriptedProvider({"script": {"steps": 3}, "strict_sequence": True, **config})
    response = await provider.complete(request(USER))
    return provider, stored(response), response.tool_calls[0].id


async def test_strict_sequence_accepts_a_well_formed_request_and_records_the_check() -> None:
    provider, turn, call_id = await strict_provider()
    await provider.complete(request(USER, turn, result_of(call_id)))
    check = provider.records[1].sequence
    assert check is not None and check.ok
    assert (check.messages, check.tool_calls, check.tool_results) == (3, 1, 1)
    assert check.thinking_turn is None  # plain replies: no thinking rule
    assert ScriptedProvider({"script": {"steps": 1}}).records == []
    unchecked = ScriptedProvider({"script": {"steps": 1}})
    await unchecked.complete(request(USER))
    assert unchecked.records[0].sequence is None  # off by default


@pytest.mark.parametrize(
    ("fault", "fragment"),
    [
        ("foreign_between", "sits between the tool calls of message 1 and their results"),
        ("orphan", "answers no call of the assistant message before it (orphan result)"),
        ("unanswered", "have no result before message 2 (role 'user') (unanswered call)"),
        ("unanswered_at_end", "have no result at the end of the request"),
    ],
)
async def test_strict_sequence_refuses_what_real_providers_refuse(
    fault: str, fragment: str
) -> None:
    provider, turn, call_id = await strict_provider()
    note = {"role": "system", "content": "A hook's note."}
    messages = {
        "foreign_between": [USER, turn, note, result_of(call_id)],
        "orphan": [USER, turn, result_of(call_id), result_of("call_9999")],
        "unanswered": [USER, turn, {"role": "user", "content": "And then?"}],
        "unanswered_at_end": [USER, turn],
    }[fault]
    with pytest.raises(InvalidRequestError) as caught:
        await provider.complete(request(*messages))
    assert fragment in str(caught.value)
    assert caught.value.retryable is False and caught.value.status_code == 400
    record = provider.records[-1]
    assert record.rejected and not record.sequence.ok
    assert fragment in record.sequence.faults[0]
    assert provider._cursor == 1  # a refused request consumes no script step


async def test_an_orphan_after_a_plain_turn_is_refused() -> None:
    provider = ScriptedProvider({"strict_sequence": True})
    with pytest.raises(InvalidRequestError, match="message 1: tool result 'x' answers no call"):
        await provider.complete(request(USER, result_of("x")))


async def test_strict_thinking_rule_checks_only_the_latest_turn() -> None:
    provider, turn, call_id = await strict_provider(reply_shape="anthropic-thinking")
    second = await provider.complete(request(USER, turn, result_of(call_id)))
    assert provider.records[1].sequence.thinking_turn == 1
    turn2 = stored(second)
    call2 = second.tool_calls[0].id
    # Earlier turns may lose their thinking (Anthropic ignores it): accepted.
    without_thinking = dict(turn, content=[b for b in turn["content"] if b["type"] != "thinking"])
    await provider.complete(
        request(USER, without_thinking, result_of(call_id), turn2, result_of(call2))
    )
    assert provider.records[2].sequence.ok and provider.records[2].sequence.thinking_turn == 3


@pytest.mark.parametrize("damage", ["removed", "edited", "foreign"])
async def test_strict_thinking_rule_refuses_a_latest_turn_without_its_exact_thinking(
    damage: str,
) -> None:
    provider, turn, call_id = await strict_provider(reply_shape="anthropic-thinking")
    thinking, *rest = turn["content"]
    if damage == "removed":
        latest = dict(turn, content=rest)
        fragment = "without its signed thinking block exactly as produced"
    elif damage == "edited":
        latest = dict(turn, content=[dict(thinking, thinking=thinking["thinking"][:-40]), *rest])
        fragment = "without its signed thinking block exactly as produced"
    else:
        latest = dict(turn, content=[*turn["content"][:-1]], tool_calls=[
            {"id": call_id, "tool": "lookup", "arguments": {"topic": "never asked"}}
        ])  # fmt: skip
        fragment = "was not produced by this provider"
    with pytest.raises(InvalidRequestError) as caught:
        await provider.complete(request(USER, latest, result_of(call_id)))
    assert fragment in str(caught.value)


async def test_strict_checks_run_before_the_window() -> None:
    provider = ScriptedProvider(
        {"context_window": 1_000, "max_output_tokens": 900, "strict_sequence": True}
    )
    big = {"role": "user", "content": render_document("tides", 2_000)}
    with pytest.raises(InvalidRequestError):
        await provider.complete(request(big, result_of("x")))
    with pytest.raises(ContextLengthError):
        await provider.complete(request(big))
    assert provider.records[-1].sequence.ok  # the size refusal still records what was checked


# -- context injection hook ----------------------------------------------------------------


async def test_injector_injects_on_every_nth_event_with_its_role_and_size() -> None:
    injector = ContextInjector({"role": "user", "chars": 120, "every": 2})
    results = [await injector("tool:post", {}) for _ in range(5)]
    assert [r.action for r in results] == [
        "continue", "inject_context", "continue", "inject_context", "continue",
    ]  # fmt: skip
    injected = [r for r in results if r.action == "inject_context"]
    assert [r.context_injection_role for r in injected] == ["user", "user"]
    assert [len(r.context_injection) for r in injected] == [120, 120]
    assert injected[0].context_injection != injected[1].context_injection
    assert injected[0].context_injection == note_text(1, 120)


async def test_injector_defaults_to_system_on_tool_post() -> None:
    coordinator = MockCoordinator()
    await inject_hook.mount(coordinator, {})
    result = await coordinator.hooks.emit("tool:post", {"tool_name": "lookup"})
    assert result.action == "inject_context"
    assert result.context_injection_role == "system"
    assert len(result.context_injection) == 200
    other = await coordinator.hooks.emit("tool:pre", {"tool_name": "lookup"})
    assert other.action == "continue"


async def test_injector_cleanup_unregisters_every_event() -> None:
    coordinator = MockCoordinator()
    cleanup = await inject_hook.mount(coordinator, {"events": ["tool:post", "tool:pre"]})
    assert (await coordinator.hooks.emit("tool:pre", {})).action == "inject_context"
    cleanup()
    assert (await coordinator.hooks.emit("tool:pre", {})).action == "continue"
    assert (await coordinator.hooks.emit("tool:post", {})).action == "continue"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"rol": "user"}, "unknown config keys ['rol']"),
        ({"role": "developer"}, "'role' must be one of ['system', 'user', 'assistant']"),
        ({"chars": 5}, "'chars' must be an integer in [20, 100000]"),
        ({"chars": True}, "'chars' must be an integer"),
        ({"every": 0}, "'every' must be an integer >= 1"),
        ({"events": []}, "'events' must be a non-empty list"),
        ({"events": "tool:post"}, "'events' must be a non-empty list"),
        ({"events": ["tool:post", ""]}, "'events' must be a non-empty list"),
    ],
)
async def test_bad_injector_config_is_refused_at_mount(config: dict, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        await inject_hook.mount(MockCoordinator(), config)
    assert fragment in str(caught.value)


# -- doc lookup tool ---------------------------------------------------------------------


async def test_lookup_is_deterministic_long_and_varied() -> None:
    tool = DocLookupTool()
    first = await tool.execute({"topic": "tidal energy"})
    again = await DocLookupTool().execute({"topic": "tidal energy"})
    other = await tool.execute({"topic": "topic 2"})
    assert first.success and first.error is None
    assert first.output == again.output
    assert first.output != other.output
    text = first.output
    assert 0.8 * 6000 <= len(text) <= 6000
    assert text.startswith("# Tidal Energy")
    assert "- Topic: tidal energy" in text  # structured "Field: value" lines
    # Prose, not one phrase repeated: many distinct words and distinct sentences.
    words = re.findall(r"[a-z]+", text.lower())
    assert len(set(words)) > 150
    sentences = [s for s in re.split(r"(?<=\.) ", text) if len(s) > 30]
    assert len(set(sentences)) > 0.9 * len(sentences)


@pytest.mark.parametrize("size", [200, 1_500, 20_000])
def test_result_size_follows_config(size: int) -> None:
    text = render_document("topic 7", size)
    assert 0.8 * size <= len(text) <= size
    assert not text.rstrip().splitlines()[-1].startswith("#")  # no orphan heading at the cut


@pytest.mark.parametrize(
    ("tool_input", "fragment"),
    [
        ({}, "needs a 'topic'"),
        ({"topic": 3}, "'topic' must be a string, got int"),
        ({"topic": "   "}, "must not be empty"),
        ({"topic": "x" * 500}, "keep it under 200"),
        ("tides", "expects an object"),
    ],
)
async def test_lookup_rejects_bad_input_with_a_clear_error(
    tool_input: object, fragment: str
) -> None:
    result = await DocLookupTool().execute(tool_input)  # type: ignore[arg-type]
    assert not result.success
    assert fragment in result.error["message"]
    assert result.error["type"] == "invalid_input"
    assert fragment in result.get_serialized_output()  # what the model reads


async def test_tool_mount_and_schema() -> None:
    coordinator = MockCoordinator()
    await doc_tool.mount(coordinator, {"result_chars": 1_000})
    tool = coordinator.get("tools")["lookup"]
    assert tool.name == "lookup"
    assert tool.input_schema == tool.get_schema()
    assert tool.input_schema["required"] == ["topic"]
    result = await tool.execute({"topic": "x"})
    assert len(result.output) <= 1_000
    for bad in ({"result_chars": 10}, {"result_chars": "big"}, {"size": 100}):
        with pytest.raises(ValueError, match="result_chars"):
            await doc_tool.mount(MockCoordinator(), bad)


# -- the kernel's structural validation ----------------------------------------------------


@pytest.mark.parametrize(
    ("validator", "module"),
    [
        (ProviderValidator, "contextfold.amplifier.scripted_provider"),
        (ToolValidator, "contextfold.amplifier.doc_tool"),
        (HookValidator, "contextfold.amplifier.inject_hook"),
    ],
)
async def test_kernel_validator_passes(validator: type, module: str) -> None:
    result = await validator().validate(module)
    failed = [(c.name, c.message) for c in result.checks if not c.passed]
    assert result.passed and failed == [], failed
    assert any(c.name == "protocol_compliance" for c in result.checks)
