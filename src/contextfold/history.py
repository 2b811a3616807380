"""The canonical transcript: append-only, each message validated, capped and counted once.

Besides the messages it keeps what compaction needs without re-scanning: each message's
token cost (computed at admission), its classification, what the view sends for it (the
message itself, or its repaired form: see `repair`), and the partition of history into
*units*. A unit is what compaction may keep or remove as a whole: a single message, or a
*call group* (an assistant message with tool calls and the results that answer them).

Units are listed in view order, which is history order except for one case: a message
admitted while a group still waits for results (a hook injection, say) gets its own unit
after the group, so the view delivers it right after the group's results and never splits
the group. At most one group is open at a time: the next assistant turn closes it, and a
call it left unanswered gets a synthetic error result in the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .admission import Admission, Placement, admit, answering
from .conventions import replaced_by_system_prompt, request_form
from .ingress import IngressClip
from .messages import Kind, MessageInfo, content_text, text_length, well_formed
from .repair import ORPHAN_RESULT, UNANSWERED_CALL, Repair, orphan_note, synthetic_results
from .tokens import TokenCounter


@dataclass(slots=True)
class Entry:
    """One admitted message with what was learned about it at admission."""

    message: dict[str, Any]  # exactly as admitted: the record
    info: MessageInfo
    cost: int  # raw tokens of `view`, from the counter, once (0 when nothing is sent)
    unit: int
    view: dict[str, Any] | None  # what an uncompacted view sends for it; None: nothing
    # What `inspect_message` said of the message alone, before history matched its results
    # (`info` may differ for an orphan result): what a durable store keeps beside the cost.
    inspected: MessageInfo | None = None


@dataclass(slots=True)
class Unit:
    """Entries compaction treats atomically, in the order the view delivers them."""

    entries: list[int]
    calls: tuple[str, ...] = ()  # call ids of the group's assistant message
    pending: list[str] = field(default_factory=list)  # calls still without a result
    closed: bool = False  # a later assistant turn came: pending calls stay unanswered
    synthetic: list[dict[str, Any]] = field(default_factory=list)  # view-only results
    synthetic_ids: tuple[str, ...] = ()  # the calls they answer
    synthetic_cost: int = 0

    @property
    def start(self) -> int:
        return self.entries[0]

    @property
    def is_group(self) -> bool:
        return bool(self.calls)


@dataclass(frozen=True, slots=True)
class Appended:
    """What appending did: the entry, the change in the uncompacted view's raw total, and
    whether the view's order changed before its tail (then it must be re-assembled)."""

    entry: Entry
    delta: int
    reordered: bool
    repairs: list[Repair]


# Shortening rungs leave alone any message of this many characters or fewer (they skip
# what is within `keep * k + LONG_TEXT_CHARS` of their budget): history lists the longer
# ones as they are admitted, so a pass over a view of short messages visits none of them.
LONG_TEXT_CHARS = 200


