"""contextfold under a real pydantic-ai agent, offline with its `FunctionModel`: a model that
thinks, calls tools and refuses requests over its window."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from adapter_support import (
    STEPS,
    SYSTEM_PROMPT,
    WINDOW,
    WindowExceeded,
    assert_nothing_shared,
    assert_pairs_whole,
    call_id,
    check_request,
    count_sent,
    deface,
    next_step,
    prompt,
)
from adapter_support import page as page_text
from contextfold import ContextFold
from contextfold.integrations.pydantic_ai import ContextFoldCapability, from_view, to_messages
from contextfold.mirror import Mirror
from contextfold.store import StoreError
from contextfold.views import strip_metadata

NO_LIMIT = UsageLimits(request_limit=None)


def sent_form(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return strip_metadata(to_messages(messages))


class Scripted:
    """The model's function: thinks, calls ``read_page`` as the plan says; counts and polices
    every request."""

    def __init__(self, *, enforce_window: bool = True, deface_input: bool = False) -> None:
        self.enforce_window = enforce_window
        self.deface_input = deface_input
        self.requests: list[tuple[int, list[dict[str, Any]]]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent = sent_form(messages)
        if info.instructions:
            sent = [{"role": "system", "content": info.instructions}, *sent]
        tools = [
            {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
            for t in info.function_tools
        ]
        size = count_sent(sent, tools)
        self.requests.append((size, sent))
        if self.enforce_window:
            check_request(size)
        human = next(m["content"] for m in reversed(sent) if str(m["content"]).startswith("read"))
        last = messages[-1].parts[-1]
        step = next_step(human, last.tool_call_id if isinstance(last, ToolReturnPart) else None)
        if self.deface_input:
            deface(messages)
        usage = RequestUsage(input_tokens=size, output_tokens=5)
        if step is None:
            return ModelResponse(parts=[TextPart("done")], usage=usage, model_name="scripted-1")
        parts = [
            ThinkingPart(f"page {step} comes next", signature=f"sig{step}"),
            ToolCallPart("read_page", {"page": step}, call_id(step)),
        ]
        return ModelResponse(parts=parts, usage=usage, model_name="scripted-1")


class Probe(AbstractCapability[Any]):
    """After contextfold's capability: the fitted request shares nothing with the history."""

    def __init__(self) -> None:
        self.calls = 0
        self.shorter = 0

    async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
        if self.calls % 6 == 0:
            assert_nothing_shared(request_context.messages, ctx.messages)
        self.shorter += len(request_context.messages) < len(ctx.messages)
        self.calls += 1
        return request_context


def agent_for(model: Scripted, *capabilities: Any) -> Agent[None, str]:
    agent = Agent(FunctionModel(model), instructions=SYSTEM_PROMPT, capabilities=list(capabilities))

    @agent.tool_plain
    def read_page(page: int) -> str:
        """Read one page of the manual."""
        return page_text(page)

    return agent


async def test_without_contextfold_the_agent_overflows_its_window() -> None:
    with pytest.raises(WindowExceeded):
        await agent_for(Scripted()).run(prompt(0, STEPS - 1), usage_limits=NO_LIMIT)


@pytest.mark.slow
async def test_a_sixty_step_agent_finishes_inside_the_window_with_its_history_whole() -> None:
    model = Scripted(deface_input=True)
    fold = ContextFoldCapability.with_settings(max_tokens=WINDOW)
    probe = Probe()
    result = await agent_for(model, fold, probe).run(prompt(0, STEPS - 1), usage_limits=NO_LIMIT)

    assert result.output == "done"
    assert len(model.requests) == STEPS + 1 == probe.calls
    assert probe.shorter > STEPS // 2  # the probe saw the fitted request
    assert max(size for size, _ in model.requests) <= WINDOW
    for _, sent in model.requests:
        assert_pairs_whole(sent)
    stored = result.all_messages()
    reference = await agent_for(Scripted(enforce_window=False)).run(
        prompt(0, STEPS - 1), usage_limits=NO_LIMIT
    )
    assert sent_form(stored) == sent_form(reference.all_messages())
    assert "defaced" not in ModelMessagesTypeAdapter.dump_json(stored).decode()
    context = fold.context(result.conversation_id)
    assert context.counter.ratios().keys() == {FunctionModel(model).model_name}


