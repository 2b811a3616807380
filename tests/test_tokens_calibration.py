"""The calibrated counter: convergence, outlier resistance, bounds, and its error messages."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.tokens import (
    EXACT_MIN_RATIO,
    HEURISTIC_MIN_RATIO,
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


def test_first_response_calibrates_at_once_when_it_says_more() -> None:
    counter = fresh()
    update = counter.observe(MODEL, 10_000, 11_500)
    assert update == CalibrationUpdate(
        model=MODEL, ratio=pytest.approx(1.15), samples=1, estimated=10_000, actual=11_500,
        accepted=True,
    )  # fmt: skip
    assert counter.scale(1000, MODEL) == 1150


def test_first_response_saying_less_does_not_move_it() -> None:
    # Issue 8: one response reporting input_tokens=1 dropped the ratio to its bound at once.
    counter = fresh()
    update = counter.observe(MODEL, 10_000, 1)
    assert not update.accepted
    assert counter.ratio(MODEL) == 1.0
    assert counter.scale(8_000, MODEL) == 8_000


def test_converges_within_ten_noisy_responses_and_stays_on_the_safe_side() -> None:
    counter = fresh()
    feed(counter, 1.15, 10, noise=0.05)
    # Never under the truth by more than the noise, never over it by more than the noise.
    assert 1.15 * 0.95 <= counter.ratio(MODEL) <= 1.15 * 1.05
    assert counter.snapshot()[MODEL]["samples"] == 10


def test_one_low_reading_cannot_move_it_down() -> None:
    counter = fresh()
    feed(counter, 1.15, 6, noise=0.0)
    update = counter.observe(MODEL, 10_000, 1_000)  # a 0.1x response for a 10,000-token request
    assert not update.accepted
    assert update.ratio == pytest.approx(1.15)
    feed(counter, 1.15, 1, seed=7, noise=0.0)  # a normal response in between
    counter.observe(MODEL, 10_000, 1_000)
    assert counter.ratio(MODEL) == pytest.approx(1.15)


def test_a_high_reading_is_adopted_at_once_and_undone_by_three_agreeing_ones() -> None:
    counter = fresh()
    feed(counter, 1.15, 6, noise=0.0)
    update = counter.observe(MODEL, 10_000, 20_000)
    assert update.accepted and update.ratio == pytest.approx(2.0)  # under-counting is the danger
    accepted = [counter.observe(MODEL, 10_000, 11_500).accepted for _ in range(3)]
    # The 2.0 reading is still among the last three until the third normal one arrives.
    assert accepted == [False, False, True]
    assert counter.ratio(MODEL) == pytest.approx(1.15)


def test_a_lasting_downward_shift_is_adopted_after_three_agreeing_readings() -> None:
    counter = fresh()
    feed(counter, 1.6, 8, noise=0.0)
    seen = [counter.observe(MODEL, 10_000, 8_000 + 100 * i) for i in range(3)]
    assert [u.accepted for u in seen] == [False, False, True]
    # It comes down only as far as the highest of the readings that agreed.
    assert counter.ratio(MODEL) == pytest.approx(0.82)


def test_disagreeing_low_readings_never_move_it_down() -> None:
    counter = fresh()
    feed(counter, 1.2, 3, noise=0.0)
    for actual in (1, 6_000, 1, 9_000, 1, 6_000, 1):  # odd, inconsistent under-reports
        assert not counter.observe(MODEL, 10_000, actual).accepted
    assert counter.ratio(MODEL) == pytest.approx(1.2)


def test_the_ratio_is_never_below_the_latest_readings() -> None:
    counter = fresh()
    rng = random.Random(3)
    readings: list[float] = []
    for _ in range(200):
        actual = rng.randint(5_000, 15_000)
        counter.observe(MODEL, 10_000, actual)
        readings.append(actual / 10_000)
        assert counter.ratio(MODEL) >= max(readings[-3:]) * (1 - 1e-12)


def test_heuristic_ratios_are_bounded_to_half_and_three() -> None:
    counter = fresh()
    counter.observe(MODEL, 100, 1_000_000)
    assert counter.ratio(MODEL) == pytest.approx(3.0)
    for _ in range(3):  # three agreeing absurd under-reports: believed, down to the bound
        counter.observe("tiny", 1_000_000, 1)
    assert counter.ratio("tiny") == pytest.approx(0.5)


def test_over_an_exact_tokenizer_the_estimate_never_goes_below_the_exact_count() -> None:
    counter = CalibratedCounter(ExactCounter())
    assert counter.min_ratio == EXACT_MIN_RATIO == 1.0
    for _ in range(10):
        counter.observe("gpt-4o", 10_000, 1)
        counter.observe("gpt-4o", 10_000, 5_000)
    assert counter.ratio("gpt-4o") == 1.0
    assert counter.scale(7_777, "gpt-4o") == 7_777
    assert CalibratedCounter(HeuristicCounter()).min_ratio == HEURISTIC_MIN_RATIO == 0.5


def test_absurd_readings_do_not_overflow() -> None:
    counter = fresh()
    update = counter.observe(MODEL, 1_000, 10**400)  # a/b would overflow a float
    assert update.ratio == pytest.approx(3.0)
    counter.observe(MODEL, 10**400, 1)
    assert counter.ratio(MODEL) == pytest.approx(3.0)
    # Enough absurd readings to fit a line to: never fitted, no float overflow.
    for size in (1_000, 2_000, 4_000, 10**400, 10**401):
        counter.observe(MODEL, size, 10**400 + size)
    assert counter.fixed(MODEL) == 0 and counter.ratio(MODEL) == pytest.approx(3.0)


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
        "fixed": 0,
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
        ({"tolerance": -0.1}, "tolerance"),
        ({"tolerance": 1.0}, "tolerance"),
        ({"min_ratio": 2.0, "max_ratio": 1.5}, "min_ratio"),
        ({"min_ratio": 0.0}, "min_ratio"),
        ({"max_ratio": math.inf}, "max_ratio"),
        ({"agreement": 0}, "agreement"),
        ({"agreement": True}, "agreement"),
        ({"prior": 0.4}, "min_ratio"),
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
@given(
    observations,
    st.integers(1, 5),
    st.floats(0.0, 0.5),
    st.floats(0.1, 1.0),
    st.floats(1.0, 10.0),
)
def test_ratio_rules_hold_for_any_readings(
    seen: list[tuple[str | None, int, int]],
    agreement: int,
    tolerance: float,
    low: float,
    high: float,
) -> None:
    counter = fresh(agreement=agreement, tolerance=tolerance, min_ratio=low, max_ratio=high)
    recent: dict[str | None, list[float]] = {}
    readings_of: dict[str | None, list[tuple[int, int]]] = {}
    for model, estimated, actual in seen:
        # The model's own ratio (ratio(None) may borrow another model's before None is seen).
        learned = counter.snapshot().get(UNKNOWN_MODEL_KEY if model is None else model)
        before = learned["ratio"] if learned else counter.prior
        fixed_before = learned["fixed"] if learned else 0
        update = counter.observe(model, estimated, actual)
        reading = min(high, max(low, actual / estimated))
        window = recent.setdefault(model, [])
        window.append(reading)
        del window[:-agreement]
        sizes = readings_of.setdefault(model, [])
        sizes.append((estimated, actual))
        del sizes[:-agreement]
        assert low * (1 - 1e-9) <= update.ratio <= high * (1 + 1e-9)
        assert update.fixed >= 0
        # Never below any of the last `agreement` readings (up to the ratio's bound):
        # under-counting is what overflows. With a fixed part, the estimate is the line.
        if update.fixed == 0:
            assert update.ratio >= max(window) * (1 - 1e-9)
        for size, billed in sizes:
            line = size * update.ratio + update.fixed
            assert line >= min(billed, size * high) * (1 - 1e-9) - 1e-6
        if fixed_before == update.fixed == 0 and update.ratio < before * (1 - 1e-9):
            # Down only on agreement, and only as far as the highest agreeing reading.
            assert len(window) == agreement
            assert max(window) <= min(window) * (1 + tolerance) * (1 + 1e-9)
            assert update.ratio == pytest.approx(max(window), rel=1e-9)
        assert counter.scale(estimated, model) >= math.floor(estimated * low)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.6, 2.5), st.integers(0, 2**16))
def test_any_steady_ratio_is_learned(ratio: float, seed: int) -> None:
    counter = fresh()
    feed(counter, ratio, 10, seed=seed, noise=0.02)
    # Within the noise, plus the rounding of actual to whole tokens (estimates are >= 2,000).
    slack = 0.5 / 2_000
    assert ratio * 0.98 - slack <= counter.ratio(MODEL) <= ratio * 1.02 + slack


# -- the fixed part: what every request costs beyond its messages (tool schemas) ------------


def schema_readings(counter: CalibratedCounter, schemas: int, sizes: list[int]) -> list:
    """The provider counts each request's messages exactly plus ``schemas`` tokens."""
    return [counter.observe(MODEL, size, size + schemas) for size in sizes]


