"""The summary a history already has in the store, found by key.

A context that starts from a history written before (a restart, a ``set_messages`` of a
transcript, another worker) takes up the summary its stored records already make instead of
calling the summarizer again: the longest chain of records, from the first, whose covered
messages still hash the same in this history.

A session's records are looked up by the keys its history gives, never by reading every
record of the store: a shared store holds every other session's records too, and one of them
unreadable must not fail this session, nor a million of them slow it. Two lookups feed the
chain: this session's own records (by session id), and the records of this history's
summary blocks (by covered hash, each block's chained on the record found for the block
before it), which is how another session's summaries of the same conversation are found.
A context without a session (a plain library context with a summary store of its own) has
no key for its records: it reads the store's records and takes those written without a
session, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from contextfold.summaries.records import SummaryRecord, covered_hash
from contextfold.summaries.store import SummaryStore

__all__ = ["StoredChain", "longest_chain", "stored_chain"]

StoredChain = tuple[SummaryRecord | None, int]  # the chain's last record, and its length


async def stored_chain(
    store: SummaryStore,
    messages: Sequence[Mapping[str, Any]],
    *,
    session_id: str | None,
    blocks: Iterable[Sequence[int]],
) -> StoredChain:
    """The longest stored chain that ``messages`` (a history, by index) still hash to.

    ``session_id`` names the session whose own records are read (None: the records written
    without a session); ``blocks`` are the message indexes of the history's summary blocks,
    in order: each is looked up by the hash of its messages chained on the record of the
    blocks before it.
    """
    candidates: list[SummaryRecord] = []
    if session_id is not None:
        candidates.extend(await store.records(session_id))
    else:
        candidates.extend(r for r in await store.records() if r.session_id is None)
    previous: SummaryRecord | None = None
    for block in blocks:
        ids = tuple(block)
        found = await store.get(covered_hash([messages[i] for i in ids], previous=previous))
        if found is None:
            break
        expected = (previous.history_ids if previous is not None else ()) + ids
        if found.history_ids != expected:
            # The same messages at other history indexes (a transcript resumed with another
            # start): the text holds, the ids must be these.
            found = replace(found, history_ids=expected)
        candidates.append(found)
        previous = found
    return longest_chain(candidates, messages)


def longest_chain(
    records: Iterable[SummaryRecord], messages: Sequence[Mapping[str, Any]]
) -> StoredChain:
    """The longest chain of ``records``, from one that folds in no earlier record, each
    link's new messages hashing here as they did when it was made."""
    successors: dict[str | None, list[SummaryRecord]] = {}
    for record in records:
        successors.setdefault(record.previous_hash, []).append(record)
    chain: SummaryRecord | None = None
    links = 0
    while True:
        done = len(chain.history_ids) if chain is not None else 0
        follow = None
        for record in successors.get(chain.covered_hash if chain else None, []):
            new_ids = record.history_ids[done:]
            if (
                not new_ids
                or max(new_ids) >= len(messages)
                or record.history_ids[:done] != (chain.history_ids if chain else ())
            ):
                continue
            if covered_hash([messages[i] for i in new_ids], previous=chain) == (
                record.covered_hash
            ) and (follow is None or len(record.history_ids) > len(follow.history_ids)):
                follow = record
        if follow is None:
            return chain, links
        chain, links = follow, links + 1
