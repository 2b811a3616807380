"""Where a fact stands in a view: the four categories, checked in this order.

1. **in view**: the value occurs (`facts.occurs`) in a message of the view other than the
   policy's own notice, ledger or summary messages;
2. **ledger or summary**: it occurs in one of those (for contextfold: every message it marks
   ``metadata.source == "context-fold"``, its repair notes excepted: the compaction notice,
   the summary, and any ledger message a later version adds);
3. **recoverable**: the view names the recall id of a message holding the value, written out
   in full (`View.named_ids`: ``r41``, or an end of a range, ``r10`` in ``(r10-r176)``; the
   ids a range only implies, ``r11`` to ``r175``, are not named), or a search with the
   step's own words (the current task's prompt without the value) returns such a message
   among its first five;
4. **lost**: none of these. A refused request (nothing was sent) loses all its facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .facts import Fact, occurs
from .shapes import message_text


class Outcome(StrEnum):
    """A fact's place at one request; the value is its one-letter code in the JSON."""

    IN_VIEW = "V"
    LEDGER_OR_SUMMARY = "L"
    RECALL_ID = "R"  # recoverable: the view names a source's recall id on its own
    SEARCH = "S"  # recoverable: a search with the step's words finds a source
    LOST = "X"
    REFUSED = "F"  # the request was refused: lost, and said why

    @property
    def category(self) -> str:
        """The four categories the tables report (recall id and search are recoverable;
        refused is lost)."""
        return _CATEGORY[self]


_CATEGORY = {
    Outcome.IN_VIEW: "in_view",
    Outcome.LEDGER_OR_SUMMARY: "ledger_or_summary",
    Outcome.RECALL_ID: "recoverable",
    Outcome.SEARCH: "recoverable",
    Outcome.LOST: "lost",
    Outcome.REFUSED: "lost",
}
CATEGORIES = ("in_view", "ledger_or_summary", "recoverable", "lost")


@dataclass(frozen=True)
class View:
    """What a policy sent for one request, with what the scoring needs to know of it.

    ``ledger`` holds the positions (in ``messages``) of the policy's own notice, ledger and
    summary messages; ``named_ids`` the history indices whose recall ids the view names on
    their own (only a policy whose ids can be recalled names any).
    """

    messages: Sequence[Mapping[str, Any]]
    ledger: frozenset[int] = field(default_factory=frozenset)
    named_ids: frozenset[int] = field(default_factory=frozenset)


class TextCache:
    """The searchable text of each message object a run's views hold, made once: views
    share most of their messages with the previous request's."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Mapping[str, Any], str]] = {}

    def text(self, message: Mapping[str, Any]) -> str:
        known = self._texts.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        text = message_text(message)
        self._texts[id(message)] = (message, text)  # the reference keeps the id unique
        return text


def score_fact(fact: Fact, view: View, texts: TextCache) -> Outcome:
    """The outcome of one fact in one view, search aside (see the module for the order):
    a fact this finds lost may still be found by a search (`found_by_search`)."""
    in_ledger = False
    value = fact.value
    for position, message in enumerate(view.messages):
        if not occurs(value, texts.text(message)):
            continue
        if position not in view.ledger:
            return Outcome.IN_VIEW
        in_ledger = True
    if in_ledger:
        return Outcome.LEDGER_OR_SUMMARY
    if view.named_ids and not view.named_ids.isdisjoint(fact.sources):
        return Outcome.RECALL_ID
    return Outcome.LOST


def found_by_search(fact: Fact, hits: Sequence[int]) -> bool:
    """Whether a search's hits (history indices, best first) hold a source of ``fact``."""
    return not fact.sources_set.isdisjoint(hits)


def search_query(task_prompt: str, value: str) -> str:
    """The words a search gets for a fact: the current task's prompt without the value."""
    return " ".join(task_prompt.replace(value, " ").split())
