"""The way in: what happens to one message before history appends it, in order.

1. **stamp**: ``metadata.timestamp`` as the reference module stamps it (`conventions`);
2. **copy and validate**: a private copy of plain JSON types, or a clear
   `MessageValidationError` naming the field, nothing stored (`messages`; the shapes
   nearly every message has in one look, `common_shapes`);
3. **classify** by the reference's conventions (`messages.inspect_message`);
4. **cap** an oversized tool result (`ingress`);
5. **place** it in the sequence: results matched to the open call group, and the repair a
   fault needs noted (`repair`): an orphan result, a reused call id, a message inside a
   group, an empty message;
6. **view form**: what an uncompacted view sends for it;
7. **count** it, once (`tokens`).

`admit` changes nothing: it reads where the message lands from a `Placement` (what history
says of the sequence so far) and returns an `Admission`, which `History.append` takes
(and a durable session stores first). A failure at any step leaves no trace.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from .common_shapes import admit_common_shape
from .conventions import request_form, stamp_timestamp
from .ingress import IngressClip, cap_tool_result
from .messages import (
    Kind,
    MessageInfo,
    admitted_copy,
    holds_lone_surrogate,
    inspect_message,
    to_plain,
    well_formed,
)
from .repair import (
    EMPTY_MESSAGE,
    INSIDE_CALL_GROUP,
    ORPHAN_RESULT,
    REUSED_CALL_ID,
    Repair,
    orphan_note,
    without_orphan_blocks,
)
from .tokens import TokenCounter


class Placement(NamedTuple):
    """Where a message lands: what history says of the sequence so far (a named tuple:
    one is made per admitted message)."""

    position: int  # the index the message will have
    pending: Sequence[str]  # calls of the open group still waiting for their results
    issued: Container[str]  # every call id made so far
    counter: TokenCounter
    max_tool_result_bytes: int


@dataclass(slots=True)
class Admission:
    """A validated, capped, counted message not yet appended (so failures leave no trace).

    It is computed against the history as it stands and must be appended to that same
    state (the manager's lock guarantees it).
    """

    message: dict[str, Any]
    info: MessageInfo
    view: dict[str, Any] | None
    cost: int
    clips: list[IngressClip]
    joins_open_group: bool  # answers calls of the open group
    matched: tuple[str, ...]  # call ids of the open group this message answers
    repairs: list[Repair]
    inspected: MessageInfo  # the message's own classification (see Entry.inspected)


def admit(
    message: Any,
    place: Placement,
    *,
    stamp: bool = True,
    cost: int | None = None,
    info: MessageInfo | None = None,
    restored: bool = False,
) -> Admission:
    """Admit ``message`` where ``place`` says it lands (see the module docstring).

    ``stamp=False`` takes a message as given (a replaced history, as the reference takes
    it). ``restored`` (implied by a ``cost``) is for a message read back from a durable
    store: it was stamped, copied and capped before, so none of that is done again, and its
    ``cost`` is counted only when not given (the store's was made by another counter).
    ``info``, with it, is the classification stored beside the cost, so it is not inspected
    again either.
    """
    restored = restored or cost is not None
    if stamp and not restored:
        message = stamp_timestamp(message)  # a new dict when stamped: the caller's is untouched
    stored, info, inspected, clips = _shaped(message, place, info, restored)
    info, view, matched, repairs = _placed(stored, info, inspected, place)
    if cost is None:
        cost = place.counter.count_message(view) if view is not None else 0
    return Admission(
        message=stored,
        info=info,
        view=view,
        cost=cost,
        clips=clips,
        joins_open_group=bool(matched),
        matched=matched,
        repairs=repairs,
        inspected=inspected,
    )


def _shaped(
    message: Any, place: Placement, info: MessageInfo | None, restored: bool
) -> tuple[dict[str, Any], MessageInfo, MessageInfo, list[IngressClip]]:
    """Steps 2 to 4: the stored (copied, validated, capped) message, its classification for
    the sequence, its own classification as stored, and what the cap clipped."""
    common = None if restored else admit_common_shape(message, place.max_tool_result_bytes)
    if common is not None:
        # One of the shapes nearly every message has: validated, copied and classified in
        # one look, exactly as the general path below would.
        capped, info = common
        return capped, info, info, []
    position = place.position
    if restored:
        if info is None:
            info = inspect_message(message, index=position)
            if holds_lone_surrogate(message):  # only rows without a classification
                info = replace(info, ill_formed=True)
        return message, info, info, []
    message = to_plain(message)
    info = inspect_message(message, index=position)
    # A private deep copy made of plain JSON types: later edits to the caller's dict cannot
    # reach history, and everything stored is known to serialise.
    stored, ill_formed = admitted_copy(message, index=position)
    capped, clips = cap_tool_result(stored, place.max_tool_result_bytes)
    # What is stored is the capped message: its classification is the one to keep (a clip
    # only shortens result text, but the record must describe the record).
    inspected = inspect_message(capped, index=position) if clips else info
    if ill_formed and holds_lone_surrogate(capped):  # rare: a second look is cheap
        info = replace(info, ill_formed=True)
        inspected = replace(inspected, ill_formed=True)
    return capped, info, inspected, clips


def _placed(
    stored: dict[str, Any], info: MessageInfo, inspected: MessageInfo, place: Placement
) -> tuple[MessageInfo, dict[str, Any] | None, tuple[str, ...], list[Repair]]:
    """Steps 5 and 6: the message's place in the sequence (the open group's calls it
    answers, the repairs a fault needs) and what an uncompacted view sends for it."""
    position, pending = place.position, place.pending
    matched: list[str] = []
    orphans: list[int] = []  # positions in info.result_ids
    for k, call_id in enumerate(info.result_ids):
        if call_id and call_id in pending and call_id not in matched:
            matched.append(call_id)
        else:
            orphans.append(k)
    repairs: list[Repair] = []
    view: dict[str, Any] | None = stored
    if orphans:
        unmatched = (
            info.result_ids
            if len(orphans) == len(info.result_ids)
            else tuple(info.result_ids[k] for k in orphans)
        )
        repairs.append(Repair(ORPHAN_RESULT, position, unmatched))
        if stored.get("role") == "user":
            view = without_orphan_blocks(stored, _result_block_positions(stored, orphans))
        else:
            view = orphan_note(stored, info.result_ids[0])
        if not matched:
            info = answering(info, (), Kind.USER)
    if matched and len(matched) < len(info.result_ids):
        info = answering(info, tuple(matched))
    issued = place.issued
    if info.call_ids and any(call_id in issued for call_id in info.call_ids):
        reused = tuple(call_id for call_id in info.call_ids if call_id in issued)
        repairs.append(Repair(REUSED_CALL_ID, position, reused))
    if info.reference_only:
        view = None  # history only: never sent, never counted (context-simple's rule)
    elif stored.get("content") is None and view is stored:
        if stored.get("role") in ("tool", "function", "assistant"):
            # A tool that returned nothing, or a turn of calls only (OpenAI's content None;
            # a CLI transcript drops the key): sent with empty text, since the loops build
            # a typed Message that requires content.
            view = {**stored, "content": ""}
        else:
            view = None
            repairs.append(Repair(EMPTY_MESSAGE, position))
    if view is not None:
        view = request_form(view)  # history-only metadata stays out of the view
        if inspected.ill_formed:
            # Lone surrogates stay in history (the record) but a provider's JSON cannot
            # carry them: the view sends U+FFFD in their place, and is counted so.
            view = well_formed(view)
    if pending and not matched and info.kind is not Kind.ASSISTANT and view is not None:
        repairs.append(Repair(INSIDE_CALL_GROUP, position, tuple(pending)))
    return info, view, tuple(matched), repairs


def answering(
    info: MessageInfo, result_ids: tuple[str, ...], kind: Kind | None = None
) -> MessageInfo:
    """``info`` answering only ``result_ids`` (as ``dataclasses.replace``, which costs more
    than the rest of a restored message's admission).

    A result that answers nothing makes no calls either (only assistants call), so what it
    becomes depends on its flags alone: those few infos are shared, not built each time.
    """
    if not result_ids and not info.call_ids:
        flags = (info.signed_thinking, info.thinking, info.loaded_tool_state, info.reminder)
        key = (kind or info.kind, *flags, info.reference_only, info.ill_formed)
        shared = _ANSWERING_NOTHING.get(key)
        if shared is None:
            shared = _ANSWERING_NOTHING[key] = MessageInfo(key[0], (), (), *key[1:])
        return shared
    return MessageInfo(
        kind or info.kind,
        info.call_ids,
        result_ids,
        info.signed_thinking,
        info.thinking,
        info.loaded_tool_state,
        info.reminder,
        info.reference_only,
        info.ill_formed,
    )


_ANSWERING_NOTHING: dict[tuple[Any, ...], MessageInfo] = {}  # at most 5 kinds x 64 flag sets


def _result_block_positions(message: Mapping[str, Any], result_positions: list[int]) -> list[int]:
    """Content positions of the tool_result blocks numbered ``result_positions`` among them."""
    blocks = [
        i
        for i, block in enumerate(message.get("content") or ())
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]
    return [blocks[k] for k in result_positions]
