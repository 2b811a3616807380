"""Amplifier hook module ``hooks-context-inject``: a hook that injects context, offline.

Real sessions carry hooks that return ``inject_context`` after tools run (linters, reminders,
status lines). Amplifier's kernel stores such an injection the moment the hook returns, which
can put it between an assistant's tool calls and their results. This module reproduces that
traffic deterministically so a context manager can be tested against it.

Config (all validated at mount):

* ``events`` (``["tool:post"]``): the events the hook answers.
* ``role`` (``"system"``, the kernel's default): ``system``, ``user`` or ``assistant``.
* ``chars`` (200): size of each note in characters.
* ``every`` (1): inject on every N-th matching event only (1 = every one).

Notes are a pure function of their sequence number, so sessions replay byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from amplifier_core.models import HookResult

MODULE_ID = "hooks-context-inject"
Role = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")
MIN_CHARS = 20
MAX_CHARS = 100_000
_KNOWN_KEYS = frozenset({"events", "role", "chars", "every"})
_FILLER = (
    "Reminder: keep answers grounded in the documents already retrieved, cite the topic each "
    "fact came from, and prefer the newest figure when two sources disagree. "
)


@dataclass(frozen=True)
class InjectConfig:
    """Validated configuration of ``hooks-context-inject``."""

    events: tuple[str, ...] = ("tool:post",)
    role: Role = "system"
    chars: int = 200
    every: int = 1

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> InjectConfig:
        config = dict(config or {})
        unknown = sorted(set(config) - _KNOWN_KEYS)
        if unknown:
            raise ValueError(
                f"{MODULE_ID}: unknown config keys {unknown}; known: {sorted(_KNOWN_KEYS)}"
            )
        events = config.get("events", list(cls.events))
        if (
            not isinstance(events, list | tuple)
            or not events
            or not all(isinstance(e, str) and e for e in events)
        ):
            raise ValueError(
                f"{MODULE_ID}: 'events' must be a non-empty list of event names, got {events!r}"
            )
        role = config.get("role", cls.role)
        if role not in ROLES:
            raise ValueError(f"{MODULE_ID}: 'role' must be one of {list(ROLES)}, got {role!r}")
        chars = config.get("chars", cls.chars)
        if (
            isinstance(chars, bool)
            or not isinstance(chars, int)
            or not MIN_CHARS <= chars <= MAX_CHARS
        ):
            raise ValueError(
                f"{MODULE_ID}: 'chars' must be an integer in [{MIN_CHARS}, {MAX_CHARS}], "
                f"got {chars!r}"
            )
        every = config.get("every", cls.every)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"{MODULE_ID}: 'every' must be an integer >= 1, got {every!r}")
        return cls(events=tuple(dict.fromkeys(events)), role=role, chars=chars, every=every)


def note_text(serial: int, chars: int) -> str:
    """The ``serial``-th note, exactly ``chars`` characters long."""
    head = f"[note {serial}] "
    body = _FILLER * (chars // len(_FILLER) + 1)
    return (head + body)[:chars]


class ContextInjector:
    """The hook handler: counts matching events and injects a note on every N-th one."""

    def __init__(self, config: InjectConfig | Mapping[str, Any] | None = None) -> None:
        self.config = (
            config if isinstance(config, InjectConfig) else InjectConfig.from_mapping(config)
        )
        self.seen = 0
        self.injected = 0

    async def __call__(self, event: str, data: dict[str, Any]) -> HookResult:
        self.seen += 1
        if self.seen % self.config.every:
            return HookResult(action="continue")
        self.injected += 1
        return HookResult(
            action="inject_context",
            context_injection=note_text(self.injected, self.config.chars),
            context_injection_role=self.config.role,
        )


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> Callable[[], None]:
    """Register the injector on its events; returns a cleanup callable that unregisters it."""
    injector = ContextInjector(InjectConfig.from_mapping(config))
    unregister = [
        coordinator.hooks.register(event, injector, priority=50, name=MODULE_ID)
        for event in injector.config.events
    ]

    def cleanup() -> None:
        for undo in unregister:
            undo()
        unregister.clear()

    return cleanup


__all__ = ["MODULE_ID", "ContextInjector", "InjectConfig", "mount", "note_text"]
