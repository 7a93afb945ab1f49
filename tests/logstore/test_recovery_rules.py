"""Issue 22.8: recovery judges a log by the rules readers apply (``offset_continuity``),
so it cuts at the first batch a reader would refuse, never before it, and keeps no batch
a reader refuses. Kafka's CRC does not cover the 8-byte base offset: a flipped base offset
passes the CRC and only the offset rules catch it."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT

TS = 1_700_000_000_000


def value(i: int) -> bytes:
    return b"v%d-" % i + b"y" * (i % 7)


def build(d: Path, batches: int, per_batch: int, config: dict[str, str] | None = None) -> None:
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1, config=config or {})
        for b in range(batches):
            first = b * per_batch
            mgr.append("t", 0, encode_batches(
                pa.array([value(i) for i in range(first, first + per_batch)]),
                timestamps=pa.array([TS + i for i in range(first, first + per_batch)],
                                    pa.int64())))


def segment_files(d: Path) -> list[Path]:
    return sorted((d / "t-0").glob("*.log"))


def read_all(d: Path) -> list[int]:
    """Every offset a reader in another process reads up to the high watermark; the
    values must be the ones written."""
    with LogManager([d], read_only=True) as mgr:
        log = mgr.get_log("t", 0)
        rows = decode_batches(b"".join(log.read_chunks(0, log.high_watermark)))
        offsets = rows.column("offset").to_pylist()
        assert rows.column("value").to_pylist() == [value(o) for o in offsets]
        return offsets


def crash_and_recover(d: Path) -> int:
    """Drop the clean shutdown marker and the recovery point (recovery walks from the
    segment holding it: from the first one, so that every segment is judged), open a
    writer (it recovers), return its log end."""
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    (d / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nt 0 0\n")
    with LogManager([d]) as mgr:
        return mgr.get_log("t", 0).log_end_offset


def test_a_flipped_base_offset_is_cut_and_the_batches_before_it_kept(tmp_path):
    """The issue's scenario: ten batches of five, the third's base offset 10 -> 11."""
    d = tmp_path / "logs"
    build(d, batches=10, per_batch=5)
    (path,) = segment_files(d)
    data = bytearray(path.read_bytes())
    third = list(iter_batch_headers(data))[2]
    assert third.base_offset == 10
    struct.pack_into(">q", data, third.position, 11)
    path.write_bytes(bytes(data))
    assert crash_and_recover(d) == 10
    assert path.stat().st_size == third.position  # cut at the flipped batch, not after it
    assert read_all(d) == list(range(10))
    with LogManager([d], read_only=True) as mgr:
        assert mgr.check(deep=True) == []
    with LogManager([d]) as mgr:
        assert mgr.append("t", 0, encode_batches(pa.array([value(10)]))).first_offset == 10
    assert read_all(d) == list(range(11))


def test_a_base_offset_reaching_the_next_segment_is_cut(tmp_path):
    """Rule 2 with the next segment's base: the last batch of a segment that is no
    longer written claims offsets of the next one."""
    d = tmp_path / "logs"
    build(d, batches=12, per_batch=3, config={"segment.bytes": "700"})
    first, second = segment_files(d)[:2]
    data = bytearray(first.read_bytes())
    last = list(iter_batch_headers(data))[-1]
    # A flip to the next segment's base: increasing, but outside its own segment.
    struct.pack_into(">q", data, last.position, int(second.stem))
    first.write_bytes(bytes(data))
    assert crash_and_recover(d) == last.base_offset
    assert read_all(d) == list(range(last.base_offset))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, list[list[tuple[int, int, int, int]]], int]:
    """A three-segment log and, per segment, its batches as (position, end, base offset,
    next offset); and its log end offset."""
    d = tmp_path_factory.mktemp("pristine") / "logs"
    build(d, batches=15, per_batch=4, config={"segment.bytes": "600"})
    layout = [[(h.position, h.end_position, h.base_offset, h.next_offset)
               for h in iter_batch_headers(p.read_bytes())] for p in segment_files(d)]
    assert len(layout) >= 3
    return d, layout, layout[-1][-1][3]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(min_value=0, max_value=1, exclude_max=True),
       flip=st.integers(min_value=1, max_value=255))
def test_one_corrupt_byte_anywhere_costs_its_batch_and_those_after_it_at_most(pristine, where,
                                                                             flip):
    """Recovery keeps every batch before the corrupt one, and either keeps the corrupt
    one (its change broke no rule: a leader epoch) with everything after it, or cuts
    there; whatever it keeps reads back whole and checks clean."""
    src, layout, end = pristine
    batches = [(i, b) for i, seg in enumerate(layout) for b in seg]
    total = sum(b[1] - b[0] for _, b in batches)
    target = int(where * total)
    # the batch holding byte ``target`` of the log (segments in order)
    k = 0
    while target >= batches[k][1][1] - batches[k][1][0]:
        target -= batches[k][1][1] - batches[k][1][0]
        k += 1
    seg_index, (pos, _stop, base, _next) = batches[k]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "logs"
        shutil.copytree(src, d)
        path = segment_files(d)[seg_index]
        data = bytearray(path.read_bytes())
        data[pos + target] ^= flip
        path.write_bytes(bytes(data))
        leo = crash_and_recover(d)
        assert leo in (base, end), (seg_index, pos + target, leo)
        assert read_all(d) == list(range(leo))
        with LogManager([d], read_only=True) as mgr:
            assert [p for p in mgr.check(deep=True) if not p.note] == []
