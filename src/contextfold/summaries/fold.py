"""Folding a span into one summary, chunk by chunk, reusing every summary already made.

A span too large for one summarizer call is never cut to its tail (that would silently drop
its beginning, usually the task). It is split into chunks that fit ``max_input_tokens``
together with the prompt and the summary so far, and folded in order: previous summary + next
chunk -> new summary. Each step's result is a record keyed by a hash of exactly what it
covers, so a later fold over the same messages (the next pass, a resume, another worker with
the same store) finds it and makes no call. An incremental fold (a previous record plus newer
messages) works the same way, so a summary stays within ``max_output_tokens`` however much
it covers.

Chunks follow tool-call groups: an assistant message with tool calls and the results that
answer them always land in one chunk. A group that alone exceeds a chunk's budget has its
results (and, if still needed, its other messages) shortened in the copy sent to the
summarizer; the record still hashes the messages as admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextfold.messages import Kind, inspect_message, well_formed
from contextfold.summaries.aligned import SentPrefix, aligned_request, takes_aligned_requests
from contextfold.summaries.records import SummaryRecord, covered_hash
from contextfold.summaries.store import InMemorySummaryStore, SummaryStore
from contextfold.summaries.summarizer import (
    DEFAULT_SUMMARY_PROMPT,
    Summarizer,
    SummaryFailure,
    SummaryPrompt,
    summarize_span,
    summarizer_identity,
)
from contextfold.summaries.transcript import previous_summary_message, render_transcript
from contextfold.tokens import TokenCounter, build_counter

__all__ = [
    "FoldResult",
    "SummaryFolder",
    "chunk_groups",
    "head_tail",
    "shorten_group",
    "tool_call_groups",
]

# Tokens kept aside in every chunk for the transcript's headings and the request's framing.
_FRAMING_ALLOWANCE = 32
# The smallest chunk budget worth a call; below it the settings leave no room for messages.
_MIN_CHUNK_TOKENS = 64


@dataclass(frozen=True)
class FoldResult:
    """What a fold produced, and what it cost.

    ``record`` covers the previous record's messages and every new message, or is None when a
    summarizer call failed (``failure`` says why). ``calls`` counts summarizer calls,
    ``reused`` the chunks whose summary was already in the store, ``written`` the records
    this fold added to the store. Records of chunks folded before a failure stay in the
    store: each is a correct summary of exactly what its hash covers.
    """

    record: SummaryRecord | None
    chunks: int
    calls: int
    reused: int
    written: tuple[SummaryRecord, ...] = ()
    failure: SummaryFailure | None = None
    aligned: int = 0  # calls sent as cache-aligned requests (see `summaries.aligned`)


@dataclass
class SummaryFolder:
    """Folds spans of history into summary records with one configured summarizer.

    ``max_input_tokens`` bounds everything one call reads (prompt, summary so far, chunk);
    ``max_output_tokens`` bounds every summary; ``timeout`` bounds every call, in seconds.
    ``chunk_budget`` is what is left of ``max_input_tokens`` for the rendered messages.
    """

    summarizer: Summarizer
    max_input_tokens: int = 16_000
    max_output_tokens: int = 1_000
    timeout: float | None = 60.0
    counter: TokenCounter = field(default_factory=lambda: build_counter("exact"))
    store: SummaryStore = field(default_factory=InMemorySummaryStore)
    name: str = field(init=False)
    prompt: SummaryPrompt = field(init=False)
    chunk_budget: int = field(init=False)

    def __post_init__(self) -> None:
        for name in ("max_input_tokens", "max_output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        timeout = self.timeout
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ValueError(
                f"timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        self.name, prompt = summarizer_identity(self.summarizer)
        self.prompt = prompt or DEFAULT_SUMMARY_PROMPT
        # A full-size previous summary is reserved even on the first chunk, so chunk borders
        # depend only on the messages: the same span always splits the same way, and its
        # records are found again.
        reserved = self.counter.count_text(self.prompt.text) + self.max_output_tokens
        self.chunk_budget = self.max_input_tokens - reserved - _FRAMING_ALLOWANCE
        if self.chunk_budget < _MIN_CHUNK_TOKENS:
            raise ValueError(
                f"max_input_tokens {self.max_input_tokens} leaves {self.chunk_budget} tokens for "
                f"messages after the prompt and a summary of max_output_tokens "
                f"{self.max_output_tokens}; raise max_input_tokens or lower max_output_tokens"
            )

    async def fold(
        self,
        previous: SummaryRecord | None,
        messages: Sequence[Mapping[str, Any]],
        history_ids: Sequence[int],
        *,
        session_id: str | None = None,
        prefix: SentPrefix | None = None,
    ) -> FoldResult:
        """One record covering ``previous`` (if any) and ``messages`` (history ``history_ids``).

        At most one summarizer call per chunk; none for a chunk whose record is stored. With
        ``prefix`` (the view as it was last sent) and a summarizer that takes them, a call
        whose span is in that view is a cache-aligned request (`summaries.aligned`).
        """
        ids = tuple(history_ids)
        if len(ids) != len(messages):
            raise ValueError(
                f"{len(messages)} messages but {len(ids)} history ids; give one id per message"
            )
        if not messages:
            raise ValueError("nothing to fold: messages is empty")
        covered = (previous.history_ids if previous else ()) + ids
        if list(covered) != sorted(set(covered)):
            raise ValueError(
                "history ids must increase and follow those of the previous record, got "
                f"{ids[:3]}... after {previous.history_ids[-3:] if previous else ()}"
            )
        groups = tool_call_groups(messages)
        chunks = chunk_groups(messages, groups, self._group_cost, self.chunk_budget)
        current = previous
        calls = reused = aligned = 0
        aligns = prefix is not None and takes_aligned_requests(self.summarizer)
        written: list[SummaryRecord] = []
        for chunk in chunks:
            chunk_messages = [messages[i] for group in chunk for i in group]
            chunk_ids = tuple(ids[i] for group in chunk for i in group)
            key = covered_hash(chunk_messages, previous=current)
            found = await self.store.get(key)
            if found is not None and self.fits(found):
                expected = (current.history_ids if current else ()) + chunk_ids
                if found.history_ids != expected:
                    # The same messages at other history indexes (a transcript resumed
                    # with a different start): the text holds, the ids must be these.
                    found = replace(found, history_ids=expected)
                current, reused = found, reused + 1
                continue
            calls += 1
            request = None
            if aligns:
                assert prefix is not None
                covers = f"r{chunk_ids[0]}-r{chunk_ids[-1]}"
                request = aligned_request(prefix, chunk_ids, current, self.prompt, covers)
                aligned += request is not None
            if request is None:
                request = self._request(current, [self._fitted(messages, group) for group in chunk])
            answer = await summarize_span(
                self.summarizer,
                request,
                max_tokens=self.max_output_tokens,
                counter=self.counter,
                timeout=self.timeout,
            )
            if isinstance(answer, SummaryFailure):
                return FoldResult(None, len(chunks), calls, reused, tuple(written), answer, aligned)
            record = SummaryRecord(
                text=answer,
                history_ids=(current.history_ids if current else ()) + chunk_ids,
                covered_hash=key,
                previous_hash=current.covered_hash if current else None,
                summarizer=self.name,
                prompt_id=self.prompt.id,
                prompt_version=self.prompt.version,
                tokens=self.counter.count_text(answer),
                session_id=session_id,
            )
            winner = await self.store.put_if_absent(record)
            if winner is record:
                written.append(record)
            # The record already stored under this key (another writer's, or one too large
            # for this summary size, kept for whoever wrote it) is used only if it fits.
            current = winner if self.fits(winner) else record
        assert current is not None  # messages is not empty, so at least one chunk ran
        return FoldResult(current, len(chunks), calls, reused, tuple(written), aligned=aligned)

    def fits(self, record: SummaryRecord) -> bool:
        """Whether a stored record may stand in this folder's summaries: its text is within
        ``max_output_tokens`` by this folder's counter, as an answer must be. A record written
        for a larger window (another worker's, an earlier run's) is summarized again."""
        return self.counter.count_text(record.text) <= self.max_output_tokens

    def _request(
        self, previous: SummaryRecord | None, groups: list[list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        head = [previous_summary_message(previous.text)] if previous else []
        return head + [m for group in groups for m in group]

    def _group_cost(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return self.counter.count_text(render_transcript(messages))

    def _fitted(
        self, messages: Sequence[Mapping[str, Any]], group: Sequence[int]
    ) -> list[dict[str, Any]]:
        """The group as the summarizer reads it: shortened only if it alone is over budget,
        lone surrogates as U+FFFD (as the view sends them: a provider's JSON cannot carry
        them)."""
        members = [well_formed(dict(messages[i])) for i in group]
        if self._group_cost(members) <= self.chunk_budget:
            return members
        return shorten_group(members, self.chunk_budget, self.counter)


def tool_call_groups(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indexes of ``messages`` in atomic groups: an assistant message with tool calls owns
    the results after it that answer those calls; every other message is its own group."""
    groups: list[list[int]] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        info = inspect_message(message, index=index)
        answers = set(info.result_ids)
        if info.kind is Kind.TOOL_RESULT and open_calls and answers <= open_calls:
            groups[-1].append(index)
            continue
        groups.append([index])
        open_calls = set(info.call_ids) if info.kind is Kind.ASSISTANT else set()
    return groups


