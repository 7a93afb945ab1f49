"""Faults inside the readable range of a cleanly closed log dir: a bit flip in a batch's
base offset (outside the CRC), a deleted middle segment, truncated inactive and active
segments, a garbled active offset index. Readers in another process (read-only) must
never return shifted, duplicated or skipped rows: they read exactly what was written or
raise an error naming the file (CorruptRecordError for wrong bytes, MissingDataError for
missing offsets). ``check(deep=True)`` and ``seglog check`` report every fault."""

from __future__ import annotations

import io
import logging
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from _log_checks import make_batch, value_for
from segment_damage import flip_base_offset, segment_files

from seglog.cli import main as seglog_main
from seglog.logstore.errors import (
    CorruptRecordError,
    MissingDataError,
    OffsetBelowLogStartError,
    SeglogError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.records.record_format import iter_batch_headers

TOPIC = "t"
CONFIG = {"segment.bytes": 6 * 1024, "index.interval.bytes": 512}


def build(d: Path, config: dict | None = None, rows: int = 300) -> None:
    rnd = random.Random(3)
    with LogManager([d]) as mgr:
        mgr.create_topic(TOPIC, 1, {**CONFIG, **(config or {})})
        log = mgr.get_log(TOPIC, 0)
        while log.log_end_offset < rows:
            n = min(rnd.randint(1, 9), rows - log.log_end_offset)
            mgr.append(TOPIC, 0, make_batch(log.log_end_offset, n))
        mgr.checkpoint_high_watermarks()
        assert log.num_segments >= 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pristine") / "logs"
    build(d)
    return d


def segments(d: Path) -> list[Path]:
    return segment_files(d, TOPIC)


def headers(path: Path) -> list:
    return list(iter_batch_headers(path.read_bytes()))


def truncate(path: Path, mid_batch: bool) -> None:
    hs = headers(path)
    h = hs[len(hs) // 2]
    os.truncate(path, h.position + (h.size // 2 if mid_batch else 0))


def garble_active_index(d: Path) -> None:
    idx = segments(d)[-1].with_suffix(".index")
    data = bytearray(idx.read_bytes())
    # entries point at later batches than their offsets name: a lookup that trusted
    # them would skip rows
    n = next((i for i in range(0, len(data), 8) if data[i : i + 8] == bytes(8)), len(data)) // 8
    assert n >= 3, "the active index needs entries for this test"
    for i in range(n):
        rel, pos = struct.unpack_from(">ii", data, 8 * i)
        nxt = struct.unpack_from(">ii", data, 8 * (i + 1))[1] if i + 1 < n else pos
        struct.pack_into(">ii", data, 8 * i, rel, nxt)
    idx.write_bytes(bytes(data))


FAULTS: dict[str, Callable[[Path], None]] = {
    "flip-base-middle-bit0": lambda d: flip_base_offset(segments(d)[1], 3, 0),
    "flip-base-middle-bit3": lambda d: flip_base_offset(segments(d)[1], 3, 3),
    "flip-base-middle-bit40": lambda d: flip_base_offset(segments(d)[1], 3, 40),
    "flip-base-last-bit0": lambda d: flip_base_offset(segments(d)[-1], -1, 0),
    "flip-base-last-bit2": lambda d: flip_base_offset(segments(d)[-1], -1, 2),
    "flip-base-last-bit40": lambda d: flip_base_offset(segments(d)[-1], -1, 40),
    "flip-base-first-of-segment": lambda d: flip_base_offset(segments(d)[2], 0, 1),
    "delete-middle-segment": lambda d: [
        p.unlink() for p in segments(d)[1].parent.glob(segments(d)[1].stem + ".*")
    ],
    "truncate-inactive-mid-batch": lambda d: truncate(segments(d)[1], True),
    "truncate-inactive-at-batch": lambda d: truncate(segments(d)[1], False),
    "truncate-active-mid-batch": lambda d: truncate(segments(d)[-1], True),
    "truncate-active-at-batch": lambda d: truncate(segments(d)[-1], False),
}
MISSING = {"delete-middle-segment", "truncate-inactive-at-batch"}
# The last segment cut short: the published high watermark is beyond the log end, and a
# reader clamps it there (Kafka's rule), warning; it reads the records before the cut.
CLAMPED = {"truncate-active-mid-batch", "truncate-active-at-batch"}


def read_rows(d: Path, *, chunks: bool) -> list[int]:
    """Every offset readable by a reader in another process, checked against the values
    written. Raises what the reader raises."""
    with LogManager([d], read_only=True) as mgr:
        mgr.high_watermarks()
        log = mgr.get_log(TOPIC, 0)
        start, end = log.log_start_offset, log.high_watermark
        offsets: list[int] = []
        if chunks:
            for chunk in log.read_chunks(start, end, 4096):
                rows = decode_batches(chunk, start_offset=start, end_offset=end)
                offsets += rows.column("offset").to_pylist()
                values = rows.column("value").to_pylist()
                assert values == [value_for(o) for o in rows.column("offset").to_pylist()]
        else:
            offset = start
            while offset < end:
                fetched = log.read(offset, max_bytes=2048)
                rows = decode_batches(fetched.records, start_offset=offset, end_offset=end)
                got = rows.column("offset").to_pylist()
                assert got, f"read({offset}) returned nothing below the high watermark {end}"
                assert rows.column("value").to_pylist() == [value_for(o) for o in got]
                offsets += got
                offset = fetched.next_offset
        return offsets


def seglog_check(d: Path) -> tuple[int, str]:
    out = io.StringIO()
    status = seglog_main(["check", str(d)], out)
    return status, out.getvalue()


def deep_problems(d: Path) -> list:
    with LogManager([d], read_only=True) as mgr:
        return mgr.check(deep=True)


def test_the_pristine_log_reads_whole_and_checks_clean(pristine):
    assert read_rows(pristine, chunks=True) == list(range(300))
    assert read_rows(pristine, chunks=False) == list(range(300))
    assert deep_problems(pristine) == []
    status, out = seglog_check(pristine)
    assert status == 0, out


@pytest.mark.parametrize("fault", sorted(set(FAULTS) - CLAMPED))
@pytest.mark.parametrize("chunks", [True, False], ids=["read_chunks", "read"])
def test_a_fault_is_an_error_naming_the_file_never_wrong_rows(pristine, tmp_path, fault, chunks):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    FAULTS[fault](d)
    expected = MissingDataError if fault in MISSING else CorruptRecordError
    with pytest.raises(SeglogError) as info:
        rows = read_rows(d, chunks=chunks)
        pytest.fail(f"{fault}: read {len(rows)} rows without an error")
    assert isinstance(info.value, expected), f"{fault}: {info.value!r}"
    assert not isinstance(info.value, OffsetBelowLogStartError), info.value
    assert f"{TOPIC}-0" in str(info.value) and ".log" in str(info.value), info.value


@pytest.mark.parametrize("fault", sorted(CLAMPED))
@pytest.mark.parametrize("chunks", [True, False], ids=["read_chunks", "read"])
def test_a_cut_last_segment_reads_up_to_the_cut_with_a_warning(
    pristine, tmp_path, fault, chunks, caplog
):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    FAULTS[fault](d)
    with caplog.at_level(logging.WARNING):
        rows = read_rows(d, chunks=chunks)
    last = segments(d)[-1]
    assert rows == list(range(headers(last)[-1].next_offset))  # every record before the cut
    assert "says high watermark 300" in caplog.text and "beyond its log end" in caplog.text


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_check_reports_every_fault(pristine, tmp_path, fault):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    FAULTS[fault](d)
    problems = deep_problems(d)
    assert problems, f"check(deep=True) found nothing after {fault}"
    status, out = seglog_check(d)
    assert status == 1 and "OK" not in out, f"seglog check after {fault}:\n{out}"


def test_a_missing_range_says_where_to_go_on(pristine, tmp_path):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    gone = segments(d)[1]
    first, after = int(gone.stem), int(segments(d)[2].stem)
    FAULTS["delete-middle-segment"](d)
    with LogManager([d], read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 0)
        with pytest.raises(MissingDataError) as info:
            list(log.read_chunks(0, log.high_watermark))
        assert (info.value.start, info.value.end) == (first, after)
        rows = decode_batches(
            b"".join(log.read_chunks(after, log.high_watermark)), start_offset=after
        )
        assert rows.column("offset").to_pylist() == list(range(after, 300))


def test_a_garbled_active_index_costs_a_scan_not_rows(tmp_path, caplog):
    d = tmp_path / "logs"
    build(d, {"index.interval.bytes": 128})
    garble_active_index(d)
    active = int(segments(d)[-1].stem)
    first_entry = (
        active + struct.unpack_from(">i", segments(d)[-1].with_suffix(".index").read_bytes(), 0)[0]
    )
    for chunks in (True, False):
        assert read_rows(d, chunks=chunks) == list(range(300))
    with LogManager([d], read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 0)
        starts = [first_entry, *range(active, 300, 7)]
        for start in starts:  # every lookup lands on the right batch
            rows = decode_batches(b"".join(log.read_chunks(start, 300)), start_offset=start)
            assert rows.column("offset").to_pylist() == list(range(start, 300))
        assert log.log_end_offset == 300
    assert "offset index" in caplog.text and "is corrupt" in caplog.text
    assert any(p.kind == "bad-index-entry" for p in deep_problems(d))
    status, out = seglog_check(d)
    assert status == 1, out


@pytest.mark.parametrize("bit", [40, 33])
@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_compacted_log_still_catches_base_offsets_outside_their_segment(tmp_path, bit, which):
    d = tmp_path / "logs"
    build(d, {"cleanup.policy": "compact"})
    segs = segments(d)
    seg = segs[1] if which == "middle" else segs[-1]
    flip_base_offset(seg, 2, bit)
    # Issue 22.18: the bound broken, in real offsets (the last segment has no next base,
    # so no made-up end of its range like "[base, base + 2^31)")
    want = (
        f"reaching the next segment's base offset {int(segs[2].stem)}"
        if which == "middle"
        else f"more than 2147483647 above its segment's base offset {int(seg.stem)}"
    )
    with pytest.raises(CorruptRecordError, match=want) as info:
        read_rows(d, chunks=True)
    assert str(int(seg.stem) + 2**31) not in str(info.value)
    problems = deep_problems(d)
    assert problems and str(int(seg.stem) + 2**31) not in problems[0].message


def test_retention_under_a_reader_is_missing_data_never_an_inverted_range(tmp_path):
    d = tmp_path / "logs"
    build(d, {"retention.bytes": 1, "file.delete.delay.ms": 0})
    with LogManager([d], read_only=True) as reader:
        log = reader.get_log(TOPIC, 0)
        chunks = log.read_chunks(0, log.high_watermark, 1024)
        next(chunks)  # the reader holds the first segment; the later ones are not open
        with LogManager([d]) as writer:
            assert writer.delete_old_segments() > 0
            lso = writer.get_log(TOPIC, 0).log_start_offset
        with pytest.raises(OffsetBelowLogStartError) as info:
            list(chunks)
        e = info.value
        assert e.start < e.end == lso, e
        assert f"[{e.start}, {lso})" in str(e) and f"{TOPIC}-0" in str(e)