def test_tool_schemas_are_learned_as_a_fixed_part_not_a_ratio() -> None:
    # 600 tokens of schemas on a 150-token first request read as a 5x under-count: the ratio
    # alone would scale every later request by 3 (its bound) for the rest of the session.
    counter = CalibratedCounter(ExactCounter())
    first, second, third = schema_readings(counter, 600, [150, 770, 1_390])
    # Beyond the ratio's bound over an exact count: the excess is a fixed part, as far as
    # the bound would have taken this request (3 x 150), and the ratio stays 1.
    assert first.ratio == pytest.approx(1.0) and first.fixed == 300
    assert second.fixed == 300  # within the bound: rule 2 raises the ratio instead
    assert third.accepted and third.fixed == 600 and third.ratio == pytest.approx(1.0)
    assert counter.fixed(MODEL) == 600 and counter.fixed(None) == 600
    # Later requests are estimated as messages + schemas, whatever their size.
    for size in (2_000, 10_000, 100_000):
        assert counter.scale(size, MODEL) + counter.fixed(MODEL) == size + 600
    assert counter.snapshot()[MODEL]["fixed"] == 600


def test_a_fixed_part_and_a_ratio_are_learned_together() -> None:
    counter = fresh()
    rng = random.Random(3)
    sizes = [rng.randint(500, 20_000) for _ in range(12)]
    for size in sizes:
        counter.observe(MODEL, size, math.ceil(size * 1.3) + 2_000)
    assert counter.ratio(MODEL) == pytest.approx(1.3, abs=0.01)
    assert abs(counter.fixed(MODEL) - 2_000) <= 25
    for size in sizes:  # the learned line covers every reading it was learned from
        assert counter.scale(size, MODEL) + counter.fixed(MODEL) >= math.ceil(size * 1.3) + 2_000


