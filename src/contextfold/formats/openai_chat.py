"""OpenAI Chat Completions ``messages``: contextfold's own shape, fitted as they are.

    view = await openai_chat.view_for(context, messages, tools=tools)
    response = client.chat.completions.create(model=..., messages=view, tools=tools)
    await openai_chat.record_usage(context, response.usage)
    messages.append(response.choices[0].message.model_dump(exclude_none=True))

``messages`` is the caller's whole conversation (the system message included), kept and grown
by the caller; only what was appended since the last call is admitted. Edit the list in any
other way and the context's history is replaced by it (its compaction starts afresh).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..mirror import Mirror, mirror_for
from ..request_forms import openai_chat_messages

if TYPE_CHECKING:
    from ..manager import ContextFold

SHAPE = "openai_chat"


def to_messages(messages: Sequence[Mapping[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """Chat Completions messages as contextfold messages: the same dicts (admission copies)."""
    return [dict(message) for message in messages]


def from_view(view: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A view as Chat Completions messages: contextfold's metadata left out, and a turn of
    calls alone with ``content: None`` as OpenAI's own messages carry it."""
    return openai_chat_messages(view)


def _mirror(context: ContextFold) -> Mirror:
    return mirror_for(context, SHAPE, to_messages)


async def view_for(
    context: ContextFold,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The fitted ``messages`` for the next request with ``tools`` (counted, never cut)."""
    mirror = _mirror(context)
    view = await mirror.view(messages, fixed_tokens=mirror.fixed_tokens(tools=tools))
    return from_view(view)


async def record_usage(context: ContextFold, usage: Any, *, model: str | None = None) -> None:
    """Teach the context what the provider billed for the last request (``response.usage``)."""
    await _mirror(context).record_usage(usage, model=model)
