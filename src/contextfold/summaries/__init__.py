"""Summaries made once and kept: records keyed by what they cover, a store, the summarizer.

- :mod:`~contextfold.summaries.records`: :class:`SummaryRecord` and :func:`covered_hash`.
- :mod:`~contextfold.summaries.store`: the :class:`SummaryStore` interface, in memory.
- :mod:`~contextfold.summaries.summarizer`: the :class:`Summarizer` protocol, adapters for
  the OpenAI and Anthropic SDKs and Amplifier providers, the offline digest summarizer, and
  :func:`summarize_span`, which turns every failure into a :class:`SummaryFailure`.
- :mod:`~contextfold.summaries.fold`: :class:`SummaryFolder`, which folds a span chunk by
  chunk (never cut to its tail) and reuses stored records instead of calling again.
"""

from __future__ import annotations

from contextfold.summaries.digest import digest_transcript
from contextfold.summaries.fold import FoldResult, SummaryFolder, tool_call_groups
from contextfold.summaries.records import (
    SCHEMA_VERSION,
    SummaryRecord,
    SummaryRecordError,
    canonical_message_json,
    covered_hash,
)
from contextfold.summaries.store import InMemorySummaryStore, SummaryStore
from contextfold.summaries.summarizer import (
    DEFAULT_SUMMARY_PROMPT,
    SUMMARY_METADATA_KEY,
    SUMMARY_REQUEST_MARKER,
    AnswerCutOff,
    Summarizer,
    SummaryFailure,
    SummaryPrompt,
    amplifier_summarizer,
    anthropic_summarizer,
    openai_summarizer,
    scripted_summarizer,
    summarize_span,
)
from contextfold.summaries.transcript import (
    is_previous_summary,
    previous_summary_message,
    render_transcript,
)

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "SCHEMA_VERSION",
    "SUMMARY_METADATA_KEY",
    "SUMMARY_REQUEST_MARKER",
    "AnswerCutOff",
    "FoldResult",
    "InMemorySummaryStore",
    "Summarizer",
    "SummaryFailure",
    "SummaryFolder",
    "SummaryPrompt",
    "SummaryRecord",
    "SummaryRecordError",
    "SummaryStore",
    "amplifier_summarizer",
    "anthropic_summarizer",
    "canonical_message_json",
    "covered_hash",
    "digest_transcript",
    "is_previous_summary",
    "openai_summarizer",
    "previous_summary_message",
    "render_transcript",
    "scripted_summarizer",
    "summarize_span",
    "tool_call_groups",
]
