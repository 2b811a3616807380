"""A counter that learns, per model, how far its estimates are from what the provider bills.

Even an exact tokenizer misses what a provider adds (system framing, tool rendering, a
different vocabulary for non-OpenAI models). After every response the provider reports the
real input size (``input_tokens + cache_write_tokens``); comparing it with what we estimated
for that same request gives one observation of ``actual / estimated``. We keep a ratio per
model and scale request *totals* by it; message counts stay raw, so the manager's cached
per-message integers never need recomputing when the ratio moves.

The ratio exists to keep the budget honest, and the two ways of being wrong are not alike: an
estimate above the truth compacts a little early, one below it sends a request over the
window. Usage readings can be wrong in the dangerous direction for ordinary reasons (the
Anthropic SDK's ``input_tokens`` leaves out cache reads, so one SDK's usage read as another's
halves the figure; an error response reports 1 token), so the rules are asymmetric. All of
it happens in log space, so 2x over and 2x under weigh the same:

1. The observed ratio is clamped to ``[min_ratio, max_ratio]``. Over an exact tokenizer
   (:class:`~contextfold.tokens.ExactCounter`) ``min_ratio`` is 1.0: the estimate never goes
   below the exact count of what is sent, whatever is reported. Over the heuristic, which
   has no vocabulary and really can be 2x off, it is 0.5.
2. Upward is quick: a reading at or above the current ratio is adopted at once. Under-counting
   is the failure that overflows a window, so one reading is enough to stop it.
3. Downward needs agreement: the ratio comes down only when the last ``agreement`` readings
   (3) all agree within ``tolerance`` (10 %) of each other, and then only to the *highest* of
   them. This holds from the very first response: the prior (1.0) is not dropped on one
   reading's word. One odd low reading is never enough; three consistent ones are a fact.

So after every observation the ratio is at least the latest reading (clamped), and it is below
an earlier ratio only when several readings in a row agreed on that. The state is keyed by
model name only; nothing refers to the conversation, so it survives ``set_messages`` and
``clear`` as long as the manager keeps this object.

Some of what a provider counts does not grow with the conversation: the tool schemas and the
orchestrator's own instructions ride on every request at the same size. Read as a ratio, 600
tokens of schemas on a 150-token first request look like a 5x under-count and would shrink
the budget for the whole session. So the counter also learns a **fixed** part per model: the
estimate of a request is ``ceil(raw * ratio) + fixed``. A fixed part is only ever learned from
agreement:

4. When the last few readings (at least three and ``agreement``, sizes at least 25 % apart;
   two where the ratio's bound leaves one uncovered and the line counts more) disagree as
   ratios but lie on one line ``actual = ratio * raw + fixed`` within ``tolerance``, that
   line is adopted: its slope (clamped like any ratio) and, as the fixed
   part, the largest amount by which a reading exceeds the slope, so the line is at or above
   every one of them. This works both ways: it takes the estimate down where schemas had
   inflated the ratio, and up past the ratio's bound where schemas dwarf the messages (58
   tools' schemas on a 700-token conversation are a 20x "ratio"). ``fixed`` is never
   negative, so the estimate never goes below ``min_ratio`` times the count, and never above
   ``MAX_FIXED`` (more than any model's window: such a line is a misread usage, not a fact).
   Rules 2 and 3 then apply to what a reading leaves after the fixed part.
6. Over an exact tokenizer, a reading beyond the ratio's bound (a request billed at more
   than three times its exact count) is not a ratio at all: the excess goes to the fixed
   part, as far as the bound would have taken this request's estimate, and the ratio stays.
7. Quick is not final. An upward correction (one reading raising the estimate of its own
   request by more than ``tolerance``) rests on that reading's word until a later reading
   agrees with it (comes in at the corrected level, within ``tolerance``). Until then it is
   *suspect*: :meth:`set_aside` (the manager calls it when the corrected estimate would
   refuse a request that fits without it) goes back to what the counter said before and
   keeps the correction aside; the next reading takes it back up if it agrees, else it is
   dropped. One misread figure (20,000 tokens billed for a 5,748-token view) can therefore
   never lock a session out: it would refuse every later request, and with no request sent
   no reading could ever correct it. A correction two readings agree on is a fact and stays.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from contextfold.tokens.base import TokenCounter
from contextfold.tokens.exact import ExactCounter

__all__ = [
    "EXACT_MIN_RATIO",
    "HEURISTIC_MIN_RATIO",
    "UNKNOWN_MODEL_KEY",
    "CalibratedCounter",
    "CalibrationUpdate",
]

# How an observation without a model name is listed by ratios().
UNKNOWN_MODEL_KEY = "*"

# Lowest ratio over an exact tokenizer: the estimate never drops below the exact count of the
# request. A lower floor would let a mis-read usage figure send a view over the budget by the
# exact count, which is the one number we can check; providers that frame requests add tokens,
# they do not remove them.
EXACT_MIN_RATIO = 1.0
# Lowest ratio over the heuristic, which can really be off by this much on odd content.
HEURISTIC_MIN_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class CalibrationUpdate:
    """The outcome of one observation; ``to_event()`` is the ``context:calibration`` payload.

    ``accepted`` is False when the reading asked for a lower ratio that is still waiting for
    agreement (the ratio did not move); True when the ratio now reflects it.
    """

    model: str | None
    ratio: float
    samples: int
    estimated: int
    actual: int
    accepted: bool
    fixed: int = 0  # tokens every request costs beyond its messages (tool schemas, ...)

    def to_event(self) -> dict[str, Any]:
        return asdict(self)


# How many recent (raw, actual) readings a fixed part is fitted on, and how far apart in size
# they must be for a slope to mean anything.
FIT_READINGS = 8
FIT_MIN_SPREAD = 1.25
# A fitted line is adopted only when it counts the largest recent request this much apart
# from the current estimate (less would only add rounding noise).
FIT_MIN_CHANGE = 0.02
# No model's window is this large: a fixed part above it is a misread usage figure.
MAX_FIXED = 2_000_000
# Readings above this are never fitted (they are misread, and floats cannot hold their sums).
MAX_FITTED_READING = 10**12


@dataclass(slots=True)
class _ModelState:
    log_ratio: float
    recent: deque[float]
    samples: int = field(default=0)
    fixed: int = 0
    readings: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=FIT_READINGS))
    # Rule 7: (log_ratio, fixed) before an upward correction no later reading has agreed
    # with yet; and a correction `set_aside` took back, waiting for the next reading's word.
    suspect: tuple[float, int] | None = None
    aside: tuple[float, int] | None = None

    def estimate(self, raw: int, calibration: tuple[float, int] | None = None) -> float:
        """The estimate of a request of ``raw`` tokens under ``calibration`` (else this one)."""
        log_ratio, fixed = calibration or (self.log_ratio, self.fixed)
        return raw * math.exp(log_ratio) + fixed


def _check_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int token count, got {type(value).__name__}")
    return value


class CalibratedCounter:
    """Wraps a counter; counts stay raw, :meth:`scale` applies the learned per-model ratio."""

    __slots__ = (
        "_exact",
        "_last_model",
        "_log_max",
        "_log_min",
        "_log_prior",
        "_log_tolerance",
        "_name",
        "_named",
        "_states",
        "agreement",
        "base",
        "max_ratio",
        "min_ratio",
        "prior",
        "tolerance",
    )

    def __init__(
        self,
        base: TokenCounter,
        *,
        min_ratio: float | None = None,
        max_ratio: float = 3.0,
        agreement: int = 3,
        tolerance: float = 0.1,
        prior: float = 1.0,
    ) -> None:
        """``min_ratio`` defaults to :data:`EXACT_MIN_RATIO` over an :class:`ExactCounter`
        and to :data:`HEURISTIC_MIN_RATIO` otherwise."""
        if not isinstance(base, TokenCounter) or isinstance(base, CalibratedCounter):
            raise TypeError(
                "base must be a plain TokenCounter (e.g. HeuristicCounter() or ExactCounter()), "
                f"got {type(base).__name__}"
            )
        if min_ratio is None:
            min_ratio = EXACT_MIN_RATIO if isinstance(base, ExactCounter) else HEURISTIC_MIN_RATIO
        if not 0.0 < min_ratio <= prior <= max_ratio or not math.isfinite(max_ratio):
            raise ValueError(
                "need 0 < min_ratio <= prior <= max_ratio < inf, got "
                f"min_ratio={min_ratio}, prior={prior}, max_ratio={max_ratio}"
            )
        if isinstance(agreement, bool) or not isinstance(agreement, int) or agreement < 1:
            raise ValueError(f"agreement must be an int >= 1, got {agreement!r}")
        if not 0.0 <= tolerance < 1.0:
            raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
        self.base = base
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.agreement = agreement
        self.tolerance = tolerance
        self.prior = prior
        self._log_min = math.log(min_ratio)
        self._log_max = math.log(max_ratio)
        self._log_prior = math.log(prior)
        # A hair of slack so readings exactly `tolerance` apart agree despite float rounding.
        self._log_tolerance = math.log1p(tolerance) + 1e-12
        self._states: dict[str | None, _ModelState] = {}
        self._last_model: str | None = None
        self._exact = isinstance(base, ExactCounter)
        self._name = ""  # `name`, formatted for the base `_named`
        self._named: TokenCounter | None = None

    # -- counting: raw, delegated ------------------------------------------------------------

    @property
    def name(self) -> str:
        base = self.base
        if self._named is not base:  # formatted once per base (read on every request)
            self._name, self._named = f"calibrated:{base.name}", base
        return self._name

    @property
    def request_overhead(self) -> int:
        """The base counter's per-request tokens, RAW like every count here: the manager adds
        it to the raw total, and the ratio scales the sum."""
        return self.base.request_overhead

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
        state = self._learned(model)
        if state is None or state.samples == 0:
            return self.prior
        return math.exp(state.log_ratio)

    def fixed(self, model: str | None) -> int:
        """Tokens the provider counts on every request of ``model`` beyond its messages (tool
        schemas, an orchestrator's instructions), learned from agreeing readings; 0 until then.
        ``None`` resolves as in :meth:`ratio`."""
        state = self._learned(model)
        return state.fixed if state is not None else 0

    def _learned(self, model: str | None) -> _ModelState | None:
        """What was learned for ``model``; for None, else for the model observed last."""
        state = self._states.get(model)
        if state is None and model is None and self._last_model is not None:
            state = self._states.get(self._last_model)
        return state

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
        state = self._states.get(model)
        if state is None:
            state = self._states[model] = _ModelState(
                log_ratio=self._log_prior, recent=deque(maxlen=self.agreement)
            )
        before = (state.log_ratio, state.fixed)
        # What the messages cost once the fixed part is set aside, as a log ratio; a reading
        # at or below the fixed part alone asks for the lowest ratio there is.
        net = actual - state.fixed
        # log(a) - log(b), not log(a / b): a / b overflows a float for absurd int readings.
        observed = math.log(net) - math.log(estimated) if net > 0 else self._log_min
        if self._exact and observed > self._log_max:
            accepted = self._beyond_the_bound(state, estimated, actual)
        else:
            observed = min(self._log_max, max(self._log_min, observed))
            accepted = self._update(state, observed)
        if estimated <= MAX_FITTED_READING and actual <= MAX_FITTED_READING:
            state.readings.append((estimated, actual))
        if self._fit(state):
            accepted = True
        if self._judged(state, before, estimated, actual):
            accepted = True
        self._last_model = model
        return CalibrationUpdate(
            model=model,
            ratio=self.ratio(model),
            samples=state.samples,
            estimated=estimated,
            actual=actual,
            accepted=accepted,
            fixed=state.fixed,
        )

    def _judged(
        self, state: _ModelState, before: tuple[float, int], estimated: int, actual: int
    ) -> bool:
        """Rule 7: note an upward correction as suspect, or a reading agreeing with one as
        its confirmation. True when a correction set aside was taken back up."""
        # Readings past any window are misread; floats cannot hold the largest of them.
        estimated, actual = min(estimated, MAX_FITTED_READING), min(actual, MAX_FITTED_READING)
        agrees_at = actual * (1.0 + self.tolerance) + 1  # a level this reading agrees with
        aside, state.aside = state.aside, None
        if aside is not None and state.estimate(estimated, aside) <= agrees_at:
            # The provider says again what the correction set aside said: it is a fact.
            raised = state.estimate(estimated, aside) > state.estimate(estimated)
            if raised:
                state.log_ratio, state.fixed = aside
            state.suspect = None
            return raised
        now = state.estimate(estimated)
        if now > state.estimate(estimated, before) * (1.0 + self.tolerance) + 1:
            if state.suspect is None:  # keep the level before the first unconfirmed step
                state.suspect = before
        elif state.suspect is not None and now <= agrees_at:
            state.suspect = None  # a later reading at the corrected level confirms it
        return False

    def suspect(self, model: str | None) -> bool:
        """Whether ``model``'s estimate rests on an upward correction that only one reading
        has made so far (rule 7)."""
        state = self._learned(model)
        return state is not None and state.suspect is not None

    def set_aside(self, model: str | None) -> bool:
        """Go back to the calibration before ``model``'s unconfirmed upward correction, and
        keep the correction aside for the next reading to confirm or drop (rule 7). False
        when there is none: every correction in force was confirmed."""
        state = self._learned(model)
        if state is None or state.suspect is None:
            return False
        state.aside = (state.log_ratio, state.fixed)
        state.log_ratio, state.fixed = state.suspect
        state.suspect = None
        state.recent.clear()  # the readings behind the correction are not the ratio's word
        return True

    def _update(self, state: _ModelState, observed: float) -> bool:
        state.samples += 1
        state.recent.append(observed)
        if observed >= state.log_ratio:
            state.log_ratio = observed  # upward (or level): one reading is enough
            return True
        recent = state.recent
        if len(recent) < self.agreement or max(recent) - min(recent) > self._log_tolerance:
            return False  # a lower reading waits for others to agree with it
        # Readings agree on a lower ratio: come down, but only as far as the highest of them.
        state.log_ratio = max(recent)
        return True

    def _beyond_the_bound(self, state: _ModelState, estimated: int, actual: int) -> bool:
        """Rule 6: a reading beyond the ratio's bound over an exact tokenizer.

        An exact count is not several times off in proportion; what a provider adds beyond it
        is tool schemas and instructions, a fixed amount. So the excess goes to the fixed part
        (as far as the bound would have taken the estimate of this request, so one reading
        weighs no more than before), not to the ratio: a tiny first request carrying a few
        tools' schemas no longer triples the estimate of every later request. Readings after
        it (rule 4) then learn the fixed part exactly.
        """
        state.samples += 1
        ratio = math.exp(state.log_ratio)
        shortfall = actual - (estimated * ratio + state.fixed)
        # What the bound allows at this size: the line no higher than max_ratio times it.
        room = self.max_ratio * estimated - (estimated * ratio + state.fixed)
        raised = max(0, math.ceil(min(shortfall, room)))
        state.fixed = min(MAX_FIXED, state.fixed + raised)
        return raised > 0

    def _fit(self, state: _ModelState) -> bool:
        """Rule 4: adopt the line the recent readings agree on, if they do. True if adopted."""
        readings = state.readings
        # Any two readings lie on a line, so coming down takes a third (agreement). Going up
        # does not wait: where the ratio's bound leaves a reading uncovered (schemas that
        # dwarf the messages), two readings are enough to stop under-counting, which is what
        # overflows a window (rule 2's reasoning).
        ratio = math.exp(state.log_ratio)
        agreed = len(readings) >= max(self.agreement, 3)
        short = any(x * ratio + state.fixed < y for x, y in readings)
        if len(readings) < 2 or not (agreed or short):
            return False
        sizes = [x for x, _ in readings]
        if max(sizes) < FIT_MIN_SPREAD * min(sizes):
            return False  # too close together: the slope would be noise
        # Readings that agree as plain ratios need no fixed part (rules 2 and 3 have them); a
        # line fitted to them would trade a little slope for an intercept and under-count
        # requests larger than any seen. With a fixed part in place they may say it shrank.
        logs = [math.log(y) - math.log(x) for x, y in readings if y > 0]
        agree = len(logs) == len(readings) and max(logs) - min(logs) <= self._log_tolerance
        if agree and state.fixed == 0:
            return False
        count = len(readings)
        mean_x = sum(sizes) / count
        mean_y = sum(y for _, y in readings) / count
        spread = sum((x - mean_x) ** 2 for x in sizes)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in readings) / spread
        log_slope = math.log(slope) if slope > 0 else self._log_min
        log_slope = min(self._log_max, max(self._log_min, log_slope))
        slope = math.exp(log_slope)
        # The line sits on the highest reading above the slope: none is left uncovered.
        fixed = max(0, max(math.ceil(y - x * slope) for x, y in readings))
        # Agreement: the line over-counts no reading by more than the tolerance.
        limit = 1.0 + self.tolerance
        if any(x * slope + fixed > y * limit + 1 for x, y in readings):
            return False
        if fixed > MAX_FIXED:
            return False
        # A line that merely restates the current one would only add rounding noise.
        largest = max(sizes)
        current = largest * ratio + state.fixed
        if abs(largest * slope + fixed - current) < current * FIT_MIN_CHANGE:
            return False
        if not agreed and largest * slope + fixed < current:
            return False  # too few readings to come down on
        state.log_ratio, state.fixed = log_slope, fixed
        # Later single readings are judged against the new line, not the old ratios.
        state.recent.clear()
        return True

    def ratios(self) -> dict[str, float]:
        """Learned ratios by model (``"*"`` for observations without a model name)."""
        return {
            UNKNOWN_MODEL_KEY if model is None else model: math.exp(state.log_ratio)
            for model, state in self._states.items()
            if state.samples
        }

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Ratios with their sample counts and fixed parts, for reports and durable sessions:
        ``{model: {ratio, samples, fixed}}``, the model observed last marked ``last: true``
        (a request that names no model uses its ratio, after a resume too)."""
        return {
            UNKNOWN_MODEL_KEY if model is None else model: {
                "ratio": math.exp(state.log_ratio),
                "samples": state.samples,
                "fixed": state.fixed,
                **({"last": True} if model is not None and model == self._last_model else {}),
                # An unconfirmed correction stays one on resume (rule 7).
                **(
                    {"suspect": [math.exp(state.suspect[0]), state.suspect[1]]}
                    if state.suspect is not None
                    else {}
                ),
            }
            for model, state in self._states.items()
            if state.samples
        }

    def restore(self, snapshot: Mapping[str, Mapping[str, Any]]) -> None:
        """Take up ratios `snapshot` recorded (a durable session resuming), bounded as any
        learned ratio is; entries that are not a positive ratio are ignored."""
        for key, value in snapshot.items():
            ratio, samples = value.get("ratio"), value.get("samples", 1)
            if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not ratio > 0:
                continue
            model = None if key == UNKNOWN_MODEL_KEY else str(key)
            log_ratio = min(self._log_max, max(self._log_min, math.log(ratio)))
            samples = samples if isinstance(samples, int) and samples > 0 else 1
            fixed = value.get("fixed", 0)
            fixed = fixed if isinstance(fixed, int) and not isinstance(fixed, bool) else 0
            self._states[model] = _ModelState(
                log_ratio=log_ratio,
                recent=deque(maxlen=self.agreement),
                samples=samples,
                fixed=max(0, fixed),
                suspect=self._restored_suspect(value.get("suspect")),
            )
            if value.get("last") is True and model is not None:
                self._last_model = model

    def _restored_suspect(self, value: Any) -> tuple[float, int] | None:
        """A snapshot's ``suspect`` calibration ([ratio, fixed]); None if absent or odd."""
        if not isinstance(value, list | tuple) or len(value) != 2:
            return None
        ratio, fixed = value
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            return None
        if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 0:
            return None
        if not math.isfinite(ratio):
            return None
        return min(self._log_max, max(self._log_min, math.log(ratio))), fixed

    def __repr__(self) -> str:
        return f"CalibratedCounter({self.base!r}, ratios={self.ratios()!r})"
