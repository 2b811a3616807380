"""LangChain v1 / LangGraph: an agent middleware that fits every model call.

    agent = create_agent(model, tools, middleware=[ContextFoldMiddleware(max_tokens=100_000)],
                         checkpointer=InMemorySaver())

The graph's state and its checkpointer keep the whole conversation; each model call gets a
fitted copy of it (``wrap_model_call``/``awrap_model_call``): a tool call and its results are
kept or dropped together, and what compaction takes out is named in a notice and can be
recalled. The system message and the tool schemas are counted and never cut. The usage a
model reports (``AIMessage.usage_metadata``) calibrates the count.

One `ContextFold` per LangGraph thread (``config["configurable"]["thread_id"]``), made by
``new_context(thread_id)``: give it a durable store (``store="sqlite:///agent.db",
session_id=thread_id``) and a run resumed from the checkpointer continues with the same view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
except ImportError as error:  # the extra is not installed
    raise ImportError(
        f"contextfold.integrations.langchain needs "
        f"LangChain and LangGraph ({error.name} is missing): "
        f"pip install 'contextfold[langchain]'"
    ) from error

from ..manager import ContextFold
from ..mirror import (
    DEFAULT_MAX_CONVERSATIONS,
    REF,
    Conversations,
    Mirror,
    owned,
    run_sync,
    tool_arguments,
)
from ..views import detached

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def to_messages(items: Sequence[BaseMessage], start: int = 0) -> list[dict[str, Any]]:
    """LangChain messages as contextfold messages, each marked with its index."""
    messages = []
    for offset, item in enumerate(items):
        role = _ROLES.get(item.type) or getattr(item, "role", None) or "user"
        message: dict[str, Any] = {"role": role, "content": _content(item.content)}
        if isinstance(item, AIMessage) and item.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": tool_arguments(call["args"])},
                }
                for call in item.tool_calls
            ]
        if isinstance(item, ToolMessage):
            message["tool_call_id"] = item.tool_call_id
        message["metadata"] = {REF: [start + offset]}
        messages.append(message)
    return messages


def _content(content: Any) -> Any:
    """LangChain content (text, or a list of blocks and bare strings) as contextfold's."""
    if isinstance(content, list):
        return [{"type": "text", "text": b} if isinstance(b, str) else b for b in content]
    return content


def from_view(view: Sequence[Mapping[str, Any]], mirror: Mirror) -> list[AnyMessage]:
    """A view as LangChain messages: copies of the state's own (with the view's content where
    compaction changed it) sharing nothing mutable with them; the context's own messages as
    new ones."""
    out: list[AnyMessage] = []
    for message in view:
        admitted = mirror.admitted(message)
        if admitted is not None and message["role"] == admitted["role"]:
            copied = owned(mirror.items[admitted["metadata"][REF][0]])
            if message.get("content") != admitted.get("content"):
                copied.__dict__["content"] = detached(message.get("content"))
            out.append(copied)
        else:
            out.append(_made(message))
    return out


def _made(message: Mapping[str, Any]) -> AIMessage | HumanMessage | SystemMessage | ToolMessage:
    """A message the context wrote (a notice, a summary, a repair) as LangChain's type."""
    content = detached(message.get("content")) or ""
    role = message.get("role")
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=message["tool_call_id"], status="error")
    if role in ("system", "developer"):
        return SystemMessage(content=content)
    if role == "assistant":
        return AIMessage(content=content)
    return HumanMessage(content=content)


class ContextFoldMiddleware(AgentMiddleware):
    """Fits each model call of a `create_agent` agent (see the module).

    ``ContextFoldMiddleware(new_context=None, *, max_threads=1000, **settings)``:
    ``new_context(thread_id)`` makes the `ContextFold` of a thread; by default
    ``ContextFold(**settings)`` (``max_tokens``: the input budget of the model's window). The
    ``max_threads`` most recently used threads are kept; one let go is made again from its
    messages on its next call (see `contextfold.mirror.Conversations`).
    """

    def __init__(
        self,
        new_context: Callable[[str], ContextFold] | None = None,
        *,
        max_threads: int = DEFAULT_MAX_CONVERSATIONS,
        **settings: Any,
    ) -> None:
        super().__init__()
        if new_context is not None and settings:
            raise TypeError("pass either new_context or ContextFold settings, not both")
        make = new_context or (lambda _thread: ContextFold(**settings))
        self._threads = Conversations(make, to_messages, max_threads)
        self._tools_cost: tuple[list[Any], int] | None = None

    def context(self, thread_id: str = "default") -> ContextFold:
        """The `ContextFold` of ``thread_id`` (made on first use)."""
        return self._threads.get(thread_id).context

    async def _fitted(self, request: ModelRequest) -> tuple[Mirror, ModelRequest]:
        mirror = self._threads.get(_thread_id())
        await self._threads.close_let_go()
        fixed = self._fixed(mirror, request)
        view = await mirror.view(request.messages, fixed_tokens=fixed, model=_name(request.model))
        return mirror, request.override(messages=from_view(view, mirror))

    def _fixed(self, mirror: Mirror, request: ModelRequest) -> int:
        system = []
        if request.system_message is not None:
            system = [{"role": "system", "content": _content(request.system_message.content)}]
        tools = request.tools
        cached = self._tools_cost
        if (
            cached is None
            or len(cached[0]) != len(tools)
            or any(a is not b for a, b in zip(cached[0], tools, strict=True))
        ):
            schemas = [convert_to_openai_tool(tool) for tool in tools]
            cached = self._tools_cost = (list(tools), mirror.fixed_tokens(tools=schemas))
        return cached[1] + mirror.fixed_tokens(system=system)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        mirror, fitted = await self._fitted(request)
        response = await handler(fitted)
        await _record(mirror, response)
        return response

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> Any:
        mirror, fitted = run_sync(self._fitted(request))
        response = handler(fitted)
        run_sync(_record(mirror, response))
        return response


def _thread_id() -> str:
    """The LangGraph thread of the running call ("default" without a checkpointer)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run
        return "default"
    return str(configurable.get("thread_id", "default"))


def _name(model: Any) -> str | None:
    """The model's name as its provider reports it (``model_name`` on most chat models)."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


async def _record(mirror: Mirror, response: Any) -> None:
    """Feed the usage of the model's answer to the context's meter."""
    response = getattr(response, "model_response", response)  # an ExtendedModelResponse's
    result = response.result if isinstance(response, ModelResponse) else [response]
    for message in result:
        if isinstance(message, AIMessage) and message.usage_metadata:
            # Keyed by the model the request was fitted for (a reply may name a snapshot).
            await mirror.record_usage(message.usage_metadata)
            return
