"""``transactions.producer_batches``: the Python walk of a small span and the numba
kernel of a large one find the same producer batches, with the same header fields."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.log import transactions
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import ControlType, encode_batches, encode_control_batch
from seglog.logstore.util.clock import MockClock

FIELDS = ("position", "base_offset", "last_offset", "size", "attributes", "producer_id",
          "producer_epoch", "base_sequence", "max_timestamp")


def _scan(seg, start: int = 0, end_offset: int = 2**63 - 1) -> list[tuple]:
    return [tuple(getattr(h, f) for f in FIELDS) + (bytes(buf[h.position:h.end_position]),)
            for h, buf in transactions.producer_batches(seg, start, end_offset)]


@pytest.fixture
def segment(tmp_path):
    now = 1_700_000_000_000
    log = Log.open(tmp_path / "t-0", LogConfig.from_properties({}), clock=MockClock(now))
    values = pa.array([b"a", b"b", b"c"])
    log.append(encode_batches(values, now_ms=now))  # no producer id: not reported
    log.append(encode_batches(values, now_ms=now, producer_id=7, producer_epoch=1,
                              base_sequence=0))
    log.append(encode_batches(values, now_ms=now, producer_id=9, producer_epoch=0,
                              base_sequence=0, is_transactional=True, compression="lz4"))
    log.append(encode_control_batch(ControlType.ABORT, producer_id=9, producer_epoch=0,
                                    timestamp_ms=now))
    log.append(encode_batches(values, now_ms=now, producer_id=7, producer_epoch=1,
                              base_sequence=3))
    yield log.segments[-1]
    log.close()


@pytest.mark.parametrize(("start", "end_offset"), [(0, 2**63 - 1), (0, 6), (0, 0)])
def test_python_walk_matches_the_kernel(segment, monkeypatch, start, end_offset):
    small = _scan(segment, start, end_offset)
    monkeypatch.setattr(transactions, "SMALL_SCAN", -1)  # every span goes to the kernel
    assert _scan(segment, start, end_offset) == small
    if end_offset > 6:
        assert [r[5] for r in small] == [7, 9, 9, 7]  # producer ids, control batch included
    assert len(small) == {2**63 - 1: 4, 6: 1, 0: 0}[end_offset]


def test_python_walk_starts_at_a_batch_position(segment):
    first = _scan(segment)
    second_start = first[1][0]
    rest = _scan(segment, second_start)
    assert [r[1:] for r in rest] == [r[1:] for r in first[1:]]  # positions are buffer-relative


def test_python_walk_names_the_file_of_a_damaged_header(segment):
    with open(segment.log_path, "r+b") as f:  # an impossible magic in the second batch
        pos = _scan(segment)[0][0]
        f.seek(pos + 16)
        f.write(b"\x07")
    with pytest.raises(CorruptRecordError, match=str(segment.log_path.name)):
        _scan(segment)


def test_a_bucket_segment_scans_a_span_above_small_scan():
    """Above ``SMALL_SCAN`` the walk reads chunks through ``readinto``; a bucket segment
    fills the buffer by slice assignment, which a numpy array refuses (bytes are no
    integers): the walk hands it a memoryview of its chunk."""
    from bucket_helpers import memory_uri

    from seglog.logstore.manager.log_manager import LogManager

    values = pa.array([b"v" * 1000] * 3000)  # ~3 MB: several 1 MiB batches
    with LogManager(memory_uri()) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, encode_batches(values, producer_id=7, producer_epoch=0,
                                          base_sequence=0))
        seg = mgr.get_log("t", 0).segments[0]
        assert seg.size > transactions.SMALL_SCAN
        found = [(h.base_offset, h.last_offset, h.producer_id)
                 for h, _ in transactions.producer_batches(seg)]
    assert found[0][0] == 0 and found[-1][1] == 2999 and {p for *_, p in found} == {7}
    assert all(a[1] + 1 == b[0] for a, b in zip(found, found[1:], strict=False))
