"""A long-horizon corpus of our own: agent sessions where later tasks need earlier findings.

Each session (from a seed, deterministically) is one operations agent working 8-10 tool-using
tasks back to back, 110-190 assistant turns in all. *Investigations* dig a finding out of
bulky tool output full of look-alike ids (which order went missing, which incident broke
billing, which payment was taken twice, which export file is the one); *follow-ups*, tasks
later, act on those findings and describe them only ("refund the customer whose parcel went
missing"), never repeating a value in the prompt, so the agent needs ids, amounts, emails,
URLs and paths it last saw dozens of turns earlier. Tool results are bulky (listings, logs,
CSV exports) so every window in the eval overflows many times over.

Messages are OpenAI/Amplifier chat dicts: a system prompt (no ids), user prompts marked
``metadata.source = "user"``, assistant turns with ``tool_calls`` (JSON arguments) followed
by one ``tool`` message per call, and a closing answer per task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ..runner import EvalConversation
from .follow_ups import FOLLOW_UPS, status_note
from .investigations import INVESTIGATIONS
from .script import Script
from .world import Mint

CORPUS_NAME = "long-horizon"


@dataclass(frozen=True)
class CorpusSettings:
    """How many sessions, from which seed, and how long each is."""

    seed: int = 0
    sessions: int = 8
    min_tasks: int = 8
    max_tasks: int = 10
    min_turns: int = 110
    max_turns: int = 190

    def __post_init__(self) -> None:
        for name in ("seed", "sessions", "min_tasks", "max_tasks", "min_turns", "max_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if self.sessions < 1:
            raise ValueError(f"sessions must be at least 1, got {self.sessions}")
        if not 2 <= self.min_tasks <= self.max_tasks <= len(_SLOTS):
            raise ValueError(
                f"tasks per session must satisfy 2 <= min_tasks <= max_tasks <= {len(_SLOTS)}, "
                f"got {self.min_tasks} and {self.max_tasks}"
            )
        if not self.min_tasks * _MIN_TURNS_PER_TASK <= self.min_turns <= self.max_turns:
            raise ValueError(
                f"turns per session must satisfy {_MIN_TURNS_PER_TASK} x min_tasks <= "
                f"min_turns <= max_turns, got {self.min_turns} and {self.max_turns}"
            )


_MIN_TURNS_PER_TASK = 8  # the longest task's fixed steps, its answer included


def generate_corpus(settings: CorpusSettings | None = None) -> list[EvalConversation]:
    """The corpus ``settings`` describe: the same sessions for the same settings, always."""
    settings = settings or CorpusSettings()
    return [
        EvalConversation(
            id=f"{CORPUS_NAME}-{settings.seed}-{number}",
            corpus=CORPUS_NAME,
            messages=generate_session(settings, number),
        )
        for number in range(settings.sessions)
    ]


def generate_session(settings: CorpusSettings, number: int) -> list[dict[str, Any]]:
    """Session ``number`` of the corpus (its own random stream: sessions are independent)."""
    rng = random.Random(f"contextfold-long-horizon:{settings.seed}:{number}")
    script = Script(rng, Mint(rng))
    tasks = rng.randint(settings.min_tasks, settings.max_tasks)
    turns = rng.randint(settings.min_turns, settings.max_turns)
    plan = _plan(rng, tasks)
    allotments = _allot(rng, turns, [1.3 if kind == "investigate" else 0.8 for kind, _ in plan])
    findings: list[dict[str, Any]] = []
    for (kind, detail), allotment in zip(plan, allotments, strict=True):
        until = script.turns + allotment
        if kind == "investigate":
            findings.append(INVESTIGATIONS[detail](script, until))
        elif kind == "follow_up":
            finding = findings[detail]
            FOLLOW_UPS[finding["kind"]](script, until, finding)
        else:
            status_note(script, until, findings)
    return script.messages


def _plan(rng: random.Random, tasks: int) -> list[tuple[str, Any]]:
    """Which task comes when: investigations, each followed up two or more tasks later
    (``IIIFIFIFFF``); from nine tasks on, the last one writes a status note citing what
    was done (``IIIFIFIFN``, ``IIIFIFIFFN``)."""
    investigations = sum(1 for slot in _SLOTS[:tasks] if slot == "I")
    kinds = list(INVESTIGATIONS)
    rng.shuffle(kinds)
    plan: list[tuple[str, Any]] = []
    done = followed = 0
    for position, slot in enumerate(_SLOTS[:tasks]):
        if position == tasks - 1 and tasks >= 9:
            plan.append(("note", None))
        elif slot == "I":
            plan.append(("investigate", kinds[done % len(kinds)]))
            done += 1
        else:
            plan.append(("follow_up", followed))
            followed += 1
    assert done == investigations
    return plan


_SLOTS = "IIIFIFIFFF"


def _allot(rng: random.Random, turns: int, weights: list[float]) -> list[int]:
    """``turns`` shared out by ``weights`` (with some jitter), none below the minimum."""
    jittered = [w * rng.uniform(0.8, 1.2) for w in weights]
    total = sum(jittered)
    shares = [max(_MIN_TURNS_PER_TASK, int(turns * w / total)) for w in jittered]
    shares[-1] += turns - sum(shares)
    if shares[-1] < _MIN_TURNS_PER_TASK:
        shares[-1] = _MIN_TURNS_PER_TASK
    return shares


__all__ = ["CORPUS_NAME", "CorpusSettings", "generate_corpus", "generate_session"]
