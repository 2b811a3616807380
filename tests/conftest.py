"""Set up once for the whole run: the OpenTelemetry SDK's tracer provider of the span tests
(`otel_support`), installed before any test (or docs example) could set another, since a
process sets it only once. It records only inside `otel_support.recording()`."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("opentelemetry.sdk") is not None:
    from tests.otel_support import install

    install()
