"""contextfold under a real LangChain v1 agent (``create_agent``, LangGraph's checkpointer),
offline with a chat model of our own that calls tools and refuses requests over its window."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from adapter_support import (
    COUNTER,
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
from contextfold.integrations.langchain import ContextFoldMiddleware, from_view, to_messages
from contextfold.mirror import Mirror
from contextfold.store import StoreError


class ScriptedChatModel(BaseChatModel):
    """Calls ``read_page`` as the plan says; counts and polices every request it receives."""

    model_name: str = "scripted-1"
    enforce_window: bool = True
    usage_scale: float = 1.0
    # Out of the repr: LangChain serialises the model on every call.
    schemas: list[dict[str, Any]] = Field(default_factory=list, repr=False)
    requests: list[tuple[int, list[dict[str, Any]]]] = Field(default_factory=list, repr=False)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        # A copy sharing `requests`, as bind_tools returns a new runnable.
        return self.model_copy(update={"schemas": [convert_to_openai_tool(t) for t in tools]})

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any):
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    async def _agenerate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw
    ):
        return self._generate(messages)

    def _answer(self, messages: list[Any]) -> AIMessage:
        sent = convert_to_openai_messages(messages)
        size = count_sent(sent, self.schemas)
        self.requests.append((size, sent))
        if self.enforce_window:
            check_request(size)
        human = next(m for m in reversed(messages) if is_prompt(m))
        last = messages[-1]
        step = next_step(human.text, last.tool_call_id if isinstance(last, ToolMessage) else None)
        if step is None:
            answer = AIMessage(content="done")
        else:
            call = {"name": "read_page", "args": {"page": step}, "id": call_id(step)}
            answer = AIMessage(content="", tool_calls=[call])
        inputs = round(size * self.usage_scale)
        answer.usage_metadata = {"input_tokens": inputs, "output_tokens": 5, "total_tokens": inputs}
        answer.response_metadata = {"model_name": "scripted-1"}
        return answer


def is_prompt(message: Any) -> bool:
    return isinstance(message, HumanMessage) and message.text.startswith("read steps")


@tool("read_page")
def read_page_tool(page: int) -> str:
    """Read one page of the manual."""
    return page_text(page)


class Probe(AgentMiddleware):
    """Inside contextfold's middleware: sees the fitted request beside the graph's state,
    checks they share nothing mutable, and defaces the request after the call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def check(self, request: Any) -> None:
        if self.calls % 6 == 0:  # a walk of the whole state: every sixth call is enough
            assert_nothing_shared(request.messages, request.state["messages"])

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.check(request)
        response = await handler(request)
        deface(request.messages)
        self.calls += 1
        return response

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.check(request)
        response = handler(request)
        deface(request.messages)
        self.calls += 1
        return response


def agent_with(model: ScriptedChatModel, middleware: list[Any], saver: Any = None) -> Any:
    return create_agent(
        model,
        [read_page_tool],
        system_prompt=SYSTEM_PROMPT,
        middleware=middleware,
        checkpointer=saver or InMemorySaver(),
    )


def config(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 1000}


async def reference_history(first: int = 0, last: int = STEPS - 1) -> list[dict[str, Any]]:
    """The conversation as the agent stores it with no window to fit."""
    agent = agent_with(ScriptedChatModel(enforce_window=False), [])
    state = await agent.ainvoke({"messages": [HumanMessage(prompt(first, last))]}, config())
    return convert_to_openai_messages(state["messages"])


async def test_without_contextfold_the_agent_overflows_its_window() -> None:
    agent = agent_with(ScriptedChatModel(), [])
    with pytest.raises(WindowExceeded):
        await agent.ainvoke({"messages": [HumanMessage(prompt(0, STEPS - 1))]}, config())


@pytest.mark.slow
async def test_a_sixty_step_agent_finishes_inside_the_window_with_its_history_whole() -> None:
    model = ScriptedChatModel()
    fold = ContextFoldMiddleware(max_tokens=WINDOW)
    probe = Probe()
    agent = agent_with(model, [fold, probe])
    state = await agent.ainvoke({"messages": [HumanMessage(prompt(0, STEPS - 1))]}, config())

    assert state["messages"][-1].content == "done"
    assert len(model.requests) == STEPS + 1 == probe.calls
    sizes = [size for size, _ in model.requests]
    assert max(sizes) <= WINDOW
    for _, sent in model.requests:
        assert_pairs_whole(sent)
    # The graph's own history: every message, as it would be with no window at all.
    stored = convert_to_openai_messages(state["messages"])
    assert stored == await reference_history()
    assert COUNTER.count_request(stored) > 3 * WINDOW
    # Usage fed calibration for this model.
    assert "scripted-1" in fold.context("t1").counter.ratios()


@pytest.mark.slow
def test_the_sync_path_fits_as_the_async_one() -> None:
    model = ScriptedChatModel()
    probe = Probe()
    agent = agent_with(model, [ContextFoldMiddleware(max_tokens=WINDOW), probe])
    state = agent.invoke({"messages": [HumanMessage(prompt(0, 23))]}, config())
    assert state["messages"][-1].content == "done"
    assert max(size for size, _ in model.requests) <= WINDOW
    assert COUNTER.count_request(convert_to_openai_messages(state["messages"])) > WINDOW
    assert probe.calls == 25


