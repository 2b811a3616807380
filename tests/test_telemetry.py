"""OpenTelemetry spans, checked with the real SDK's in-memory exporter: in a library session,
in a real kernel session (loop-fold + context-fold + provider-scripted), not recording, off,
and with OpenTelemetry absent."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry import trace
from tests.otel_support import install, named, recording
from tests.support import agent_run, human
from tests.test_amplifier_orchestrator import mount_plan, open_session, parts

from contextfold import ContextFold
from contextfold.errors import ConfigError, ContextLengthError
from contextfold.recall import RecallError
from contextfold.summaries import scripted_summarizer
from contextfold.telemetry import ADMIT, RECALL, REQUEST, SEARCH, SUMMARIZE, USAGE

LADDER = ["strip_thinking", "summarize", "truncate_tool_results", "drop_oldest"]


def attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_library_session_traces_requests_admissions_summaries_recalls_and_usage(
    tmp_path: Any,
) -> None:
    messages = agent_run(30, result_chars=1500)
    with recording() as exporter:
        context = ContextFold(
            max_tokens=6000,
            strategies=LADDER,
            summarizer=scripted_summarizer(),
            store=f"sqlite:///{tmp_path / 'otel.db'}",
            session_id="session-7",
            prices="anthropic",
        )
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and index > 1:
                await context.get_messages_for_request()
                await context.on_llm_response(
                    {
                        "usage": {
                            "input_tokens": 3000,
                            "cache_read_tokens": 2000,
                            "cache_write_tokens": 500,
                            "output_tokens": 40,
                        },
                        "model": "claude-sonnet-4-5",
                    }
                )
            await context.add_message(message)
        await context.get_messages_for_request()
        recalled = await context.recall("r3")
        with pytest.raises(RecallError):
            await context.recall("r99999")
        spans = exporter.get_finished_spans()

    admissions = named(spans, ADMIT)
    assert len(admissions) == len(messages)
    first = attributes(admissions[0])
    assert first["contextfold.message.role"] == "system"
    assert first["contextfold.message.index"] == 0
    assert first["contextfold.message.tokens"] > 0
    assert first["gen_ai.conversation.id"] == "session-7"
    assert [attributes(s)["contextfold.message.index"] for s in admissions] == list(
        range(len(messages))
    )

    requests = named(spans, REQUEST)
    reports = sum(1 for i, m in enumerate(messages) if m["role"] == "assistant" and i > 1) + 1
    assert len(requests) == reports
    compacted = [attributes(s) for s in requests if attributes(s)["contextfold.compacted"]]
    assert compacted, "the run compacted"
    one = compacted[0]
    assert one["contextfold.tokens.after"] < one["contextfold.tokens.before"]
    assert one["contextfold.budget"] > 0 and one["contextfold.trigger"] <= one["contextfold.budget"]
    assert one["contextfold.rungs_applied"]
    assert one["contextfold.cache.share"] == 0  # a pass rewrote the prefix
    assert one["contextfold.cost.usd"] > 0
    assert one["gen_ai.conversation.id"] == "session-7"
    steady = [attributes(s) for s in requests[1:] if not attributes(s)["contextfold.compacted"]]
    assert steady and all(0 < a["contextfold.cache.share"] <= 1 for a in steady)
    assert sum(a["contextfold.summaries.written"] for a in map(attributes, requests)) >= 1
    assert sum(a["contextfold.messages.removed"] for a in map(attributes, requests)) > 0

    # Each summarizer call is a child of the request span whose pass needed it.
    summaries = named(spans, SUMMARIZE)
    assert summaries
    by_id = {s.context.span_id: s for s in requests}
    for summary in summaries:
        assert summary.parent is not None and summary.parent.span_id in by_id
        assert attributes(summary)["contextfold.summary.messages"] > 0
        assert attributes(summary)["contextfold.summary.chars"] > 0

    recalls = named(spans, RECALL)
    assert [attributes(s)["contextfold.recall.id"] for s in recalls] == ["r3", "r99999"]
    assert attributes(recalls[0])["contextfold.recall.chars"] == len(recalled)
    assert recalls[1].status.status_code is trace.StatusCode.ERROR
    assert attributes(recalls[1])["error.type"] == "RecallError"

    usages = named(spans, USAGE)
    assert len(usages) == reports - 1
    usage = attributes(usages[0])
    assert usage["gen_ai.usage.input_tokens"] == 3500  # gross input plus cache writes
    assert usage["gen_ai.usage.cache_read.input_tokens"] == 2000
    assert usage["gen_ai.usage.cache_creation.input_tokens"] == 500
    assert usage["gen_ai.usage.output_tokens"] == 40
    assert usage["gen_ai.response.model"] == "claude-sonnet-4-5"
    assert usage["contextfold.cache.share"] == round(2000 / 3500, 4)
    assert usage["contextfold.cost.usd"] > 0
    # Linked to the request whose view it answered.
    assert usages[0].links and usages[0].links[0].context.span_id == requests[0].context.span_id


async def test_a_kernel_session_traces_every_request_under_the_callers_span() -> None:
    plan = mount_plan(
        {"steps": 8, "final_text": "Done."},
        context={"max_tokens": 4000},
        result_chars=3000,
    )
    tracer = trace.get_tracer("test")
    with recording() as exporter:
        async with open_session(plan) as (session, _):
            with tracer.start_as_current_span("agent turn") as turn:
                answer = await session.execute("Research eight topics.")
            context, provider = parts(session)
            history = await context.get_messages()
        spans = exporter.get_finished_spans()
    assert answer == "Done."
    requests = named(spans, REQUEST)
    assert len(requests) == len(provider.records) == 9
    assert all(s.parent is not None and s.parent.span_id == turn.get_span_context().span_id
               for s in requests)  # fmt: skip
    assert all(attributes(s)["gen_ai.provider.name"] == "scripted" for s in requests)
    assert any(attributes(s)["contextfold.compacted"] for s in requests)
    assert len(named(spans, ADMIT)) == len(history)
    # provider-scripted reports usage on llm:response: one usage span per model call.
    usages = named(spans, USAGE)
    assert len(usages) == 9
    assert all(attributes(s)["gen_ai.usage.input_tokens"] > 0 for s in usages)
    assert [attributes(s)["gen_ai.usage.cache_read.input_tokens"] for s in usages] == [
        record.cache_read_tokens for record in provider.records
    ]


async def test_nothing_is_recorded_when_the_caller_trace_is_not_sampled() -> None:
    install()
    context = ContextFold(max_tokens=4000)
    with recording() as exporter:
        unsampled = trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=1, span_id=2, is_remote=True, trace_flags=trace.TraceFlags(0)
            )
        )
        with trace.use_span(unsampled):
            for message in agent_run(4):
                await context.add_message(message)
            await context.get_messages_for_request()
        assert exporter.get_finished_spans() == ()
    # Outside any recording window the switch sampler drops everything too.
    await context.get_messages_for_request()
    assert exporter.get_finished_spans() == ()


async def test_off_means_no_tracer_and_bad_values_are_refused() -> None:
    assert ContextFold(opentelemetry="off")._telemetry is None
    assert ContextFold()._telemetry is not None  # installed: on by default
    for bad in ("on", "", None, True):
        with pytest.raises(ConfigError, match="opentelemetry"):
            ContextFold(opentelemetry=bad)
    with recording() as exporter:
        context = ContextFold(opentelemetry="off")
        await context.add_message(human("hi"))
        await context.get_messages_for_request()
        assert exporter.get_finished_spans() == ()


async def test_a_failing_description_never_breaks_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = ContextFold(max_tokens=4000)
    telemetry = context._telemetry
    assert telemetry is not None

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("exporter bug")

    telemetry.describe_request = broken  # type: ignore[method-assign]
    with recording() as exporter, caplog.at_level(logging.WARNING):
        await context.add_message(human("hi"))
        view = await context.get_messages_for_request()
        spans = named(exporter.get_finished_spans(), REQUEST)
    assert view and view[0]["content"] == "hi"
    assert len(spans) == 1  # ended all the same
    assert "describing a span failed" in caplog.text


async def test_a_refused_request_is_an_error_span() -> None:
    context = ContextFold(max_tokens=1000)
    with recording() as exporter:
        await context.add_message(human("x " * 5000))
        with pytest.raises(ContextLengthError):
            await context.get_messages_for_request()
        [span] = named(exporter.get_finished_spans(), REQUEST)
    assert span.status.status_code is trace.StatusCode.ERROR
    assert attributes(span)["error.type"] == "ContextLengthError"


@pytest.mark.slow
def test_without_opentelemetry_nothing_is_imported_and_everything_works() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys

        class Blocked:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError("blocked for the test")
                return None

        sys.meta_path.insert(0, Blocked())
        from contextfold import ContextFold

        async def main():
            context = ContextFold(max_tokens=4000)
            assert context._telemetry is None
            await context.add_message({"role": "user", "content": "hi"})
            assert (await context.get_messages_for_request())[0]["content"] == "hi"
            assert await context.recall("r0") == "hi"

        asyncio.run(main())
        assert not any(name.startswith("opentelemetry") for name in sys.modules), sorted(
            name for name in sys.modules if name.startswith("opentelemetry")
        )
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_an_admission_span_counts_clipped_results_and_repairs() -> None:
    context = ContextFold(max_tool_result_bytes=1024)
    with recording() as exporter:
        await context.add_message(human("go"))
        await context.add_message({"role": "tool", "tool_call_id": "nobody", "content": "x"})
        await context.add_message(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "tool": "t", "arguments": {}}],
            }
        )
        await context.add_message({"role": "tool", "tool_call_id": "c1", "content": "y" * 5000})
        spans = named(exporter.get_finished_spans(), ADMIT)
    notes = [
        (attributes(s)["contextfold.ingress.clipped"], attributes(s)["contextfold.repairs"])
        for s in spans
    ]
    assert notes == [(0, 0), (0, 1), (0, 0), (1, 0)]


async def test_a_search_span_says_how_much_was_asked_and_found_never_the_words() -> None:
    with recording() as exporter:
        context = ContextFold(max_tokens=3000)
        for message in agent_run(30, result_chars=1500):
            await context.add_message(message)
        await context.get_messages_for_request()  # compacts: there is something to search
        hits = await context.search("lookup results of topic three", limit=4)
        with pytest.raises(ValueError):
            await context.search("   ", limit=4)  # refused before a span is started
        spans = named(exporter.get_finished_spans(), SEARCH)
    assert hits
    assert len(spans) == 1
    assert attributes(spans[0]) == {
        "contextfold.search.query_chars": len("lookup results of topic three"),
        "contextfold.search.query_words": 5,
        "contextfold.search.limit": 4,
        "contextfold.search.hits": len(hits),
    }
    assert spans[0].status.status_code is not trace.StatusCode.ERROR


@pytest.mark.slow
def test_a_provider_set_after_the_context_was_made_is_found() -> None:
    # An application may build its context before it sets up OpenTelemetry (or never set it
    # up, or name its provider in OTEL_PYTHON_TRACER_PROVIDER): the cheap path must not
    # miss the provider once there is one. A fresh process: a provider is set only once.
    script = textwrap.dedent(
        """
        import asyncio

        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        from contextfold import ContextFold

        async def main():
            context = ContextFold(max_tokens=4000)
            await context.add_message({"role": "user", "content": "hi"})
            await context.get_messages_for_request()  # no provider yet: nothing to record
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            assert exporter.get_finished_spans() == ()
            trace.set_tracer_provider(provider)
            await context.add_message({"role": "assistant", "content": "hello"})
            await context.get_messages_for_request()
            names = [span.name for span in exporter.get_finished_spans()]
            assert names == ["contextfold.admit", "contextfold.request"], names

        asyncio.run(main())
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.slow
def test_a_provider_named_in_the_environment_is_found() -> None:
    # Nothing but the variable sets the provider up: the context loads it when it is made,
    # and its request's events are emitted inside a recording request span.
    script = textwrap.dedent(
        """
        import asyncio

        from opentelemetry import trace

        from contextfold import ContextFold

        spans = []

        def on_event(name, payload):
            span = trace.get_current_span()
            spans.append((name, getattr(span, "name", None), span.is_recording()))

        async def main():
            context = ContextFold(max_tokens=4000, on_event=on_event)
            await context.add_message({"role": "user", "content": "hi"})
            await context.get_messages_for_request()
            assert ("context:budget", "contextfold.request", True) in spans, spans

        asyncio.run(main())
        print("ok")
        """
    )
    environment = dict(os.environ, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
