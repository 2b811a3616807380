"""The CLI's exit statuses, and its one error type for bad input: a file or option it
cannot use."""

from __future__ import annotations

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1  # ContextLengthError: the protected content alone is too big
EXIT_BAD_INPUT = 2  # a file, option or config value the command cannot use

# The demo refuses (exit 2) a window below MIN_DEMO_WINDOW: under it not even the smallest
# --result-chars fits beside the 1,024-token reply reserve (measured: 1,500 works with 200
# characters, 1,300 does not). With the default --result-chars the task needs about
# DEMO_WINDOW_FOR_DEFAULT_RESULTS (measured: 1,550 works, 1,500 does not); a window between
# the two exits 1 ("cannot fit"). test_cli_demo checks both.
MIN_DEMO_WINDOW = 1_500
DEMO_WINDOW_FOR_DEFAULT_RESULTS = 1_550


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
