"""Amplifier integration: ``mount()`` for the ``context-fold`` context module.

The orchestrator, scripted provider and document tool that let a whole session run
offline live beside it (``orchestrator``, ``scripted_provider``, ``doc_tool``); they are
imported only by their own entry points.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
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
# The llm:response meter is registered as the reference module registers its own: named
# "<module id>-meter", at priority 50 (lower runs first).
METER_HOOK_NAME = f"{MODULE_ID}-meter"
METER_PRIORITY = 50


async def mount(
    coordinator: Any, config: dict[str, Any] | None = None
) -> Callable[[], Awaitable[None]]:
    """Mount contextfold at the ``context`` mount point; returns an async cleanup callable.

    A bad config key or value raises `ConfigError` here, at mount, not mid-session. Works
    with the kernel's coordinator and with any object that has ``mount(point, module)``
    and, optionally, ``hooks`` (``register``; ``emit`` for our events) and
    ``register_capability``.
    """
    hooks = getattr(coordinator, "hooks", None)
    emit = getattr(hooks, "emit", None)
    context = ContextFold(config or {}, on_event=emit if callable(emit) else None)
    await _mount_context(coordinator, context)

    unregister: list[Callable[[], Any]] = []
    register = getattr(hooks, "register", None)
    if callable(register):

        async def on_llm_response(event: str, data: dict[str, Any]) -> Any:
            try:
                await context.on_llm_response(data)
            except Exception:  # the meter is observability: it never breaks a session
                logger.warning("context-fold: could not read llm:response usage", exc_info=True)
            return _continue()

        undo = register(
            "llm:response", on_llm_response, priority=METER_PRIORITY, name=METER_HOOK_NAME
        )
        if callable(undo):
            unregister.append(undo)
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

    async def cleanup() -> None:
        for undo in unregister:
            try:
                result = undo()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.debug("context-fold: unregister failed", exc_info=True)
        unregister.clear()

    return cleanup


async def _mount_context(coordinator: Any, context: ContextFold) -> None:
    """``coordinator.mount("context", context, name=...)``, or without ``name`` for a
    coordinator whose ``mount`` does not take it (the reference module's test doubles)."""
    try:
        result = coordinator.mount("context", context, name=MODULE_ID)
    except TypeError as error:
        # Only the missing keyword is ours to work around; any other TypeError is a real
        # fault of the coordinator and must surface.
        if "unexpected keyword argument 'name'" not in str(error):
            raise
        result = coordinator.mount("context", context)
    if inspect.isawaitable(result):
        await result


def _continue() -> Any:
    """The hook result that lets an event go on: amplifier-core's, or None without it."""
    try:
        from amplifier_core.models import HookResult
    except ImportError:  # a host's own coordinator without the kernel installed
        return None
    return HookResult(action="continue")


__all__ = ["METER_HOOK_NAME", "METER_PRIORITY", "MODULE_ID", "REQUEST_RETENTION", "mount"]
