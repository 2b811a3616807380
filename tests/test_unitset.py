"""UnitSet (removed and summarized units as runs) behaves exactly like a set of ints."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.compaction.unitset import UnitSet

operations = st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(0, 70), st.integers(0, 70))
def test_a_unit_set_matches_a_plain_set(ops: list[tuple[bool, int]], low: int, high: int) -> None:
    model: set[int] = set()
    units = UnitSet()
    other_model = {u for u in range(0, 70, 3)}
    other = UnitSet(other_model)
    for add, unit in ops:
        if add:
            model.add(unit)
            units.add(unit)
        else:
            model.discard(unit)
            units.discard(unit)
        assert len(units) == len(model)
    assert list(units) == sorted(model)
    assert list(reversed(units)) == sorted(model, reverse=True)
    assert all((u in units) == (u in model) for u in range(-2, 75))
    assert units == model and units == UnitSet(model) and units.copy() == units
    assert units.first() == (min(model) if model else None)
    assert list(units.outside(65)) == [u for u in range(65) if u not in model]
    assert units.count_in(low, high) == len([u for u in model if low <= u < high])
    rest = sorted(model - other_model)
    assert list(units.without(other)) == rest
    assert list(units.without(other, reverse=True)) == rest[::-1]
    assert list(units.without(other, start=low)) == [u for u in rest if u >= low]
    assert list(units.without(other, reverse=True, start=low)) == [
        u for u in rest[::-1] if u <= low
    ]
    # Runs are disjoint, sorted and never adjacent (one pair per gap).
    runs = units.runs()
    assert all(a[1] < b[0] for a, b in pairwise(runs))
    assert UnitSet.from_runs(runs) == units


def test_a_long_removal_is_one_run() -> None:
    units = UnitSet()
    units.update(range(2, 100_000))
    units.discard(50_000)  # a retained reminder back in the view
    assert units.runs() == [(2, 50_000), (50_001, 100_000)]
    assert len(units) == 99_997


@given(
    st.lists(st.integers(0, 120), max_size=40),
    st.lists(st.integers(0, 120), max_size=60),
)
def test_updating_with_many_members_at_once_matches_adding_each(
    before: list[int], added: list[int]
) -> None:
    merged = UnitSet(before)
    merged.update(added)  # 16 or more: merged as runs
    one_by_one = UnitSet(before)
    for unit in added:
        one_by_one.add(unit)
    assert merged == one_by_one
    assert merged.runs() == one_by_one.runs()
    assert len(merged) == len(set(before) | set(added))
    assert all(end > start for start, end in merged.runs())
    assert all(a[1] < b[0] for a, b in pairwise(merged.runs()))  # disjoint, not adjacent
