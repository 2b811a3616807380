"""The ``contextfold`` console script: runs the CLI, naming the extra a command lacks.

The library alone reads a store (``contextfold sessions``); ``demo``, ``replay`` and ``eval``
need the kernel (the demo runs a real session), rich and PyYAML, which the ``[cli]`` extra
brings, and draw their charts with matplotlib when the ``[charts]`` extra is there. Without
what it needs a command says so in one line and exits 2, instead of a traceback naming a
module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from contextfold.cli import EXIT_BAD_INPUT
from contextfold.cli import main as run_cli

# Top-level modules the [cli] extra provides, by the name Python imports them under.
CLI_EXTRA_MODULES = frozenset({"amplifier_core", "rich", "yaml"})
INSTALL_HINT = (
    "contextfold: this command needs the [cli] extra ({missing} is not installed): install "
    "contextfold with it (from a checkout: pip install '.[cli]')"
)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run_cli(argv)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in CLI_EXTRA_MODULES:
            raise  # a genuinely broken installation, not a missing extra
        print(INSTALL_HINT.format(missing=missing), file=sys.stderr)
        return EXIT_BAD_INPUT


def console() -> None:
    """The console script: run, flush, and leave without interpreter teardown.

    amplifier-core's engine sometimes crashes while the interpreter shuts down after a
    session ran (a fatal error in PyGILState_Release, or a segmentation fault, after all
    output was written), which would turn a finished command's status into 134 or 139.
    Everything the command writes is closed by the time `main` returns, so skipping the
    teardown loses nothing.
    """
    status = main()
    try:
        sys.stdout.flush()
    except OSError as error:  # what an unguarded printout left behind cannot be written
        print(
            f"contextfold: error: cannot write to standard output ({error.strerror})",
            file=sys.stderr,
        )
        status = status or EXIT_BAD_INPUT
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    console()
