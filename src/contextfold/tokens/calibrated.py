"""A counter that learns, per model, how far its estimates are from what the provider bills.

Even an exact tokenizer misses what a provider adds (system framing, tool rendering, a
different vocabulary for non-OpenAI models). After every response the provider reports the
real input size (``input_tokens + cache_write_tokens``); comparing it with what we estimated
for that same request gives one observation of ``actual / estimated``. We keep a smoothed
ratio per model and scale request *totals* by it; message counts stay raw, so the manager's
cached per-message integers never need recomputing when the ratio moves.

How an observation moves the ratio (all in log space, so 2x over and 2x under weigh the same):

1. The observed ratio is clamped to ``[min_ratio, max_ratio]``.
2. Warm-up (fewer than ``warmup`` accepted samples): the ratio is the median of the samples,
   so the very first response already calibrates, and with three samples one odd one is
   outvoted.
3. After warm-up, an observation more than ``outlier_factor`` away from the current ratio is
   rejected (``accepted=False``) and leaves it untouched. If ``warmup`` rejections in a row
   all point the same way, the world has changed (another system prompt, a new tool set): the
   ratio is re-seeded from their median.
4. Otherwise an exponential moving average with weight ``max(smoothing, 1/n)`` takes it in.

The state is keyed by model name only; nothing refers to the conversation, so it survives
``set_messages`` and ``clear`` as long as the manager keeps this object.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from contextfold.tokens.base import TokenCounter

__all__ = ["UNKNOWN_MODEL_KEY", "CalibratedCounter", "CalibrationUpdate"]

# How an observation without a model name is listed by ratios().
UNKNOWN_MODEL_KEY = "*"


@dataclass(frozen=True, slots=True)
class CalibrationUpdate:
    """The outcome of one observation; ``to_event()`` is the ``context:calibration`` payload."""

    model: str | None
    ratio: float
    samples: int
    estimated: int
    actual: int
    accepted: bool

    def to_event(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _ModelState:
    log_ratio: float
    samples: int = 0
    warmup_logs: list[float] = field(default_factory=list)
    rejected_logs: list[float] = field(default_factory=list)
    rejected_sign: int = 0


def _check_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int token count, got {type(value).__name__}")
    return value


class CalibratedCounter:
    """Wraps a counter; counts stay raw, :meth:`scale` applies the learned per-model ratio."""

    __slots__ = (
        "_last_model",
        "_log_max",
        "_log_min",
        "_log_outlier",
        "_log_prior",
        "_states",
        "base",
        "max_ratio",
        "min_ratio",
        "outlier_factor",
        "prior",
        "smoothing",
        "warmup",
    )

    def __init__(
        self,
        base: TokenCounter,
        *,
        smoothing: float = 0.2,
        min_ratio: float = 0.5,
        max_ratio: float = 3.0,
        outlier_factor: float = 1.5,
        warmup: int = 3,
        prior: float = 1.0,
    ) -> None:
        if not isinstance(base, TokenCounter) or isinstance(base, CalibratedCounter):
            raise TypeError(
                "base must be a plain TokenCounter (e.g. HeuristicCounter() or ExactCounter()), "
                f"got {type(base).__name__}"
            )
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if not 0.0 < min_ratio <= prior <= max_ratio or not math.isfinite(max_ratio):
            raise ValueError(
                "need 0 < min_ratio <= prior <= max_ratio < inf, got "
                f"min_ratio={min_ratio}, prior={prior}, max_ratio={max_ratio}"
            )
        if not outlier_factor > 1.0:
            raise ValueError(f"outlier_factor must be > 1, got {outlier_factor}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup must be an int >= 1, got {warmup!r}")
        self.base = base
        self.smoothing = smoothing
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.outlier_factor = outlier_factor
        self.warmup = warmup
        self.prior = prior
        self._log_min = math.log(min_ratio)
        self._log_max = math.log(max_ratio)
        self._log_outlier = math.log(outlier_factor)
        self._log_prior = math.log(prior)
        self._states: dict[str | None, _ModelState] = {}
        self._last_model: str | None = None

    # -- counting: raw, delegated ------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"calibrated:{self.base.name}"

    def count_text(self, text: str) -> int:
        return self.base.count_text(text)

    def count_message(self, message: Mapping[str, Any]) -> int:
        return self.base.count_message(message)

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        return self.base.count_tools(tools)

    # -- calibration -------------------------------------------------------------------------

    def ratio(self, model: str | None) -> float:
        """The learned ratio for ``model``; ``prior`` (1.0) until one is learned.

        ``None`` means "the model is not known at request time": it uses the ratio learned
        without a model name, else the one of the model observed most recently (a session
        talks to one model at a time), else the prior.
        """
        state = self._states.get(model)
        if state is None and model is None and self._last_model is not None:
            state = self._states.get(self._last_model)
        if state is None or state.samples == 0:
            return self.prior
        return math.exp(state.log_ratio)

    def scale(self, raw: int, model: str | None) -> int:
        """``ceil(raw * ratio(model))``: a raw request total in the provider's tokens."""
        raw = _check_count(raw, "raw")
        if raw < 0:
            raise ValueError(f"raw token count must be >= 0, got {raw}")
        ratio = self.ratio(model)
        # Round away float fuzz (1.15 * 100 == 114.99999999999999) before taking the ceiling.
        return raw if ratio == 1.0 else math.ceil(round(raw * ratio, 6))

    def observe(self, model: str | None, estimated: int, actual: int) -> CalibrationUpdate:
        """Learn from one response.

        ``estimated`` is the RAW (unscaled) count of the request the response answers;
        ``actual`` is what the provider reported for it: ``input_tokens + cache_write_tokens``.
        """
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be a str or None, got {type(model).__name__}")
        estimated = _check_count(estimated, "estimated")
        actual = _check_count(actual, "actual")
        if estimated <= 0:
            raise ValueError(
                f"estimated must be > 0 (the raw count of the request sent), got {estimated}"
            )
        if actual <= 0:
            raise ValueError(
                f"actual must be > 0 (input_tokens + cache_write_tokens from llm:response), "
                f"got {actual}; skip responses that report no usage"
            )
        observed = min(self._log_max, max(self._log_min, math.log(actual / estimated)))
        state = self._states.get(model)
        if state is None:
            state = self._states[model] = _ModelState(log_ratio=self._log_prior)
        accepted = self._update(state, observed)
        self._last_model = model
        return CalibrationUpdate(
            model=model,
            ratio=self.ratio(model),
            samples=state.samples,
            estimated=estimated,
            actual=actual,
            accepted=accepted,
        )

    def _update(self, state: _ModelState, observed: float) -> bool:
        if state.samples < self.warmup:
            state.warmup_logs.append(observed)
            state.samples += 1
            state.log_ratio = statistics.median(state.warmup_logs)
            if state.samples == self.warmup:
                state.warmup_logs.clear()
            return True
        deviation = observed - state.log_ratio
        if abs(deviation) > self._log_outlier:
            sign = 1 if deviation > 0 else -1
            if sign != state.rejected_sign:
                state.rejected_logs.clear()
                state.rejected_sign = sign
            state.rejected_logs.append(observed)
            if len(state.rejected_logs) < self.warmup:
                return False
            # A run of consistent "outliers" is a new regime, not noise: move to it.
            state.log_ratio = statistics.median(state.rejected_logs)
            state.samples = len(state.rejected_logs)
        else:
            state.samples += 1
            weight = max(self.smoothing, 1.0 / state.samples)
            state.log_ratio += weight * deviation
        state.rejected_logs.clear()
        state.rejected_sign = 0
        state.log_ratio = min(self._log_max, max(self._log_min, state.log_ratio))
        return True

    def ratios(self) -> dict[str, float]:
        """Learned ratios by model (``"*"`` for observations without a model name)."""
        return {
            UNKNOWN_MODEL_KEY if model is None else model: math.exp(state.log_ratio)
            for model, state in self._states.items()
            if state.samples
        }

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Ratios with their sample counts, for reports: ``{model: {ratio, samples}}``."""
        return {
            UNKNOWN_MODEL_KEY if model is None else model: {
                "ratio": math.exp(state.log_ratio),
                "samples": state.samples,
            }
            for model, state in self._states.items()
            if state.samples
        }

    def __repr__(self) -> str:
        return f"CalibratedCounter({self.base!r}, ratios={self.ratios()!r})"
