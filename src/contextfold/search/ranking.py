"""How a search ranks: one algorithm, written once, run by every backend over its own index.

The ranking is a generator that asks for what it needs (`StatsRequest`, `CandidatesRequest`,
`TaskDocsRequest`) and gets the answers sent back: the memory index answers from its arrays,
the SQLite store from FTS5 and its tables, the PostgreSQL store from its full-text index and
tables. All arithmetic happens here, in the same order for every backend, so the same history
gives the same hits with the same scores everywhere.

A search is asked by description ("refund the customer whose parcel went missing") while the
message holding the value speaks of it in other words ("ORD-79347 is marked lost in
transit"); the earlier task's own prompt ("a parcel they ordered in March never arrived")
usually shares the description's words. So a message is found two ways:

1. **by its own words**: BM25 (Lucene's and SQLite FTS5's ranking function) over its terms;
   terms in more than half the messages carry almost no weight and are left out when the
   query has rarer ones, and only the messages holding the rarest terms are scored
   (`MAX_CANDIDATES`), which bounds a query's cost on a long history;
2. **by its task**: a message belongs to the task of the last human prompt before it. The
   earlier tasks whose prompts match the query best (`TASKS`, each at least `TASK_SHARE` of
   the best one's score) lend their messages a score, weighted by where the finding of a
   task usually is: toward its end, where the agent concluded (the closing answer most, then
   the turns before it, the prompt least). The task being worked on (the newest prompt's) is
   not lent: a search looks back.

A message's score is its own BM25 score over the best one's (the best direct match scores 1)
plus ``TASK_WEIGHT`` times its task's prompt score over the best task's, times that weight.
The constants were chosen on generated sessions (`contextfold eval`'s long-horizon corpus,
four seeds, and BFCL) among a few round values, never tuned to one session's wording; how
much each part adds is in docs/summaries-and-recall.md.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .text import QUERY_CHARS, DocKind, terms

# BM25's usual constants: term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
# At most this many messages are scored for a query's words: its terms are taken from the
# rarest while their postings fit; the more common ones only score the messages found (a
# term in thousands of messages cannot lift one that holds no rarer term into the best few,
# and reading it would make every query cost the history). A query whose rarest term alone
# is in more messages reads that term's newest postings only.
MAX_CANDIDATES = 500
# A query is searched by its first this many distinct terms, read from its first
# QUERY_CHARS characters (a pasted page is a description too, but its thousandth word adds
# nothing, and a store's statement must stay bounded).
MAX_QUERY_TERMS = 64
# Task expansion: at most this many earlier tasks lend their messages a score, each scoring
# at least this share of the best one; each lends its newest TASK_DOCS messages.
TASKS = 4
TASK_SHARE = 0.3
TASK_DOCS = 200
TASK_WEIGHT = 1.0
# Where in a task its finding usually is: the prompt (the task's start) weighs this much, the
# weight grows linearly to 1 at the task's newest message, and the closing answer (the
# task's last answer without a call) weighs CLOSING_WEIGHT.
TASK_START_WEIGHT = 0.5
CLOSING_WEIGHT = 2.0

NO_TASK = -1


class StatsRequest(NamedTuple):
    """Asks for the session's `SessionStats` and the document frequency of ``terms``."""

    terms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SessionStats:
    """What BM25 needs of the whole session: how many messages are indexed, their terms in
    all, the newest prompt's position (`NO_TASK` without one) and each asked term's
    document frequency (a term in no message may be left out)."""

    docs: int
    total_length: int
    current_task: int
    df: Mapping[str, int]


class CandidatesRequest(NamedTuple):
    """Asks for every message holding one of ``terms``, and the ``cap`` newest holding each of
    ``newest``: their `DocInfo`, with the counts of ``used`` (in any order, each once)."""

    terms: tuple[str, ...]
    newest: tuple[str, ...]
    cap: int
    used: tuple[str, ...]


class TaskDocsRequest(NamedTuple):
    """Asks for the ``per_task`` newest messages of each task in ``tasks`` (a task is named by
    its prompt's position): a mapping of task to their `DocInfo`, counts of ``used``."""

    tasks: tuple[int, ...]
    per_task: int
    used: tuple[str, ...]


class DocInfo(NamedTuple):
    """One indexed message: its position (the history index), its number of terms, its task
    (`NO_TASK`: before any prompt), its `DocKind`, and how often it holds each used term."""

    doc: int
    length: int
    task: int
    kind: int
    tfs: tuple[int, ...]


Request = StatsRequest | CandidatesRequest | TaskDocsRequest
Ranking = Generator[Request, Any, list[tuple[int, float]]]