async def test_reported_usage_calibrates_what_is_sent() -> None:
    # A provider that bills a quarter more than the exact count: the view shrinks to match.
    model = ScriptedChatModel(usage_scale=1.25)
    fold = ContextFoldMiddleware(max_tokens=WINDOW)
    agent = agent_with(model, [fold])
    await agent.ainvoke({"messages": [HumanMessage(prompt(0, STEPS - 1))]}, config())
    assert fold.context("t1").counter.ratio("scripted-1") >= 1.2
    billed = [round(size * 1.25) for size, _ in model.requests]
    assert max(billed[5:]) <= WINDOW


@pytest.mark.slow
async def test_a_resumed_thread_continues_with_the_same_view(tmp_path: Any) -> None:
    def durable(name: str) -> ContextFoldMiddleware:
        url = f"sqlite:///{tmp_path / name}"
        return ContextFoldMiddleware(
            lambda thread: ContextFold(max_tokens=WINDOW, store=url, session_id=thread)
        )

    second = {"messages": [HumanMessage(prompt(30, STEPS - 1))]}
    # Uninterrupted: both prompts through the same agent and middleware.
    straight = ScriptedChatModel()
    agent = agent_with(straight, [ContextFoldMiddleware(max_tokens=WINDOW)])
    await agent.ainvoke({"messages": [HumanMessage(prompt(0, 29))]}, config())
    before = len(straight.requests)
    await agent.ainvoke(second, config())

    # Interrupted after the first prompt; resumed by new objects over the stored state.
    saver = InMemorySaver()
    first_model = ScriptedChatModel()
    agent = agent_with(first_model, [durable("fold.db")], saver)
    await agent.ainvoke({"messages": [HumanMessage(prompt(0, 29))]}, config())
    resumed = ScriptedChatModel()
    agent = agent_with(resumed, [durable("fold.db")], saver)
    state = await agent.ainvoke(second, config())

    assert first_model.requests == straight.requests[:before]
    assert resumed.requests == straight.requests[before:]
    assert len(state["messages"]) == 2 * (1 + 2 * 30 + 1)


def rich_history() -> list[Any]:
    return [
        SystemMessage("be brief", id="s"),
        HumanMessage(["look at this", {"type": "text", "text": "and this"}], id="h1", name="ann"),
        AIMessage(
            content=[{"type": "text", "text": "calling"}],
            tool_calls=[{"name": "read_page", "args": {"page": 1}, "id": "c1"}],
            additional_kwargs={"refusal": None, "extra": {"nested": [1, 2]}},
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
            id="a1",
        ),
        ToolMessage(
            page_text(1), tool_call_id="c1", name="read_page", artifact={"raw": [1]}, id="t1"
        ),
        AIMessage("done", id="a2"),
    ]


async def test_unchanged_messages_come_back_equal_and_unshared() -> None:
    history = rich_history()
    mirror = Mirror(ContextFold(), to_messages)
    view = await mirror.view(history)
    back = from_view(view, mirror)
    assert back == history
    assert_nothing_shared(back, history)


async def test_a_shortened_result_keeps_its_call_id_name_and_artifact() -> None:
    long_result = " ".join(page_text(n) for n in range(12))
    history = rich_history()
    history[3] = history[3].model_copy(update={"content": long_result})
    mirror = Mirror(ContextFold(max_tokens=2500, protected_tool_results=0), to_messages)
    back = from_view(await mirror.view(history), mirror)
    (result,) = [m for m in back if isinstance(m, ToolMessage)]
    assert (result.tool_call_id, result.name, result.artifact) == ("c1", "read_page", {"raw": [1]})
    assert len(result.content) < len(long_result) // 4
    assert history[3].content == long_result  # the state's message is untouched
    assert_pairs_whole(convert_to_openai_messages(back))


def test_new_context_and_settings_together_are_refused() -> None:
    with pytest.raises(TypeError, match="either new_context or ContextFold settings"):
        ContextFoldMiddleware(lambda thread: ContextFold(), max_tokens=WINDOW)


async def test_only_the_most_recent_threads_stay_live_and_one_let_go_resumes(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    made: list[tuple[str, ContextFold]] = []

    def new_context(thread: str) -> ContextFold:
        made.append((thread, ContextFold(max_tokens=WINDOW, store=url, session_id=thread)))
        return made[-1][1]

    fold = ContextFoldMiddleware(new_context, max_threads=2)
    agent = agent_with(ScriptedChatModel(), [fold])
    for thread in ("a", "b", "c"):
        await agent.ainvoke({"messages": [HumanMessage(prompt(0, 3))]}, config(thread))
    # Thread "a" was let go when "c" came: its context closed its store.
    assert [thread for thread, _ in made] == ["a", "b", "c"]
    with pytest.raises(StoreError, match="was closed"):
        await made[0][1].add_message({"role": "user", "content": "late"})

    # Its next call makes it again, from the stored session and the graph's messages.
    state = await agent.ainvoke({"messages": [HumanMessage(prompt(4, 7))]}, config("a"))
    assert [thread for thread, _ in made] == ["a", "b", "c", "a"]
    again = await fold.context("a").get_messages()
    # Every message of the thread up to the last model call (the answer to that call is
    # admitted at the next one).
    graph = convert_to_openai_messages(state["messages"])[:-1]
    assert [(m["role"], m.get("content")) for m in again] == [
        (m["role"], m.get("content")) for m in graph
    ]
    assert state["messages"][-1].content == "done"


def test_the_number_of_threads_kept_must_be_positive() -> None:
    for bad in (0, -1, 2.5, "10"):
        with pytest.raises(ValueError, match="positive integer"):
            ContextFoldMiddleware(max_threads=bad, max_tokens=WINDOW)
