"""A summary as a durable record, keyed by a hash of exactly what it covers.

A summary costs a model call, so it is made once and kept. It may be reused later (the next
request, a ``set_messages`` resume, another worker reading the same store) only when the
messages it claims to cover still hash the same: the key is a SHA-256 over those messages as
they were admitted, chained to the previous summary it folded in. A summary can therefore
never be applied to a conversation it was not made from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "SummaryRecord",
    "SummaryRecordError",
    "canonical_message_json",
    "covered_hash",
    "ill_formed_at",
]

# Version of the record's JSON form. Bump it when a field changes meaning or is added
# without a default; a reader refuses records newer than it understands.
SCHEMA_VERSION = 1

# Separates the chained parts inside the hash input. A NUL byte cannot occur in canonical
# JSON (json.dumps escapes it as \u0000), so no message can impersonate a boundary.
_SEPARATOR = b"\x00"


class SummaryRecordError(ValueError):
    """A summary record that cannot be read: wrong shape, or a newer schema than this code."""


def canonical_message_json(message: Mapping[str, Any]) -> str:
    """The one serialisation a covered message is hashed in: the message without its
    ``metadata`` (bookkeeping such as the admission timestamp, which the summarizer never
    reads: the same conversation admitted by another worker at another time must find the
    same summary), everything the summarizer reads byte for byte.

    ``sort_keys`` makes the hash independent of key order (a dict rebuilt by a store, a
    JSON round-trip or another language keeps its meaning but not always its order);
    compact separators and ``ensure_ascii=False`` make it independent of formatting
    choices and keep every character as itself, so one changed byte in any value changes
    the hash. ``default`` is left unset on purpose: a value that is not plain JSON has no
    stable text, and hashing its ``repr`` would make the key depend on the Python process.
    """
    content = {key: value for key, value in message.items() if key != "metadata"}
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def covered_hash(
    messages: Sequence[Mapping[str, Any]], previous: SummaryRecord | None = None
) -> str:
    """SHA-256 (hex) over ``messages`` as admitted, chained to ``previous``.

    ``previous`` is the summary these messages are folded onto: its own key and its text
    enter the hash, so a summary built on a different earlier summary (another
    conversation's, or another summarizer's) never matches. Raises ``TypeError`` for a
    message that is not plain JSON.
    """
    digest = hashlib.sha256()
    digest.update(b"contextfold.summary.v1")
    digest.update(_SEPARATOR)
    if previous is not None:
        digest.update(previous.covered_hash.encode("ascii"))
        digest.update(_SEPARATOR)
        digest.update(hashlib.sha256(previous.text.encode("utf-8")).hexdigest().encode("ascii"))
    digest.update(_SEPARATOR)
    for message in messages:
        # surrogatepass: a lone surrogate admitted as it was hashes as itself (UTF-8 alone
        # cannot encode it); well-formed text encodes as plain UTF-8, as before.
        digest.update(canonical_message_json(message).encode("utf-8", "surrogatepass"))
        digest.update(_SEPARATOR)
    return digest.hexdigest()


def ill_formed_at(text: str) -> str | None:
    """Why ``text`` is not valid Unicode (where its first lone surrogate is), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"a lone surrogate U+{ord(text[error.start]):04X} at character {error.start}"
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class SummaryRecord:
    """One summary and exactly what it stands for.

    ``history_ids`` are the history indexes of every message the summary covers, including
    those covered through ``previous_hash`` (the record it folded in); ``message_count`` is
    their number. ``tokens`` is what ``text`` costs by the counter that budgeted it.
    """

    text: str
    history_ids: tuple[int, ...]
    covered_hash: str
    summarizer: str
    prompt_id: str
    prompt_version: int
    tokens: int
    previous_hash: str | None = None
    session_id: str | None = None
    created_at: str = field(default_factory=_now)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise SummaryRecordError("a summary record needs a non-empty text")
        problem = ill_formed_at(self.text)
        if problem is not None:
            raise SummaryRecordError(f"a summary record's text must be valid Unicode: {problem}")
        ids = self.history_ids
        if not isinstance(ids, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise SummaryRecordError(
                "history_ids must be a tuple of history indexes (integers >= 0)"
            )
        if list(ids) != sorted(set(ids)):
            raise SummaryRecordError("history_ids must be strictly increasing, without repeats")
        if not ids:
            raise SummaryRecordError("a summary record must cover at least one message")
        for name in ("covered_hash", "previous_hash"):
            value = getattr(self, name)
            if value is None and name == "previous_hash":
                continue
            if not _is_sha256_hex(value):
                raise SummaryRecordError(f"{name} must be 64 lowercase hex digits, got {value!r}")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise SummaryRecordError(f"tokens must be an integer >= 0, got {self.tokens!r}")
        if (
            isinstance(self.prompt_version, bool)
            or not isinstance(self.prompt_version, int)
            or self.prompt_version < 1
        ):
            raise SummaryRecordError(
                f"prompt_version must be an integer >= 1, got {self.prompt_version!r}"
            )
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise SummaryRecordError(
                f"session_id must be a string or None, got {self.session_id!r}"
            )
        for name in ("summarizer", "prompt_id", "created_at"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise SummaryRecordError(f"{name} must be a non-empty string")

    @property
    def message_count(self) -> int:
        """How many history messages the summary covers."""
        return len(self.history_ids)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, with the schema version first."""
        return {
            "schema_version": SCHEMA_VERSION,
            "text": self.text,
            "history_ids": list(self.history_ids),
            "message_count": self.message_count,
            "covered_hash": self.covered_hash,
            "previous_hash": self.previous_hash,
            "summarizer": self.summarizer,
            "prompt_id": self.prompt_id,
            "prompt_version": self.prompt_version,
            "tokens": self.tokens,
            "session_id": self.session_id,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SummaryRecord:
        """Read a record written by :meth:`to_dict`, refusing a newer schema than this code's."""
        if not isinstance(data, Mapping):
            raise SummaryRecordError(
                f"a summary record must be a JSON object, got {type(data).__name__}"
            )
        version = data.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise SummaryRecordError(
                f"summary record has no valid schema_version (got {version!r})"
            )
        if version > SCHEMA_VERSION:
            raise SummaryRecordError(
                f"summary record schema_version {version} is newer than this contextfold "
                f"understands ({SCHEMA_VERSION}); upgrade contextfold to read it"
            )
        required = ("text", "history_ids", "covered_hash", "summarizer", "prompt_id")
        missing = [key for key in (*required, "prompt_version", "tokens") if key not in data]
        if missing:
            raise SummaryRecordError(f"summary record is missing {missing}")
        ids = data["history_ids"]
        if not isinstance(ids, list):
            raise SummaryRecordError("history_ids must be a JSON array of integers")
        count = data.get("message_count", len(ids))
        if count != len(ids):
            raise SummaryRecordError(
                f"message_count {count!r} disagrees with the {len(ids)} history_ids"
            )
        optional: dict[str, Any] = {}
        if "created_at" in data:
            optional["created_at"] = data["created_at"]
        return cls(
            text=data["text"],
            history_ids=tuple(ids),
            covered_hash=data["covered_hash"],
            previous_hash=data.get("previous_hash"),
            summarizer=data["summarizer"],
            prompt_id=data["prompt_id"],
            prompt_version=data["prompt_version"],
            tokens=data["tokens"],
            session_id=data.get("session_id"),
            **optional,
        )


def _is_sha256_hex(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )
