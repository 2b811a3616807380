"""``python -m contextfold.cli``: the same command as the ``contextfold`` console script."""

from __future__ import annotations

import sys

from contextfold.cli import main

if __name__ == "__main__":
    sys.exit(main())