def chunk_groups(
    messages: Sequence[Mapping[str, Any]],
    groups: list[list[int]],
    cost: Callable[[Sequence[Mapping[str, Any]]], int],
    budget: int,
) -> list[list[list[int]]]:
    """Consecutive groups packed greedily into chunks whose summed ``cost`` stays within
    ``budget``; a group over budget alone becomes a chunk of its own (shortened later)."""
    chunks: list[list[list[int]]] = []
    used = 0
    for group in groups:
        group_cost = cost([messages[i] for i in group])
        if chunks and used + group_cost <= budget:
            chunks[-1].append(group)
            used += group_cost
        else:
            chunks.append([group])
            used = group_cost
    return chunks


def shorten_group(
    members: list[dict[str, Any]], budget: int, counter: TokenCounter
) -> list[dict[str, Any]]:
    """A copy of an over-budget group that fits ``budget``: tool results are cut first (to
    their start and end), and the other messages only if the results alone cannot make room.
    """
    results = [i for i, m in enumerate(members) if _is_result(m)]
    others = [i for i in range(len(members)) if i not in results]
    fixed = sum(counter.count_text(render_transcript([members[i]])) for i in others)
    if results and fixed <= budget // 2:
        share = (budget - fixed) // len(results)
        cut = results
    else:
        share = budget // len(members)
        cut = list(range(len(members)))
    shortened = list(members)
    for i in cut:
        shortened[i] = _shorten_message(members[i], share, counter)
    return shortened


