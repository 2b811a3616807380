"""What the framework adapters cost per model call, beside what the framework itself costs.

For each framework (LangChain v1 ``create_agent`` on LangGraph with its in-memory
checkpointer; the OpenAI Agents SDK's ``Runner`` with an in-memory ``SQLiteSession``;
pydantic-ai's ``Agent`` with a ``FunctionModel``), a conversation of ``--messages`` messages
(tool-call turns with their results) is already stored, and each call adds one turn:

- *framework*: one run of the agent that makes one model call, answered at once by a model
  that does nothing (the framework's own per-call overhead at that size: state, session or
  history handling, its message mapping, checkpointing), with no adapter;
- *conversion*: the adapter's own work on the same call: recognising the known messages,
  converting the new ones to contextfold's, and converting the view back to the framework's
  types (copies sharing nothing with its state). The window is large enough for the whole
  conversation, so the view (and the conversion back) is as large as it gets;
- *context*: contextfold's request path on the same call (admission of the new messages and
  the view), for reference.

The best of ``--reps`` calls each, framework and adapter calls interleaved (the machine is
shared: both meet the same load, and the best is the least disturbed), all in one run; the
figure that matters is the ratio conversion / framework (goal: under 20 %).

Run::

    uv run python bench/bench_adapters.py
    uv run python bench/bench_adapters.py --messages 1000 --reps 15 --json bench/out/adapters.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from contextfold import ContextFold
from contextfold.mirror import Mirror

PAGE = "the quick brown fox jumps over the lazy dog. " * 8
BIG = 50_000_000  # a window the whole conversation fits in


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


class AdapterCall:
    """The adapter's work on one call, the history growing by one turn a call."""

    def __init__(
        self,
        history: list[Any],
        turn: Callable[[int], list[Any]],
        to_messages: Callable[..., Any],
        from_view: Callable[[Any, Mirror], Any],
    ) -> None:
        self.history, self.turn, self.from_view = history, turn, from_view
        self.mirror = Mirror(ContextFold(max_tokens=BIG), to_messages)
        self.to_messages = to_messages
        self.calls = 0

    async def start(self) -> None:
        await self.mirror.view(self.history)

    async def __call__(self) -> tuple[float, float]:
        """(conversion, context) seconds of one call."""
        mirror = self.mirror
        self.calls += 1
        self.history = history = [*self.history, *self.turn(100_000 + self.calls)]
        known = len(mirror.items)
        start = time.perf_counter()
        assert all(a is b or a == b for a, b in zip(history, mirror.items, strict=False))
        new = self.to_messages(history[known:], known)
        converting = time.perf_counter() - start
        start = time.perf_counter()
        for message in new:
            await mirror.context.add_message(message)
        view = await mirror.context.get_messages_for_request(token_budget=BIG)
        context = time.perf_counter() - start
        mirror.items.extend(history[known:])
        for message in new:  # what the mirror records beside admitting them
            mirror._admitted[tuple(message["metadata"]["framework_ref"])] = message
        start = time.perf_counter()
        self.from_view(view, mirror)
        return converting + time.perf_counter() - start, context


async def measure(
    framework_call: Callable[[], Awaitable[Any]], adapter: AdapterCall, reps: int
) -> dict[str, float]:
    """The best of ``reps`` calls of each, interleaved so both meet the same machine load;
    the collector paused while timing."""
    await adapter.start()
    await framework_call()  # warm
    frameworks, conversions, contexts = [], [], []
    for _ in range(reps):
        gc.collect()
        gc.disable()
        frameworks.append(await timed(framework_call))
        conversion, context = await adapter()
        gc.enable()
        conversions.append(conversion)
        contexts.append(context)
    return {"framework": min(frameworks), "conversion": min(conversions), "context": min(contexts)}


# -- LangChain ---------------------------------------------------------------------------------


async def bench_langchain(messages: int, reps: int) -> dict[str, float]:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.checkpoint.memory import InMemorySaver

    from contextfold.integrations.langchain import from_view, to_messages

    class Answers(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "answers"

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> ChatResult:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])

    def turn(n: int) -> list[Any]:
        call = {"name": "read", "args": {"page": n}, "id": f"c{n}"}
        return [AIMessage("", tool_calls=[call]), ToolMessage(PAGE, tool_call_id=f"c{n}")]

    history: list[Any] = [HumanMessage("read")]
    while len(history) < messages:
        history += turn(len(history))
    agent = create_agent(Answers(), [], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "b"}}
    await agent.ainvoke({"messages": history}, config)
    adapter = AdapterCall(history, turn, to_messages, from_view)
    return await measure(
        lambda: agent.ainvoke({"messages": [HumanMessage("next")]}, config), adapter, reps
    )


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


async def bench_openai_agents(messages: int, reps: int) -> dict[str, float]:
    from agents import (
        Agent,
        Model,
        ModelResponse,
        Runner,
        SQLiteSession,
        Usage,
        set_tracing_disabled,
    )
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    from contextfold.formats.openai_responses import from_view, to_messages

    set_tracing_disabled(True)

    class Answers(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            text = ResponseOutputText(type="output_text", text="ok", annotations=[])
            message = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(requests=1), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    def turn(n: int) -> list[dict[str, Any]]:
        return [
            {"type": "function_call", "call_id": f"c{n}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{n}", "output": PAGE},
        ]

    history: list[Any] = [{"role": "user", "content": "read"}]
    while len(history) < messages:
        history += turn(len(history))
    session = SQLiteSession("b")
    await session.add_items(history)
    agent = Agent(name="b", model=Answers())
    adapter = AdapterCall(history, turn, to_messages, from_view)
    return await measure(lambda: Runner.run(agent, "next", session=session), adapter, reps)


# -- pydantic-ai ---------------------------------------------------------------------------------


async def bench_pydantic_ai(messages: int, reps: int) -> dict[str, float]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import FunctionModel

    from contextfold.integrations.pydantic_ai import from_view, to_messages

    def turn(n: int) -> list[Any]:
        return [
            ModelResponse(parts=[ToolCallPart("read", {"page": n}, f"c{n}")]),
            ModelRequest(parts=[ToolReturnPart("read", PAGE, f"c{n}")]),
        ]

    history: list[Any] = [ModelRequest(parts=[UserPromptPart("read")])]
    while len(history) < messages:
        history += turn(len(history))
    # The history ends with a request the run continues: end it with an answer instead.
    history.append(ModelResponse(parts=[TextPart("ok")]))
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("ok")])))
    adapter = AdapterCall(history, turn, to_messages, from_view)
    return await measure(lambda: agent.run("next", message_history=history), adapter, reps)


FRAMEWORKS = {
    "langchain": bench_langchain,
    "openai-agents": bench_openai_agents,
    "pydantic-ai": bench_pydantic_ai,
}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = {}
    print(f"per model call at {args.messages:,} messages, best of {args.reps}")
    print(
        f"{'framework':<15}{'framework ms':>14}{'conversion ms':>15}{'ratio':>8}{'context ms':>12}"
    )
    for name, bench in FRAMEWORKS.items():
        row = await bench(args.messages, args.reps)
        row["ratio"] = row["conversion"] / row["framework"]
        rows[name] = row
        print(
            f"{name:<15}{row['framework'] * 1e3:>14.2f}{row['conversion'] * 1e3:>15.2f}"
            f"{row['ratio']:>8.1%}{row['context'] * 1e3:>12.2f}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"messages": args.messages, "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
