"""The two baselines every context manager is measured against.

- **naive drop-oldest**: system messages stay; the oldest units (a tool call with all its
  results, any other message alone) leave the view, whole, until it fits the window by exact
  count. Nothing else is protected, not even the task's prompt. It refuses only when the
  newest unit and the system messages alone do not fit.
- **observation masking**: every tool result but the last ``keep_last`` (default 10) is
  replaced by a short stub, always (as agents that mask observations do, not only under
  pressure); calls and their arguments stay. If the view still does not fit, the oldest
  units leave as with drop-oldest.

Neither keeps anything outside the view, so neither can name a recall id or search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .counts import ExactCounts
from .policy import NoSearch, Refusal
from .scoring import View
from .shapes import answers_calls, is_system, makes_calls

MASK_STUB = "[older tool result omitted]"
DEFAULT_KEEP_LAST = 10  # the observation window agents that mask commonly keep


class _Units:
    """A growing conversation cut into removable units as it arrives (see `shapes.units`),
    with the exact cost of each message's form in the view and of each unit, kept current
    as messages arrive or change form (so a request costs a pass over units, not messages)."""

    def __init__(self, counts: ExactCounts) -> None:
        self.counts = counts
        self.messages: list[dict[str, Any]] = []
        self.forms: list[Mapping[str, Any]] = []  # what the view carries for each message
        self.unit_of: list[int] = []  # unit of each message; -1 for a system message
        self.units: list[list[int]] = []
        self.unit_costs: list[int] = []
        self.system_cost = 0
        self._costs: list[int] = []
        self._open_group = False

    def add(self, message: dict[str, Any]) -> None:
        if not isinstance(message, Mapping):
            raise ValueError(f"a message must be an object, got {type(message).__name__}")
        index = len(self.messages)
        cost = self.counts(message)
        self.messages.append(message)
        self.forms.append(message)
        self._costs.append(cost)
        if is_system(message):
            self.unit_of.append(-1)
            self.system_cost += cost
            self._open_group = False
            return
        if answers_calls(message) and self._open_group:
            self.units[-1].append(index)
            self.unit_costs[-1] += cost
        else:
            self.units.append([index])
            self.unit_costs.append(cost)
            self._open_group = makes_calls(message)
        self.unit_of.append(len(self.units) - 1)

    def replace(self, index: int, form: Mapping[str, Any]) -> None:
        """Carry ``form`` in the view in place of message ``index``."""
        cost = self.counts(form)
        change = cost - self._costs[index]
        self.forms[index] = form
        self._costs[index] = cost
        unit = self.unit_of[index]
        if unit < 0:
            self.system_cost += change
        else:
            self.unit_costs[unit] += change

    def fitted(self, window: int, policy: str) -> list[Mapping[str, Any]]:
        """The forms without the oldest units, until the request fits ``window``."""
        unit_costs = self.unit_costs
        total = self.counts.overhead + self.system_cost + sum(unit_costs)
        drop = 0
        while total > window and drop < len(unit_costs) - 1:
            total -= unit_costs[drop]
            drop += 1
        if total > window:
            raise Refusal(
                f"{policy}: the newest message group and the system messages need {total:,} "
                f"tokens, over the {window:,}-token window"
            )
        if drop == 0:
            return list(self.forms)
        start = self.units[drop][0]
        head = [
            form for form, unit in zip(self.forms[:start], self.unit_of, strict=False) if unit < 0
        ]
        return head + self.forms[start:]


@dataclass(frozen=True)
class NaiveDropOldest:
    """Drop the oldest whole units until the view fits (see the module)."""

    key: ClassVar[str] = "naive"
    label: ClassVar[str] = "naive drop-oldest"

    def start(self, window: int, counts: ExactCounts) -> _NaiveSession:
        return _NaiveSession(window, counts)


class _NaiveSession(NoSearch):
    def __init__(self, window: int, counts: ExactCounts) -> None:
        self._window = window
        self._units = _Units(counts)

    async def add(self, message: dict[str, Any]) -> None:
        self._units.add(message)

    async def request(self) -> View:
        return View(self._units.fitted(self._window, "naive"))


@dataclass(frozen=True)
class ObservationMasking:
    """Mask all but the last ``keep_last`` tool results; then drop oldest (see the module)."""

    keep_last: int = DEFAULT_KEEP_LAST
    stub: str = MASK_STUB

    key: ClassVar[str] = "masking"
    label: ClassVar[str] = "observation masking"

    def __post_init__(self) -> None:
        if isinstance(self.keep_last, bool) or not isinstance(self.keep_last, int):
            raise ValueError(f"keep_last must be a whole number, got {self.keep_last!r}")
        if self.keep_last < 0:
            raise ValueError(f"keep_last must be 0 or more, got {self.keep_last}")

    def start(self, window: int, counts: ExactCounts) -> _MaskingSession:
        return _MaskingSession(self, window, counts)


class _MaskingSession(NoSearch):
    def __init__(self, policy: ObservationMasking, window: int, counts: ExactCounts) -> None:
        self._policy = policy
        self._window = window
        self._units = _Units(counts)
        self._results: list[int] = []  # indices of tool results, in order
        self._masked = 0  # how many of them (the oldest) are masked

    async def add(self, message: dict[str, Any]) -> None:
        self._units.add(message)
        if answers_calls(message):
            self._results.append(len(self._units.messages) - 1)

    async def request(self) -> View:
        units = self._units
        # Each result is masked once, when it falls out of the last keep_last: the masked
        # form is one object from then on, shared by every later view.
        older = max(0, len(self._results) - self._policy.keep_last)
        for index in self._results[self._masked : older]:
            units.replace(index, masked_result(units.messages[index], self._policy.stub))
        self._masked = max(self._masked, older)
        return View(units.fitted(self._window, "masking"))


def masked_result(message: Mapping[str, Any], stub: str) -> Mapping[str, Any]:
    """A tool result with its output replaced by ``stub`` (its call id and shape kept)."""
    content = message.get("content")
    if isinstance(content, list) and message.get("role") == "user":
        blocks = [
            {**block, "content": stub}
            if isinstance(block, Mapping) and block.get("type") == "tool_result"
            else block
            for block in content
        ]
        return {**message, "content": blocks}
    if isinstance(content, str) and len(content) <= len(stub):
        return message
    return {**message, "content": stub}
