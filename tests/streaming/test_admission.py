"""Admission control: Kafka's proportional split, bytes, min + delay, AvailableNow."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from seglog.streaming.admission import (
    AdmissionLimits,
    SegmentLayout,
    admit,
    cap_to_target,
    segment_layout,
    split_budget,
)


def test_unlimited_reads_all():
    a = admit({("t", 0): 1}, {("t", 0): 100}, AdmissionLimits(), now_ms=0)
    assert a.end == {("t", 0): 100} and not a.delayed


def test_max_offsets_split_proportionally_to_lag():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 8}
    end = admit(start, latest, AdmissionLimits(max_offsets=100), now_ms=0).end
    assert end[("t", 2)] == 8  # a tiny partition is not starved
    assert end[("t", 0)] - 0 > end[("t", 1)] - 100 > 0
    assert sum(end[tp] - start[tp] for tp in start) == 100


@given(st.dictionaries(st.integers(0, 30), st.integers(1, 10**6), min_size=1),
       st.integers(1, 10**5))
def test_split_never_exceeds_budget_or_lag(lag, budget):
    lag = {("t", p): n for p, n in lag.items()}
    share = split_budget(lag, budget)
    assert sum(share.values()) == min(budget, sum(lag.values()))
    assert all(0 <= share[tp] <= lag[tp] for tp in lag)


def test_min_offsets_delays_until_max_trigger_delay():
    lim = AdmissionLimits(min_offsets=50, max_trigger_delay_ms=1000)
    start, latest = {("t", 0): 0}, {("t", 0): 10}
    # First batch of a query (no stamp): admitted at once, as Kafka.
    assert admit(start, latest, lim, now_ms=5000).end == latest
    delayed = admit(start, latest, lim, now_ms=5000, last_trigger_ms=4500)
    assert delayed.delayed and delayed.end == start
    assert admit(start, latest, lim, now_ms=5500, last_trigger_ms=4500).end == latest
    assert admit(start, {("t", 0): 60}, lim, now_ms=4600, last_trigger_ms=4500).end == {
        ("t", 0): 60}


def test_bytes_estimated_from_segment_sizes():
    layout = SegmentLayout((0, 100), (1000, 5000), 150)  # 10 B/offset, then 100 B/offset
    assert layout.bytes_between(0, 150) == 6000
    assert layout.bytes_between(90, 110) == 100 + 1000
    assert layout.offset_after_bytes(0, 1500, 150) == 105
    lim = AdmissionLimits(max_bytes=1500)
    end = admit({("t", 0): 0}, {("t", 0): 150}, lim, now_ms=0, layouts=lambda tp: layout).end
    assert end == {("t", 0): 105}
    # An oversized first batch still moves by one offset.
    tiny = AdmissionLimits(max_bytes=1)
    assert admit({("t", 0): 100}, {("t", 0): 150}, tiny, now_ms=0,
                 layouts=lambda tp: layout).end == {("t", 0): 101}


def test_byte_budget_split_by_lag_and_what_a_partition_leaves_goes_to_the_others():
    """Each partition's share is proportional to its offset lag and is walked from its
    start (only the segments it may admit are sized); a partition whose whole lag fits
    hands what it leaves to the others."""
    cheap = SegmentLayout((0,), (1000,), 100)  # 10 B an offset
    dear = SegmentLayout((0,), (10_000,), 100)  # 100 B an offset
    layouts = {("t", 0): cheap, ("t", 1): dear}
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 100, ("t", 1): 100}
    two_k = admit(start, latest, AdmissionLimits(max_bytes=2000), now_ms=0,
                  layouts=layouts.get).end
    assert two_k == {("t", 0): 100, ("t", 1): 10}  # 1,000 B each
    # 1,500 B each: the cheap one needs 1,000, its other 500 buy the dear one 5 offsets
    three_k = admit(start, latest, AdmissionLimits(max_bytes=3000), now_ms=0,
                    layouts=layouts.get).end
    assert three_k == {("t", 0): 100, ("t", 1): 20}


@given(st.lists(st.tuples(st.lists(st.integers(1, 30), min_size=1, max_size=6),
                          st.lists(st.integers(0, 5_000), min_size=6, max_size=6),
                          st.integers(0, 40), st.integers(0, 200)),
                min_size=1, max_size=5),
       st.integers(1, 20_000))
def test_byte_bound_never_exceeds_the_budget(partitions, max_bytes):
    """Whatever the layouts, the admitted bytes stay within the budget, but for the one
    offset every lagging partition always moves by."""
    layouts, start, latest = {}, {}, {}
    for p, (gaps, sizes, tail, first) in enumerate(partitions):
        bases = tuple(sum(gaps[:i]) for i in range(len(gaps)))
        layout = SegmentLayout(bases, tuple(sizes[:len(bases)]), bases[-1] + tail)
        layouts[("t", p)] = layout
        start[("t", p)] = min(first, layout.end_offset)
        latest[("t", p)] = layout.end_offset
    end = admit(start, latest, AdmissionLimits(max_bytes=max_bytes), now_ms=0,
                layouts=layouts.get).end
    total = 0.0
    for tp, layout in layouts.items():
        assert start[tp] <= end[tp] <= latest[tp]
        if end[tp] > start[tp] + 1:
            total += _reference_bytes(layout, start[tp], end[tp])
    assert total <= max_bytes * (1 + 1e-6)


def test_segment_layout_lists_real_files(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    for base, size in ((0, 300), (40, 200)):
        (d / f"{base:020d}.log").write_bytes(b"x" * size)
        (d / f"{base:020d}.index").write_bytes(b"\0" * 64)
    (d / f"{80:020d}.log.deleted").write_bytes(b"x")
    layout = segment_layout([str(tmp_path / "nope"), str(tmp_path)], ("t", 0), 60)
    assert layout == SegmentLayout((0, 40), (300, 200), 60)
    assert segment_layout([str(tmp_path)], ("t", 1), 0) is None
    assert os.path.exists(d / f"{80:020d}.log.deleted")


def test_available_now_caps_at_target_and_ignores_new_partitions():
    latest = {("t", 0): 90, ("t", 1): 5, ("t", 2): 3}
    assert cap_to_target(latest, {("t", 0): 50, ("t", 1): 9}) == {("t", 0): 50, ("t", 1): 5}


def _reference_bytes(layout: SegmentLayout, a: int, b: int) -> float:
    """The estimate by its definition: each segment's size spread evenly over its
    offsets, summed offset by offset."""
    bases = layout.base_offsets
    total = 0.0
    for i, (base, size) in enumerate(zip(bases, layout.sizes, strict=True)):
        nxt = bases[i + 1] if i + 1 < len(bases) else max(layout.end_offset, base + 1)
        hi = max(nxt, base + 1)
        total += size * sum(1 for o in range(base, hi) if a <= o < b) / (hi - base)
    return total


@given(st.lists(st.integers(1, 30), min_size=1, max_size=12),
       st.lists(st.integers(0, 10_000), min_size=12, max_size=12),
       st.integers(0, 40), st.integers(0, 400), st.integers(0, 400),
       st.floats(0, 50_000))
def test_layout_estimates_match_their_definition(gaps, sizes, tail, x, y, budget):
    """The bisected estimates (a trigger looks at the segments around its offsets only)
    give the definition's bytes, and offset_after_bytes the largest end within budget."""
    bases = tuple(sum(gaps[:i]) for i in range(len(gaps)))
    layout = SegmentLayout(bases, tuple(sizes[:len(bases)]), bases[-1] + tail)
    a, b = min(x, y), max(x, y)
    expected = _reference_bytes(layout, a, b)
    assert abs(layout.bytes_between(a, b) - expected) <= 1e-6 * max(expected, 1.0)
    end, spent = layout.admit_bytes(a, budget, b)
    assert end == layout.offset_after_bytes(a, budget, b)
    assert abs(spent - _reference_bytes(layout, a, end)) <= 1e-6 * max(spent, 1.0)
    assert a <= end <= b
    assert _reference_bytes(layout, a, end) <= budget + 1e-6 * max(budget, 1.0)
    covered = max(layout.end_offset, bases[-1] + 1)  # offsets past the spans cost nothing
    if end < min(b, covered) and budget > 0:
        assert _reference_bytes(layout, a, end + 1) > budget - 1e-6 * max(budget, 1.0)
