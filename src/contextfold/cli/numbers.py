"""Whole numbers as a command line gives them: ``8000``, ``8_000`` or ``8,000``."""

from __future__ import annotations

import argparse


def whole_number(text: str) -> int:
    """``text`` as an integer; argparse's error naming it otherwise."""
    try:
        return int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """``text`` as an integer above 0."""
    value = whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value
