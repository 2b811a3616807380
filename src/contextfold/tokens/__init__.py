"""Token counting: a fast heuristic, an exact offline tokenizer, and a calibrated wrapper.

Counters return RAW counts per message (the manager caches them at admission); a
:class:`CalibratedCounter` scales request totals by a ratio learned per model from the usage
providers report. See ``bench/TOKENS.md`` for the measured error of each.
"""

from __future__ import annotations

from contextfold.tokens.base import TokenCounter
from contextfold.tokens.calibrated import (
    EXACT_MIN_RATIO,
    HEURISTIC_MIN_RATIO,
    UNKNOWN_MODEL_KEY,
    CalibratedCounter,
    CalibrationUpdate,
)
from contextfold.tokens.encodings import (
    SUPPORTED_ENCODINGS,
    EncodingLoadError,
    encoding_for_model,
)
from contextfold.tokens.exact import ExactCounter
from contextfold.tokens.factory import COUNTER_KINDS, build_counter
from contextfold.tokens.framing import REPLY_PRIMING_TOKENS, count_request
from contextfold.tokens.heuristic import HeuristicCounter
from contextfold.tokens.identity import COUNTING_RULES_VERSION, cost_identity
from contextfold.tokens.serialize import canonical_json, serialize_message

__all__ = [
    "COUNTER_KINDS",
    "COUNTING_RULES_VERSION",
    "EXACT_MIN_RATIO",
    "HEURISTIC_MIN_RATIO",
    "REPLY_PRIMING_TOKENS",
    "SUPPORTED_ENCODINGS",
    "UNKNOWN_MODEL_KEY",
    "CalibratedCounter",
    "CalibrationUpdate",
    "EncodingLoadError",
    "ExactCounter",
    "HeuristicCounter",
    "TokenCounter",
    "build_counter",
    "canonical_json",
    "cost_identity",
    "count_request",
    "encoding_for_model",
    "serialize_message",
]
