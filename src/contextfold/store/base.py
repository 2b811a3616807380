"""The session store interface: what a durable contextfold session is made of.

A session is an append-only log of admitted messages, each with the token cost it was
admitted at and the counter that made it (a resume by the same counter never re-tokenizes)
and, optionally, its classification (the JSON form of its ``MessageInfo``, so a resume never
re-inspects it either), plus three small JSON documents: the manager's sticky compaction
state (written with the sequence number and the history digest it describes), the
calibration ratios per model, and the last budget decision. Summary records are shared by
every session of a store and keyed by the hash of what they cover.

Sequence numbers order the log; nothing is ever ordered by time (two messages admitted in
the same clock tick must come back in the order they were written: OpenAI Agents SDK
#1900). Every append names the sequence number it expects to follow, so two writers of one
session can never interleave silently: the one that lost the race gets
:class:`ConcurrentUpdateError` and decides what to do (usually reload and retry, see
:func:`append_at_end`). A replacement of the whole session moves the sequence past its old
end (a fence) even when it writes nothing, so a writer that loaded before it always
conflicts: sequence numbers never go back and never name two different histories.

Each session also keeps a digest of its history: a SHA-256 chain over the stored message
texts in order (:func:`extend_history_digest`), moved by every append and recomputed by a
replacement. A saved state carries the digest of the history it describes, so a reader can
check in time proportional to what was appended since that the state still belongs to the
stored history (:func:`state_describes`).
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from contextfold.summaries.records import SummaryRecord

__all__ = [
    "DOCUMENT_VERSION",
    "HISTORY_GENESIS",
    "ConcurrentUpdateError",
    "SearchableStore",
    "SessionInfo",
    "SessionStore",
    "StoreError",
    "StoreSchemaError",
    "StoredMessage",
    "StoredSession",
    "StoredState",
    "append_at_end",
    "assemble_session",
    "check_cost",
    "check_cost_counter",
    "check_digest",
    "check_document",
    "check_info_json",
    "check_message_json",
    "check_rows",
    "check_session_id",
    "decode_message",
    "extend_history_digest",
    "history_digest",
    "state_describes",
]

# One row of ``append_many``: (message_json, cost), (message_json, cost, info_json) or
# (message_json, cost, info_json, cost_counter).
Row = tuple[str, int] | tuple[str, int, str | None] | tuple[str, int, str | None, str | None]
# A checked row: (message_json, cost, info_json, cost_counter).
CheckedRow = tuple[str, int, str | None, str | None]

# Version of the envelope the JSON documents (state, calibration, budget) are stored in.
# The manager's snapshot inside is opaque to the store; a reader refuses a newer envelope.
DOCUMENT_VERSION = 1


class StoreError(Exception):
    """A session store failed or refused: the message says what and what to do."""


class StoreSchemaError(StoreError):
    """The store's schema cannot be used by this code (newer than it, or not ours at all)."""


class ConcurrentUpdateError(StoreError):
    """Another writer moved the session on: ``expected_seq`` is no longer its last seq."""

    def __init__(
        self, session_id: str, expected_seq: int, actual_seq: int, *, other_history: bool = False
    ) -> None:
        if other_history:
            what = (
                f"at seq {actual_seq} the store holds another history than this writer's "
                "(the session was deleted and written again since this writer loaded it)"
            )
        else:
            what = (
                f"it expected to follow seq {expected_seq}, but the store is at seq "
                f"{actual_seq}. Another writer appended to it or replaced it first"
            )
        super().__init__(
            f"session {session_id!r} changed under this writer: {what}; nothing was written. "
            "Reload the session (open_session, or a new ContextFold) and retry, or use "
            "contextfold.store.append_at_end to append after whatever is there."
        )
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class StoredMessage(NamedTuple):
    """One admitted message as stored: its seq, its JSON text, its token cost, its
    classification's JSON form when the writer gave one (None for rows written before
    classifications were stored: the reader inspects the message again), and the identity
    of the counter that made the cost (None when unknown: a reader counts it again).

    A named tuple, not a dataclass: a resume builds one per message, and this is the
    cheapest immutable record to build from a database row (``StoredMessage._make(row)``).
    """

    seq: int
    message_json: str
    cost: int
    info_json: str | None = None
    cost_counter: str | None = None

    @property
    def message(self) -> dict[str, Any]:
        """The message as a dict (parsed on every call: keep the result)."""
        return decode_message(self.message_json, self.seq)


