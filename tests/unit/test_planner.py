"""The arena planner: no two tensors live at the same time share bytes, and the arena stays
near the liveness lower bound."""

import numpy as np

from edgetrain.memory import ALIGN, Interval, liveness_lower_bound, place


def random_intervals(seed, n=60):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        start = int(rng.integers(0, 40))
        out.append(Interval(f"t{i}", start, start + int(rng.integers(0, 8)), int(rng.integers(1, 500))))
    return out


def test_live_tensors_never_overlap():
    for seed in range(20):
        intervals = random_intervals(seed)
        offsets, total = place(intervals)
        for a in intervals:
            assert offsets[a.name] % ALIGN == 0 and offsets[a.name] + a.size <= total
            for b in intervals:
                if a.name < b.name and a.start <= b.end and b.start <= a.end:
                    assert (offsets[a.name] + a.size <= offsets[b.name] or
                            offsets[b.name] + b.size <= offsets[a.name]), (a, b)


def test_arena_close_to_lower_bound():
    ratios = []
    for seed in range(20):
        intervals = random_intervals(seed)
        _, total = place(intervals)
        bound = liveness_lower_bound(intervals)
        assert total >= bound
        ratios.append(total / bound)
    print(f"arena / liveness lower bound: mean {np.mean(ratios):.3f}, worst {max(ratios):.3f}")
    assert np.mean(ratios) < 1.25


def test_chain_reuses_memory():
    # a -> b -> c -> d: each tensor lives only while its consumer runs, so two buffers suffice.
    chain = [Interval(n, i, i + 1, 100) for i, n in enumerate("abcd")]
    _, total = place(chain)
    assert total == 2 * 100
