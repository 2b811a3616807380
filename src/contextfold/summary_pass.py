"""The summaries of a compaction pass: which blocks are summarized already, folding the turns
a pass marked for summarizing into the view's summary, and taking up the summary a resumed
history's stored records already make.

A summary costs a model call, so every failure falls through: a pass whose summary fails (or
would not fit) is planned again without the summarize rung, and nothing is ever written as a
summary from a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .compaction.planner import PassResult
from .compaction.summarize import Summarize, id_ranges, summary_blocks, summary_message
from .compaction.working import FoldState
from .errors import ConfigError
from .events import SUMMARY
from .history import History
from .ledger import ValueIndex, check_summary
from .summaries import (
    InMemorySummaryStore,
    Summarizer,
    SummaryFailure,
    SummaryFolder,
    SummaryRecord,
    SummaryStore,
    covered_hash,
)
from .summaries.adoption import stored_chain
from .summaries.aligned import SentPrefix
from .tokens import TokenCounter

logger = logging.getLogger(__name__)

Events = list[tuple[str, dict[str, Any]]]


@dataclass(slots=True)
class SummaryStats:
    """What summarizing has cost this context so far (``context.summary_stats``)."""

    calls: int = 0  # summarizer calls made
    reused: int = 0  # spans whose summary was found in the store (no call)
    written: int = 0  # summary records written to the store
    failures: int = 0  # passes whose summary failed and fell through to the next rung
    aligned: int = 0  # calls sent as cache-aligned requests (the view as last sent, then
    # the instruction: see `summaries.aligned`)

    def counts(self) -> tuple[int, int, int]:
        """(calls, written, reused): what a request's telemetry span reports the change of."""
        return self.calls, self.written, self.reused


def summary_folder(
    ladder: Sequence[Any], summarizer: Summarizer | None, store: SummaryStore | None
) -> SummaryFolder | None:
    """The folder the summarize rung's summaries go through, when the ladder has one."""
    rung = next((r for r in ladder if isinstance(r, Summarize)), None)
    if rung is None:
        return None
    if summarizer is None or not callable(summarizer):
        raise ConfigError(
            "strategies names 'summarize' but no summarizer was given: pass "
            "ContextFold(summarizer=...) (an async (messages, max_tokens) -> str callable, or "
            "contextfold.summaries.openai_summarizer / anthropic_summarizer / "
            "scripted_summarizer), or in Amplifier the 'summarizer' config."
        )
    return SummaryFolder(
        summarizer,
        max_input_tokens=rung.max_input_tokens,
        max_output_tokens=rung.max_output_tokens,
        timeout=rung.timeout,
        store=store if store is not None else InMemorySummaryStore(),
    )


