"""Anthropic Messages: ``messages`` with ``tool_use``/``tool_result`` and signed thinking
blocks, the ``system`` prompt apart.

    view = await anthropic.view_for(context, messages, system=SYSTEM, tools=tools)
    response = client.messages.create(model=..., max_tokens=1024, tools=tools, **view.request())
    await anthropic.record_usage(context, response.usage)
    messages.append({"role": "assistant", "content": response.content})

contextfold keeps these blocks natively: thinking goes back whole or not at all, and the newest
tool turn's signed thinking is never touched. The system prompt and the tool schemas ride on
every request: they are counted and the conversation is fitted to what they leave. A message
contextfold writes in the system role (a notice, when ``compaction_notice_role`` is
``system``) joins the ``system`` prompt, which is the only place Anthropic takes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..mirror import Mirror, mirror_for
from ..request_forms import AnthropicSystem, anthropic_messages

if TYPE_CHECKING:
    from ..manager import ContextFold

SHAPE = "anthropic"

System = AnthropicSystem


@dataclass(frozen=True, slots=True)
class AnthropicView:
    """A fitted request: its ``system`` prompt (None when there is none) and ``messages``."""

    system: System
    messages: list[dict[str, Any]]

    def request(self) -> dict[str, Any]:
        """``messages`` and, when there is one, ``system``: keyword arguments for
        ``client.messages.create``."""
        if self.system is None:
            return {"messages": self.messages}
        return {"system": self.system, "messages": self.messages}


def to_messages(messages: Sequence[Any], start: int = 0) -> list[dict[str, Any]]:
    """Messages API messages as contextfold messages: the same shape (admission copies them
    and turns the SDK's typed blocks into their JSON form)."""
    return [dict(message) for message in messages]


def from_view(view: Sequence[Mapping[str, Any]], system: System = None) -> AnthropicView:
    """A view as a Messages API request: metadata left out, system-role text joined to
    ``system``."""
    return AnthropicView(*anthropic_messages(view, system))


def _system_message(system: System) -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    return [{"role": "system", "content": system}]


def _mirror(context: ContextFold) -> Mirror:
    return mirror_for(context, SHAPE, to_messages)


async def view_for(
    context: ContextFold,
    messages: Sequence[Any],
    *,
    system: System = None,
    tools: Sequence[Mapping[str, Any]] = (),
) -> AnthropicView:
    """The fitted request for ``messages`` under ``system`` and ``tools`` (both counted,
    never cut)."""
    if system is not None and not isinstance(system, str | list):
        raise TypeError(
            f"system must be the prompt text or a list of text blocks, got {type(system).__name__}"
        )
    mirror = _mirror(context)
    fixed = mirror.fixed_tokens(system=_system_message(system), tools=tools)
    view = await mirror.view(messages, fixed_tokens=fixed)
    return from_view(view, system)


async def record_usage(context: ContextFold, usage: Any, *, model: str | None = None) -> None:
    """Teach the context what the provider billed for the last request (``response.usage``:
    cache reads and writes are added to ``input_tokens``, as Anthropic bills them)."""
    await _mirror(context).record_usage(usage, model=model)