def rank(query: str, limit: int, skip: Callable[[int], bool] | None = None) -> Ranking:
    """The ``limit`` best ``(position, score)`` for ``query``, best first (ties: the newer
    first), leaving out every position ``skip`` says to; see the module for the score."""
    words = tuple(dict.fromkeys(terms(query[:QUERY_CHARS])))[:MAX_QUERY_TERMS]
    stats: SessionStats = yield StatsRequest(words)
    count = stats.docs
    df = stats.df
    wanted = sorted((t for t in words if df.get(t, 0) > 0), key=lambda t: (df[t], t))
    if not count or not wanted or limit <= 0:
        return []
    # A term in more than half the messages has an idf near zero: with rarer terms in the
    # query it changes nothing that matters, and is left out.
    used = tuple([t for t in wanted if df[t] * 2 <= count] or wanted)
    full: list[str] = []
    postings = 0
    for term in used:  # the rarest first, while their postings fit
        postings += df[term]
        if postings > MAX_CANDIDATES:
            break
        full.append(term)
    newest = () if full else used[:1]
    found: Sequence[DocInfo] = yield CandidatesRequest(tuple(full), newest, MAX_CANDIDATES, used)
    score = _Bm25(used, df, count, stats.total_length)
    infos = {info.doc: info for info in found}
    own = {doc: score(info) for doc, info in infos.items()}

    prompts = {
        doc: value
        for doc, value in own.items()
        if infos[doc].kind == DocKind.PROMPT and doc != stats.current_task
    }
    chosen: tuple[int, ...] = ()
    best_task = 0.0
    if prompts:
        ordered = sorted(prompts, key=lambda doc: (prompts[doc], doc), reverse=True)
        best_task = prompts[ordered[0]]
        chosen = tuple(t for t in ordered[:TASKS] if prompts[t] >= TASK_SHARE * best_task)
    spans: dict[int, tuple[int, int | None]] = {}  # task -> (its newest message, closing answer)
    if chosen:
        members: Mapping[int, Sequence[DocInfo]] = yield TaskDocsRequest(chosen, TASK_DOCS, used)
        for task in chosen:
            latest, closing = task, None
            for info in members.get(task, ()):
                latest = max(latest, info.doc)
                if info.kind == DocKind.ANSWER and (closing is None or info.doc > closing):
                    closing = info.doc
                if info.doc not in infos:
                    infos[info.doc] = info
                    own[info.doc] = score(info)
            spans[task] = (latest, closing)

    best_own = max(own.values(), default=0.0)
    final: dict[int, float] = {}
    for doc, info in infos.items():
        if not info.length or (skip is not None and skip(doc)):
            continue  # nothing to find in it, or the caller has it already
        value = own[doc] / best_own if best_own > 0 else 0.0
        span = spans.get(info.task)
        if span is not None:
            value += TASK_WEIGHT * prompts[info.task] / best_task * _task_weight(doc, info, span)
        if value > 0:
            final[doc] = value
    return heapq.nlargest(limit, final.items(), key=_best_first)


def _task_weight(doc: int, info: DocInfo, span: tuple[int, int | None]) -> float:
    newest, closing = span
    start = info.task
    if doc == closing:
        return CLOSING_WEIGHT
    along = (doc - start) / (newest - start) if newest > start else 1.0
    return TASK_START_WEIGHT + (1 - TASK_START_WEIGHT) * min(1.0, max(0.0, along))


class _Bm25:
    """BM25 of a message over the used terms, summed in their order (the same floating-point
    result in every backend)."""

    def __init__(
        self, used: tuple[str, ...], df: Mapping[str, int], count: int, total: int
    ) -> None:
        self.gains = [math.log(1 + (count - df[t] + 0.5) / (df[t] + 0.5)) * (K1 + 1) for t in used]
        average = total / count if total else 1.0
        self.base = K1 * (1 - B)
        self.length_weight = K1 * B / average

    def __call__(self, info: DocInfo) -> float:
        norm = self.base + self.length_weight * info.length
        value = 0.0
        for gain, tf in zip(self.gains, info.tfs, strict=True):
            if tf:
                value += gain * tf / (tf + norm)
        return value


def _best_first(item: tuple[int, float]) -> tuple[float, int]:
    return item[1], item[0]


def counts_of(words: list[str], used: Sequence[str]) -> tuple[int, ...]:
    """How often each of ``used`` occurs in ``words`` (a message's terms, repeats kept)."""
    return tuple(words.count(t) for t in used)


def run_ranking(search: Ranking, answer: Callable[[Request], Any]) -> list[tuple[int, float]]:
    """Drive ``search`` (`rank`'s generator) with a backend's synchronous ``answer``."""
    try:
        request = next(search)
        while True:
            request = search.send(answer(request))
    except StopIteration as done:
        return done.value


async def run_ranking_async(
    search: Ranking, answer: Callable[[Request], Awaitable[Any]]
) -> list[tuple[int, float]]:
    """Drive ``search`` (`rank`'s generator) with a backend's asynchronous ``answer``."""
    try:
        request = next(search)
        while True:
            request = search.send(await answer(request))
    except StopIteration as done:
        return done.value
