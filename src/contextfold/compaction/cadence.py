"""How often passes come, and how deep the next one goes so they do not come every request.

A pass compacts toward ``target_usage`` and stops there, which leaves room for the view to
grow until the trigger fires again. In a small window that room can be less than one or two
requests' worth: an 8,000-token window with tool results of 1,300 tokens compacted on
nearly every request, rewriting the prompt prefix each time (no prompt cache hits, a notice
that changes every turn). So the next pass's target follows the growth seen since the last
pass: it leaves room for at least `MIN_REQUESTS_BETWEEN_PASSES` requests of that growth
under the trigger, as far as protection lets it go. Where the configured target already
leaves that room (any window large beside what a request adds) nothing changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A pass leaves room under the trigger for at least this many requests of the growth seen.
MIN_REQUESTS_BETWEEN_PASSES = 4


@dataclass(slots=True)
class Cadence:
    """The view's size after the last committed pass and the requests delivered since."""

    after: int | None = None  # tokens of the view's messages when the last pass committed
    requests: int = 0  # requests since then, this one included once it is planned

    def waited(self) -> None:
        """A request went out without a pass."""
        self.requests += 1

    def passed(self, after: int) -> None:
        """A pass was committed, leaving the view's messages at ``after`` tokens."""
        self.after, self.requests = after, 0

    def target(self, size: int, trigger: int, target: int) -> int:
        """The target for a pass of a view of ``size`` tokens now: the configured ``target``,
        or lower where it would leave less room under ``trigger`` than
        `MIN_REQUESTS_BETWEEN_PASSES` requests of the growth per request since the last pass."""
        if self.after is None:
            return target
        growth = max(0, size - self.after) / (self.requests + 1)
        room_needed = math.ceil(MIN_REQUESTS_BETWEEN_PASSES * growth)
        return max(0, min(target, trigger - room_needed))
