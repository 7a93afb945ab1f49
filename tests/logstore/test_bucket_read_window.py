"""Bucket reads through ``SegmentWindow``: one large ranged GET serves many decode chunks,
a range ending mid-object fetches only up to where its last batch can end, and the
damage rules (short object, missing object) hold for every window size."""

from __future__ import annotations

import struct
import threading
from typing import Any

import pyarrow as pa
import pytest
from bucket_helpers import CountingStorage, memory_uri

from seglog.logstore.bucket import bucket_read_window
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import CorruptRecordError, MissingDataError
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.object_storage import ObjectStorage

TS = 1_700_000_000_000
ROWS = 400  # a segment: 400 records in batches of at most 512 bytes (~30 batches)


class RangeRecorder(CountingStorage):
    """Counts requests and records each ranged GET of a ``.log`` as (key, position,
    length)."""

    def __init__(self, inner: ObjectStorage) -> None:
        super().__init__(inner)
        self.gets: list[tuple[str, int, int]] = []

    def read_range_view(self, path: Any, position: int, length: int) -> memoryview:
        self.counts["read_range_view"] += 1
        self.gets.append((str(path), position, length))
        return self.inner.read_range_view(path, position, length)


def batches(n: int, start: int) -> bytearray:
    return encode_batches(pa.array([b"value-%06d" % i for i in range(start, start + n)]),
                          timestamps=pa.array([TS + i for i in range(start, start + n)],
                                              pa.int64()),
                          max_batch_bytes=512)


def two_segments() -> tuple[BucketLogManager, RangeRecorder, list]:
    storage = RangeRecorder(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1, {"index.interval.bytes": "100"})
    for i in range(2):
        mgr.append("t", 0, batches(ROWS, ROWS * i))
    segments = list(mgr.state.partition("t", 0).segments)
    assert [(s.base_offset, s.next_offset) for s in segments] == [(0, ROWS), (ROWS, 2 * ROWS)]
    storage.gets.clear()
    return mgr, storage, segments


def read(mgr: BucketLogManager, start: int, end: int, chunk_bytes: int) -> list[int]:
    log = mgr.get_log("t", 0)
    return [o for c in log.read_chunks(start, end, chunk_bytes)
            for o in decode_batches(bytes(c), start_offset=start, end_offset=end)
            .column("offset").to_pylist()]


def test_one_ranged_get_serves_every_chunk_of_a_segment():
    mgr, storage, segments = two_segments()
    assert read(mgr, 0, 2 * ROWS, chunk_bytes=600) == list(range(2 * ROWS))
    # Each segment is one GET (plus the byte that shows an object longer than
    # committed), however many 600-byte chunks it is decoded in.
    assert [(p, n) for _k, p, n in storage.gets] == [(0, s.size + 1) for s in segments]


