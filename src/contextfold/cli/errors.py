"""The CLI's one error type for bad input: a file or option it cannot use."""

from __future__ import annotations


class InputError(Exception):
    """A file (or option) the CLI cannot use. ``str()`` is the one line shown to the user."""

    def __init__(self, source: str, problem: str, place: str | None = None) -> None:
        self.source = source
        self.place = place
        self.problem = problem
        where = f"{source}, {place}" if place else source
        super().__init__(f"{where}: {problem}")


class OutputError(Exception):
    """Standard output cannot be written (a full disk, a closed pipe): the one line shown."""
