"""Writing to standard output when it may not take the writing: a full disk, a closed pipe.

A command's printout is its result: when it cannot be written, the command says so in one
line on stderr and exits non-zero, instead of ending in a traceback (or in the interpreter's
own complaint when it flushes what is left at exit).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from contextfold.cli.errors import EXIT_BAD_INPUT, OutputError

__all__ = ["fail", "progress_bar", "stdout_guarded", "write_stdout"]

# An error line longer than this is cut: a message quoting a huge value must stay one line.
MAX_ERROR_CHARS = 1_000


def fail(message: str, status: int = EXIT_BAD_INPUT) -> int:
    """Print one line on stderr and return the exit status."""
    line = " ".join(message.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    print(f"contextfold: error: {line}", file=sys.stderr)
    return status


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout and flush it; :class:`OutputError` when it cannot be."""
    with stdout_guarded():
        sys.stdout.write(text)


@contextmanager
def stdout_guarded() -> Iterator[None]:
    """Whatever the block writes to stdout is flushed at its end; a write that fails there
    or inside it becomes one :class:`OutputError`."""
    try:
        yield
        sys.stdout.flush()
    except OSError as error:
        _discard_stdout()
        reason = error.strerror or type(error).__name__
        raise OutputError(f"cannot write to standard output ({reason})") from None


def _discard_stdout() -> None:
    """Point stdout at the null device, so what is still buffered has somewhere to go when
    the interpreter flushes it at exit (it would fail again, with a traceback)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError):  # no real descriptor behind stdout (a test's capture)
        pass


@contextmanager
def progress_bar(total: int, unit: str, *, shown: bool) -> Iterator[Callable[[int], None] | None]:
    """A transient "replaying" bar over ``total`` ``unit`` on stderr, when ``shown`` and
    stderr is a terminal; it yields the function to tell it how many are done (None when no
    bar is drawn). rich is imported here: ``contextfold sessions`` runs without it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True)
    if not shown or not console.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        console=console,
        transient=True,
    )
    task = bar.add_task(unit, total=total)
    with bar:
        yield lambda done: bar.update(task, completed=done)
