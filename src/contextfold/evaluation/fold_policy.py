"""contextfold itself, under any configuration, as a policy of the eval.

Each session is a fresh `ContextFold` with the configuration given, its budget capped at the
window (``max_tokens = min(max_tokens, window)``: the whole window is the input budget, as
every other policy gets it). A configuration whose ladder has the ``summarize`` rung gets the
offline digest summarizer (`summaries.scripted_summarizer`): a replay has no model to ask. A
``summarizer`` key, as an Amplifier mount plan would carry, is therefore set aside.

What the scoring reads from the view is found by what contextfold marks, never by knowing
how it works: its own messages carry ``metadata.source == "context-fold"`` (the compaction
notice, the summary, any ledger a later version adds; repair notes excepted), and the recall
ids it names are those written out on their own in those messages (``r41``, alone or in a
list; never inside a range such as ``r12-r15``, ends included: a range says a message of it
held something, not which) or in a ``context_recall("r41")`` hint anywhere. A search is used
when the context offers one (``search(query, limit=...)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import ContextConfig
from ..costing import PricedRequest
from ..errors import ContextLengthError
from ..manager import ContextFold
from ..messages import NOTICE_SOURCE
from ..recall import ID_PREFIX, RECALL_TOOL
from ..summaries import scripted_summarizer
from ..summaries.metered import MeteredSummarizer
from .counts import ExactCounts
from .policy import Refusal, metadata_of
from .scoring import View
from .shapes import message_text

# An id written out on its own (alone or in a list), not part of a longer word; ranges such
# as ``r12-r15`` are blanked out first, so neither their ends nor what they imply count.
_WRITTEN_ID = re.compile(rf"(?<![A-Za-z0-9_]){ID_PREFIX}(0|[1-9][0-9]{{0,11}})(?![A-Za-z0-9_])")
_ID_RANGE = re.compile(rf"{ID_PREFIX}[0-9]+\s*[-\u2013]\s*{ID_PREFIX}[0-9]+")
_RECALL_HINT = re.compile(rf'{RECALL_TOOL}\(\s*"{ID_PREFIX}(0|[1-9][0-9]{{0,11}})"')
_RESULT_ID_KEYS = ("recall_id", "id")


@dataclass(frozen=True)
class ContextFoldPolicy:
    """contextfold with ``config`` (the keys of `ContextConfig`, as a mount plan gives them)."""

    key: str = "contextfold"
    label: str = "contextfold defaults"
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        settings = dict(self.config)
        settings.pop("summarizer", None)
        # Checked now, so a bad configuration is named before any replay starts.
        ContextConfig.from_mapping(settings)
        object.__setattr__(self, "config", settings)

    @property
    def summarizes(self) -> bool:
        ladder = ContextConfig.from_mapping(self.config).ladder
        return any(rung.name == "summarize" for rung in ladder)

    def settings_for(self, window: int) -> dict[str, Any]:
        """The configuration a session in ``window`` runs with."""
        cap = self.config.get("max_tokens")
        capped = window if not isinstance(cap, int) or isinstance(cap, bool) else min(cap, window)
        return {**self.config, "max_tokens": capped}

    def start(self, window: int, counts: ExactCounts) -> ContextFoldSession:
        summarizer = None
        if self.summarizes:
            # Each summarizer call priced as the transcript request it stands for.
            summarizer = MeteredSummarizer(
                scripted_summarizer(),
                counts.request,
                lambda text: counts({"role": "assistant", "content": text}),
            )
        # An eval's requests are simulated: no OpenTelemetry spans of them.
        context = ContextFold(self.settings_for(window), summarizer=summarizer, opentelemetry="off")
        return ContextFoldSession(context, summarizer)


class ContextFoldSession:
    """A policy session over one `ContextFold` (any subclass or configuration of it)."""

    def __init__(self, context: ContextFold, summarizer: MeteredSummarizer | None = None) -> None:
        self.context = context
        self._summarizer = summarizer
        # The context's own view, not a copy, when it offers one (it is only read here);
        # else the public request.
        self._request = getattr(context, "_request_view_shared", None) or (
            context.get_messages_for_request
        )
        self._marks = _MarkCache()

    async def add(self, message: dict[str, Any]) -> None:
        await self.context.add_message(message)

    async def request(self) -> View:
        try:
            view = await self._request()
        except ContextLengthError as error:
            raise Refusal(str(error).strip().splitlines()[0]) from None
        messages = list(view)  # the shared list grows later: keep this request's as it was
        ledger: list[int] = []
        named: set[int] = set()
        for position, message in enumerate(messages):
            own, ids = self._marks.of(message)
            if own:
                ledger.append(position)
            named |= ids
        return View(messages, ledger=frozenset(ledger), named_ids=frozenset(named))

    def summary_requests(self) -> list[PricedRequest]:
        """The summary requests made since the last call (see `MeteredSummarizer`)."""
        return self._summarizer.take() if self._summarizer is not None else []

    @property
    def offers_search(self) -> bool:
        return callable(getattr(self.context, "search", None))

    async def search(self, query: str, limit: int) -> list[int] | None:
        search = getattr(self.context, "search", None)
        if not callable(search):
            return None
        found = await search(query, limit=limit)
        return hit_indices(found)[:limit]


class _MarkCache:
    """Per message object: whether it is contextfold's own, and the recall ids it names."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Mapping[str, Any], bool, frozenset[int]]] = {}

    def of(self, message: Mapping[str, Any]) -> tuple[bool, frozenset[int]]:
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1], known[2]
        own = is_own_message(message)
        text = message_text(message)
        ids = {int(m) for m in _RECALL_HINT.findall(text)} if RECALL_TOOL in text else set()
        if own:
            ids.update(int(m) for m in _WRITTEN_ID.findall(_ID_RANGE.sub(" ", text)))
        marks = (own, frozenset(ids))
        self._known[id(message)] = (message, *marks)
        return marks


def is_own_message(message: Mapping[str, Any]) -> bool:
    """A message contextfold wrote into the view (notice, summary, ledger), repairs aside."""
    metadata = metadata_of(message)
    return metadata.get("source") == NOTICE_SOURCE and "repair" not in metadata


def hit_indices(found: Any) -> list[int]:
    """History indices of a search's results, best first, read leniently: each result may
    be a recall id (``"r41"``), an index, a mapping with ``recall_id`` or ``id``, or an
    object with such an attribute. Results that name no message are skipped."""
    if found is None or isinstance(found, str | bytes | Mapping):
        found = [found] if found is not None else []
    indices: list[int] = []
    for item in found if isinstance(found, Iterable) else ():
        index = _hit_index(item)
        if index is not None:
            indices.append(index)
    return indices


def _hit_index(item: Any) -> int | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item if item >= 0 else None
    if isinstance(item, str):
        match = re.fullmatch(rf"\s*{ID_PREFIX}(0|[1-9][0-9]{{0,11}})\s*", item)
        return int(match.group(1)) if match else None
    for key in _RESULT_ID_KEYS:
        value = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
        if value is not None:
            return _hit_index(value)
    return None