@dataclass
class History:
    """Append-only message log with running totals."""

    counter: TokenCounter
    max_tool_result_bytes: int
    entries: list[Entry] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    open_unit: int | None = None  # the call group still waiting for results
    issued: set[str] = field(default_factory=set)  # every call id made so far
    first_human: int | None = None
    last_human: int | None = None
    raw_total: int = 0  # raw tokens of the whole history as an uncompacted view sends it
    repairs: list[Repair] = field(default_factory=list)
    # Stored system prompts a system prompt factory replaces in the view (hook notes and
    # developer messages are not among them), and their raw cost.
    system_prompts: list[int] = field(default_factory=list)
    system_prompt_raw: int = 0
    # Entries whose view carries more than LONG_TEXT_CHARS characters of text, entries
    # carrying thinking, and system prompts and loaded-tool state (always protected): the
    # few a compaction pass looks for, listed so it need not visit every message.
    long_texts: set[int] = field(default_factory=set, init=False)
    thinking_entries: set[int] = field(default_factory=set, init=False)
    pinned_entries: set[int] = field(default_factory=set, init=False)
    # Messages the caller pinned (``metadata.pinned: true`` at admission, or `ContextFold.pin`
    # later): kept in the view whole, yielding only before the required core (`protection`).
    pins: set[int] = field(default_factory=set, init=False)
    # Persisted reminders by their text (the newest copy of each): what a request that must
    # carry a reminder complete (``retain_contents``) looks up.
    reminders: dict[str, int] = field(default_factory=dict, init=False)
    # Unanswered calls already reported, by the index of the turn that made them.
    reported_unanswered: dict[int, set[str]] = field(default_factory=dict, init=False)
    # What the compaction notice's digest says of a unit, by (unit, its message count): a
    # unit's messages never change, so each pass need not describe the same turns again.
    # Kept by `compaction.notice`, which bounds it.
    digest_lines: dict[tuple[int, int], list[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The length of a task's line on a ledger page, by the index of its prompt: a message
    # never changes, so a page's estimate (hundreds of tasks, every repack of every pass)
    # measures each once. Kept by `ledger`.
    task_line_costs: dict[int, int] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.entries)

    # -- admission ---------------------------------------------------------------------

    def placement(self, index: int | None = None) -> Placement:
        """Where the next message lands (at ``index``, for a history being built)."""
        open_unit = self.open_unit
        return Placement(
            len(self.entries) if index is None else index,
            self.units[open_unit].pending if open_unit is not None else (),
            self.issued,
            self.counter,
            self.max_tool_result_bytes,
        )

    def prepare(
        self,
        message: Any,
        *,
        index: int | None = None,
        cost: int | None = None,
        info: MessageInfo | None = None,
        restored: bool = False,
    ) -> Admission:
        """`admission.admit` of ``message`` where this history stands, taken as given (not
        stamped: a replaced or restored history is the record as it was)."""
        return admit(
            message, self.placement(index), stamp=False, cost=cost, info=info, restored=restored
        )

    def append(self, admission: Admission) -> Appended:
        """Append a prepared message. Cannot fail: all checks happened in `prepare`."""
        index = len(self.entries)
        info = admission.info
        repairs = list(admission.repairs)
        delta = admission.cost
        reordered = False
        open_index = self.open_unit
        if admission.joins_open_group:
            assert open_index is not None  # prepare() matched against the open group
            unit_index = open_index
            group = self.units[unit_index]
            group.entries.append(index)
            for call_id in admission.matched:
                group.pending.remove(call_id)
            reordered = unit_index != len(self.units) - 1
        else:
            unit_index = len(self.units)
            calls = info.call_ids if info.kind is Kind.ASSISTANT else ()
            self.units.append(Unit([index], calls=calls, pending=list(calls)))
            if open_index is not None and info.kind is Kind.ASSISTANT:
                self.units[open_index].closed = True
        if open_index is not None:
            # The open group may have gained a result, a follower or its closing turn: its
            # view-only results follow from that, and the view changes before its tail.
            change = self._refresh_synthetic(open_index, repairs)
            delta += change
            reordered = reordered or change != 0
            group = self.units[open_index]
            if not group.pending or group.closed:
                self.open_unit = None
        if self.units[unit_index].pending:
            self.open_unit = unit_index
        self.issued.update(info.call_ids)
        if info.kind is Kind.HUMAN:
            if self.first_human is None:
                self.first_human = index
            self.last_human = index
        entry = Entry(
            admission.message, info, admission.cost, unit_index, admission.view, admission.inspected
        )
        if admission.view is not None and replaced_by_system_prompt(admission.message):
            self.system_prompts.append(index)
            self.system_prompt_raw += admission.cost
        self._add_entry(entry)
        self.raw_total += delta
        self.repairs.extend(repairs)
        return Appended(entry, delta, reordered, repairs)

    def restore(self, message: dict[str, Any], cost: int | None, info: MessageInfo | None) -> None:
        """Append a message read back from a durable store, at its stored cost (None: count
        it, the store's was made by another counter) and classification (None: inspect it):
        exactly ``append(prepare(message, cost=cost, info=info, restored=True))``.

        A resume restores every message of a session, so the shapes nearly every message
        has are done here directly, without the admission records: a message outside any
        call group, a result no call asked for while no group is open, an assistant turn
        opening a group, and results answering the open group at the end of history.
        Anything else (a fault inside a group, a reused id, history-only rows) takes the
        general path.
        """
        if (
            cost is None
            or info is None
            or info.reference_only
            or info.ill_formed  # its view is not the message itself
            or (info.call_ids and info.result_ids)
        ):
            self.append(self.prepare(message, cost=cost, info=info, restored=True))
            return
        index = len(self.entries)
        units = self.units
        open_index = self.open_unit
        role = message.get("role")
        empty = message.get("content") is None
        calls = info.call_ids
        results = info.result_ids
        if open_index is None:
            if not calls and not results and not empty:  # a message of its own
                view = request_form(message)
                if info.kind is Kind.HUMAN:
                    if self.first_human is None:
                        self.first_human = index
                    self.last_human = index
                elif replaced_by_system_prompt(message):
                    self.system_prompts.append(index)
                    self.system_prompt_raw += cost
                units.append(Unit([index]))
            elif role == "tool" and len(results) == 1 and not calls:  # an orphan result
                self.repairs.append(Repair(ORPHAN_RESULT, index, results))
                view = request_form(orphan_note(message, results[0]))
                stored, info = info, answering(info, (), Kind.USER)
                units.append(Unit([index]))
                self._add_entry(Entry(message, info, cost, len(units) - 1, view, stored))
                self.raw_total += cost
                return
            elif (
                calls and info.kind is Kind.ASSISTANT and self.issued.isdisjoint(calls)
            ):  # a turn of calls opening a group
                view = request_form({**message, "content": ""} if empty else message)
                self.open_unit = len(units)
                units.append(Unit([index], calls=calls, pending=list(calls)))
                self.issued.update(calls)
            else:
                self.append(self.prepare(message, cost=cost, info=info, restored=True))
                return
        else:
            group = units[open_index]
            pending = group.pending
            if not (
                results
                and not calls
                and open_index == len(units) - 1  # nothing follows the group yet
                and not group.synthetic_ids
                and len(set(results)) == len(results)
                and all(call_id in pending for call_id in results)
            ):
                self.append(self.prepare(message, cost=cost, info=info, restored=True))
                return
            # Results of calls of the group at the end of history: they join the group.
            view = request_form({**message, "content": ""} if empty else message)
            group.entries.append(index)
            for call_id in results:
                pending.remove(call_id)
            if not pending:
                self.open_unit = None
        self._add_entry(Entry(message, info, cost, len(units) - 1, view, info))
        self.raw_total += cost

    def _add_entry(self, entry: Entry) -> None:
        index = len(self.entries)
        if entry.view is not None and text_length(entry.view) > LONG_TEXT_CHARS:
            self.long_texts.add(index)
        info = entry.info
        if info.thinking:
            self.thinking_entries.add(index)
        if info.kind is Kind.SYSTEM or info.loaded_tool_state:
            self.pinned_entries.add(index)
        if info.reminder:
            self.reminders[content_text(entry.message.get("content"))] = index
        if entry.view is not None and pinned_at_admission(entry.message):
            self.pins.add(index)
        self.entries.append(entry)

    def extend(self, messages: Iterable[Any]) -> list[IngressClip]:
        """Admit many messages; on the first refusal raise with its index (used on a fresh log)."""
        clips: list[IngressClip] = []
        for i, message in enumerate(messages):
            admission = self.prepare(message, index=i)
            self.append(admission)
            clips.extend(admission.clips)
        return clips

    def _refresh_synthetic(self, unit_index: int, repairs: list[Repair]) -> int:
        """Recompute the view-only results of a group; returns the change in raw cost.

        A call still waiting for its result needs one in the view as soon as anything
        follows its group (a provider refuses an unanswered call before the last message);
        at the very tail the group is simply still running.
        """
        group = self.units[unit_index]
        follows = group.closed or unit_index != len(self.units) - 1
        wanted = tuple(group.pending) if follows else ()
        if group.closed:
            # Reported once the fault is a fact: a later turn came and the calls never got
            # their results. While the group is still open its results may yet arrive (a
            # hook note between a call and its result is the common case), so a stand-in
            # in the view is reported when a view actually carries it (`provisional_repairs`).
            repairs.extend(self._unreported_calls(unit_index, wanted))
        if wanted == group.synthetic_ids:
            return 0
        before = group.synthetic_cost
        assistant = self.entries[group.start].message
        group.synthetic = [well_formed(m) for m in synthetic_results(assistant, wanted)]
        group.synthetic_ids = wanted
        group.synthetic_cost = sum(self.counter.count_message(m) for m in group.synthetic)
        return group.synthetic_cost - before

    def provisional_repairs(self) -> list[Repair]:
        """Repairs a view about to be delivered carries for the open group (its unanswered
        calls answered by stand-ins because something follows it), not reported before."""
        if self.open_unit is None:
            return []
        group = self.units[self.open_unit]
        found = self._unreported_calls(self.open_unit, group.synthetic_ids)
        self.repairs.extend(found)
        return found

    def _unreported_calls(self, unit_index: int, call_ids: tuple[str, ...]) -> list[Repair]:
        """The repair for those of a group's unanswered ``call_ids`` not reported yet, now
        counted as reported (every caller records what this returns)."""
        if not call_ids:
            return []
        start = self.units[unit_index].start
        # By group, not a scan of every repair so far: a transcript full of faults would
        # make each closing turn cost all the faults before it.
        reported = self.reported_unanswered.setdefault(start, set())
        new = tuple(call_id for call_id in call_ids if call_id not in reported)
        if not new:
            return []
        reported.update(new)
        return [Repair(UNANSWERED_CALL, start, new)]

    # -- reading -----------------------------------------------------------------------

    def unit_cost(self, unit: Unit, replaced: Mapping[int, tuple[dict[str, Any], int]]) -> int:
        """Raw cost of a unit as the view sends it, replaced (shortened) messages at their
        new cost, view-only results included."""
        total = unit.synthetic_cost
        for i in unit.entries:
            swap = replaced.get(i)
            total += swap[1] if swap is not None else self.entries[i].cost
        return total


def pinned_at_admission(message: Mapping[str, Any]) -> bool:
    """Whether a message asks to be pinned: ``metadata.pinned`` is ``True`` (only the
    boolean: ``"true"`` or ``1`` pin nothing)."""
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("pinned") is True
