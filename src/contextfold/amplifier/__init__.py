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

from contextfold.amplifier.summarizer import mounted_summarizer
from contextfold.config import ContextConfig
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
# The negotiated provider-count path (token_meter: actual only, as in the reference):
# ``await capability(provider=..., retain_contents=..., count_view=..., fit_output=...)``.
MEASURED_REQUEST_VIEW = "context.measured_request_view"


class RequestRetention(dict[str, Any]):
    """The ``context.request_retention`` capability: callable as the reference module's
    (``await capability(retain_contents=[...], provider=..., hard_fit=...)`` returns the
    view, through ``get_messages_for_request_retaining``), and readable as a spec of what
    ``get_messages_for_request`` accepts (``required_reminders``, ``hard_fit``)."""

    def __init__(self, context: ContextFold) -> None:
        super().__init__(REQUEST_RETENTION_SPEC)
        self._context = context

    async def __call__(self, **kwargs: Any) -> list[dict[str, Any]]:
        return await self._context.get_messages_for_request_retaining(**kwargs)


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
    settings = dict(config or {})
    # The summarize rung's summarizer is a provider of this session (see `summarizer`).
    summarizer_spec = settings.pop("summarizer", None)
    # A durable session: the store URL from the config, the session id from the kernel.
    store = settings.pop("store", None)
    session_id = settings.pop("session_id", None) or getattr(coordinator, "session_id", None)
    resolved = ContextConfig.resolve(settings)
    wants_summary = any(getattr(rung, "name", None) == "summarize" for rung in resolved.ladder)
    summarizer = (
        mounted_summarizer(coordinator, summarizer_spec)
        if wants_summary or summarizer_spec is not None
        else None
    )
    context = ContextFold(
        resolved,
        on_event=_event_callback(hooks),
        summarizer=summarizer,
        store=store,
        session_id=session_id if store is not None else None,
    )
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
            register_capability(REQUEST_RETENTION, RequestRetention(context))
        except Exception:
            logger.debug("context-fold: could not register %s", REQUEST_RETENTION, exc_info=True)
        if context.config.token_meter == "actual":
            try:
                register_capability(MEASURED_REQUEST_VIEW, context.get_measured_request_view)
            except Exception:
                logger.debug(
                    "context-fold: could not register %s", MEASURED_REQUEST_VIEW, exc_info=True
                )
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
        # The store this mount opened from its ``store`` URL: released with the session.
        await context.aclose()

    return cleanup


def _event_callback(hooks: Any) -> Callable[[str, dict[str, Any]], Awaitable[Any]] | None:
    """Our events go to the host's ``hooks.emit``, skipped when no handler listens.

    One emit through the kernel's hook registry costs about 0.1 ms even with no handler
    (a round trip to the Rust engine's own thread), several times a whole steady request;
    asking the registry whether the event has a handler costs about 0.2 µs. The kernel's
    registry matches handlers by exact event name, so an event with none reaches nobody.
    """
    emit = getattr(hooks, "emit", None)
    if not callable(emit):
        return None
    list_handlers = getattr(hooks, "list_handlers", None)
    if not callable(list_handlers):
        return emit  # a host registry we cannot ask: always emit

    async def emit_if_heard(event: str, data: dict[str, Any]) -> Any:
        try:
            heard = bool(list_handlers(event).get(event))
        except Exception:  # a registry with another list_handlers: do not guess, emit
            heard = True
        return await emit(event, data) if heard else None

    return emit_if_heard


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
