"""Amplifier integration: ``mount()`` for the ``context-fold`` context module.

The orchestrator, scripted provider and document tool that let a whole session run
offline live beside it (``orchestrator``, ``scripted_provider``, ``doc_tool``); they are
imported only by their own entry points.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from contextfold.events import ALL_EVENTS
from contextfold.manager import ContextFold

logger = logging.getLogger(__name__)

MODULE_ID = "context-fold"
# The contract's optional capability: orchestrators that see it may pass
# required_reminders=[...] (persisted reminder bodies that must reach the model complete)
# and hard_fit=True (a provider-directed forced refit) to get_messages_for_request.
REQUEST_RETENTION = "context.request_retention"
REQUEST_RETENTION_SPEC = {"required_reminders": True, "hard_fit": True, "module": MODULE_ID}
METER_PRIORITY = 90  # observe usage late, after hooks that might adjust the payload


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Callable[[], None]:
    """Mount contextfold at the ``context`` mount point; returns a cleanup callable.

    A bad config key or value raises `ConfigError` here, at mount, not mid-session.
    """
    hooks = getattr(coordinator, "hooks", None)
    context = ContextFold(config or {}, on_event=hooks.emit if hooks is not None else None)
    await coordinator.mount("context", context, name=MODULE_ID)

    unregister: list[Callable[[], Any]] = []
    if hooks is not None:

        async def on_llm_response(event: str, data: dict[str, Any]) -> Any:
            from amplifier_core.models import HookResult

            try:
                await context.on_llm_response(data)
            except Exception:  # the meter is observability: it never breaks a session
                logger.warning("context-fold: could not read llm:response usage", exc_info=True)
            return HookResult(action="continue")

        unregister.append(
            hooks.register(
                "llm:response", on_llm_response, priority=METER_PRIORITY, name="context-fold-meter"
            )
        )
    register_capability = getattr(coordinator, "register_capability", None)
    if callable(register_capability):
        try:
            register_capability(REQUEST_RETENTION, dict(REQUEST_RETENTION_SPEC))
        except Exception:
            logger.debug("context-fold: could not register %s", REQUEST_RETENTION, exc_info=True)
    register_contributor = getattr(coordinator, "register_contributor", None)
    if callable(register_contributor):
        try:
            register_contributor("observability.events", MODULE_ID, lambda: list(ALL_EVENTS))
        except Exception:
            logger.debug("context-fold: could not register observability events", exc_info=True)

    def cleanup() -> None:
        for undo in unregister:
            try:
                undo()
            except Exception:
                logger.debug("context-fold: unregister failed", exc_info=True)
        unregister.clear()

    return cleanup


__all__ = ["MODULE_ID", "REQUEST_RETENTION", "mount"]
