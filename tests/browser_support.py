"""A real headless Chromium for the inspector page's tests: Debian's ``chromium`` driven by
Playwright (its own browser download is never used).

Without a browser the tests skip, unless ``CONTEXTFOLD_REQUIRE_BROWSER=1`` (set by
``.ci/run``, which installs ``chromium`` when it is missing): then they fail. Screenshots are
kept in the test's tmp dir and, when ``CONTEXTFOLD_TEST_ARTIFACTS`` names a folder (``.ci/run``
sets ``test-artifacts``), copied there as the run's artifacts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# A closed network: no background connections, no first-run, no sandbox (root in CI).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    found = os.environ.get("CONTEXTFOLD_CHROMIUM")
    if found and Path(found).exists():
        return found
    for candidate in CHROMIUM_PATHS:
        if Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


def browser_or_skip() -> str:
    """The browser's path; skips (or fails where a browser is required) without one."""
    path = chromium_path()
    problem = None
    if path is None:
        problem = "no chromium on this machine (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "playwright is not installed (uv sync installs it with the dev group)"
    if problem is not None:
        if os.environ.get("CONTEXTFOLD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CONTEXTFOLD_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(problem)
    assert path is not None
    return path


class OpenedPage:
    """A page opened from a file, with every console error and page error it raised."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on(
            "console",
            lambda message: (
                self.errors.append(f"console {message.type}: {message.text}")
                if message.type in ("error", "warning")
                else None
            ),
        )
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("requestfailed", lambda request: self.errors.append(f"request: {request.url}"))
        page.on(
            "request",
            lambda request: (
                None
                if request.url.startswith(("file:", "data:", "blob:"))
                else self.errors.append(f"network request: {request.url}")
            ),
        )


@contextmanager
def opened(path: Path, *, width: int = 1150, height: int = 1400) -> Iterator[OpenedPage]:
    """``path`` open in headless Chromium, its scripts run and its first render done."""
    executable = browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            watched = OpenedPage(page)
            page.goto(path.resolve().as_uri())
            page.wait_for_selector("body[data-ready]", timeout=60_000)
            assert page.evaluate("document.body.dataset.ready") == "1", watched.errors
            page.wait_for_selector("#details[data-ready='1']", timeout=60_000)
            yield watched
        finally:
            browser.close()


def keep_screenshot(page: Any, path: Path) -> Path:
    """A full-page screenshot at ``path``, also kept in the artifacts folder when one is set
    (named by the test's tmp dir and the file, so tests never overwrite each other's)."""
    page.screenshot(path=str(path), full_page=True)
    folder = os.environ.get("CONTEXTFOLD_TEST_ARTIFACTS")
    if folder:
        kept = Path(folder) / f"{path.parent.name}-{path.name}"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, kept)
    assert path.stat().st_size > 0
    return path
