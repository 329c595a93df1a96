"""Static arena planning: every tensor gets a fixed offset, and tensors whose lifetimes do not
overlap share bytes."""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 4  # floats (16 bytes), so vector loads of any tensor start aligned


@dataclass(frozen=True)
class Interval:
    name: str
    start: int  # index of the statement that writes it
    end: int  # index of the last statement that reads it (inclusive)
    size: int  # floats


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def place(intervals: list[Interval]) -> tuple[dict[str, int], int]:
    """Best-fit placement, largest tensors first: each goes into the smallest free gap among the
    already placed tensors it is live with. Returns (offsets, arena size), in floats."""
    placed: list[tuple[int, int, Interval]] = []  # (offset, aligned size, interval)
    offsets: dict[str, int] = {}
    total = 0
    for iv in sorted(intervals, key=lambda i: (-i.size, i.start, i.name)):
        size = _aligned(iv.size)
        busy = sorted((off, off + sz) for off, sz, other in placed
                      if other.start <= iv.end and iv.start <= other.end)
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        if best is None:
            best = cursor  # no gap fits: extend past the last live neighbour
        offsets[iv.name] = best
        placed.append((best, size, iv))
        total = max(total, best + size)
    return offsets, total


def liveness_lower_bound(intervals: list[Interval]) -> int:
    """The most floats live at any one statement: no placement can use less."""
    points = {i.start for i in intervals}
    return max((sum(_aligned(i.size) for i in intervals if i.start <= p <= i.end) for p in points), default=0)