@pytest.mark.slow
async def test_a_resumed_conversation_continues_with_the_same_view(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'fold.db'}"

    def durable() -> ContextFoldCapability:
        return ContextFoldCapability(
            lambda conversation: ContextFold(max_tokens=WINDOW, store=url, session_id=conversation)
        )

    straight = Scripted()
    agent = agent_for(straight, ContextFoldCapability.with_settings(max_tokens=WINDOW))
    first_run = await agent.run(prompt(0, 29), usage_limits=NO_LIMIT)
    before = len(straight.requests)
    await agent.run(
        prompt(30, STEPS - 1), message_history=first_run.all_messages(), usage_limits=NO_LIMIT
    )

    first = Scripted()
    run = await agent_for(first, durable()).run(prompt(0, 29), usage_limits=NO_LIMIT)
    saved = ModelMessagesTypeAdapter.dump_json(run.all_messages())  # the stored conversation
    resumed = Scripted()
    history = ModelMessagesTypeAdapter.validate_json(saved)
    second = await agent_for(resumed, durable()).run(
        prompt(30, STEPS - 1), message_history=history, usage_limits=NO_LIMIT
    )

    assert first.requests == straight.requests[:before]
    assert resumed.requests == straight.requests[before:]
    assert second.conversation_id == run.conversation_id
    assert len(second.all_messages()) == 2 * (1 + 2 * 30 + 1)


def pydantic_history() -> list[ModelMessage]:
    return [
        ModelRequest(
            parts=[SystemPromptPart("be brief"), UserPromptPart(["look", "at this"])],
            metadata={"tag": [1]},
        ),
        ModelResponse(
            parts=[
                ThinkingPart("hmm", signature="sig"),
                TextPart("calling"),
                ToolCallPart("read_page", {"page": 1}, "c1"),
                ToolCallPart("read_page", {"page": 2}, "c2"),
            ],
            usage=RequestUsage(input_tokens=10, output_tokens=3),
            model_name="m",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("read_page", page_text(1), "c1"),
                ToolReturnPart("read_page", {"rows": [1, 2]}, "c2"),
                UserPromptPart("and?"),
            ]
        ),
        ModelResponse(parts=[TextPart("done")]),
    ]


async def test_unchanged_messages_come_back_equal_and_unshared() -> None:
    history = pydantic_history()
    mirror = Mirror(ContextFold(), to_messages)
    back = from_view(await mirror.view(history), mirror)
    assert back == history
    assert_nothing_shared(back, history)
    roles = [m["role"] for m in to_messages(history)]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]


async def test_a_shortened_return_and_dropped_thinking_keep_the_pairs() -> None:
    history = pydantic_history()
    long_return = " ".join(page_text(n) for n in range(10))
    history[2].parts[0] = ToolReturnPart("read_page", long_return, "c1")
    history += [
        ModelRequest(parts=[UserPromptPart("again")]),
        ModelResponse(parts=[ThinkingPart("more", signature="s2"), TextPart("ok")]),
    ]
    mirror = Mirror(ContextFold(max_tokens=2200, protected_tool_results=0), to_messages)
    back = from_view(await mirror.view(history), mirror)
    returns = [p for m in back for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.tool_call_id for p in returns] == ["c1", "c2"]
    assert len(returns[0].content) < len(long_return) // 4
    assert not any(
        isinstance(p, ThinkingPart) and p.content == "hmm" for m in back for p in m.parts
    )
    assert_pairs_whole(sent_form(back))
    assert history[2].parts[0].content == long_return  # the history's part is untouched


def test_the_capability_is_left_out_of_a_serialised_spec() -> None:
    assert ContextFoldCapability.get_serialization_name() is None
    assert (
        json.dumps(ContextFoldCapability.with_settings(max_tokens=5).settings)
        == '{"max_tokens": 5}'
    )


async def test_only_the_most_recent_conversations_stay_live_and_one_let_go_resumes(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path / 'conversations.db'}"
    made: list[tuple[str, ContextFold]] = []

    def new_context(conversation: str) -> ContextFold:
        context = ContextFold(max_tokens=WINDOW, store=url, session_id=conversation)
        made.append((conversation, context))
        return context

    agent = agent_for(Scripted(), ContextFoldCapability(new_context, max_conversations=2))
    runs = [await agent.run(prompt(0, 3), usage_limits=NO_LIMIT) for _ in range(3)]
    assert [c for c, _ in made] == [run.conversation_id for run in runs]
    # The first conversation was let go when the third came: its context closed its store.
    with pytest.raises(StoreError, match="was closed"):
        await made[0][1].add_message({"role": "user", "content": "late"})

    # Continued, it is made again and picks up its stored session and the run's messages.
    again = await agent.run(
        prompt(4, 7), message_history=runs[0].all_messages(), usage_limits=NO_LIMIT
    )
    assert again.conversation_id == runs[0].conversation_id == made[-1][0]
    assert len(made) == 4 and again.output == "done"
    stored = await made[-1][1].get_messages()
    assert len(stored) == len(sent_form(again.all_messages())) - 1  # less the final answer


def test_the_number_of_conversations_kept_must_be_positive() -> None:
    for bad in (0, -3, 1.5):
        with pytest.raises(ValueError, match="positive integer"):
            ContextFoldCapability(max_conversations=bad)