def test_readings_that_agree_as_ratios_never_get_a_fixed_part() -> None:
    counter = fresh()
    feed(counter, 1.2, 30, noise=0.03)
    assert counter.fixed(MODEL) == 0


def test_a_line_the_readings_do_not_agree_on_is_not_adopted() -> None:
    # Schemas, then one odd reading (1 token: an error response) among them: no line fits
    # all, so nothing is learned from the odd one and the estimate never drops below exact.
    counter = CalibratedCounter(ExactCounter())
    schema_readings(counter, 600, [150, 770])
    line = (counter.ratio(MODEL), counter.fixed(MODEL))
    update = counter.observe(MODEL, 1_390, 1)
    assert (counter.ratio(MODEL), counter.fixed(MODEL)) == line and not update.accepted
    assert counter.scale(1_390, MODEL) >= 1_390


def test_schemas_that_dwarf_the_messages_raise_the_estimate_past_the_ratios_bound() -> None:
    # 58 tools' schemas (14,180 tokens) on a conversation of a few hundred tokens: as a ratio
    # that is 20x and more, pinned at 3x, so every request was under-counted by thousands.
    counter = CalibratedCounter(ExactCounter())
    first, second = schema_readings(counter, 14_180, [67, 712])
    assert first.ratio == pytest.approx(1.0) and first.fixed == 2 * 67  # as far as the bound
    # The bound leaves the second reading uncovered by thousands: two readings are enough to
    # go up (the third request is not sent over the window waiting for agreement).
    assert second.fixed == 14_180 and second.ratio == pytest.approx(1.0)
    schema_readings(counter, 14_180, [1_286])
    assert counter.fixed(MODEL) == 14_180 and counter.ratio(MODEL) == pytest.approx(1.0)
    assert counter.scale(800, MODEL) + counter.fixed(MODEL) == 14_980


