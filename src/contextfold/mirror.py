"""Following a framework's own message list: its history stays the record, a context fits it.

Agent frameworks keep the conversation themselves (LangGraph's checkpointed state, the Agents
SDK's session, pydantic-ai's message history) and hand the whole of it to every model call. A
`Mirror` keeps one `ContextFold`'s history in step with that list and returns the fitted view
for the call: what the framework stored is never touched; the view is a new list sharing
nothing mutable with it.

Keeping in step is cheap on the usual path: the list only grows, so the items already
admitted are recognised (by identity, else by equality, for frameworks that rebuild their
items on every call) and only the new ones are converted and admitted. Anything else (a
framework that rewrote or shortened its list, a resumed run whose context was stored
before) is reconciled once: if the context's history is the start of the converted list,
the rest is appended; otherwise the history is replaced (`set_messages`).

A framework adapter supplies one conversion, ``convert(items, start) -> messages``, which marks
each message's metadata with `REF` (a JSON list of ints, starting with the index of its first
item in the framework's list), so that a view message can be traced back to the items it came
from (`Mirror.admitted`) and rebuilt as the framework's own type. Messages the context made
(a compaction notice, a summary, a repair) carry no `REF`.

What a request costs beside its messages (the system prompt or instructions, the tool schemas)
rides on every request and is never compacted: the adapter counts it (`Mirror.fixed_tokens`)
and the view is fitted to the budget less that. Usage readings are reported less the same
amount, so calibration learns about the messages it fits.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import decimal
import enum
import json
import threading
import uuid
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .budget import derive_budget
from .conventions import TIMESTAMP_KEY
from .errors import context_length_error
from .meter import read_usage

if TYPE_CHECKING:
    from .manager import ContextFold

REF = "framework_ref"

Convert = Callable[[Sequence[Any], int], list[dict[str, Any]]]
T = TypeVar("T")


class Mirror:
    """One context's history kept in step with a framework's message list (see the module)."""

    def __init__(self, context: ContextFold, convert: Convert) -> None:
        self.context = context
        self._convert = convert
        self.items: list[Any] = []  # the framework's items admitted so far, in order
        self._admitted: dict[tuple[int, ...], dict[str, Any]] = {}  # REF -> converted message
        self._fixed = 0  # the fixed part of the last request, in tokens
        self._model: str | None = None  # the model of the last request or usage reading

    # -- keeping in step -------------------------------------------------------------------

    async def sync(self, items: Sequence[Any]) -> None:
        """Admit what ``items`` adds to what was admitted before; reconcile anything else."""
        known = self.items
        count = len(known)
        if len(items) >= count and all(
            a is b or a == b for a, b in zip(items, known, strict=False)
        ):
            if len(items) == count:
                return
            if count:
                await self._append(self._converted(items[count:], count), items[count:])
                return
        # A first look (the context may hold a stored session), or a list that changed.
        await self._reconcile(items)

    async def _append(self, messages: list[dict[str, Any]], items: Sequence[Any]) -> None:
        try:
            for message in messages:
                await self.context.add_message(message)
        except BaseException:
            # Some of them may be in: the next look compares the history with the list.
            self.items, self._admitted = [], {}
            raise
        self.items.extend(items)

    def _converted(self, items: Sequence[Any], start: int) -> list[dict[str, Any]]:
        messages = self._convert(items, start)
        for message in messages:
            ref = message.get("metadata", {}).get(REF)
            if ref is not None:
                self._admitted[tuple(ref)] = message
        return messages

    async def _reconcile(self, items: Sequence[Any]) -> None:
        """Bring a context whose history is not the start of ``items`` in step with them."""
        self.items = []
        self._admitted = {}
        converted = self._converted(items, 0)
        stored = await self.context.get_messages()
        if len(stored) <= len(converted) and all(
            _same(s, c) for s, c in zip(stored, converted, strict=False)
        ):
            # A resumed context: what it holds is the start of the framework's history.
            for message in converted[len(stored) :]:
                await self.context.add_message(message)
        else:
            await self.context.set_messages(converted)
        self.items = list(items)

    # -- the request ---------------------------------------------------------------------

    async def view(
        self, items: Sequence[Any], *, fixed_tokens: int = 0, model: str | None = None
    ) -> list[dict[str, Any]]:
        """The fitted view of ``items`` for one request to ``model`` whose other parts cost
        ``fixed_tokens`` (see `fixed_tokens`). Naming the model keys calibration to it (a
        resumed context learns which model it serves from this, not from memory)."""
        await self.sync(items)
        self._model = model or self._model
        decision = await derive_budget(self.context.config)
        budget = decision.effective_budget - fixed_tokens
        if budget <= 0:
            raise context_length_error(
                f"context-fold: the request's fixed parts (system prompt, tool schemas: "
                f"{fixed_tokens} tokens) leave nothing of the {decision.effective_budget}-token "
                "budget for the conversation. Raise max_tokens or send fewer tools.",
                required_tokens=fixed_tokens,
                budget=decision.effective_budget,
                model=decision.model,
            )
        self._fixed = fixed_tokens
        return await self.context.get_messages_for_request(
            token_budget=budget, provider=_Named(self._model)
        )

    def fixed_tokens(
        self,
        system: Sequence[Mapping[str, Any]] = (),
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> int:
        """Tokens of a request's parts beside its messages: ``system`` messages (chat dicts)
        and ``tools`` (OpenAI function schemas), counted with the context's counter."""
        counter = self.context.counter
        total = sum(counter.count_message(message) for message in system)
        return total + (counter.count_tools(list(tools)) if tools else 0)

    async def record_usage(self, usage: Any, *, model: str | None = None) -> None:
        """Report a response's usage (any shape `read_usage` reads: an SDK's usage object,
        LangChain's ``usage_metadata``), less the fixed part of the request it answers."""
        if usage is None:
            return  # no usage reported (a test model, a provider without usage)
        parsed = read_usage({"usage": usage, "model": model})
        if parsed is None:
            return
        actual, cache_read, _, model = parsed
        model = self._model = model or self._model
        net = actual - self._fixed
        if net <= 0:
            return
        usage = {"input_tokens": net, "cache_read_tokens": cache_read}
        await self.context.on_llm_response({"usage": usage, "model": model})

    # -- tracing a view back -------------------------------------------------------------

    def admitted(self, message: Mapping[str, Any]) -> dict[str, Any] | None:
        """The converted message admitted for the items ``message`` (a view message) came
        from; None for a message the context made."""
        metadata = message.get("metadata")
        if type(metadata) is not dict:
            return None
        ref = metadata.get(REF)
        return self._admitted.get(tuple(ref)) if type(ref) is list else None


