from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.logstore.errors import CorruptIndexError, InvalidOffsetError
from seglog.logstore.index.offset_index import OffsetIndex, OffsetPosition


def test_lookup_finds_the_largest_entry_at_or_below(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 100, 4096)
    for off, pos in [(110, 1000), (120, 2000), (130, 3000)]:
        idx.append(off, pos)
    assert idx.lookup(99) == OffsetPosition(100, 0)
    assert idx.lookup(109) == OffsetPosition(100, 0)
    assert idx.lookup(110) == OffsetPosition(110, 1000)
    assert idx.lookup(125) == OffsetPosition(120, 2000)
    assert idx.lookup(10**9) == OffsetPosition(130, 3000)
    idx.close()


def test_preallocated_then_trimmed_on_close(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 4096 + 5)
    assert os.path.getsize(path) == 4096  # rounded down to whole entries
    assert idx.max_entries == 512
    idx.append(5, 100)
    idx.append(9, 200)
    idx.close()
    assert os.path.getsize(path) == 16
    again = OffsetIndex(path, 0, 4096)
    assert again.entries == 2 and again.lookup(9) == OffsetPosition(9, 200)
    again.close()


def test_offsets_must_grow_and_fit(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 10, 4096)
    idx.append(20, 1)
    with pytest.raises(InvalidOffsetError):
        idx.append(20, 2)
    with pytest.raises(InvalidOffsetError):
        idx.append(10 + 2**31, 3)
    idx.close()


def test_full_index_refuses_appends(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 16)
    idx.append(1, 1)
    idx.append(2, 2)
    assert idx.is_full
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.append(3, 3)
    idx.close()


def test_truncate_to_removes_entries_at_or_above(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 4096)
    for off in (10, 20, 30, 40):
        idx.append(off, off * 10)
    idx.truncate_to(30)
    assert [e.offset for e in idx.all_entries()] == [10, 20]
    idx.truncate_to(15)
    assert [e.offset for e in idx.all_entries()] == [10]
    idx.append(11, 500)  # appends continue after a truncation
    assert idx.lookup(100) == OffsetPosition(11, 500)
    idx.close()


def test_sanity_check_rejects_a_zero_filled_tail_and_odd_lengths(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 4096)
    idx.append(5, 50)
    idx.flush()
    idx.close_handler()  # a crash: never trimmed
    crashed = OffsetIndex(path, 0, 4096)
    assert crashed.entries == 512  # Kafka counts the whole file
    with pytest.raises(CorruptIndexError):
        crashed.sanity_check()
    crashed.close_handler()
    with open(path, "ab") as f:
        f.write(b"123")
    odd = OffsetIndex(path, 0, 4096)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        odd.sanity_check()
    odd.close_handler()


def test_read_only_counts_leading_nonzero_entries_of_a_live_index(tmp_path):
    path = tmp_path / "0.index"
    writer = OffsetIndex(path, 0, 4096)
    writer.append(3, 30)
    writer.flush()
    reader = OffsetIndex(path, 0, writable=False, count_leading_nonzero=True)
    assert reader.entries == 1
    writer.append(7, 70)  # visible to the reader through the page cache
    assert reader.lookup(8) == OffsetPosition(7, 70)
    writer.close()  # trimmed under the reader: it must not crash
    assert reader.entries == 2
    reader.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=0, max_size=60, unique=True),
       st.integers(0, 1200))
def test_lookup_matches_a_sorted_list_model(tmp_path_factory, rel_offsets, target):
    d = tmp_path_factory.mktemp("idx")
    idx = OffsetIndex(d / "0.index", 0, 8 * 100)
    model = sorted(rel_offsets)
    for i, off in enumerate(model):
        idx.append(off, i * 7)
    below = [(o, i * 7) for i, o in enumerate(model) if o <= target]
    expected = OffsetPosition(*below[-1]) if below else OffsetPosition(0, 0)
    assert idx.lookup(target) == expected
    idx.close()