def test_a_misread_usage_weighs_no_more_than_the_ratios_bound() -> None:
    # Absurd but consistent readings: no line is learned from them (no model's window is that
    # large), and the fixed part they leave never takes the estimate of a request of the
    # size read past the ratio's bound (3x), as the ratio alone would have.
    counter = CalibratedCounter(ExactCounter())
    for size in (1_000, 2_000, 4_000, 8_000):
        counter.observe(MODEL, size, 10**12 + size)
        assert counter.scale(size, MODEL) + counter.fixed(MODEL) <= 3 * size
    assert counter.ratio(MODEL) == pytest.approx(1.0)
    for size in (8_000, 50_000, 200_000):  # larger requests: less than the ratio would say
        assert counter.scale(size, MODEL) + counter.fixed(MODEL) <= 3 * size


def test_fewer_schemas_later_lower_the_fixed_part_on_agreement() -> None:
    counter = CalibratedCounter(ExactCounter())
    schema_readings(counter, 3_000, [1_000, 2_000, 3_000, 4_000])
    assert counter.fixed(MODEL) == 3_000
    schema_readings(counter, 500, [5_000])  # one reading: the line stays where it was
    assert counter.fixed(MODEL) == 3_000
    schema_readings(counter, 500, [6_000, 7_500, 9_000, 11_000, 13_000, 15_000, 18_000])
    assert counter.fixed(MODEL) == 500 and counter.ratio(MODEL) == pytest.approx(1.0)


def test_the_fixed_part_survives_snapshot_and_restore_and_bad_values_are_ignored() -> None:
    counter = CalibratedCounter(ExactCounter())
    schema_readings(counter, 600, [150, 770, 1_390])
    again = CalibratedCounter(ExactCounter())
    again.restore(counter.snapshot())
    assert again.fixed(MODEL) == 600 and again.ratio(MODEL) == pytest.approx(1.0)
    for bad in (-5, "600", True, 1.5, None):
        other = CalibratedCounter(ExactCounter())
        other.restore({MODEL: {"ratio": 1.0, "samples": 3, "fixed": bad}})
        assert other.fixed(MODEL) == 0
    old = CalibratedCounter(ExactCounter())
    old.restore({MODEL: {"ratio": 1.2, "samples": 3}})  # a snapshot from before fixed parts
    assert old.fixed(MODEL) == 0 and old.ratio(MODEL) == pytest.approx(1.2)


@settings(max_examples=200, deadline=None)
@given(
    ratio=st.floats(min_value=1.0, max_value=2.5),
    fixed=st.integers(min_value=0, max_value=8_000),
    sizes=st.lists(st.integers(min_value=50, max_value=120_000), min_size=1, max_size=25),
    odd=st.sets(st.integers(min_value=0, max_value=24), max_size=4),
)
def test_the_latest_reading_is_always_covered_up_to_the_ratios_bound(
    ratio: float, fixed: int, sizes: list[int], odd: set[int]
) -> None:
    """Whatever the truth (a ratio and a fixed part) and wherever odd readings fall (1 token,
    or ten times the truth), after every observation the estimate of the request just
    answered is at least the reading (up to ``max_ratio`` times the count), never below the
    exact count, and the fixed part is never negative."""
    counter = CalibratedCounter(ExactCounter())
    for index, size in enumerate(sizes):
        actual = math.ceil(size * ratio) + fixed
        if index in odd:
            actual = 1 if index % 2 else actual * 10
        counter.observe(MODEL, size, actual)
        estimate = counter.scale(size, MODEL) + counter.fixed(MODEL)
        assert estimate >= min(actual, math.ceil(size * counter.max_ratio))
        assert estimate >= size and counter.fixed(MODEL) >= 0
