"""What a policy is to the eval: something that takes messages one at a time and, at each
model request, sends a view of them (or refuses).

A policy is a small object with a ``key`` (what ``--policy`` names), a ``label`` (what the
tables show) and ``start(window, counts)``, which opens a session of it for one recorded
conversation in a window of ``window`` input tokens. The session is told every message in
order (``add``), asked for a view before every assistant message (``request``), and may
offer a search (``search``; None when it has none). Adding a policy is one class with these
three methods and one line in `policies.BUILTIN_POLICIES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .counts import ExactCounts
from .scoring import View


class Refusal(Exception):
    """The policy sends nothing for this request (what it must keep cannot fit)."""


@runtime_checkable
class PolicySession(Protocol):
    """One policy replaying one conversation in one window."""

    @property
    def offers_search(self) -> bool:
        """Whether `search` can answer (the tables say "search: n/a" otherwise)."""
        ...

    async def add(self, message: dict[str, Any]) -> None:
        """Take the next message of the conversation (raise ValueError to refuse it)."""
        ...

    async def request(self) -> View:
        """The view sent for the next model request; `Refusal` when nothing can be sent."""
        ...

    async def search(self, query: str, limit: int) -> list[int] | None:
        """History indices of the best matches for ``query``, best first; None when the
        policy has no search."""
        ...


@runtime_checkable
class Policy(Protocol):
    """A way of fitting a conversation into a window."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...

    def start(self, window: int, counts: ExactCounts) -> PolicySession:
        """A fresh session in a window of ``window`` input tokens; ``counts`` is the exact
        o200k ruler every view is measured with (a baseline may fit by it)."""
        ...


class NoSearch:
    """A session without search (every baseline)."""

    offers_search = False

    async def search(self, query: str, limit: int) -> list[int] | None:
        return None


def metadata_of(message: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = message.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}
