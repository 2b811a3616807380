"""The one small protocol every token counter speaks.

The manager counts each message exactly once, when it is admitted, and keeps the
integer. Counters therefore return *raw* counts; a calibrated counter applies its
learned per-model ratio to totals (one multiplication per request), never per message.

A request costs more than its messages: the provider primes the reply
(``<|start|>assistant<|message|>``, 3 tokens in OpenAI's accounting) once per request.
Counters say how much as ``request_overhead``, so a budget check of a whole request is
``sum(count_message) + count_tools(tools) + request_overhead``, scaled as one total.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of chat messages (OpenAI/Amplifier or Anthropic shapes)."""

    @property
    def name(self) -> str:
        """Short identifier shown in reports, e.g. ``heuristic`` or ``exact:o200k_base``."""
        ...

    @property
    def request_overhead(self) -> int:
        """RAW tokens every request costs besides its messages and tools (reply priming)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a bare string (no message framing)."""
        ...

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens one message costs inside a request, framing included."""
        ...

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens the tool schemas of a request cost."""
        ...