# The C scanner behind json.loads, called directly: json.loads adds two Python calls and a
# regular expression per text, nearly as much as decoding a typical message. Same decoder
# settings as json.loads, so the result is the same dict.
# (typeshed types make_scanner's argument as a scanner; it reads any decoder's settings.)
scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def decode_message(message_json: str, seq: int, session_id: str | None = None) -> dict[str, Any]:
    """A stored message's JSON text as a dict; :class:`StoreError` naming the row (and the
    session, when given) for a row that is not a JSON object's text."""
    where = f"session {session_id!r}, seq {seq}" if session_id is not None else f"seq {seq}"
    if not isinstance(message_json, str):
        raise StoreError(
            f"the stored message at {where} is damaged: a {type(message_json).__name__}, not "
            "JSON text. Restore the store from a backup, or delete the session."
        )
    try:
        value, end = scan_json(message_json, 0)
    except Exception:  # StopIteration or a decode error: let json.loads say what is wrong
        value, end = None, -1
    if end != len(message_json):  # whitespace around it, or not JSON at all
        try:
            value = json.loads(message_json)
        except ValueError as error:
            raise StoreError(
                f"the stored message at {where} is damaged: not JSON ({error}). Restore the "
                "store from a backup, or delete the session."
            ) from None
    if not isinstance(value, dict):
        raise StoreError(f"the stored message at {where} is damaged: not a JSON object")
    return value


# The digest of an empty history; every session's chain starts here.
HISTORY_GENESIS = hashlib.sha256(b"contextfold.history.v1").hexdigest()


def extend_history_digest(digest: str, message_json: str) -> str:
    """The history digest after appending ``message_json`` to a history of ``digest``:
    SHA-256 over the previous digest's bytes and the text's UTF-8 bytes (a chain, so the
    digest of a longer history follows from a shorter one's and what was appended)."""
    step = hashlib.sha256(bytes.fromhex(digest))
    step.update(message_json.encode("utf-8", "surrogatepass"))
    return step.hexdigest()


def history_digest(texts: Iterable[str], start: str = HISTORY_GENESIS) -> str:
    """The digest of the history ``texts`` make after one of digest ``start``."""
    digest = start
    for text in texts:
        digest = extend_history_digest(digest, text)
    return digest


@dataclass(frozen=True)
class StoredState:
    """The manager's compaction snapshot, the seq of the last message it describes and the
    digest of the history up to that message (None for a state saved before digests were
    kept: it cannot be matched to a history)."""

    seq: int
    snapshot: dict[str, Any]
    history_sha256: str | None = None


@dataclass(frozen=True)
class StoredSession:
    """Everything a resume needs, read in one consistent snapshot of the store.

    ``last_seq`` is 0 for a session never written. ``generation`` counts whole-session
    replacements (:meth:`SessionStore.append_many`). ``state`` is None until a pass was
    saved, and after a replacement (it described messages that are gone).
    ``history_sha256`` is the digest of the stored messages (None for a session last
    written before digests were kept, and for one that does not exist).
    """

    session_id: str
    last_seq: int
    generation: int
    messages: tuple[StoredMessage, ...]
    state: StoredState | None
    calibration: dict[str, Any] | None
    budget: dict[str, Any] | None
    history_sha256: str | None = None

    @property
    def exists(self) -> bool:
        return self.last_seq > 0 or self.generation > 0


def state_describes(session: StoredSession) -> bool:
    """Whether the session's saved state describes its stored history: the state's digest,
    carried forward over the messages appended after it, is the session's digest.

    A session written before digests were kept has its digest computed from its messages
    (once per resume, until its next state save stores one).
    """
    state = session.state
    if state is None or state.history_sha256 is None or state.seq > session.last_seq:
        return False
    messages = session.messages
    current = session.history_sha256
    if current is None:
        current = history_digest(m.message_json for m in messages)
    # Messages are in seq order; those after the state are usually few, and at the end.
    start = len(messages)
    while start > 0 and messages[start - 1].seq > state.seq:
        start -= 1
    appended = (m.message_json for m in messages[start:])
    return history_digest(appended, state.history_sha256) == current