# How many conversations an adapter keeps live by default: enough for a busy server's active
# threads, bounded so a long-running one does not keep every thread it ever saw.
DEFAULT_MAX_CONVERSATIONS = 1_000


class Conversations:
    """The mirrors of an adapter's conversations (LangGraph threads, pydantic-ai conversation
    ids), the ``limit`` most recently used kept. A conversation let go loses nothing: the
    framework holds its messages (and a durable context its store), so its next call makes
    its context again with ``new_context(key)`` and the mirror admits the framework's list
    (or resumes the stored session). Its context is closed (`ContextFold.aclose`)."""

    def __init__(
        self, new_context: Callable[[str], ContextFold], convert: Convert, limit: int
    ) -> None:
        if type(limit) is not int or limit < 1:
            raise ValueError(
                f"the number of conversations kept must be a positive integer, got {limit!r}"
            )
        self._new_context = new_context
        self._convert = convert
        self.limit = limit
        self._mirrors: dict[str, Mirror] = {}  # least recently used first
        self._let_go: list[ContextFold] = []

    def __len__(self) -> int:
        return len(self._mirrors)

    def get(self, key: str) -> Mirror:
        """The mirror of ``key``, made on first use; the least recently used beyond the limit
        are let go (closed at the next `close_let_go`)."""
        mirrors = self._mirrors
        mirror = mirrors.pop(key, None)
        if mirror is None:
            mirror = Mirror(self._new_context(key), self._convert)
        mirrors[key] = mirror
        while len(mirrors) > self.limit:
            oldest = next(iter(mirrors))
            self._let_go.append(mirrors.pop(oldest).context)
        return mirror

    async def close_let_go(self) -> None:
        """Close the contexts of the conversations let go (after any request in flight)."""
        while self._let_go:
            await self._let_go.pop().aclose()


