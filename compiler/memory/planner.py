"""Static arena planning: every tensor gets a fixed offset, and tensors whose lifetimes do not
overlap share bytes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGN = 4  # floats (16 bytes), so vector loads of any tensor start aligned
KINDS = ("activation", "gradient", "optimizer_state", "workspace")


@dataclass(frozen=True)
class Interval:
    name: str
    start: int  # index of the statement that writes it
    end: int  # index of the last statement that reads it (inclusive)
    size: int  # 4-byte words: floats, or the uint32 words of a bit mask
    # (statement, words), in order: from that statement on it holds fewer words, the rest of its
    # bytes free (a tensor that took over a larger one's bytes, memory.plan's in-place outputs)
    shrinks: tuple[tuple[int, int], ...] = ()

    def segments(self) -> list[tuple[int, int, int]]:
        """(first statement, last statement, words) of each stretch of its life."""
        starts = [(self.start, self.size), *self.shrinks]
        ends = [statement - 1 for statement, _ in self.shrinks] + [self.end]
        return [(start, end, words) for (start, words), end in zip(starts, ends)]


@dataclass(frozen=True)
class Block:
    """One arena tensor as the memory report shows it."""

    name: str
    kind: str  # one of KINDS; workspace = a kernel's scratch tensor
    offset: int  # bytes from the start of the arena
    size: int  # bytes
    start: int  # index of the statement that writes it
    end: int  # index of the last statement that reads it (inclusive)
    c_type: str = "float"  # of its elements: float, int32_t, uint32_t (bit masks), int8_t, ...


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# Best fit is greedy, so the order tensors are placed in matters; no single order wins on every
# schedule, and planning is cheap next to compiling, so each of these is tried and the smallest
# arena kept. Big tensors first leaves small ones for the gaps; earliest first follows the schedule
# the way a stack allocator would; most byte-statements first favours long-lived activations.
_ORDERS = (
    lambda i: (-i.size, i.start, i.name),
    lambda i: (i.start, -i.size, i.name),
    lambda i: (-i.size * (i.end - i.start + 1), i.name),
    lambda i: (-(i.end - i.start), -i.size, i.name),
)
_REPAIRS = 10  # placements per order, each with the tensors the last put above the bound first


class _Placed:
    """The segments placed so far, as columns: (first statement, last statement, lowest word, word
    past the end). Columns, not tuples, because each placement asks which of them are live with it,
    and a model of thousands of tensors asks that thousands of times for each order tried."""

    def __init__(self, capacity: int):
        self.columns = np.zeros((4, capacity), dtype=np.int64)
        self.count = 0

    def add(self, start: int, end: int, lo: int, hi: int) -> None:
        self.columns[:, self.count] = (start, end, lo, hi)
        self.count += 1

    def live(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of the segments live at some statement of [first, last], sorted as (lo, hi) pairs."""
        start, end, lo, hi = self.columns[:, : self.count]
        meets = (start <= last) & (first <= end)
        lo, hi = lo[meets], hi[meets]
        order = np.lexsort((hi, lo))
        return lo[order], hi[order]


def _best_fit(intervals: list[Interval]) -> tuple[dict[str, int], int]:
    """Each tensor goes into the smallest free gap among the already placed tensors it is live
    with, or past the last of them when no gap fits."""
    placed = _Placed(sum(1 + len(iv.shrinks) for iv in intervals))
    offsets: dict[str, int] = {}
    total = 0
    for iv in intervals:
        best = _fit_segments(placed, iv.segments()) if iv.shrinks else _fit(placed, iv)
        offsets[iv.name] = best
        for start, end, words in iv.segments():
            placed.add(start, end, best, best + _aligned(words))
        total = max(total, best + _aligned(iv.size))
    return offsets, total


def _fit(placed: _Placed, iv: Interval) -> int:
    """The start of the smallest gap (the first of the smallest) that fits `iv` among the placed
    tensors live with it, or the end of the last of them."""
    lo, hi = placed.live(iv.start, iv.end)
    if not len(lo):
        return 0
    # the gap before each busy range begins where every range before it has ended
    cursor = np.maximum.accumulate(np.concatenate(([0], hi)))
    gaps = lo - cursor[:-1]
    fits = np.flatnonzero(gaps >= _aligned(iv.size))
    if not len(fits):
        return int(cursor[-1])
    return int(cursor[fits[np.argmin(gaps[fits])]])


def _fit_segments(placed: _Placed, segments: list[tuple[int, int, int]]) -> int:
    """_best_fit's offset for a tensor that shrinks: the lowest offset of a stretch where every
    segment is clear of the placed ones live with it, in the smallest gap below what the first
    (largest) segment meets, else the lowest such offset above all it meets."""
    meets = [placed.live(first, last) for first, last, _ in segments]
    # offsets in [lo - words + 1, hi) would overlap a placed range
    lo = np.concatenate([np.maximum(0, los - _aligned(words) + 1) for (los, _), (_, _, words) in zip(meets, segments)])
    hi = np.concatenate([his for _, his in meets])
    order = np.lexsort((hi, lo))
    lo, hi = lo[order], hi[order]
    # a stretch is clear from where every taken range before it has ended, up to the next one's start
    cursor = np.maximum.accumulate(np.concatenate(([0], hi)))
    clear = np.append(cursor[:-1][lo > cursor[:-1]], cursor[-1])
    above = meets[0][0]  # sorted
    below = np.searchsorted(above, clear)
    inside = below < len(above)
    if not inside.any():
        return int(clear[0])
    gaps = above[below[inside]] - clear[inside]
    return int(clear[inside][np.argmin(gaps)])  # the first smallest: clear rises


def place(intervals: list[Interval], packed: bool = True) -> tuple[dict[str, int], int]:
    """Best-fit placement by size and conflict, in the order (of a few, each repaired a few times)
    that packs tightest. Returns (offsets, arena size), in floats. Unpacked: one best-fit pass, in
    the first order, for a build whose offsets are never emitted (codegen's compile_batched probes
    the batch with them); the search for the tightest order is most of a large model's planning."""
    if not packed:
        return _best_fit(sorted(intervals, key=_ORDERS[0]))
    best, bound = None, liveness_lower_bound(intervals)
    for key in _ORDERS:
        order = sorted(intervals, key=key)
        for _ in range(_REPAIRS):
            offsets, total = _best_fit(order)
            if best is None or total < best[1]:
                best = (offsets, total)
            if total == bound:
                return best
            # The tensors that ended above the bound go first next time; the others find room around them.
            above = {iv.name for iv in order if offsets[iv.name] + _aligned(iv.size) > bound}
            order = [iv for iv in order if iv.name in above] + [iv for iv in order if iv.name not in above]
    return best if best else ({}, 0)


def liveness_lower_bound(intervals: list[Interval]) -> int:
    """The most floats live at any one statement: no placement can use less."""
    events: dict[int, int] = {}
    for start, end, words in (segment for i in intervals for segment in i.segments()):
        events[start] = events.get(start, 0) + _aligned(words)
        events[end + 1] = events.get(end + 1, 0) - _aligned(words)
    live = peak = 0
    for point in sorted(events):
        live += events[point]
        peak = max(peak, live)
    return peak
