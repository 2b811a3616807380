"""context-simple's policy, as far as its contract and public code let it be reproduced.

Amplifier's reference context module compacts in eight interleaved levels, measured with its
own estimate (``len(str(message)) // 4`` per message), when the view reaches
``compact_threshold`` (0.92) of the budget less the notice reserve (800 tokens), down to
``target_usage`` (0.50) of it, stopping as soon as the target is reached:

1. truncate the oldest quarter of the tool results, 2. the next quarter;
3. remove the oldest messages outside the protected recent 30% (a call with all its results;
   user messages are never removed, only stubbed once over 80 characters);
4. truncate the third quarter of the remaining results; 5. remove with 60% of the protection;
6. truncate every result but the protected ones; 7. remove with 30% of the protection;
8. stub the first user message, and remove old stubs.

System messages are never compacted (the compacted view puts them first); the last user
message and the last ``protected_tool_results`` (5) results, with their call groups, are
never removed. Decisions are sticky, as the contract says: a later request starts from the
reduced view. A notice (a system message saying what was done, no values) is inserted after
the system messages. It never refuses: what it sends may exceed the window, which the eval's
exact recount shows. Texts and names here are ours; the behaviour is the reference's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .counts import ExactCounts
from .policy import NoSearch
from .scoring import View
from .shapes import answers_calls, is_system, role_of, units

STUB_MIN_CHARS = 80  # user messages this long or shorter are never stubbed
NOTICE_SOURCE = "context-compaction"


@dataclass(frozen=True)
class ContextSimple:
    """context-simple's eight-level ladder with its defaults (see the module)."""

    compact_threshold: float = 0.92
    target_usage: float = 0.50
    protected_recent: float = 0.30
    protected_tool_results: int = 5
    truncate_chars: int = 250
    notice_token_reserve: int = 800

    key: ClassVar[str] = "context-simple"
    label: ClassVar[str] = "context-simple"

    def start(self, window: int, counts: ExactCounts) -> _Session:
        return _Session(self, window)


def estimate(message: Mapping[str, Any]) -> int:
    """The reference's estimate of one message: a quarter of its Python text."""
    return len(str(message)) // 4


class _Session(NoSearch):
    def __init__(self, policy: ContextSimple, window: int) -> None:
        self._policy = policy
        self._budget = window - policy.notice_token_reserve
        self._messages: list[dict[str, Any]] = []
        self._estimates: list[int] = []
        self._removed: set[int] = set()
        self._forms: dict[int, dict[str, Any]] = {}  # truncated or stubbed, by history index
        self._form_estimates: dict[int, int] = {}
        self._truncated: set[int] = set()
        self._stubbed: set[int] = set()
        self._notice: dict[str, Any] | None = None
        self._compacted = False

    async def add(self, message: dict[str, Any]) -> None:
        if not isinstance(message, Mapping):
            raise ValueError(f"a message must be an object, got {type(message).__name__}")
        self._messages.append(message)
        self._estimates.append(estimate(message))

    async def request(self) -> View:
        entries = self._entries()
        total = sum(self._estimate(index) for index in entries)
        budget = self._budget
        if budget > 0 and total / budget >= self._policy.compact_threshold:
            _Pass(self, entries, total).run()
            self._compacted = True
            entries = self._entries()
        if not self._compacted:
            return View([self._form(index) for index in entries])
        system = [self._form(i) for i in entries if is_system(self._messages[i])]
        rest = [self._form(i) for i in entries if not is_system(self._messages[i])]
        notice = [self._notice] if self._notice is not None else []
        position = min(1, len(system))
        messages = [*system[:position], *notice, *system[position:], *rest]
        ledger = frozenset({position}) if notice else frozenset()
        return View(messages, ledger=ledger)

    def _entries(self) -> list[int]:
        removed = self._removed
        return [i for i in range(len(self._messages)) if i not in removed]

    def _form(self, index: int) -> dict[str, Any]:
        return self._forms.get(index, self._messages[index])

    def _estimate(self, index: int) -> int:
        return self._form_estimates.get(index, self._estimates[index])


