"""pydantic-ai: a capability that fits every model request.

    fold = ContextFoldCapability.with_settings(max_tokens=100_000)
    agent = Agent(model, tools=[...], capabilities=[fold])

pydantic-ai 2 documents ``prepare_model_request`` as the hook for context-window fitting:
what it sets is the request on the wire, never the run's message history. So the history
(``result.all_messages()``, a conversation store) keeps every message, and each request gets
a fitted copy: a tool call and its return are kept or dropped together, earlier thinking may
be left out, the newest turn's goes back whole. Instructions and tool schemas are counted and
never cut; each response's usage calibrates the count.

Messages convert part by part: a `ModelRequest` gives one message per part (system prompt,
user prompt, each tool return), a `ModelResponse` one assistant message (text and thinking
blocks, tool calls); parts the view leaves unchanged come back as copies of the originals, and
changed ones are the originals with the view's text. Parts with nothing to say to the model
(instruction and tool-availability deltas) ride along with their request's first part.

One `ContextFold` per conversation (``RunContext.conversation_id``), made by
``new_context(conversation_id)``: with a durable store, a run continuing the conversation's
stored history continues with the same view.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        RetryFeedbackPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import RunContext
    from pydantic_core import to_jsonable_python
except ImportError as error:  # the extra is not installed
    raise ImportError(
        f"contextfold.integrations.pydantic_ai needs "
        f"pydantic-ai ({error.name} is missing): "
        f"pip install 'contextfold[pydantic-ai]'"
    ) from error

from ..manager import ContextFold
from ..mirror import DEFAULT_MAX_CONVERSATIONS, REF, Conversations, Mirror, owned

_OPAQUE = "pydantic_ai_part"


def to_messages(items: Sequence[ModelMessage], start: int = 0) -> list[dict[str, Any]]:
    """pydantic-ai messages as contextfold messages, each marked ``[message, part]``."""
    out: list[dict[str, Any]] = []
    for offset, item in enumerate(items):
        index = start + offset
        if isinstance(item, ModelResponse):
            out.append(_response(item, [index, 0]))
            continue
        for number, part in enumerate(item.parts):
            message = _request_part(part)
            if message is not None:
                message["metadata"] = {REF: [index, number]}
                out.append(message)
    return out


def _request_part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        content = part.content
        if isinstance(content, str):
            return {"role": "user", "content": content}
        return {"role": "user", "content": [_user_block(item) for item in content]}
    if isinstance(part, ToolReturnPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": _returned(part)}
    if isinstance(part, RetryFeedbackPart):
        return {"role": "user", "content": part.model_response()}
    return None  # a delta or marker: no content of its own (see the module)


def _returned(part: ToolReturnPart) -> str:
    return part.model_response_str()


def _user_block(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    return {"type": _OPAQUE, "part": to_jsonable_python(item)}


def _response(item: ModelResponse, ref: list[int]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for part in item.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.content})
        elif isinstance(part, ThinkingPart):
            signature = part.signature or ""
            content.append({"type": "thinking", "thinking": part.content, "signature": signature})
        elif isinstance(part, ToolCallPart):
            arguments = part.args_as_json_str()
            function = {"name": part.tool_name, "arguments": arguments}
            calls.append({"id": part.tool_call_id, "type": "function", "function": function})
        else:
            content.append({"type": _OPAQUE, "part": to_jsonable_python(part)})
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = calls
    message["metadata"] = {REF: ref}
    return message


# -- back ------------------------------------------------------------------------------------


def from_view(view: Sequence[Mapping[str, Any]], mirror: Mirror) -> list[ModelMessage]:
    """A view as pydantic-ai messages sharing nothing mutable with the history's."""
    out: list[ModelMessage] = []
    # The parts list of the request being gathered into (the request holds this very list)
    # and the history message it comes from.
    parts: list[ModelRequestPart] | None = None
    source: int | None = None
    admitted_for = mirror.admitted
    items = mirror.items
    for message in view:
        admitted = admitted_for(message)
        if admitted is None:
            made = _made(message, out)
            if parts is None:
                parts, source = [], None
                out.append(ModelRequest(parts=parts))
            parts.append(made)
            continue
        index, number = admitted["metadata"][REF]
        original = items[index]
        same = message.get("content") == admitted.get("content")  # what compaction changes
        if isinstance(original, ModelResponse):
            parts = None
            out.append(_copied_response(original, message, same))
            continue
        part = owned(original.parts[number])
        if not same:
            part = _with_text(part, message.get("content"))
        if parts is None or source != index:
            request = _shell(original)
            parts, source = request.parts, index
            if len(original.parts) > 1:  # a lone part is the one converted
                parts.extend(owned(p) for p in original.parts if not isinstance(p, _CONVERTED))
            out.append(request)
        parts.append(part)
    return out


# Request parts without content of their own (see the module): they ride with their request.
_CONVERTED = (SystemPromptPart, UserPromptPart, ToolReturnPart, RetryFeedbackPart)


