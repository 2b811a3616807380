"""contextfold under the real OpenAI Agents SDK (``Runner``, ``RunConfig``, ``SQLiteSession``),
offline with a `Model` of our own that calls tools and refuses requests over its window. What
the model is sent is counted as the SDK's own Chat Completions converter renders it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.chatcmpl_converter import Converter
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

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
from contextfold.formats.openai_responses import from_view, to_messages
from contextfold.integrations.openai_agents import ContextFoldFilter
from contextfold.mirror import Mirror

set_tracing_disabled(True)


class ScriptedModel(Model):
    """Reasons, then calls ``read_page`` as the plan says; counts and polices each request."""

    def __init__(self, *, enforce_window: bool = True, deface_input: bool = False) -> None:
        self.enforce_window = enforce_window
        self.deface_input = deface_input
        self.requests: list[tuple[int, list[dict[str, Any]]]] = []

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        *a: Any,
        **k: Any,
    ) -> ModelResponse:
        sent = Converter.items_to_messages(input)
        if system_instructions:
            sent = [{"role": "system", "content": system_instructions}, *sent]
        sent = json.loads(json.dumps(sent, default=str))
        size = count_sent(sent, [Converter.tool_to_openai(tool) for tool in tools])
        self.requests.append((size, sent))
        if self.enforce_window:
            check_request(size)
        human = next(m["content"] for m in reversed(sent) if str(m["content"]).startswith("read"))
        last = input[-1]
        step = next_step(
            human, last["call_id"] if last.get("type") == "function_call_output" else None
        )
        if self.deface_input:
            deface(input)
        usage = Usage(requests=1, input_tokens=size, output_tokens=5, total_tokens=size + 5)
        return ModelResponse(output=self._output(step), usage=usage, response_id=None)

    def _output(self, step: int | None) -> list[Any]:
        if step is None:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            return [
                ResponseOutputMessage(
                    id="msg_done",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        thought = Summary(type="summary_text", text=f"page {step} comes next")
        return [
            ResponseReasoningItem(id=f"rs_{step}", type="reasoning", summary=[thought]),
            ResponseFunctionToolCall(
                type="function_call",
                call_id=call_id(step),
                name="read_page",
                arguments=json.dumps({"page": step}),
                id=f"fc_{step}",
                status="completed",
            ),
        ]

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


@function_tool
def read_page(page: int) -> str:
    """Read one page of the manual."""
    return page_text(page)


def agent_for(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="reader", instructions=SYSTEM_PROMPT, tools=[read_page], model=model)


class Probe:
    """Around contextfold's filter: the fitted input shares nothing with the run's items."""

    def __init__(self, fold: ContextFoldFilter) -> None:
        self.fold = fold
        self.calls = 0

    async def __call__(self, data: Any) -> Any:
        fitted = await self.fold(data)
        if self.calls % 6 == 0:
            assert_nothing_shared(fitted.input, data.model_data.input)
        self.calls += 1
        return fitted


async def run(
    model: ScriptedModel, session: Any, text: str, fold: ContextFoldFilter | None, **kw: Any
) -> Any:
    config = RunConfig(call_model_input_filter=kw.pop("probe", None) or fold)
    hooks = fold.hooks if fold is not None else None
    return await Runner.run(
        agent_for(model), text, session=session, run_config=config, hooks=hooks, max_turns=500
    )


async def test_without_contextfold_the_run_overflows_its_window() -> None:
    with pytest.raises(WindowExceeded):
        await run(ScriptedModel(), SQLiteSession("s"), prompt(0, STEPS - 1), None)


@pytest.mark.slow
async def test_a_sixty_step_run_finishes_inside_the_window_with_its_session_whole() -> None:
    model = ScriptedModel(deface_input=True)
    fold = ContextFoldFilter(ContextFold(max_tokens=WINDOW))
    probe = Probe(fold)
    session = SQLiteSession("s")
    result = await run(model, session, prompt(0, STEPS - 1), fold, probe=probe)

    assert result.final_output == "done"
    assert len(model.requests) == STEPS + 1 == probe.calls
    assert max(size for size, _ in model.requests) <= WINDOW
    for _, sent in model.requests:
        assert_pairs_whole(sent)
    # The session holds every item, as a run with no window stores them.
    reference = SQLiteSession("r")
    await run(ScriptedModel(enforce_window=False), reference, prompt(0, STEPS - 1), None)
    assert await session.get_items() == await reference.get_items()
    assert len(await session.get_items()) == 1 + 3 * STEPS + 1
    assert fold.context.counter.ratios()  # each response's usage reached calibration


@pytest.mark.slow
async def test_a_resumed_session_continues_with_the_same_view(tmp_path: Any) -> None:
    def durable() -> ContextFoldFilter:
        url = f"sqlite:///{tmp_path / 'fold.db'}"
        return ContextFoldFilter(ContextFold(max_tokens=WINDOW, store=url, session_id="s"))

    straight = ScriptedModel()
    fold = ContextFoldFilter(ContextFold(max_tokens=WINDOW))
    session = SQLiteSession("s")
    await run(straight, session, prompt(0, 29), fold)
    before = len(straight.requests)
    await run(straight, session, prompt(30, STEPS - 1), fold)

    stored = tmp_path / "agents.db"
    first = ScriptedModel()
    await run(first, SQLiteSession("s", db_path=stored), prompt(0, 29), durable())
    resumed = ScriptedModel()
    reopened = SQLiteSession("s", db_path=stored)
    await run(resumed, reopened, prompt(30, STEPS - 1), durable())

    assert first.requests == straight.requests[:before]
    assert resumed.requests == straight.requests[before:]
    assert len(await reopened.get_items()) == 2 * (1 + 3 * 30 + 1)


def responses_history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read steps 0-1"},
        {"type": "reasoning", "id": "rs_0", "summary": [{"type": "summary_text", "text": "go"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_0",
            "status": "completed",
            "content": [{"type": "output_text", "text": "reading", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_0",
            "call_id": "call_0",
            "name": "read_page",
            "arguments": '{"page": 0}',
        },
        {"type": "function_call_output", "call_id": "call_0", "output": page_text(0)},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"q": "x"}},
        {"type": "custom_tool_call", "call_id": "call_1", "name": "patch", "input": "diff"},
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "applied"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and now"},
                {"type": "input_image", "image_url": "x"},
            ],
        },
    ]


async def test_items_come_back_as_they_were_and_unshared() -> None:
    items = responses_history()
    mirror = Mirror(ContextFold(), to_messages)
    back = from_view(await mirror.view(items), mirror)
    assert back == items
    assert_nothing_shared(back, items)
    # One turn (reasoning, message, call) is one assistant message answered by its output.
    kinds = [m["role"] for m in to_messages(items)]
    assert kinds == ["user", "assistant", "tool", "assistant", "tool", "user"]


async def test_a_turn_whose_reasoning_is_left_out_is_sent_without_item_ids() -> None:
    items = responses_history()[:5]
    items[4] = {**items[4], "output": " ".join(page_text(n) for n in range(8))}
    items += [
        {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "next"}]},
        {
            "type": "function_call",
            "id": "fc_9",
            "call_id": "c9",
            "name": "read_page",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c9", "output": "x " * 300},
    ]
    mirror = Mirror(ContextFold(max_tokens=2400, protected_tool_results=1), to_messages)
    back = from_view(await mirror.view(items), mirror)
    ids = [item.get("id") for item in back]
    assert "rs_0" not in ids and "msg_0" not in ids and "fc_0" not in ids  # left out: no ids
    assert "rs_9" in ids and "fc_9" in ids  # the newest turn goes back whole
    first_output = next(i for i in back if i.get("call_id") == "call_0" and "output" in i)
    assert len(first_output["output"]) < len(items[4]["output"]) // 4


def test_the_filter_refuses_what_is_not_a_context() -> None:
    with pytest.raises(TypeError, match="takes a ContextFold"):
        ContextFoldFilter({"max_tokens": WINDOW})  # type: ignore[arg-type]
