"""`contextfold.fit` works from synchronous code and from inside a running event loop;
`afit` is its async form; both give the view a kept context would give."""

from __future__ import annotations

import asyncio
import warnings

import pytest

import contextfold
from contextfold import ContextFold

MESSAGES = [{"role": "system", "content": "You answer briefly."}] + [
    message
    for turn in range(40)
    for message in (
        {"role": "user", "content": f"question {turn}: " + "why " * 80},
        {"role": "assistant", "content": f"answer {turn}: " + "because " * 80},
    )
]


async def _kept_view(budget: int) -> list[dict]:
    context = ContextFold()
    await context.set_messages(MESSAGES)
    return await context.get_messages_for_request(token_budget=budget)


def test_fit_from_sync_code_is_the_kept_contexts_view() -> None:
    view = contextfold.fit(MESSAGES, 2_000)
    assert view == asyncio.run(_kept_view(2_000))
    assert len(view) < len(MESSAGES)


def test_fit_inside_a_running_loop_works_and_leaves_no_unawaited_coroutine() -> None:
    async def handler() -> list[dict]:
        return contextfold.fit(MESSAGES, 2_000)  # e.g. from a notebook or a web handler

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would fail here
        view = asyncio.run(handler())
    assert view == asyncio.run(_kept_view(2_000))


async def test_afit_is_the_async_form() -> None:
    assert await contextfold.afit(MESSAGES, 2_000) == await _kept_view(2_000)


def test_fit_accepts_a_one_pass_iterable_and_leaves_the_callers_messages_alone() -> None:
    before = [dict(m) for m in MESSAGES]
    view = contextfold.fit(iter(MESSAGES), 2_000)
    view[0]["content"] = "changed"
    assert before == MESSAGES


@pytest.mark.parametrize("budget", [0, -5, 1.5, "2000", True])
def test_a_bad_budget_is_a_clear_error_inside_and_outside_a_loop(budget: object) -> None:
    with pytest.raises(ValueError, match="token_budget must be a positive whole number"):
        contextfold.fit(MESSAGES, budget)  # type: ignore[arg-type]

    async def inside() -> None:
        contextfold.fit(MESSAGES, budget)  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="token_budget must be a positive whole number"):
        asyncio.run(inside())