class SummaryPass:
    """The summarize rung's side of a context: its folder, its rung and what it cost."""

    def __init__(
        self,
        folder: SummaryFolder,
        rung: Summarize,
        counter: TokenCounter,
        session_id: str | None,
    ) -> None:
        self.folder = folder
        self.rung = rung
        self.counter = counter
        self.session_id = session_id
        self.stats = SummaryStats()

    def size_for(self, ladder: Sequence[Any]) -> None:
        """Summaries are sized by the ladder as sized for this request's budget (which also
        decides which stored records fit: sized before any is taken up)."""
        sized = next(r for r in ladder if isinstance(r, Summarize))
        self.folder.max_output_tokens = sized.max_output_tokens

    async def blocks(self, history: History, state: FoldState) -> tuple[list[tuple[int, ...]], int]:
        """History's summary blocks, and the index of the first one that would need a
        summarizer call (those before it are summarized or have a record in the store)."""
        folder = self.folder
        blocks = summary_blocks(history, self.rung.span_budget)
        removed = state.removed_units  # summarized units are among them
        previous = state.summary_record
        for position, block in enumerate(blocks[:-1]):
            left = [u for u in block if u not in removed]
            if not left:
                continue
            messages = [history.entries[i].message for u in left for i in history.units[u].entries]
            found = await folder.store.get(covered_hash(messages, previous=previous))
            if found is None or not folder.fits(found):
                return blocks, position
            previous = found
        return blocks, len(blocks)

    async def fold(
        self,
        history: History,
        result: PassResult,
        budget_raw: int,
        blocks: Sequence[tuple[int, ...]],
        events: Events,
        values: ValueIndex | None = None,
        prefix: SentPrefix | None = None,
    ) -> PassResult | None:
        """Fold the turns the pass summarized into the summary the view carries, checked
        against the values of its span (`ledger.check_summary`: what the summary leaves out
        is appended verbatim with recall ids, as room allows, or goes to the ledger). None
        when the summarizer failed or its summary would not fit: the caller plans the pass
        again without the summarize rung (see `without_summaries`). ``prefix`` is the view
        as last sent, for cache-aligned requests."""
        state = result.state
        pending = state.pending_summary
        record: SummaryRecord | None = state.summary_record
        ids: list[int] = []
        calls = reused = written = aligned = 0
        failed: SummaryFailure | None = None
        for block in blocks:
            block_ids = [i for u in block if u in pending for i in history.units[u].entries]
            if not block_ids:
                continue
            ids.extend(block_ids)
            fold = await self.folder.fold(
                record,
                [history.entries[i].message for i in block_ids],
                block_ids,
                session_id=self.session_id,
                prefix=prefix,
            )
            aligned += fold.aligned
            calls, reused, written = (
                calls + fold.calls,
                reused + fold.reused,
                written + len(fold.written),
            )
            if fold.record is None:
                failed = fold.failure
                break
            record = fold.record
        stats = self.stats
        stats.calls += calls
        stats.reused += reused
        stats.written += written
        stats.aligned += aligned
        event: dict[str, Any] = {"covers": len(ids), "calls": calls, "reused": reused}
        event["aligned"] = aligned
        event["written"] = written
        if failed is None and record is not None:
            size = self.folder.max_output_tokens
            # Room for the values the summary leaves out: what it left of its own size, and
            # a quarter of that size besides (the view must still fit the budget).
            room = size // 4 + max(0, size - self.counter.count_text(record.text))
            for allowance in (room, 0):
                check = check_summary(values, history, record.text, ids, state.ledger, allowance)
                message = summary_message(record.text, record.history_ids, check.appendix)
                cost = self.counter.count_message(message)
                raw_total = result.raw_total + cost - state.summary_cost
                if raw_total + result.notice_cost <= budget_raw:
                    break
            if raw_total + result.notice_cost <= budget_raw:
                state.summary, state.summary_record = message, record
                state.summary_cost = cost
                state.ledger = check.ledger
                state.pending_summary.clear()
                result.raw_total = raw_total
                ranges = id_ranges(record.history_ids)
                event["appended"], event["to_ledger"] = check.appended, check.to_ledger
                events.append((SUMMARY, {**event, "tokens": cost, "ids": ranges}))
                return result
            failure = {"reason": "does_not_fit", "detail": f"{cost} tokens"}
        else:
            assert failed is not None
            failure = {"reason": failed.reason, "detail": failed.detail}
        stats.failures += 1
        events.append((SUMMARY, {**event, "failure": failure}))
        logger.warning(
            "context-fold: summary failed (%s: %s); compacting without it",
            failure["reason"],
            failure["detail"],
        )
        return None

    async def adopted(self, history: History, base: FoldState) -> FoldState | None:
        """A resumed history (or another worker's) takes up the summary its records already
        make: the longest chain of stored records, from the first, whose covered messages
        still hash the same here. Its turns leave the view with the summary standing for
        them, with no summarizer call; turns the original run dropped stay until a pass
        decides about them. Returns the state to plan from, or None (nothing to take up)."""
        blocks = summary_blocks(history, self.rung.span_budget)[:-1]
        # Looked up by key (this session's records, each block's hash), never by reading
        # every record of a store other sessions share.
        chain, links = await stored_chain(
            self.folder.store,
            [entry.message for entry in history.entries],
            session_id=self.session_id,
            blocks=[[i for u in block for i in history.units[u].entries] for block in blocks],
        )
        if chain is not None and not self.folder.fits(chain):
            chain = None  # made for a larger summary size: it would crowd out the turns
        units = {history.entries[i].unit for i in chain.history_ids} if chain else set()
        covered = set(chain.history_ids) if chain else set()
        if chain is None or any(i not in covered for u in units for i in history.units[u].entries):
            return None
        state = base.copy()
        for unit in sorted(units):
            state.summarize_unit(unit, history.units[unit].entries)
        state.summary = summary_message(chain.text, chain.history_ids)
        state.summary_cost = self.counter.count_message(state.summary)
        state.summary_record = chain
        self.stats.reused += links
        return state


def without_summaries(ladder: Sequence[Any]) -> tuple[Any, ...]:
    """The ladder with its summarize rung left out (a pass whose summary failed)."""
    return tuple(r for r in ladder if not isinstance(r, Summarize))
