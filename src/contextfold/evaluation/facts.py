"""The facts each step of a recorded session needs, by one rule that works on any session.

The rule (docs/eval.md states it in the same words):

1. A *step* is an assistant message with something before it. The model request made just
   before it (the view of everything admitted so far) is the request the step is scored at.
2. Candidate values come from the step itself:
   - every argument of its tool calls, at any depth: a string taken whole when it reads
     as one identifier (`whole_value`); a number when it has at least four digits, or three
     and a decimal point (``48213``, ``1284.5``; a float is also tried with two decimals,
     ``1284.50``, as amounts are written);
   - inside every argument string and the step's own text (not its thinking): the
     identifier-like spans of `PATTERNS` (URLs, emails, paths, dates, amounts, ids and
     codes, quoted names).
   The values and the patterns are `contextfold.identifiers`, which the identifier ledger
   reads messages with too.
   Values shorter than three characters are never facts.
3. A candidate is a *fact* when it occurs in a message before the step (not a system
   message) and in no system message before the step. "Occurs" means as a whole: the
   characters on either side are not letters or digits (``ORD-4821`` does not occur in
   ``ORD-48213``). A message's text is everything a model reads in it (`shapes.text_leaves`).
4. Its *sources* are the earlier non-system messages it occurs in. It is *near* when its
   latest source is in the current task (at or after the last human prompt before the step)
   or among the messages of the last ``near_turns`` assistant turns (default 10); otherwise
   it is *far*. A fact inside another fact of the same step (an id inside its URL) is
   left to the longer one.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions import is_human_prompt
from ..identifiers import (
    MAX_VALUE_CHARS,
    MIN_VALUE_CHARS,
    PATTERNS,
    call_values,
    occurs,
    whole_value,
)
from .shapes import is_system, message_text, role_of, visible_text

__all__ = [
    "DEFAULT_NEAR_TURNS",
    "MAX_VALUE_CHARS",
    "MIN_VALUE_CHARS",
    "PATTERNS",
    "Fact",
    "FactRule",
    "SessionFacts",
    "Step",
    "candidate_values",
    "find_steps",
    "occurs",
    "whole_value",
]

DEFAULT_NEAR_TURNS = 10


@dataclass(frozen=True, slots=True)
class Fact:
    """One value a step needs: where it occurred before, and whether that is near."""

    value: str
    kind: str  # "url", "email", "path", "date", "amount", "id", "quoted", "argument"
    sources: tuple[int, ...]  # earlier non-system messages holding it, in order
    near: bool

    @property
    def latest_source(self) -> int:
        return self.sources[-1]

    @property
    def sources_set(self) -> frozenset[int]:
        return frozenset(self.sources)

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "kind": self.kind,
            "sources": list(self.sources),
            "near": self.near,
        }


@dataclass(frozen=True, slots=True)
class Step:
    """A request before an assistant message, with the facts that message needs."""

    message_index: int  # the assistant message (= messages admitted at the request)
    task_start: int | None  # index of the last human prompt before it, if any
    task_prompt: str  # that prompt's text ("" without one): the query a search gets
    facts: tuple[Fact, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_index": self.message_index,
            "task_start": self.task_start,
            "facts": [fact.to_dict() for fact in self.facts],
        }


@dataclass(frozen=True, slots=True)
class FactRule:
    """The rule's one setting: how many assistant turns back still count as near."""

    near_turns: int = DEFAULT_NEAR_TURNS

    def __post_init__(self) -> None:
        if isinstance(self.near_turns, bool) or not isinstance(self.near_turns, int):
            raise ValueError(f"near_turns must be a whole number, got {self.near_turns!r}")
        if self.near_turns < 0:
            raise ValueError(f"near_turns must be 0 or more, got {self.near_turns}")


def candidate_values(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(value, kind)`` the rule's step 2 finds in an assistant message, first seen first,
    each value once (`identifiers.call_values`)."""
    return call_values(message)


class SessionFacts:
    """The facts of every step of one session (`find_steps`), computed once and shared by
    every policy and window the session is replayed under."""

    def __init__(self, messages: Sequence[Mapping[str, Any]], rule: FactRule) -> None:
        self._messages = messages
        self._rule = rule
        self._texts = [message_text(m) if isinstance(m, Mapping) else "" for m in messages]
        self._system = [isinstance(m, Mapping) and is_system(m) for m in messages]
        # Where each value occurs, computed the first time it is a candidate.
        self._occurrences: dict[str, tuple[list[int], list[int]]] = {}

    def steps(self) -> list[Step]:
        messages = self._messages
        steps: list[Step] = []
        task_start: int | None = None
        assistant_turns: list[int] = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                continue
            if role_of(message) == "assistant" and index > 0:
                steps.append(self._step(index, message, task_start, assistant_turns))
            if role_of(message) == "assistant":
                assistant_turns.append(index)
            elif is_human_prompt(message):
                task_start = index
        return steps

    def _step(
        self,
        index: int,
        message: Mapping[str, Any],
        task_start: int | None,
        assistant_turns: list[int],
    ) -> Step:
        near_turns = self._rule.near_turns
        if near_turns == 0:
            turns_start = index
        elif len(assistant_turns) >= near_turns:
            turns_start = assistant_turns[-near_turns]
        else:
            turns_start = 0
        boundary = min(turns_start, index if task_start is None else task_start)
        facts: list[Fact] = []
        for value, kind in candidate_values(message):
            sources, system = self._where(value)
            if system and system[0] < index:
                continue  # the system prompt carries it: always in view, never a fact
            earlier = sources[: bisect.bisect_left(sources, index)]
            if not earlier:
                continue  # the step made it up (a new name, a computed number)
            facts.append(Fact(value, kind, tuple(earlier), near=earlier[-1] >= boundary))
        # A fact inside another fact of the step (an id inside its URL) is the longer one's.
        values = [fact.value for fact in facts]
        facts = [f for f in facts if not any(f.value != v and f.value in v for v in values)]
        prompt = ""
        if task_start is not None:
            prompt = visible_text(self._messages[task_start])
        return Step(index, task_start, prompt, tuple(facts))

    def _where(self, value: str) -> tuple[list[int], list[int]]:
        """Indices of the non-system and of the system messages ``value`` occurs in."""
        known = self._occurrences.get(value)
        if known is None:
            sources: list[int] = []
            system: list[int] = []
            for index, text in enumerate(self._texts):
                if occurs(value, text):
                    (system if self._system[index] else sources).append(index)
            known = self._occurrences[value] = (sources, system)
        return known


def find_steps(messages: Sequence[Mapping[str, Any]], rule: FactRule | None = None) -> list[Step]:
    """The steps of a session and the facts each needs (see the module for the rule).

    ``messages`` is a session as recorded; a part of a message that cannot be read (a
    non-object message, arguments that are not JSON, content of another type) is read as
    far as it can be and never raises.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(f"find_steps takes a list of chat messages, got {type(messages).__name__}")
    return SessionFacts(messages, rule or FactRule()).steps()
