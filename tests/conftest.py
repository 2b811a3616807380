"""Set up once for the whole run.

The OpenTelemetry SDK's tracer provider of the span tests (`otel_support`) is installed before
any test (or docs example) could set another, since a process sets it only once. It records
only inside `otel_support.recording()`.

The property tests' depth: each hypothesis test declares, with `@settings(max_examples=N)`,
the examples its property deserves. The default run (`uv run pytest`) draws a quarter of
them (at least `SHALLOW_FLOOR`), so the everyday run stays fast while every property is
still exercised on fresh random inputs; with `CONTEXTFOLD_HYPOTHESIS=thorough` every
property test draws all N. `.ci/run` runs the property tests that way in its second step,
together with the slow tests (`-m "slow or hypothesis"`). A test marked slow always draws
its declared N: it is already in the long run.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if importlib.util.find_spec("opentelemetry.sdk") is not None:
    from tests.otel_support import install

    install()

if TYPE_CHECKING:
    from store_support import PostgresServer

DEPTH_ENV = "CONTEXTFOLD_HYPOTHESIS"
SHALLOW_SHARE = 4
SHALLOW_FLOOR = 10


def shallow_examples(declared: int) -> int:
    """The examples a property test of `declared` examples draws in the default run."""
    return min(declared, max(SHALLOW_FLOOR, declared // SHALLOW_SHARE))


def _depth() -> str:
    depth = os.environ.get(DEPTH_ENV, "")
    if depth not in ("", "thorough"):
        raise pytest.UsageError(f'{DEPTH_ENV}={depth!r}: set it to "thorough" or leave it unset')
    return depth


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _depth() == "thorough":
        return
    from hypothesis import is_hypothesis_test, settings

    shallowed: set[int] = set()
    for item in items:
        test = getattr(item, "obj", None)
        if test is None or not is_hypothesis_test(test) or item.get_closest_marker("slow"):
            continue
        if id(test) in shallowed:  # one function object behind several parametrized items
            continue
        # Hypothesis keeps a test's settings (its @settings merged over the profile) on the
        # wrapped test and reads them when the test runs; a fail-loud check, should that move.
        declared = getattr(test, "_hypothesis_internal_use_settings", None)
        if not isinstance(declared, settings):
            raise pytest.UsageError(
                f"{item.nodeid}: hypothesis no longer keeps a test's settings where "
                f"tests/conftest.py looks; run with {DEPTH_ENV}=thorough and update conftest"
            )
        shallow = settings(declared, max_examples=shallow_examples(declared.max_examples))
        test._hypothesis_internal_use_settings = shallow
        shallowed.add(id(test))


@pytest.fixture(scope="session")
def shared_postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole run: starting one takes seconds, and every
    test works in a database of its own on it (`fresh_database`, `empty_database`)."""
    from store_support import start_or_skip

    server = start_or_skip()
    yield server
    server.stop()
