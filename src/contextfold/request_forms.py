"""A view in each client's request form: what `contextfold.formats` hands an application, and
what a summarizer asking the same provider sends, so that the two agree byte for byte where
they must (a cache-aligned summary request repeats the conversation's cached prompt).

- Chat Completions: contextfold's own shape without its metadata; a turn of calls alone has
  ``content: None``, as OpenAI's own messages carry it.
- Anthropic Messages: the messages without metadata, and the ``system`` prompt apart; a
  message contextfold wrote in the system role (a notice) joins ``system``, the only place
  Anthropic takes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .conventions import SYSTEM_ROLES
from .messages import content_text
from .views import strip_metadata

__all__ = ["AnthropicSystem", "anthropic_messages", "openai_chat_messages"]

# Anthropic's ``system``: the prompt text, a list of text blocks, or none.
AnthropicSystem = str | list[dict[str, Any]] | None


def openai_chat_messages(view: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``view`` as Chat Completions messages (new dicts; the view is untouched)."""
    messages = strip_metadata(view)
    for message in messages:
        if message.get("tool_calls") and message.get("content") == "":
            message["content"] = None
    return messages


def anthropic_messages(
    view: Sequence[Mapping[str, Any]], system: AnthropicSystem = None
) -> tuple[AnthropicSystem, list[dict[str, Any]]]:
    """``view`` as a Messages API request: its ``system`` (``system`` with the view's
    system-role texts joined after it; a copy) and its ``messages``."""
    extra: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in strip_metadata(view):
        if message.get("role") in SYSTEM_ROLES:
            extra.append(content_text(message.get("content"), "\n"))
        else:
            messages.append(message)
    return _joined(system, [text for text in extra if text]), messages


def _joined(system: AnthropicSystem, extra: list[str]) -> AnthropicSystem:
    if not extra:
        return [dict(block) for block in system] if isinstance(system, list) else system
    if system is None or system == "":
        return "\n\n".join(extra)
    if isinstance(system, str):
        return "\n\n".join([system, *extra])
    return [dict(block) for block in system] + [{"type": "text", "text": text} for text in extra]