@dataclass(frozen=True)
class SessionInfo:
    """One line of :meth:`SessionStore.list_sessions`."""

    session_id: str
    last_seq: int
    generation: int
    message_count: int


@runtime_checkable
class SessionStore(Protocol):
    """Durable sessions and summary records. Every method is a coroutine.

    A method returns only once its write is durable (committed and synced as the backend
    allows); a method that raises wrote nothing.
    """

    async def open(self) -> None:
        """Connect and check (or migrate) the schema; later calls do nothing.

        Every other method opens the store on first use; call this to fail early.
        """
        ...

    async def close(self) -> None:
        """Release connections and threads. The store may not be used afterwards."""
        ...

    async def open_session(self, session_id: str) -> StoredSession:
        """The session's messages (in seq order), last seq and documents; empty if new."""
        ...

    async def append(
        self,
        session_id: str,
        expected_seq: int,
        message_json: str,
        cost: int,
        info_json: str | None = None,
        *,
        cost_counter: str | None = None,
    ) -> int:
        """Append one message after ``expected_seq``; return its seq (``expected_seq + 1``).

        ``info_json`` is the message's classification, stored as given and returned with it
        (opaque to the store; see ``contextfold.messages.info_to_json``); ``cost_counter``
        names the counter that made ``cost`` (opaque too; None: unknown). ``expected_seq`` 0
        creates the session. Raises :class:`ConcurrentUpdateError` when the session's last
        seq is not ``expected_seq``.
        """
        ...

    async def append_many(self, session_id: str, expected_seq: int, messages: Sequence[Row]) -> int:
        """Replace the whole session with ``messages`` atomically: (json, cost) pairs,
        (json, cost, info_json) triples or (json, cost, info_json, cost_counter) rows.

        The replacement takes seq ``expected_seq + 1`` itself and the new messages the seqs
        after it, so the session's last seq moves even when ``messages`` is empty (a clear):
        every writer still holding ``expected_seq`` or older conflicts, and seqs never go
        back. The generation is bumped and the state snapshot dropped. Returns the new last
        seq. Creates the session if needed.
        """
        ...

    async def save_state(
        self,
        session_id: str,
        seq: int,
        snapshot: Mapping[str, Any],
        *,
        history_sha256: str | None = None,
    ) -> None:
        """Store the compaction snapshot describing the whole stored log, up to ``seq``,
        with the session's history digest (:attr:`StoredState.history_sha256`).

        ``history_sha256`` is the digest of the history the writer's snapshot describes
        (:func:`history_digest` of its message texts; None: not checked). Refused with
        :class:`ConcurrentUpdateError` when the session has moved past ``seq`` or holds
        another history (a stale writer never stores a state of a history the store no
        longer holds), and with :class:`StoreError` when ``seq`` is past the session's last
        seq.
        """
        ...

    async def save_calibration(self, session_id: str, calibration: Mapping[str, Any]) -> None:
        """Store the calibration ratios per model (replaces the previous document)."""
        ...

    async def save_budget(self, session_id: str, budget: Mapping[str, Any]) -> None:
        """Store the last budget decision (replaces the previous document)."""
        ...

    async def list_sessions(self) -> list[SessionInfo]:
        """Every stored session, by id."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session's messages and documents (not its summary records, which other
        sessions may reuse). True when something was deleted."""
        ...

    async def get(self, covered_hash: str) -> SummaryRecord | None:
        """The summary record for this covered hash, or None."""
        ...

    async def put_if_absent(self, record: SummaryRecord) -> SummaryRecord:
        """Insert ``record`` unless its hash is stored; return the record the store holds."""
        ...

    async def records(self, session_id: str | None = None) -> list[SummaryRecord]:
        """Summary records in insertion order, optionally only one session's."""
        ...


