"""A real OpenTelemetry SDK for the span tests: one global tracer provider (a process may set
it only once) exporting to memory, whose sampler records only while a test asks it to, so
the rest of the suite runs with OpenTelemetry present but not recording."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult


class Switch(Sampler):
    """Records every span while ``on``, none otherwise."""

    on = False

    def should_sample(
        self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP)

    def get_description(self) -> str:
        return "test switch"


SWITCH = Switch()
EXPORTER = InMemorySpanExporter()
_installed = False


def install() -> None:
    global _installed
    if not _installed:
        provider = TracerProvider(sampler=SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        _installed = True


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Spans recorded (and cleared) for the duration."""
    install()
    EXPORTER.clear()
    SWITCH.on = True
    try:
        yield EXPORTER
    finally:
        SWITCH.on = False


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]
