"""The OpenAI Agents SDK: a ``call_model_input_filter`` and run hooks that fit every call.

    fold = ContextFoldFilter(ContextFold(max_tokens=100_000))
    result = await Runner.run(agent, "...", session=session,
                              run_config=RunConfig(call_model_input_filter=fold), hooks=fold.hooks)

The run's items (and the ``Session``, which the filter never touches) keep the whole
conversation; each model call gets a fitted copy of it. Responses items are grouped as in
`contextfold.formats.openai_responses`: a model turn's reasoning, message and function calls
with the outputs that answer them are kept, dropped and repaired as one group. The agent's
instructions and its function tools' schemas are counted and never cut; the usage of each
response (``on_llm_end``) calibrates the count.

One filter per conversation: give its `ContextFold` a durable store (``store=...,
session_id=session.session_id``) and a run resumed from the same ``Session`` continues with
the same view. Already have run hooks? Call ``await fold.record_usage(response)`` from your own
``on_llm_end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

try:
    from agents import (
        Agent,
        FunctionTool,
        ModelResponse,
        RunContextWrapper,
        RunHooks,
        TResponseInputItem,
    )
    from agents.run_config import CallModelData, ModelInputData
except ImportError as error:  # the extra is not installed
    raise ImportError(
        f"contextfold.integrations.openai_agents needs "
        f"the OpenAI Agents SDK ({error.name} is missing): "
        f"pip install 'contextfold[openai-agents]'"
    ) from error

from ..formats.openai_responses import from_view, to_messages
from ..manager import ContextFold
from ..mirror import Mirror


def tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """The function tools' schemas as the model receives them (hosted tools have none)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.params_json_schema,
            },
        }
        for tool in tools
        if isinstance(tool, FunctionTool)
    ]


class ContextFoldFilter:
    """A ``RunConfig.call_model_input_filter`` fitting each call's input (see the module)."""

    def __init__(self, context: ContextFold) -> None:
        if not isinstance(context, ContextFold):
            raise TypeError(
                f"ContextFoldFilter takes a ContextFold, got {type(context).__name__}; make one "
                "per conversation, e.g. ContextFold(max_tokens=100_000)"
            )
        self.mirror = Mirror(context, to_messages)
        self.hooks = ContextFoldHooks(self)
        self._tools: tuple[list[Any], int] | None = None

    @property
    def context(self) -> ContextFold:
        return self.mirror.context

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        instructions = data.model_data.instructions
        system = [{"role": "system", "content": instructions}] if instructions else []
        fixed = self._tools_cost(data.agent.tools) + self.mirror.fixed_tokens(system=system)
        model = _name(data.agent.model)
        view = await self.mirror.view(data.model_data.input, fixed_tokens=fixed, model=model)
        # The items are copies of the SDK's own or made in its shapes: plain dicts to the
        # framework-free formats module, its input item types here.
        items = cast("list[TResponseInputItem]", from_view(view, self.mirror))
        return ModelInputData(input=items, instructions=instructions)

    def _tools_cost(self, tools: list[Any]) -> int:
        cached = self._tools
        if (
            cached is None
            or len(cached[0]) != len(tools)
            or any(a is not b for a, b in zip(cached[0], tools, strict=True))
        ):
            cost = self.mirror.fixed_tokens(tools=tool_schemas(tools))
            cached = self._tools = (list(tools), cost)
        return cached[1]

    async def record_usage(self, response: ModelResponse, model: str | None = None) -> None:
        """Feed one response's usage to the context's meter."""
        await self.mirror.record_usage(response.usage, model=model)


class ContextFoldHooks(RunHooks[Any]):
    """Run hooks reporting each response's usage to a `ContextFoldFilter`."""

    def __init__(self, fold: ContextFoldFilter) -> None:
        self._fold = fold

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        await self._fold.record_usage(response, _name(agent.model))


def _name(model: Any) -> str | None:
    """An agent's model name: the string it names, or the model object's ``model``."""
    if isinstance(model, str):
        return model or None
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else None
