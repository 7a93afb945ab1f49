from __future__ import annotations

import os

import pytest

from seglog.logstore.errors import InvalidOffsetError
from seglog.logstore.index.time_index import TimeIndex, TimestampOffset


def test_appends_only_when_the_timestamp_grows(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 100, 1200)
    idx.maybe_append(1000, 105)
    idx.maybe_append(1000, 110)  # same timestamp: no entry
    idx.maybe_append(2000, 120)
    assert idx.all_entries() == [TimestampOffset(1000, 105), TimestampOffset(2000, 120)]
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(1500, 130)  # timestamps never go back
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(3000, 119)  # nor offsets
    idx.close()


def test_lookup_largest_entry_at_or_below(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 100, 1200)
    for ts, off in [(1000, 105), (2000, 120), (3000, 140)]:
        idx.maybe_append(ts, off)
    assert idx.lookup(999) == TimestampOffset(-1, 100)
    assert idx.lookup(2500) == TimestampOffset(2000, 120)
    assert idx.lookup(3000) == TimestampOffset(3000, 140)
    idx.close()


def test_last_slot_is_kept_for_the_final_entry(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 36)  # three entries
    idx.maybe_append(1, 1)
    idx.maybe_append(2, 2)
    assert idx.is_full
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.maybe_append(3, 3)
    idx.maybe_append(3, 3, skip_full_check=True)  # what a roll writes
    idx.close()
    assert os.path.getsize(tmp_path / "0.timeindex") == 36


def test_truncate_to_removes_entries_at_or_above_an_offset(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 1200)
    for ts, off in [(10, 5), (20, 10), (30, 15)]:
        idx.maybe_append(ts, off)
    idx.truncate_to(10)
    assert idx.all_entries() == [TimestampOffset(10, 5)]
    assert idx.last() == TimestampOffset(10, 5)
    idx.truncate_to(0)
    assert idx.last() == TimestampOffset(-1, 0)
    idx.close()
