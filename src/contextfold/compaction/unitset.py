"""A set of unit indexes kept as sorted runs, so its size follows the view, not history.

Compaction removes turns oldest first, so the removed (and summarized) units of a long
session are one long run from near the start, broken only where a protected unit (the
system prompt, the first human prompt, a retained reminder) stays in the view. A plain set
would grow with history and make every pass copy it; as runs it costs one pair per gap, and
the gaps are units the view still carries. Membership is a binary search; copying, equality
and walking the complement (the view's units) cost the number of runs, not of units.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

# From this many new members on, `UnitSet.update` merges runs instead of adding each.
_MERGE_FROM = 16


class UnitSet:
    """Unit indexes as sorted, disjoint, non-adjacent half-open runs ``[start, end)``."""

    __slots__ = ("_ends", "_size", "_starts")

    def __init__(self, units: Iterable[int] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._size = 0
        for unit in sorted(set(units)):
            self.add(unit)

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, int]]) -> UnitSet:
        """From ``(start, end)`` runs (any order; overlapping or adjacent runs merge)."""
        made = cls()
        for start, end in sorted(runs):
            if end <= start:
                continue
            if made._ends and start <= made._ends[-1]:
                if end > made._ends[-1]:
                    made._size += end - made._ends[-1]
                    made._ends[-1] = end
                continue
            made._starts.append(start)
            made._ends.append(end)
            made._size += end - start
        return made

    # -- reading -------------------------------------------------------------------------

    def __contains__(self, unit: object) -> bool:
        if not isinstance(unit, int):
            return False
        i = bisect_right(self._starts, unit) - 1
        return i >= 0 and unit < self._ends[i]

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[int]:
        for start, end in zip(self._starts, self._ends, strict=True):
            yield from range(start, end)

    def __reversed__(self) -> Iterator[int]:
        for start, end in zip(reversed(self._starts), reversed(self._ends), strict=True):
            yield from range(end - 1, start - 1, -1)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnitSet):
            return self._starts == other._starts and self._ends == other._ends
        if isinstance(other, set | frozenset):
            return len(other) == self._size and all(u in self for u in other)
        return NotImplemented

    # Mutable, so unhashable: said to the type checker too (typeshed's object.__hash__ is a
    # method, which None does not match).
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UnitSet.from_runs({self.runs()!r})"

    def runs(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def first(self) -> int | None:
        return self._starts[0] if self._starts else None

    def count_in(self, low: int, high: int) -> int:
        """How many members lie in ``[low, high)``."""
        total = 0
        for i in range(max(0, bisect_right(self._starts, low) - 1), len(self._starts)):
            start, end = self._starts[i], self._ends[i]
            if start >= high:
                break
            total += max(0, min(end, high) - max(start, low))
        return total

    def outside(self, limit: int) -> Iterator[int]:
        """The indexes in ``[0, limit)`` that are *not* members, ascending (the view's units
        when this is the removed set): cost follows the answer and the number of runs."""
        position = 0
        for start, end in zip(self._starts, self._ends, strict=True):
            if start >= limit:
                break
            yield from range(position, start)
            position = end
        yield from range(position, limit)

    def without(
        self, other: UnitSet, *, reverse: bool = False, start: int | None = None
    ) -> Iterator[int]:
        """Members not in ``other``, ascending (descending with ``reverse``), from ``start``
        on when given. Whole runs of ``other`` are skipped by binary search: the cost is the
        number of runs and of members yielded, never of the units skipped."""
        runs = self.runs()
        if start is not None:
            if reverse:
                runs = [(s, min(e, start + 1)) for s, e in runs if s <= start]
            else:
                runs = [(max(s, start), e) for s, e in runs if e > start]
        for run_start, run_end in reversed(runs) if reverse else runs:
            unit = run_end - 1 if reverse else run_start
            while run_start <= unit < run_end:
                i = bisect_right(other._starts, unit) - 1
                if i >= 0 and unit < other._ends[i]:
                    unit = other._starts[i] - 1 if reverse else other._ends[i]
                    continue
                yield unit
                unit += -1 if reverse else 1

    # -- changing ------------------------------------------------------------------------

    def add(self, unit: int) -> None:
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, unit) - 1
        if i >= 0 and unit < ends[i]:
            return
        joins_left = i >= 0 and ends[i] == unit
        joins_right = i + 1 < len(starts) and starts[i + 1] == unit + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = unit + 1
        elif joins_right:
            starts[i + 1] = unit
        else:
            starts.insert(i + 1, unit)
            ends.insert(i + 1, unit + 1)
        self._size += 1

    def update(self, units: Iterable[int]) -> None:
        units = list(units)
        if len(units) < _MERGE_FROM:
            for unit in units:
                self.add(unit)
            return
        # Many at once (a pass removing a long stretch of turns): merged as runs, in time
        # proportional to the runs and the new members, not a search and insert for each.
        runs = self.runs()
        ordered = iter(sorted(set(units)))  # not empty: at least _MERGE_FROM units
        start = next(ordered)
        end = start + 1
        for unit in ordered:
            if unit == end:
                end += 1
                continue
            runs.append((start, end))
            start, end = unit, unit + 1
        runs.append((start, end))
        merged = UnitSet.from_runs(runs)
        self._starts, self._ends, self._size = merged._starts, merged._ends, merged._size

    def discard(self, unit: int) -> None:
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, unit) - 1
        if i < 0 or unit >= ends[i]:
            return
        start, end = starts[i], ends[i]
        if start == unit and end == unit + 1:
            del starts[i], ends[i]
        elif start == unit:
            starts[i] = unit + 1
        elif end == unit + 1:
            ends[i] = unit
        else:
            ends[i] = unit
            starts.insert(i + 1, unit + 1)
            ends.insert(i + 1, end)
        self._size -= 1

    def copy(self) -> UnitSet:
        made = UnitSet()
        made._starts = list(self._starts)
        made._ends = list(self._ends)
        made._size = self._size
        return made
