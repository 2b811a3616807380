"""Which counter made a token cost, so a stored cost is reused only by a counter that would
count the same.

A durable session stores each message's cost beside the message; a worker counting another
way (the heuristic against an exact tokenizer, another encoding, another model's
``token_model``) must count the message again, or its budget is kept in the wrong unit.
"""

from __future__ import annotations

from contextfold.tokens.base import TokenCounter
from contextfold.tokens.calibrated import CalibratedCounter

__all__ = ["COUNTING_RULES_VERSION", "cost_identity"]

# Bump whenever a counter of this package counts the same message differently (framing,
# the heuristic's rates, image and document pricing): costs stored before are counted again.
COUNTING_RULES_VERSION = 1


def cost_identity(counter: TokenCounter) -> str:
    """The name of what counted, e.g. ``"exact:o200k_base;rules=1"`` or
    ``"heuristic;rules=1"``: the counter's name (an exact counter's names its encoding) and
    the version of the counting rules. A calibrated counter's raw counts are its base
    counter's, so it has its base counter's identity (calibration scales totals, never a
    stored cost)."""
    base = counter.base if isinstance(counter, CalibratedCounter) else counter
    return f"{base.name};rules={COUNTING_RULES_VERSION}"
