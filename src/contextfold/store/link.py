"""A context's link to its durable session: what the manager writes, and when.

- every admitted message is appended, with its token cost and the identity of the counter
  that made it, before ``add_message`` returns (acknowledged means durable: SQLite commits
  with WAL and ``synchronous=FULL``, PostgreSQL commits), carrying the sequence number it
  expects, so a worker that lost a race gets `ConcurrentUpdateError` instead of
  interleaving;
- a write and the context's taking it up are one step: cancelled while the store writes (a
  turn timeout, Ctrl-C), the write is let finish, the context takes it up, and then the
  cancellation goes on. A message is in the store and in history, or in neither;
- ``set_messages`` and ``clear`` replace the session atomically and move its sequence past
  the old end, so every worker that loaded before gets `ConcurrentUpdateError` on its next
  write;
- a committed compaction pass saves the sticky state, naming the counter that costed it and
  the digest of the history it describes (kept here as messages are written); the store
  accepts it only when that is the whole history it holds;
- calibration (each model's entry naming the counter it calibrates) and the last budget
  decision are saved as they change.

On first use the history is rebuilt from the stored messages, costs and classifications:
nothing is inspected again, and nothing is counted again unless another counter (or one
unknown) made the stored cost. The sticky state is taken up only when it describes exactly
the stored history, costed by this context's counter; otherwise it is set aside with a
warning and the next pass plans from the stored history. A damaged row is a `StoreError`
naming the session and the row.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..admission import Admission
from ..errors import ConfigError
from ..history import History
from ..messages import MessageInfo, canonical_json, info_from_json, info_to_json
from ..tokens import TokenCounter, cost_identity
from .base import (
    SessionStore,
    StoredSession,
    StoreError,
    check_session_id,
    decode_message,
    extend_history_digest,
    history_digest,
    scan_json,
    state_describes,
)
from .urls import store_from_url

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# The key under which a saved state and each calibration entry name the counter whose
# units they are in.
COUNTER_KEY = "cost_counter"
# The key under which a saved state keeps the session's pins.
PINS_KEY = "pins"


@dataclass
class Loaded:
    """A session as the store had it."""

    history: History
    state: Mapping[str, Any] | None  # the sticky-state document, when it holds for history
    calibration: Mapping[str, Any] | None  # the entries made for this context's counter
    budget: Mapping[str, Any] | None
    # The pins saved with the compaction state (`PINS_KEY`), when that state's history is the
    # stored one (whatever counter costed it: pins are not in tokens).
    pins: Mapping[str, Any] | None = None


def session_link(store: object, session_id: object) -> SessionLink | None:
    """The durable session ``store`` (a URL or a store object) and ``session_id`` name, or
    None for none. Everything is checked here, at construction (at mount in Amplifier), so
    a bad value is a :class:`ConfigError` naming the key, never a failure mid-session."""
    if store is None:
        if session_id is not None:
            raise ConfigError("session_id names a stored session: give store= as well")
        return None
    if not isinstance(session_id, str) or not session_id:
        raise ConfigError(
            "a store needs the session's id: ContextFold(store=..., session_id='...') (in "
            "Amplifier the kernel's session id is used)"
        )
    owned = isinstance(store, str)
    try:
        check_session_id(session_id)
        if isinstance(store, str):
            store = store_from_url(store)
    except StoreError as error:
        raise ConfigError(str(error)) from None
    if not isinstance(store, SessionStore):
        raise ConfigError(
            f"store must be a store URL (sqlite:///agent.db, postgresql://...) or a "
            f"SessionStore object, got {type(store).__name__} {store!r:.60}"
        )
    return SessionLink(store, session_id, owned=owned)


class SessionLink:
    """One session of one store, and the sequence number this context last saw."""

    def __init__(self, store: SessionStore, session_id: str, *, owned: bool = False) -> None:
        self.store = store
        self.session_id = session_id
        # Opened here from a URL, so closed here; a store object given is its giver's to close.
        self.owned = owned
        self.seq = 0
        self.cost_counter: str | None = None  # set by load, from the context's counter
        self.digest: str | None = None  # of the history up to seq, as the store holds it
        self._opened = False

    async def close(self) -> None:
        """Close the store when this link opened it from a URL (once; later calls do nothing)."""
        if self.owned:
            self.owned = False
            await self.store.close()

    async def load(self, counter: TokenCounter, max_tool_result_bytes: int) -> Loaded:
        if not self._opened:
            await self.store.open()
            self._opened = True
        stored = await self.store.open_session(self.session_id)
        identity = cost_identity(counter)
        history = History(counter, max_tool_result_bytes)
        recounted = _rebuild(stored, history, identity)
        if recounted:
            logger.info(
                "context-fold: %d stored token costs of session %r were made by another "
                "counter (or one not named); counted again with %s",
                recounted,
                self.session_id,
                identity,
            )
        self.seq = stored.last_seq
        self.cost_counter = identity
        self.digest = stored.history_sha256
        if self.digest is None:  # a session last written before digests were kept
            self.digest = history_digest(m.message_json for m in stored.messages)
        pins = None
        if stored.state is not None and state_describes(stored):
            found = stored.state.snapshot.get(PINS_KEY)
            pins = found if isinstance(found, Mapping) else None
        return Loaded(
            history,
            _usable_state(stored, identity),
            _usable_calibration(stored, identity),
            stored.budget,
            pins,
        )

    async def append(self, admission: Admission, admitted: Callable[[], _T]) -> _T:
        """Append ``admission``'s message, then call ``admitted`` (the context takes it up)
        and return its result. A cancel while the store writes waits for the write: if it
        landed, ``admitted`` runs before the cancellation is raised."""
        assert self.digest is not None, "a session is loaded before it is written"
        text = canonical_json(admission.message)
        write = self.store.append(
            self.session_id,
            self.seq,
            text,
            admission.cost,
            info_to_json(admission.inspected),
            cost_counter=self.cost_counter,
        )
        return await self._settled(write, extend_history_digest(self.digest, text), admitted)

    async def replace(self, history: History, replaced: Callable[[], _T]) -> _T:
        """Replace the session with ``history``, then call ``replaced``; as `append`."""
        counter = self.cost_counter
        rows = [
            (
                canonical_json(entry.message),
                entry.cost,
                info_to_json(entry.inspected) if entry.inspected is not None else None,
                counter,
            )
            for entry in history.entries
        ]
        digest = history_digest(row[0] for row in rows)
        return await self._settled(
            self.store.append_many(self.session_id, self.seq, rows), digest, replaced
        )

    async def _settled(self, write: Awaitable[int], digest: str, then: Callable[[], _T]) -> _T:
        """Run ``write`` to its end even through a cancel (a write the store has started may
        commit whatever the caller does), then take its seq and the history's ``digest`` and
        call ``then``; re-raise the cancel after. A write that fails wrote nothing and
        nothing is taken up."""
        task = asyncio.ensure_future(write)
        cancelled = False
        while not task.done():
            try:
                # Cancelling this wait leaves the write running; it never raises its error.
                await asyncio.wait((task,))
            except asyncio.CancelledError:
                cancelled = True
        try:
            seq = task.result()
        except BaseException as error:
            if cancelled and not isinstance(error, asyncio.CancelledError):
                raise asyncio.CancelledError() from error
            raise
        self.seq, self.digest = seq, digest
        result = then()
        if cancelled:
            raise asyncio.CancelledError()
        return result

    async def save_state(self, document: Mapping[str, Any]) -> None:
        if self.seq:  # documents belong to a session that exists
            await self.store.save_state(
                self.session_id,
                self.seq,
                {**document, COUNTER_KEY: self.cost_counter},
                history_sha256=self.digest,
            )

    async def save_calibration(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            counter = self.cost_counter
            stamped = {
                model: {**entry, COUNTER_KEY: counter} if isinstance(entry, Mapping) else entry
                for model, entry in document.items()
            }
            await self.store.save_calibration(self.session_id, stamped)

    async def save_budget(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            await self.store.save_budget(self.session_id, document)


def _usable_state(stored: StoredSession, identity: str) -> Mapping[str, Any] | None:
    """The saved sticky state, when it describes exactly the stored history and was costed
    by this counter; otherwise None, with a warning (the next pass plans afresh)."""
    state = stored.state
    if state is None:
        return None
    if not state_describes(stored):
        logger.warning(
            "context-fold: the saved compaction state of session %r (seq %d) does not "
            "describe the history the store holds (last seq %d); planning from the stored "
            "history instead",
            stored.session_id,
            state.seq,
            stored.last_seq,
        )
        return None
    made_by = state.snapshot.get(COUNTER_KEY)
    if made_by != identity:
        logger.warning(
            "context-fold: the saved compaction state of session %r was costed by another "
            "token counter (%s; this context counts with %s); planning afresh",
            stored.session_id,
            made_by or "unknown",
            identity,
        )
        return None
    return state.snapshot


def _usable_calibration(stored: StoredSession, identity: str) -> dict[str, Any] | None:
    """The calibration entries made for this counter (a ratio learned over another
    counter's counts would scale these wrongly). A damaged document is a StoreError."""
    document = stored.calibration
    if document is None:
        return None
    kept: dict[str, Any] = {}
    for model, entry in document.items():
        if not isinstance(entry, Mapping):
            raise StoreError(
                f"the stored calibration of session {stored.session_id!r} is damaged: its "
                f"entry for {model!r} is {entry!r:.60}, not a JSON object. Restore the store "
                "from a backup, or delete the session."
            )
        if entry.get(COUNTER_KEY) == identity:
            kept[model] = entry
    return kept


def _rebuild(stored: StoredSession, history: History, identity: str) -> int:
    """Append the stored messages to ``history`` at their stored costs and classifications:
    nothing inspected, nothing copied again, and nothing counted unless the stored cost was
    made by another counter (``identity`` is this one's). Returns how many were counted.

    The loop is the whole of a resume's time, so it is kept tight: the classifications,
    mostly a few shared forms, are decoded once each, and the cyclic garbage collector is
    kept out of it. Everything built here is kept for the life of the session, so the
    collector would walk the growing history again and again for nothing: it is paused
    while the history is built, and then what was built is handed to its oldest generation
    directly (``gc.freeze`` then ``gc.unfreeze``: two list splices), as surviving a few
    collections would have put it, instead of being walked by the next young collection.
    That step is skipped when the application froze objects of its own (a pre-fork server,
    say), which unfreezing would release.
    """
    restore = history.restore
    session_id = stored.session_id
    forms: dict[str, MessageInfo | None] = {}
    recounted = 0
    paused = gc.isenabled()
    gc.disable()
    cost: int | None  # as stored; None when another counter made it (counted again)
    try:
        for seq, message_json, cost, info_json, cost_counter in stored.messages:
            info = None
            if info_json is not None:
                info = forms.get(info_json, _UNREAD)
                if info is _UNREAD:
                    info = forms[info_json] = _stored_info(info_json)
            # decode_message's fast path, inline: this loop runs once per stored message.
            try:
                message, end = scan_json(message_json, 0)
            except Exception:  # not JSON after all (or not text): decode_message says what
                message, end = None, -1
            if type(message) is not dict or end != len(message_json):
                message = decode_message(message_json, seq, session_id)
            if type(cost) is not int or cost < 0:
                raise StoreError(
                    f"the stored message at session {session_id!r}, seq {seq} is damaged: its "
                    f"token cost is {cost!r:.40}, not an integer >= 0. Restore the store from a "
                    "backup, or delete the session."
                )
            if cost_counter != identity:  # another counter's units (or unknown): count again
                cost = None
                recounted += 1
            restore(message, cost, info)
    finally:
        if paused:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
    return recounted


_UNREAD: Any = object()


def _stored_info(info_json: str) -> MessageInfo | None:
    """The stored classification, or None to inspect the message again (another version's
    form, or a form this code cannot read: the message itself is the record)."""
    try:
        return info_from_json(info_json)
    except (TypeError, ValueError):
        return None