def _shell(message: Any) -> Any:
    """A copy of a message without its parts, sharing nothing mutable with it."""
    fields = message.__dict__.copy()
    del fields["parts"]
    for key, value in fields.items():
        if type(value) not in _PLAIN:
            fields[key] = owned(value)
    fields["parts"] = []
    new = object.__new__(type(message))
    new.__dict__.update(fields)
    return new


_PLAIN = frozenset({str, type(None), int, float, bool, datetime.datetime})


def _with_text(part: Any, content: Any) -> Any:
    """``part`` saying what the view says instead (a shortened or cleared result or prompt)."""
    if isinstance(part, ToolReturnPart | SystemPromptPart | RetryFeedbackPart):
        return dataclasses.replace(part, content=_text(content))
    if isinstance(part, UserPromptPart):
        if isinstance(content, str):
            return dataclasses.replace(part, content=content)
        texts = [b.get("text", "") if b.get("type") == "text" else None for b in content or ()]
        olds = part.content if isinstance(part.content, list) else []
        kept = [old if text is None else text for text, old in zip(texts, olds, strict=False)]
        return dataclasses.replace(part, content=kept)
    return part


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return ""


def _copied_response(
    original: ModelResponse, message: Mapping[str, Any], same: bool
) -> ModelResponse:
    response = _shell(original)
    if same:  # the view says what the history does: every part, copied
        response.parts.extend(owned(part) for part in original.parts)
        return response
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    texts = iter(b.get("text", "") for b in blocks if b.get("type") == "text")
    thinking = any(b.get("type") == "thinking" for b in blocks)
    for part in original.parts:
        if isinstance(part, ThinkingPart) and not thinking:
            continue  # an earlier turn's thinking, left out of this view
        new = owned(part)
        if isinstance(part, TextPart):
            new.content = next(texts, part.content)
        response.parts.append(new)
    return response


def _made(message: Mapping[str, Any], before: list[ModelMessage]) -> Any:
    """A message the context wrote (a notice, a summary, a repair) as a request part; a
    result the context wrote names the tool of the call it answers."""
    text = _text(message.get("content"))
    if message.get("role") == "tool":
        call_id = message.get("tool_call_id", "")
        calls = (p for m in reversed(before) for p in m.parts if isinstance(p, ToolCallPart))
        name = next((p.tool_name for p in calls if p.tool_call_id == call_id), "")
        return ToolReturnPart(tool_name=name, content=text, tool_call_id=call_id)
    if message.get("role") in ("system", "developer"):
        return SystemPromptPart(content=text)
    return UserPromptPart(content=text)


@dataclasses.dataclass
class ContextFoldCapability(AbstractCapability[Any]):
    """Fits each model request of a pydantic-ai agent (see the module).

    ``ContextFoldCapability(new_context=None, settings=None)``, or with the settings as
    keywords through `ContextFoldCapability.with_settings`: ``new_context(conversation_id)``
    makes a conversation's `ContextFold`, by default ``ContextFold(**settings)``. The
    ``max_conversations`` most recently used are kept; one let go is made again from its
    messages on its next request (see `contextfold.mirror.Conversations`).
    """

    new_context: Callable[[str], ContextFold] | None = None
    settings: Mapping[str, Any] | None = None
    max_conversations: int = DEFAULT_MAX_CONVERSATIONS
    _conversations: Conversations = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._conversations = Conversations(self._make_context, to_messages, self.max_conversations)

    def _make_context(self, key: str) -> ContextFold:
        if self.new_context is not None:
            return self.new_context(key)
        return ContextFold(**dict(self.settings or {}))

    @classmethod
    def with_settings(cls, **settings: Any) -> ContextFoldCapability:
        """A capability whose conversations each get ``ContextFold(**settings)``."""
        return cls(settings=settings)

    def context(self, conversation_id: str = "default") -> ContextFold:
        """The `ContextFold` of ``conversation_id`` (made on first use)."""
        return self._mirror(conversation_id).context

    def _mirror(self, conversation_id: str | None) -> Mirror:
        return self._conversations.get(conversation_id or "default")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds live contexts: not part of a serialisable agent spec

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        mirror = self._mirror(ctx.conversation_id)
        await self._conversations.close_let_go()
        parameters = request_context.model_request_parameters
        instructions = "\n\n".join(p.content for p in parameters.instruction_parts or ())
        system = [{"role": "system", "content": instructions}] if instructions else []
        tools = [
            {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.parameters_json_schema,
            }
            for t in (*parameters.function_tools, *parameters.output_tools)
        ]
        fixed = mirror.fixed_tokens(system=system, tools=tools)
        model = request_context.model.model_name
        view = await mirror.view(request_context.messages, fixed_tokens=fixed, model=model)
        request_context.messages = from_view(view, mirror)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        mirror = self._mirror(ctx.conversation_id)
        # Keyed by the name the request was fitted under (a response may name a snapshot).
        await mirror.record_usage(response.usage, model=request_context.model.model_name)
        return response