# The mirror each context follows a plain client's list with, per message shape: the context
# object is the session, so the mirror lives exactly as long as it does.
_MIRRORS: weakref.WeakKeyDictionary[Any, dict[str, Mirror]] = weakref.WeakKeyDictionary()


def mirror_for(context: ContextFold, shape: str, convert: Convert) -> Mirror:
    """The mirror ``context`` keeps of a plain client's message list in ``shape``."""
    mirrors = _MIRRORS.setdefault(context, {})
    mirror = mirrors.get(shape)
    if mirror is None:
        mirror = mirrors[shape] = Mirror(context, convert)
    return mirror


class _Named:
    """What a request path reads of a provider here: only the model's name."""

    def __init__(self, model: str | None) -> None:
        self.model = model


def unchanged(message: Mapping[str, Any], admitted: Mapping[str, Any] | None) -> bool:
    """Whether a view message says exactly what was admitted (metadata aside)."""
    if admitted is None:
        return False
    keys = message.keys() | admitted.keys()
    return all(message.get(k) == admitted.get(k) for k in keys if k != "metadata")


def _same(stored: Mapping[str, Any], converted: Mapping[str, Any]) -> bool:
    """Whether a stored message is a converted one as admitted (the stamp aside)."""
    metadata = dict(stored.get("metadata") or {})
    metadata.pop(TIMESTAMP_KEY, None)
    expected = converted.get("metadata") or {}
    return metadata == expected and unchanged(stored, converted)


# Values that cannot change in place: shared by a copy.
_IMMUTABLE = frozenset(
    {str, int, float, bool, type(None), bytes, complex, datetime.datetime, datetime.date}
    | {datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal, uuid.UUID}
)


_EMPTY = frozenset({dict, list})


def owned(value: Any) -> Any:
    """A copy of ``value`` sharing nothing mutable with it, for handing a framework's own
    objects to a request: containers, dataclasses and pydantic models are rebuilt level by
    level (immutable values shared, so the copy costs the structure, not the text);
    anything else is deep-copied."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        out = value.copy()
        for key, item in out.items():
            if type(item) not in _IMMUTABLE:
                # An empty container (most of a message's side fields) without a call.
                out[key] = owned(item) if item or type(item) not in _EMPTY else type(item)()
        return out
    if kind is list:
        return [item if type(item) in _IMMUTABLE else owned(item) for item in value]
    if kind is tuple:
        return tuple(owned(item) for item in value)
    how = _HOW.get(kind)
    if how is None:
        how = _HOW[kind] = _how_to_copy(kind)
    if how is _SHARE:
        return value
    if how is _DATACLASS:
        new = object.__new__(kind)
        new.__dict__.update(owned(value.__dict__))
        return new
    if how is _PYDANTIC:
        new = object.__new__(kind)
        object.__setattr__(new, "__dict__", owned(value.__dict__))
        object.__setattr__(new, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        extra, private = value.__pydantic_extra__, value.__pydantic_private__
        object.__setattr__(new, "__pydantic_extra__", extra if extra is None else owned(extra))
        object.__setattr__(new, "__pydantic_private__", private and owned(private))
        return new
    return copy.deepcopy(value)


_SHARE, _DATACLASS, _PYDANTIC, _DEEP = "share", "dataclass", "pydantic", "deep"
_HOW: dict[type, str] = {}  # how `owned` copies each type it met (decided once per type)


def _how_to_copy(kind: type) -> str:
    if issubclass(kind, type | enum.Enum):
        return _SHARE
    # Only instances with a __dict__ (no slots) are rebuilt from it.
    if dataclasses.is_dataclass(kind) and kind.__dictoffset__:
        return _DATACLASS
    if hasattr(kind, "__pydantic_fields__") and hasattr(kind, "__pydantic_fields_set__"):
        return _PYDANTIC
    return _DEEP


def tool_arguments(arguments: Any) -> str:
    """Tool-call arguments as the JSON text OpenAI's shape carries."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` from synchronous code (a framework's sync entry point) on one event
    loop kept for the purpose in a daemon thread: no loop is made per call, anything a
    context binds to a loop stays on the loop that made it, and a caller already inside a
    running loop is served too."""
    return asyncio.run_coroutine_threadsafe(coroutine, _sync_loop()).result()


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _sync_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="contextfold-sync", daemon=True).start()
            _loop = loop
        return _loop
