"""Repair: what the view sends in place of a sequence fault that history keeps as it was.

Real runs produce tool-call sequences no provider accepts: a result whose call is unknown
(a resumed transcript, a duplicate, a late answer), a call left without a result (a session
interrupted mid-tool), a message stored between a call and its results (a hook injection),
a call id reused by a later turn (backends that number calls per response). History admits
each as it happened (it is the record); the view mends it so that every request is one a
provider accepts:

- an orphan result (its call is unknown, already answered, or named by no id) is sent as a
  plain note (role user): a tool result must answer a call of the assistant message just
  before it (OpenAI, Anthropic);
- an unanswered call gets a short error result right after its group: every call must be
  answered before the next non-tool message;
- a message stored between a call and its results is delivered right after the results:
  nothing may sit between an assistant's tool calls and their results (OpenAI);
- a reused call id is left as it is: results are matched to calls within their own turn,
  and ids need only be unique among one message's calls;
- a message with no content is left out: providers refuse empty messages.

Each repair is reported once, as a `Repair` on the ``context:repaired`` event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .messages import NOTICE_SOURCE

ORPHAN_RESULT = "orphan_result"
UNANSWERED_CALL = "unanswered_call"
INSIDE_CALL_GROUP = "inside_call_group"
REUSED_CALL_ID = "reused_call_id"
EMPTY_MESSAGE = "empty_message"

ACTIONS = {
    ORPHAN_RESULT: "sent as a plain note",
    UNANSWERED_CALL: "answered in the view with a synthetic error result",
    INSIDE_CALL_GROUP: "delivered right after the call group's results",
    REUSED_CALL_ID: "matched to its results within its own turn",
    EMPTY_MESSAGE: "left out of the view",
}

UNANSWERED_TEXT = (
    "[contextfold: no result was recorded for this tool call (the run was interrupted or "
    "the result was lost). Treat the call as not completed; call the tool again if you "
    "still need its result.]"
)
ORPHAN_HEADER = "[contextfold: a tool result for call {call}, which no call in this turn made]"


@dataclass(frozen=True, slots=True)
class Repair:
    """One sequence fault and what the view does about it (the ``context:repaired`` payload)."""

    kind: str
    index: int  # history index of the message concerned (the assistant, for unanswered calls)
    call_ids: tuple[str, ...] = ()

    @property
    def action(self) -> str:
        return ACTIONS[self.kind]

    def to_event(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "index": self.index,
            "call_ids": list(self.call_ids),
            "action": self.action,
        }


def _note_metadata(kind: str) -> dict[str, Any]:
    return {"source": NOTICE_SOURCE, "repair": kind}


def result_text(content: Any) -> str:
    """The text a tool result carries, whatever its shape (string, blocks, JSON output)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content
    ):
        parts = []
        for block in content:
            if block["type"] == "text":
                parts.append(str(block.get("text", "")))
            else:
                parts.append(f"[{block['type']} block]")
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def orphan_note(message: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """A tool-role result no call answers, as a note the model can still read."""
    header = ORPHAN_HEADER.format(call=repr(call_id) if call_id else "(no id given)")
    text = result_text(message.get("content"))
    return {
        "role": "user",
        "content": f"{header}\n{text}" if text else header,
        "metadata": _note_metadata(ORPHAN_RESULT),
    }


def without_orphan_blocks(
    message: Mapping[str, Any], orphan_positions: Sequence[int]
) -> dict[str, Any]:
    """A user message whose unmatched ``tool_result`` blocks become text blocks.

    Matched results stay first (Anthropic wants tool results before any text in the
    message that answers a turn); the orphans follow as text.
    """
    content = list(message.get("content") or ())
    orphans = set(orphan_positions)
    kept = [block for i, block in enumerate(content) if i not in orphans]
    notes = []
    for i in sorted(orphans):
        block = content[i]
        call_id = block.get("tool_use_id") or block.get("tool_call_id") or ""
        header = ORPHAN_HEADER.format(call=repr(call_id) if call_id else "(no id given)")
        text = result_text(block.get("content"))
        notes.append({"type": "text", "text": f"{header}\n{text}" if text else header})
    repaired = {**message, "content": kept + notes}
    if not kept:  # nothing left that answers a call: a plain note
        repaired["metadata"] = _note_metadata(ORPHAN_RESULT)
    return repaired


def synthetic_results(
    assistant: Mapping[str, Any], call_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """Error results for ``call_ids`` in the shape the assistant's calls were made in."""
    content = assistant.get("content")
    block_ids = {
        b.get("id")
        for b in content or ()
        if isinstance(content, list) and isinstance(b, Mapping) and b.get("type") == "tool_use"
    }
    if (
        call_ids
        and all(call_id in block_ids for call_id in call_ids)
        and not assistant.get("tool_calls")
    ):
        # Anthropic shape: results are tool_result blocks of one user message.
        return [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": UNANSWERED_TEXT,
                        "is_error": True,
                    }
                    for call_id in call_ids
                ],
                "metadata": _note_metadata(UNANSWERED_CALL),
            }
        ]
    return [
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": UNANSWERED_TEXT,
            "metadata": _note_metadata(UNANSWERED_CALL),
        }
        for call_id in call_ids
    ]
