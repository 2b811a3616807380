"""The calibrated counter: convergence, outlier resistance, bounds, and its error messages."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.tokens import (
    UNKNOWN_MODEL_KEY,
    CalibratedCounter,
    CalibrationUpdate,
    ExactCounter,
    HeuristicCounter,
)

MODEL = "claude-sonnet-4-5"


def fresh(**kwargs: float) -> CalibratedCounter:
    return CalibratedCounter(HeuristicCounter(), **kwargs)  # type: ignore[arg-type]


def feed(counter: CalibratedCounter, ratio: float, n: int, *, seed: int = 0, noise: float = 0.03):
    rng = random.Random(seed)
    for _ in range(n):
        estimated = rng.randint(2_000, 60_000)
        actual = round(estimated * ratio * (1 + rng.uniform(-noise, noise)))
        counter.observe(MODEL, estimated, actual)


def test_counts_are_raw_and_delegated() -> None:
    base = HeuristicCounter()
    counter = CalibratedCounter(base)
    feed(counter, 1.4, 5)
    message = {"role": "user", "content": "hello there, how are you?"}
    assert counter.base is base
    assert counter.name == "calibrated:heuristic"
    assert counter.count_message(message) == base.count_message(message)
    assert counter.count_text("abc def") == base.count_text("abc def")
    assert counter.count_tools([{"name": "ls"}]) == base.count_tools([{"name": "ls"}])


def test_ratio_is_one_until_something_is_learned() -> None:
    counter = fresh()
    assert counter.ratio(MODEL) == 1.0
    assert counter.ratio(None) == 1.0
    assert counter.scale(12_345, MODEL) == 12_345
    assert counter.ratios() == {}


def test_first_response_calibrates_at_once() -> None:
    counter = fresh()
    update = counter.observe(MODEL, 10_000, 11_500)
    assert update == CalibrationUpdate(
        model=MODEL, ratio=pytest.approx(1.15), samples=1, estimated=10_000, actual=11_500,
        accepted=True,
    )  # fmt: skip
    assert counter.scale(1000, MODEL) == 1150


def test_converges_within_ten_noisy_responses() -> None:
    counter = fresh()
    feed(counter, 1.15, 10, noise=0.05)
    assert counter.ratio(MODEL) == pytest.approx(1.15, rel=0.02)
    assert counter.snapshot()[MODEL]["samples"] == 10


def test_one_outlier_cannot_swing_it() -> None:
    counter = fresh()
    feed(counter, 1.15, 6)
    for actual in (100_000, 1_000):  # a 10x and a 0.1x response for a 10,000-token request
        settled = counter.ratio(MODEL)
        update = counter.observe(MODEL, 10_000, actual)
        assert not update.accepted
        assert update.ratio == settled
        feed(counter, 1.15, 1, seed=7)  # a normal response in between
    assert counter.ratio(MODEL) == pytest.approx(1.15, rel=0.03)


def test_an_outlier_during_warm_up_is_outvoted() -> None:
    counter = fresh()
    counter.observe(MODEL, 10_000, 11_500)
    counter.observe(MODEL, 10_000, 29_000)  # one odd response early on
    counter.observe(MODEL, 10_000, 11_600)
    assert counter.ratio(MODEL) == pytest.approx(1.16, rel=0.01)  # the median of three


def test_a_lasting_shift_is_adopted_after_a_run_of_rejections() -> None:
    counter = fresh()
    feed(counter, 1.0, 8)
    accepted = [counter.observe(MODEL, 10_000, 20_000).accepted for _ in range(3)]
    assert accepted == [False, False, True]
    assert counter.ratio(MODEL) == pytest.approx(2.0)


def test_ratios_are_bounded() -> None:
    counter = fresh(min_ratio=0.5, max_ratio=3.0)
    counter.observe(MODEL, 100, 1_000_000)
    assert counter.ratio(MODEL) == pytest.approx(3.0)
    counter.observe("tiny", 1_000_000, 1)
    assert counter.ratio("tiny") == pytest.approx(0.5)


def test_models_are_calibrated_separately() -> None:
    counter = fresh()
    counter.observe("gpt-4o", 1_000, 1_000)
    counter.observe(MODEL, 1_000, 1_300)
    counter.observe(None, 1_000, 1_100)
    assert counter.ratios() == {
        "gpt-4o": pytest.approx(1.0),
        MODEL: pytest.approx(1.3),
        UNKNOWN_MODEL_KEY: pytest.approx(1.1),
    }
    assert counter.ratio("never-seen") == 1.0


def test_unknown_model_at_request_time_uses_the_latest_model() -> None:
    counter = fresh()
    counter.observe(MODEL, 1_000, 1_250)
    assert counter.ratio(None) == pytest.approx(1.25)


def test_state_is_not_tied_to_any_conversation() -> None:
    # The manager keeps this object across set_messages/clear: counting messages (any history)
    # must neither read nor change what was learned.
    counter = CalibratedCounter(ExactCounter())
    counter.observe("gpt-4o", 1_000, 1_200)
    before = counter.snapshot()
    for i in range(50):
        counter.count_message({"role": "user", "content": f"message {i}"})
    assert counter.snapshot() == before


def test_update_is_the_calibration_event_payload() -> None:
    update = fresh().observe(MODEL, 1_000, 1_150)
    assert update.to_event() == {
        "model": MODEL,
        "ratio": pytest.approx(1.15),
        "samples": 1,
        "estimated": 1_000,
        "actual": 1_150,
        "accepted": True,
    }


@pytest.mark.parametrize(
    ("estimated", "actual", "error", "match"),
    [
        (1_000, 0, ValueError, "actual must be > 0"),
        (1_000, -5, ValueError, "actual must be > 0"),
        (0, 1_000, ValueError, "estimated must be > 0"),
        (1_000, 1_000.0, TypeError, "actual must be an int"),
        (True, 1_000, TypeError, "estimated must be an int"),
    ],
)
def test_bad_observations_are_refused(
    estimated: object, actual: object, error: type[Exception], match: str
) -> None:
    counter = fresh()
    with pytest.raises(error, match=match):
        counter.observe(MODEL, estimated, actual)  # type: ignore[arg-type]
    assert counter.ratios() == {}


def test_bad_scale_and_model_arguments() -> None:
    counter = fresh()
    with pytest.raises(ValueError, match="raw token count must be >= 0"):
        counter.scale(-1, MODEL)
    with pytest.raises(TypeError, match="model must be a str or None"):
        counter.observe(42, 1, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"smoothing": 0.0}, "smoothing"),
        ({"smoothing": 1.5}, "smoothing"),
        ({"min_ratio": 2.0, "max_ratio": 1.5}, "min_ratio"),
        ({"min_ratio": 0.0}, "min_ratio"),
        ({"max_ratio": math.inf}, "max_ratio"),
        ({"outlier_factor": 1.0}, "outlier_factor"),
        ({"warmup": 0}, "warmup"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fresh(**kwargs)


def test_base_must_be_a_plain_counter() -> None:
    with pytest.raises(TypeError, match="plain TokenCounter"):
        CalibratedCounter(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plain TokenCounter"):
        CalibratedCounter(fresh())


observations = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["a", "b"])),
        st.integers(min_value=1, max_value=10**9),
        st.integers(min_value=1, max_value=10**9),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(observations, st.floats(0.05, 1.0), st.floats(0.1, 1.0), st.floats(1.0, 10.0))
def test_ratio_always_within_bounds(
    seen: list[tuple[str | None, int, int]], smoothing: float, low: float, high: float
) -> None:
    counter = fresh(smoothing=smoothing, min_ratio=low, max_ratio=high)
    for model, estimated, actual in seen:
        update = counter.observe(model, estimated, actual)
        assert low * (1 - 1e-12) <= update.ratio <= high * (1 + 1e-12)
        assert counter.scale(estimated, model) >= math.floor(estimated * low)
    for ratio in counter.ratios().values():
        assert low * (1 - 1e-12) <= ratio <= high * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.6, 2.5), st.integers(0, 2**16))
def test_any_steady_ratio_is_learned(ratio: float, seed: int) -> None:
    counter = fresh()
    feed(counter, ratio, 10, seed=seed, noise=0.02)
    assert counter.ratio(MODEL) == pytest.approx(ratio, rel=0.03)