@runtime_checkable
class SearchableStore(Protocol):
    """A store that keeps a full-text index of every session's messages, written in the
    same transaction as each append (and rebuilt by a replacement), and ranks with
    contextfold's own algorithm (`contextfold.search.ranking`), so its hits are those the
    memory index gives on the same history. The SQLite and PostgreSQL stores are; a store
    that is not is searched through the context's memory index instead."""

    async def search(
        self,
        session_id: str,
        query: str,
        limit: int,
        *,
        skip: Callable[[int], bool] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best ``(position, score)`` among the session's messages for
        ``query`` (its positions are history indices: 0 is the first message), leaving out
        every position ``skip`` says to; empty for an unknown session."""
        ...


async def append_at_end(
    store: SessionStore,
    session_id: str,
    message_json: str,
    cost: int,
    *,
    info_json: str | None = None,
    expected_seq: int = 0,
    attempts: int = 100,
) -> int:
    """Append after whatever the session holds now: the documented reload-and-retry.

    Tries ``expected_seq`` first and, on :class:`ConcurrentUpdateError`, retries at the seq
    the error reports. Right for independent events that may land in any order (two workers
    logging into one session); wrong for a writer whose message depends on the messages
    before it, which must reload the session and rethink instead. Raises the last conflict
    after ``attempts`` tries.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    seq = expected_seq
    for attempt in range(attempts):
        try:
            return await store.append(session_id, seq, message_json, cost, info_json)
        except ConcurrentUpdateError as conflict:
            if attempt == attempts - 1:
                raise
            seq = conflict.actual_seq
    raise AssertionError("unreachable")  # pragma: no cover


# Checks shared by every backend, so bad input gets the same error everywhere.


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not session_id or len(session_id) > 512:
        raise StoreError(
            f"a session id must be a non-empty string of at most 512 characters, "
            f"got {session_id!r:.80}"
        )
    if "\x00" in session_id:
        raise StoreError("a session id may not contain a NUL character")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError(
            f"a session id must be valid text; {session_id!r:.80} holds a lone surrogate, "
            "which no store can hold"
        ) from None
    return session_id


def check_seq(seq: object, name: str = "expected_seq") -> int:
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise StoreError(f"{name} must be an integer >= 0, got {seq!r}")
    return seq


def check_cost(cost: object) -> int:
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise StoreError(f"a message's token cost must be an integer >= 0, got {cost!r}")
    return cost


def check_digest(digest: object) -> str | None:
    """None, or a history digest: 64 lowercase hex digits."""
    if digest is None:
        return None
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise StoreError(f"history_sha256 must be 64 lowercase hex digits, got {digest!r:.80}")
    return digest


def check_cost_counter(cost_counter: object) -> str | None:
    """None (unknown) or a non-empty name of at most 200 characters."""
    if cost_counter is None:
        return None
    if not isinstance(cost_counter, str) or not cost_counter or len(cost_counter) > 200:
        raise StoreError(
            "cost_counter must be None or the counter's name (a non-empty string of at most "
            f"200 characters), got {cost_counter!r:.80}"
        )
    return cost_counter


def check_message_json(message_json: object) -> str:
    """The message must be a JSON object in text form: parsed once here, stored as given."""
    if not isinstance(message_json, str):
        raise StoreError(
            f"message_json must be the message's JSON text (str), got {type(message_json).__name__}"
        )
    try:
        value = json.loads(message_json)
    except ValueError as error:
        raise StoreError(f"message_json is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise StoreError(f"message_json must encode a JSON object, got {type(value).__name__}")
    return message_json


def check_info_json(info_json: object) -> str | None:
    """A classification is None or the JSON text of an array (its meaning is the reader's)."""
    if info_json is None:
        return None
    if not isinstance(info_json, str):
        raise StoreError(
            f"info_json must be JSON text (str) or None, got {type(info_json).__name__}"
        )
    try:
        value = json.loads(info_json)
    except ValueError as error:
        raise StoreError(f"info_json is not valid JSON: {error}") from None
    if not isinstance(value, list):
        raise StoreError(f"info_json must encode a JSON array, got {type(value).__name__}")
    return info_json


def check_rows(messages: Iterable[object]) -> list[CheckedRow]:
    """``append_many``'s rows, checked, as (json, cost, info_json, cost_counter) rows."""
    rows: list[CheckedRow] = []
    for row in messages:
        if not isinstance(row, tuple | list) or len(row) not in (2, 3, 4):
            raise StoreError(
                f"append_many takes (message_json, cost), (message_json, cost, info_json) or "
                f"(message_json, cost, info_json, cost_counter) tuples, got {row!r:.80}"
            )
        info = check_info_json(row[2]) if len(row) >= 3 else None
        counter = check_cost_counter(row[3]) if len(row) == 4 else None
        rows.append((check_message_json(row[0]), check_cost(row[1]), info, counter))
    return rows


def check_document(document: object, what: str) -> str:
    """A document as the JSON text of its versioned envelope."""
    if not isinstance(document, Mapping):
        raise StoreError(f"the {what} must be a JSON object (a mapping), got {document!r:.80}")
    try:
        body = json.dumps(dict(document), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise StoreError(f"the {what} is not plain JSON: {error}") from None
    return body


def wrap_document(body_json: str, history_sha256: str | None = None) -> str:
    """The versioned envelope; a state's carries the digest of the history it describes."""
    if history_sha256 is None:
        return f'{{"version":{DOCUMENT_VERSION},"body":{body_json}}}'
    stamp = f'"history_sha256":"{history_sha256}"'
    return f'{{"version":{DOCUMENT_VERSION},{stamp},"body":{body_json}}}'


def unwrap_document(envelope_json: str, what: str, session_id: str) -> dict[str, Any]:
    body: dict[str, Any] = _unwrap(envelope_json, what, session_id)["body"]  # a dict: checked
    return body


def _unwrap(envelope_json: str, what: str, session_id: str) -> dict[str, Any]:
    try:
        envelope = json.loads(envelope_json)
    except (TypeError, ValueError):
        raise StoreError(f"the stored {what} of session {session_id!r} is not JSON") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("body"), dict):
        raise StoreError(f"the stored {what} of session {session_id!r} has an unknown shape")
    version = envelope.get("version")
    if not isinstance(version, int) or version < 1:
        raise StoreError(f"the stored {what} of session {session_id!r} has no valid version")
    if version > DOCUMENT_VERSION:
        raise StoreSchemaError(
            f"the stored {what} of session {session_id!r} is version {version}, newer than "
            f"this contextfold understands ({DOCUMENT_VERSION}); upgrade contextfold"
        )
    return envelope


def check_record(record: object) -> SummaryRecord:
    if not isinstance(record, SummaryRecord):
        raise TypeError(f"expected a SummaryRecord, got {type(record).__name__}")
    return record


def record_json(record: SummaryRecord) -> str:
    return json.dumps(record.to_dict(), ensure_ascii=False, separators=(",", ":"))


def read_record(text: str, covered_hash: str | None = None) -> SummaryRecord:
    from contextfold.summaries.records import SummaryRecordError

    try:
        return SummaryRecord.from_dict(json.loads(text))
    except (TypeError, ValueError, SummaryRecordError) as error:
        which = f" (covered hash {covered_hash})" if covered_hash else ""
        raise StoreError(f"a stored summary record{which} cannot be read: {error}") from None


def assemble_session(
    session_id: str,
    head: tuple[int, int, str | None] | None,
    messages: tuple[StoredMessage, ...],
    documents: dict[str, tuple[int | None, str]],
) -> StoredSession:
    """Build a :class:`StoredSession` from a backend's rows: the session row's (last_seq,
    generation, history_sha256) or None, the messages, and documents (kind -> (seq, json))."""
    last_seq, generation, digest = head if head is not None else (0, 0, None)
    state = None
    if "state" in documents:
        seq, body = documents["state"]
        envelope = _unwrap(body, "state", session_id)
        stamp = envelope.get("history_sha256")
        state = StoredState(seq or 0, envelope["body"], stamp if isinstance(stamp, str) else None)
    calibration = budget = None
    if "calibration" in documents:
        calibration = unwrap_document(documents["calibration"][1], "calibration", session_id)
    if "budget" in documents:
        budget = unwrap_document(documents["budget"][1], "budget", session_id)
    return StoredSession(
        session_id=session_id,
        last_seq=last_seq,
        generation=generation,
        messages=messages,
        state=state,
        calibration=calibration,
        budget=budget,
        history_sha256=digest,
    )
