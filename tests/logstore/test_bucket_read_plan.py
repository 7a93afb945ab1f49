"""``bucket_read_plan.plan_read``: what a plan names of each segment a range touches (the
offset index only where the read uses one), and when there is no plan."""

from __future__ import annotations

from seglog.logstore.bucket.bucket_read_plan import WHOLE_OBJECT_BYTES, plan_read
from seglog.logstore.bucket.bucket_state import PartitionState, SegmentEntry
from seglog.logstore.config.config import LogConfig

CONFIG = LogConfig.from_properties()
INDEX = b"\0" * 16  # two offset index entries


def entry(base: int, size: int = 1000, *, index_object: bool = False) -> SegmentEntry:
    if index_object:
        return SegmentEntry(
            f"t-0/{base}-x", base, base + 10, size, 5, index_bytes=16, timeindex_bytes=12
        )
    return SegmentEntry(
        f"t-0/{base}-x", base, base + 10, size, 5, inline_index=INDEX, inline_timeindex=b"\0" * 12
    )


def test_the_first_and_last_segments_keep_their_inline_index_the_middle_none():
    state = PartitionState(tuple(entry(b) for b in range(0, 50, 10)))
    plan = plan_read(state, CONFIG, 7, "id", 15, 42)
    assert plan is not None
    assert (plan.version, plan.topic_id, plan.log_start_offset, plan.high_watermark) == (
        7,
        "id",
        0,
        50,
    )
    assert [s.base_offset for s in plan.segments] == [10, 20, 30, 40]
    assert [s.inline_index for s in plan.segments] == [INDEX, b"", b"", INDEX]
    assert all(s.index_bytes == 0 for s in plan.segments)
    assert not plan.gaps_allowed


def test_an_index_object_is_kept_only_for_a_large_segment():
    big = WHOLE_OBJECT_BYTES + 1
    state = PartitionState(
        (
            entry(0, big, index_object=True),
            entry(10, index_object=True),
            entry(20, big, index_object=True),
        )
    )
    plan = plan_read(state, CONFIG, 1, None, 5, 25)
    assert plan is not None
    assert [s.index_bytes for s in plan.segments] == [16, 0, 16]
    small = plan_read(PartitionState((entry(0, index_object=True),)), CONFIG, 1, None, 5, 10)
    assert small is not None and small.segments[0].index_bytes == 0


def test_no_plan_beyond_the_state():
    state = PartitionState((entry(0), entry(10)), log_start_offset=3)
    assert plan_read(state, CONFIG, 1, None, 0, 10) is None  # below the log start
    assert plan_read(state, CONFIG, 1, None, 3, 21) is None  # beyond the log end
    assert plan_read(state, CONFIG, 1, None, 3, 20) is not None
    assert plan_read(PartitionState(), CONFIG, 1, None, 0, 0) is None


def test_a_compacted_or_cleaned_partition_reads_with_gaps_allowed():
    state = PartitionState((entry(0),))
    compact = LogConfig.from_properties({"cleanup.policy": "compact"})
    plan = plan_read(state, compact, 1, None, 0, 10)
    assert plan is not None and plan.gaps_allowed
    cleaned = PartitionState((entry(0),), cleaner_offset=5)
    plan = plan_read(cleaned, CONFIG, 1, None, 0, 10)
    assert plan is not None and plan.gaps_allowed
