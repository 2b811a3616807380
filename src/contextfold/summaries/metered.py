"""A summarizer measured: every call as the request it stands for, for pricing.

The offline summarizer (`scripted_summarizer`) makes no request, but a real one would: the
eval and ``replay`` wrap it so each call is recorded as the transcript request an SDK
summarizer sends (the summary prompt as the system message, the rendered span as the user's)
with its answer as output, and price what summarizing would have cost apart from the views.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextfold.costing import PricedRequest
from contextfold.summaries.summarizer import DEFAULT_SUMMARY_PROMPT, Summarizer
from contextfold.summaries.transcript import render_transcript

__all__ = ["MeteredSummarizer"]


class MeteredSummarizer:
    """``inner``, each call recorded as a `PricedRequest` (no prefix shared: a transcript
    request repeats nothing of the conversation's). ``count_request`` counts a request's
    messages (with its framing), ``count_output`` an answer's text."""

    def __init__(
        self,
        inner: Summarizer,
        count_request: Callable[[Sequence[Mapping[str, Any]]], int],
        count_output: Callable[[str], int],
    ) -> None:
        self.inner = inner
        self.count_request = count_request
        self.count_output = count_output
        self.name = getattr(inner, "name", type(inner).__name__)
        self.prompt = getattr(inner, "prompt", DEFAULT_SUMMARY_PROMPT)
        self.made: list[PricedRequest] = []

    async def __call__(self, messages: list[dict[str, Any]], max_tokens: int) -> str:
        answer = await self.inner(messages, max_tokens)
        request = [
            {"role": "system", "content": self.prompt.text},
            {"role": "user", "content": render_transcript(messages)},
        ]
        output = self.count_output(answer) if isinstance(answer, str) else 0
        self.made.append(PricedRequest(self.count_request(request), 0, output_tokens=output))
        return answer

    def take(self) -> list[PricedRequest]:
        """The calls made since the last `take`."""
        made, self.made = self.made, []
        return made