def _is_result(message: Mapping[str, Any]) -> bool:
    return inspect_message(message, index=None).kind is Kind.TOOL_RESULT


def _shorten_message(
    message: dict[str, Any], max_tokens: int, counter: TokenCounter
) -> dict[str, Any]:
    """The message with every text in its content cut to its start and end, sharing
    ``max_tokens`` between them (tool-call arguments are left whole)."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": head_tail(content, max_tokens, counter)}
    if not isinstance(content, list):
        return message
    texts = sum(1 for block in content if _block_text(block) is not None)
    share = max_tokens // max(texts, 1)
    blocks = []
    for block in content:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            block = {**block, "text": head_tail(block["text"], share, counter)}
        elif isinstance(block, Mapping) and isinstance(block.get("content"), str):
            block = {**block, "content": head_tail(block["content"], share, counter)}
        blocks.append(block)
    return {**message, "content": blocks}


def _block_text(block: Any) -> str | None:
    if not isinstance(block, Mapping):
        return None
    for key in ("text", "content"):
        if isinstance(block.get(key), str):
            return block[key]
    return None


def head_tail(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` if it fits ``max_tokens``, else its start and end around a marker saying how
    many characters were left out of the summarizer's input."""
    if counter.count_text(text) <= max_tokens:
        return text
    low, high = 0, len(text) // 2
    best = _joined(text, 0)
    while low <= high:  # the largest head/tail size that fits
        middle = (low + high) // 2
        candidate = _joined(text, middle)
        if counter.count_text(candidate) <= max_tokens:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def _joined(text: str, keep: int) -> str:
    omitted = len(text) - 2 * keep
    tail = text[len(text) - keep :] if keep else ""
    return f"{text[:keep]}\n[... {omitted:,} characters left out for the summary ...]\n{tail}"
