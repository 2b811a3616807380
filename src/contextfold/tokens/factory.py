"""Pick a counter by name, as the ``token_counter`` config key does."""

from __future__ import annotations

import logging

from contextfold.tokens.base import TokenCounter
from contextfold.tokens.calibrated import CalibratedCounter
from contextfold.tokens.encodings import encoding_for_model
from contextfold.tokens.exact import ExactCounter
from contextfold.tokens.heuristic import HeuristicCounter

__all__ = ["COUNTER_KINDS", "build_counter"]

logger = logging.getLogger(__name__)

COUNTER_KINDS: tuple[str, ...] = ("heuristic", "exact", "calibrated")


def build_counter(kind: str = "calibrated", *, model: str | None = None) -> TokenCounter:
    """Build the counter named by ``kind`` (one of :data:`COUNTER_KINDS`).

    - ``"heuristic"``: :class:`HeuristicCounter`.
    - ``"exact"``: :class:`ExactCounter` with the model's encoding (``o200k_base`` when no model
      is given). A model with no known public encoding (Claude, Gemini, ...) gets the heuristic
      instead, with an INFO log line saying so: counting it with an OpenAI vocabulary would
      only look exact.
    - ``"calibrated"``: :class:`CalibratedCounter` over what ``"exact"`` gives.
    """
    if not isinstance(kind, str) or kind not in COUNTER_KINDS:
        raise ValueError(
            f"unknown token_counter {kind!r}; choose one of {', '.join(COUNTER_KINDS)}"
        )
    if kind == "heuristic":
        return HeuristicCounter()
    if kind == "calibrated":
        return CalibratedCounter(build_counter("exact", model=model))
    if model is None:
        return ExactCounter("o200k_base")
    encoding = encoding_for_model(model)
    if encoding is None:
        logger.info(
            "no public tokenizer known for model %r; counting tokens with the heuristic "
            "(calibration against reported usage corrects its scale)",
            model,
        )
        return HeuristicCounter()
    return ExactCounter(encoding)
