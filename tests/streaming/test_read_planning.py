"""Read planning: ranges, maxRecordsPerPartition and minPartitions as Kafka's connector."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from seglog.streaming.read_planning import ReadRange, plan_ranges, split_range


def spans(ranges):
    return [(r.topic, r.partition, r.start, r.end) for r in ranges]


def test_one_range_per_non_empty_partition():
    out = plan_ranges({("t", 0): 5, ("t", 1): 9}, {("t", 0): 8, ("t", 1): 9, ("u", 0): 2},
                      log_dirs=["/d"], include_headers=True, fail_on_data_loss=False)
    assert spans(out) == [("t", 0, 5, 8), ("u", 0, 0, 2)]
    assert out[0].log_dirs == ("/d",) and out[0].include_headers
    assert not out[0].fail_on_data_loss
    assert pickle.loads(pickle.dumps(out[0])) == out[0]


def test_max_records_then_min_partitions():
    out = plan_ranges({("t", 0): 0}, {("t", 0): 10}, log_dirs=["/d"],
                      max_records_per_partition=4)
    assert spans(out) == [("t", 0, 0, 3), ("t", 0, 3, 6), ("t", 0, 6, 10)]
    out = plan_ranges({("t", 0): 0, ("t", 1): 0}, {("t", 0): 90, ("t", 1): 10},
                      log_dirs=["/d"], min_partitions=10)
    assert [r.size for r in out] == [10] * 9 + [10]
    assert sum(1 for r in out if r.partition == 0) == 9


@given(st.integers(0, 10**6), st.integers(1, 10**5), st.integers(1, 50))
def test_split_is_contiguous_and_complete(start, size, parts):
    r = ReadRange(("/d",), "t", 0, start, start + size)
    pieces = split_range(r, parts)
    assert pieces[0].start == r.start and pieces[-1].end == r.end
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
    assert all(p.size > 0 for p in pieces) and len(pieces) == min(parts, size)