def test_a_range_ending_mid_object_fetches_up_to_its_last_batch_only():
    mgr, storage, segments = two_segments()
    end = ROWS + ROWS // 4
    assert read(mgr, ROWS // 2, end, chunk_bytes=600) == list(range(ROWS // 2, end))
    first, second = segments
    assert len(storage.gets) == 2  # the index's header read and find_batch's walk: no GET
    # The second segment's GET goes out beside the first's (read ahead), in either order.
    (key0, position0, _), (key1, position1, length1) = sorted(
        storage.gets, key=lambda g: second.key in g[0]
    )
    assert first.key in key0 and position0 > 0  # from the index entry below the start
    assert second.key in key1 and position1 == 0
    # The offset index bounds the fetch: a quarter of the records, not the whole object.
    assert length1 < second.size // 2


@pytest.mark.parametrize("fetch_bytes", [1, 700, 5000])
def test_every_window_size_reads_the_same_records_within_its_bound(monkeypatch, fetch_bytes):
    """The task's memory bound: no GET larger than max(window, chunk) (+1 byte at an
    object's end)."""
    monkeypatch.setattr(bucket_read_window, "FETCH_BYTES", fetch_bytes)
    mgr, storage, _ = two_segments()
    assert read(mgr, 37, 2 * ROWS - 13, chunk_bytes=600) == list(range(37, 2 * ROWS - 13))
    assert all(n <= max(fetch_bytes, 600) + 1 for _k, _p, n in storage.gets)


def test_a_window_reaching_a_cut_short_object_is_corruption_never_data():
    mgr, storage, segments = two_segments()
    key = segments[1].key + ".log"
    storage.inner.write_atomic(key, storage.inner.read(key)[:-5])
    reader = BucketLogManager(storage)
    with pytest.raises(CorruptRecordError, match="cut short"):
        read(reader, 0, 2 * ROWS, chunk_bytes=600)
    assert read(reader, 0, ROWS, chunk_bytes=600) == list(range(ROWS))


def test_a_read_ahead_of_a_missing_object_fails_where_the_walk_reaches_it():
    """The next segment's GET runs ahead and fails; the walk still yields every record
    before that segment, then raises MissingDataError for the segment's offsets."""
    mgr, storage, segments = two_segments()
    storage.inner.delete(segments[1].key + ".log")
    log = BucketLogManager(storage).get_log("t", 0)
    seen: list[int] = []
    with pytest.raises(MissingDataError) as e:
        for c in log.read_chunks(ROWS // 2, ROWS + 10, 600):
            seen += decode_batches(bytes(c), start_offset=ROWS // 2).column("offset").to_pylist()
    assert (e.value.start, e.value.end) == (ROWS, 2 * ROWS)
    assert seen == list(range(ROWS // 2, ROWS))
    assert not read_ahead_threads()


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("seglog-read-ahead")]


def test_the_next_segment_is_fetched_while_the_current_one_is_decoded():
    mgr, storage, segments = two_segments()
    started, release = threading.Event(), threading.Event()
    plain = storage.inner.read_range_view

    def gated(path: Any, position: int, length: int) -> memoryview:
        if segments[1].key in str(path):
            started.set()
            assert release.wait(60)
        return plain(path, position, length)

    storage.inner.read_range_view = gated  # type: ignore[method-assign]
    chunks = mgr.get_log("t", 0).read_chunks(0, 2 * ROWS, 600)
    first = next(chunks)  # segment 0's first chunk: its other chunks are not read yet
    assert started.wait(60)  # segment 1's GET is under way meanwhile
    release.set()
    offsets = [o for c in [first, *chunks]
               for o in decode_batches(bytes(c), start_offset=0).column("offset").to_pylist()]
    assert offsets == list(range(2 * ROWS))
    assert not read_ahead_threads()  # the walk's thread is joined when the walk ends


def test_a_walk_closed_early_joins_its_read_ahead():
    mgr, storage, segments = two_segments()
    chunks = mgr.get_log("t", 0).read_chunks(0, 2 * ROWS, 600)
    next(chunks)
    chunks.close()
    assert not read_ahead_threads()
    assert [p for _k, p, _n in storage.gets] == [0, 0]  # segment 0, then 1 read ahead


def test_a_large_segment_reads_its_next_window_ahead_from_an_index_entry(monkeypatch):
    """Within a segment the next window starts at an index entry (a batch start)."""
    monkeypatch.setattr(bucket_read_window, "FETCH_BYTES", 3000)
    mgr, storage, segments = two_segments()
    assert read(mgr, 0, ROWS, chunk_bytes=600) == list(range(ROWS))
    positions = [p for _k, p, _n in storage.gets]
    assert positions[0] == 0 and len(positions) > 2 and positions == sorted(positions)
    index = mgr.get_log("t", 0).segments[0].offset_index
    assert all(index.position_at_or_below(p) == p for p in positions[1:])


def indexed_segments() -> tuple[str, list]:
    """t-0 with segments [0, 40) and [40, 80) of 20 two-record batches each, an offset
    index object each with an entry per batch (objects, so a test can damage them)."""
    uri = memory_uri()
    mgr = BucketLogManager(ObjectStorage(uri))
    mgr.inline_index_bytes = 0
    mgr.create_topic("t", 1, {"index.interval.bytes": "1"})
    for i in range(2):
        mgr.append("t", 0, encode_batches(pa.array([b"value-%06d" % j
                                                    for j in range(40 * i, 40 * i + 40)]),
                                          max_batch_bytes=100))
    return uri, list(mgr.state.partition("t", 0).segments)


@pytest.mark.parametrize("segment", [0, 1])  # 1: the last segment
def test_an_index_entry_pointing_into_a_needed_batch_only_bounds_the_fetch(segment):
    """A damaged ``.index`` (of the right size: no warning) whose entry after the range's
    last batch points into that batch: the window's bound falls inside a batch
    the read needs, and the read fetches past it. The ``.log`` is intact, so the records
    come back, never a CorruptRecordError blaming the object."""
    uri, segments = indexed_segments()
    storage = ObjectStorage(uri)
    seg = segments[segment]
    headers = list(iter_batch_headers(storage.read(seg.key + ".log")))
    index = bytearray(storage.read(seg.key + ".index"))
    entries = [struct.unpack_from(">ii", index, 8 * j) for j in range(len(index) // 8)]
    # A read ending in batch 1: the bound is the entry of batch 2, made to point into batch 1
    j = [position for _offset, position in entries].index(headers[2].position)
    struct.pack_into(">ii", index, 8 * j, entries[j][0], headers[1].position + 10)
    storage.write_atomic(seg.key + ".index", bytes(index))
    start, end = seg.base_offset, headers[1].last_offset + 1
    log = BucketLogManager(ObjectStorage(uri)).get_log("t", 0)
    assert [o for c in log.read_chunks(start, end, 600)
            for o in decode_batches(bytes(c), start_offset=start).column("offset")
            .to_pylist()] == list(range(start, end))


def test_a_crc_error_leaves_no_read_ahead_running_while_it_is_kept():
    """The CRC check raises outside the walk: the walk is closed there (its read-ahead
    thread joined), not when the error's traceback lets it go."""
    mgr, storage, segments = two_segments()
    key = segments[0].key + ".log"
    data = bytearray(storage.inner.read(key))
    data[-3] ^= 0x40  # inside the last batch's records: only the CRC knows
    storage.inner.write_atomic(key, data)
    with pytest.raises(CorruptRecordError, match="CRC") as e:
        for _chunk in BucketLogManager(storage).get_log("t", 0).read_chunks(0, 2 * ROWS, 600):
            pass
    assert e.value is not None  # the error, and its traceback, are still alive
    assert not read_ahead_threads()


def test_chunks_larger_than_a_window_use_the_windows_read_ahead(monkeypatch):
    """``chunk_bytes`` above ``FETCH_BYTES``: a window read ahead is shorter than a
    chunk, and serves the whole batches it holds rather than being dropped and
    fetched again (each byte GET once, two windows in memory)."""
    monkeypatch.setattr(bucket_read_window, "FETCH_BYTES", 3000)
    mgr, storage, segments = two_segments()
    assert read(mgr, 0, 2 * ROWS, chunk_bytes=6000) == list(range(2 * ROWS))
    positions = [p for _k, p, _n in storage.gets]
    assert len(storage.gets) > 2 and positions[0] == 0
    # Windows overlap only from the index entry each starts at to the previous one's end
    # (plus the byte that shows an object longer than committed).
    fetched = sum(n for _k, _p, n in storage.gets)
    assert fetched < sum(s.size for s in segments) + 200 * len(storage.gets)