class _Pass:
    """One compaction pass over the reduced view (positions index ``entries``)."""

    def __init__(self, session: _Session, entries: list[int], total: int) -> None:
        self.session = session
        self.policy = session._policy
        self.work = [i for i in entries if not is_system(session._messages[i])]
        self.current = total
        self.target = int(session._budget * self.policy.target_usage)
        self.removed = 0
        self.truncated = 0
        self.stubbed = 0
        self.level = 1

    def run(self) -> None:
        p = self.policy.protected_recent
        steps = (
            lambda: self._truncate_wave(0.0, 0.25),
            lambda: self._truncate_wave(0.25, 0.50),
            lambda: self._remove(p),
            lambda: self._truncate_wave(0.50, 0.75),
            lambda: self._remove(p * 0.6),
            lambda: self._truncate_wave(0.0, 1.0),
            lambda: self._remove(p * 0.3),
            lambda: self._extreme(p * 0.3),
        )
        for level, step in enumerate(steps, start=1):
            self.level = level
            step()
            if self.current <= self.target:
                break
        self._write_notice()

    # -- the two moves -------------------------------------------------------------------

    def _results(self) -> list[int]:
        messages = self.session._messages
        return [pos for pos, i in enumerate(self.work) if answers_calls(messages[i])]

    def _protected_results(self, results: list[int]) -> set[int]:
        keep = self.policy.protected_tool_results
        return set(results[-keep:]) if keep else set()

    def _truncate_wave(self, start: float, end: float) -> None:
        results = self._results()
        protected = self._protected_results(results)
        wave = results[int(len(results) * start) : int(len(results) * end)]
        session = self.session
        for pos in wave:
            if self.current <= self.target:
                return
            index = self.work[pos]
            if pos in protected or index in session._truncated:
                continue
            shortened = truncated_result(session._form(index), self.policy.truncate_chars)
            if shortened is None:
                continue
            self._replace(index, shortened)
            session._truncated.add(index)
            self.truncated += 1

    def _remove(self, protected_recent: float) -> None:
        session = self.session
        messages = [session._form(i) for i in self.work]
        count = len(messages)
        users = [pos for pos, m in enumerate(messages) if _is_user(m)]
        protected = set(range(int(count * (1 - protected_recent)), count))
        if users:
            protected.add(users[-1])
        protected |= self._protected_results(self._results())
        gone: set[int] = set()
        for unit in units(messages):
            if self.current <= self.target:
                break
            if any(pos in protected or _is_user(messages[pos]) for pos in unit):
                continue
            gone.update(unit)
            self.current -= sum(session._estimate(self.work[pos]) for pos in unit)
        first, last = (users[0], users[-1]) if users else (None, None)
        for pos in users:
            if self.current <= self.target:
                break
            if pos in protected or pos in (first, last):
                continue
            self._stub(self.work[pos])
        self._drop(gone)

    def _extreme(self, protected_recent: float) -> None:
        """Level 8: stub the first user message (never the last), then remove old stubs."""
        session = self.session
        messages = [session._form(i) for i in self.work]
        users = [pos for pos, m in enumerate(messages) if _is_user(m)]
        if len(users) > 1:
            self._stub(self.work[users[0]])
        if self.current <= self.target:
            return
        boundary = int(len(self.work) * (1 - protected_recent))
        last = users[-1] if users else None
        gone: set[int] = set()
        for pos in users:
            if self.current <= self.target:
                break
            index = self.work[pos]
            if index in session._stubbed and pos < boundary and pos != last:
                gone.add(pos)
                self.current -= session._estimate(index)
        self._drop(gone)

    # -- bookkeeping ---------------------------------------------------------------------

    def _stub(self, index: int) -> None:
        session = self.session
        if index in session._stubbed:
            return
        stub = stubbed_user_message(session._form(index))
        if stub is None:
            return
        self._replace(index, stub)
        session._stubbed.add(index)
        self.stubbed += 1

    def _replace(self, index: int, form: dict[str, Any]) -> None:
        session = self.session
        cost = estimate(form)
        self.current += cost - session._estimate(index)
        session._forms[index] = form
        session._form_estimates[index] = cost

    def _drop(self, positions: set[int]) -> None:
        if not positions:
            return
        self.session._removed.update(self.work[pos] for pos in positions)
        self.work = [i for pos, i in enumerate(self.work) if pos not in positions]
        self.removed += len(positions)

    def _write_notice(self) -> None:
        text = (
            '<system-reminder source="context-compaction">\n'
            "This conversation was compacted to fit the token budget (level "
            f"{self.level} of 8): {self.removed} message(s) removed, {self.truncated} tool "
            f"result(s) truncated, {self.stubbed} user message(s) shortened. Older tool results "
            "may be truncated: run a tool again if you need its full output.\n"
            "</system-reminder>"
        )
        self.session._notice = {
            "role": "system",
            "content": text,
            "metadata": {"source": NOTICE_SOURCE, "ephemeral": True},
        }


def _is_user(message: Mapping[str, Any]) -> bool:
    return role_of(message) == "user" and not answers_calls(message)


def truncated_result(message: Mapping[str, Any], keep: int) -> dict[str, Any] | None:
    """A tool result cut to its first ``keep`` characters behind a marker; None when its
    output is not text or is short already (as the reference leaves those)."""
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= keep:
        return None
    tokens = len(content) // 4
    marker = f"[truncated: about {tokens:,} tokens; call the tool again if needed]"
    return {**message, "content": f"{marker} {content[:keep]}..."}


def stubbed_user_message(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """A long user message reduced to its opening words; None when it is not long text."""
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= STUB_MIN_CHARS:
        return None
    preview = " ".join(content[:50].split())
    return {**message, "content": f'[user message shortened; it began: "{preview}..."]'}
