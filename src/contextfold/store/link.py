"""A context's link to its durable session: what the manager writes, and when.

- every admitted message is appended, with its token cost, before ``add_message`` returns
  (acknowledged means durable: SQLite commits with WAL and ``synchronous=FULL``, PostgreSQL
  commits), carrying the sequence number it expects, so a worker that lost a race gets
  `ConcurrentUpdateError` instead of interleaving;
- ``set_messages`` and ``clear`` replace the session atomically;
- a committed compaction pass saves the sticky state with the sequence number it describes;
- calibration and the last budget decision are saved as they change.

Each message is stored with its classification (``messages.info_to_json``) beside its
cost, so on first use the history is rebuilt from the stored messages, costs and
classifications: nothing is counted or inspected again (a row written before
classifications were stored, or with another version's form, is inspected as it always
was). The sticky state is taken up when it describes exactly those messages.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..history import Admission, History
from ..messages import MessageInfo, canonical_json, info_from_json, info_to_json
from ..tokens import TokenCounter
from .base import (
    SessionStore,
    StoredMessage,
    StoreError,
    check_session_id,
    decode_message,
    scan_json,
)
from .urls import store_from_url


@dataclass
class Loaded:
    """A session as the store had it."""

    history: History
    state: Mapping[str, Any] | None  # the sticky-state document, when history still has it
    calibration: Mapping[str, Any] | None
    budget: Mapping[str, Any] | None


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
    return SessionLink(store, session_id)


class SessionLink:
    """One session of one store, and the sequence number this context last saw."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.seq = 0
        self._opened = False

    async def load(self, counter: TokenCounter, max_tool_result_bytes: int) -> Loaded:
        if not self._opened:
            await self.store.open()
            self._opened = True
        stored = await self.store.open_session(self.session_id)
        history = _rebuild(stored.messages, History(counter, max_tool_result_bytes))
        self.seq = stored.last_seq
        state = stored.state
        # A snapshot describes the log up to its seq; history only grows after it (a
        # replacement drops the snapshot), so it still holds for every later message.
        document = state.snapshot if state is not None and state.seq <= stored.last_seq else None
        return Loaded(history, document, stored.calibration, stored.budget)

    async def append(self, admission: Admission) -> None:
        self.seq = await self.store.append(
            self.session_id,
            self.seq,
            canonical_json(admission.message),
            admission.cost,
            info_to_json(admission.inspected),
        )

    async def replace(self, history: History) -> None:
        rows: Iterable[tuple[str, int, str | None]] = [
            (
                canonical_json(entry.message),
                entry.cost,
                info_to_json(entry.inspected) if entry.inspected is not None else None,
            )
            for entry in history.entries
        ]
        self.seq = await self.store.append_many(self.session_id, self.seq, list(rows))

    async def save_state(self, document: Mapping[str, Any]) -> None:
        if self.seq:  # documents belong to a session that exists
            await self.store.save_state(self.session_id, self.seq, document)

    async def save_calibration(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            await self.store.save_calibration(self.session_id, document)

    async def save_budget(self, document: Mapping[str, Any]) -> None:
        if self.seq:
            await self.store.save_budget(self.session_id, document)


def _rebuild(messages: Sequence[StoredMessage], history: History) -> History:
    """``history`` with the stored messages appended at their stored costs and
    classifications: nothing counted, nothing inspected, nothing copied again.

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
    forms: dict[str, MessageInfo | None] = {}
    paused = gc.isenabled()
    gc.disable()
    try:
        for seq, message_json, cost, info_json in messages:
            info = None
            if info_json is not None:
                info = forms.get(info_json, _UNREAD)
                if info is _UNREAD:
                    info = forms[info_json] = _stored_info(info_json)
            # decode_message's fast path, inline: this loop runs once per stored message.
            try:
                message, end = scan_json(message_json, 0)
            except Exception:  # not JSON after all: decode_message says what is wrong
                end = -1
            if end != len(message_json) or type(message) is not dict:
                message = decode_message(message_json, seq)
            restore(message, cost, info)
    finally:
        if paused:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
    return history


_UNREAD: Any = object()


def _stored_info(info_json: str) -> MessageInfo | None:
    """The stored classification, or None to inspect the message again (another version's
    form, or a form this code cannot read: the message itself is the record)."""
    try:
        return info_from_json(info_json)
    except ValueError:
        return None
