"""Cache-aligned summary requests: the view as it was last sent, then the instruction.

A summary request built as a fresh prompt (the summary prompt, then the span rendered as a
transcript) is fresh input from its first token: the provider has never seen it. The
conversation's own prompt is in the provider's cache already (the last request sent it), and
the turns a pass summarizes are the oldest ones in it. So a summary request can send that
prompt again, byte for byte, and add one message after it, the instruction naming the span:
everything before the instruction is read from the cache, at a tenth of the input price with
Anthropic and OpenAI, and only the instruction is new.

:class:`SentPrefix` is the view as it was last sent, with the position of each history
message in it; :func:`aligned_request` builds the request when every message of the span is
there (and the summary so far is the one the view carries), else None and the folder sends
the transcript request. The request's last message carries :data:`SUMMARY_REQUEST_KEY` in its
metadata (:class:`~contextfold.summaries.transcript.AlignedSpan`): where the span and the
summary so far lie in it.

It pays only where the summarizer reads the same cache as the conversation: the same
provider and model. A summarizer on another model reads nothing from the conversation's
cache and would pay the whole view as fresh input, so only a summarizer that says it takes
aligned requests (``aligned_requests = True``) gets them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextfold.summaries.records import SummaryRecord
from contextfold.summaries.summarizer import SummaryPrompt
from contextfold.summaries.transcript import SUMMARY_REQUEST_KEY, AlignedSpan

__all__ = ["SentPrefix", "aligned_request", "takes_aligned_requests"]

# How many characters of the span's first and last message the instruction quotes, so a
# model finds the span's ends by their words as well as by their positions.
_QUOTE_CHARS = 80


@dataclass(frozen=True)
class SentPrefix:
    """The view as it was last sent (the caller's copies, as handed out), where each history
    message stands in it (history id -> position), and the summary it carries (its record
    and position), if any."""

    messages: Sequence[Mapping[str, Any]]
    positions: Mapping[int, int]
    summary_record: SummaryRecord | None = None
    summary_at: int | None = None


def takes_aligned_requests(summarizer: Any) -> bool:
    """Whether ``summarizer`` says it takes cache-aligned requests (``aligned_requests``)."""
    return getattr(summarizer, "aligned_requests", False) is True


def aligned_request(
    prefix: SentPrefix,
    history_ids: Sequence[int],
    previous: SummaryRecord | None,
    prompt: SummaryPrompt,
    covers: str,
) -> list[dict[str, Any]] | None:
    """``prefix``'s messages and the instruction to summarize ``history_ids`` (folding in
    ``previous``), or None when the prefix cannot stand for them: a message of the span is
    not in it, or the summary so far is not the one it carries."""
    if not history_ids:
        return None
    positions = [prefix.positions.get(i) for i in history_ids]
    if any(p is None for p in positions):
        return None
    first = min(p for p in positions if p is not None)
    last = max(p for p in positions if p is not None)
    summary_at = None
    if previous is not None:
        if prefix.summary_record is None or (
            prefix.summary_record.covered_hash != previous.covered_hash
        ):
            return None
        summary_at = prefix.summary_at
        if summary_at is None or summary_at >= first:
            return None
    span = AlignedSpan(first, last, summary_at, covers)
    instruction = {
        "role": "user",
        "content": instruction_text(prefix.messages, span, prompt),
        "metadata": {SUMMARY_REQUEST_KEY: span.to_dict()},
    }
    return [*(dict(m) for m in prefix.messages), instruction]


def instruction_text(
    messages: Sequence[Mapping[str, Any]], span: AlignedSpan, prompt: SummaryPrompt
) -> str:
    """The summary prompt, then which messages above are the transcript to summarize."""
    lines = [
        prompt.text,
        "",
        f"The transcript is part of this conversation: messages {span.first + 1} to "
        f"{span.last + 1} above (counting from the first message of the conversation), "
        f"recall ids {span.covers}.",
    ]
    if span.previous is not None:
        lines.append(
            f"Message {span.previous + 1} is the summary of the conversation so far: fold the "
            "transcript into it and return one summary of everything."
        )
    lines.append(f"It starts with: {_quote(messages[span.first])}")
    lines.append(f"It ends with: {_quote(messages[span.last])}")
    lines.append("Summarize only that transcript; do not answer or continue the conversation.")
    return "\n".join(lines)


def _quote(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        texts = [
            str(b.get("text") or b.get("content") or "")
            for b in content
            if isinstance(b, Mapping) and b.get("type") not in ("thinking", "redacted_thinking")
        ]
        content = " ".join(t for t in texts if t)
    text = " ".join(str(content or "").split())
    if not text and message.get("tool_calls"):
        text = "(tool calls)"
    role = message.get("role", "?")
    short = text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."
    return f'({role}) "{short}"'
