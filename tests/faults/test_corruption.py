"""Junk written into real files of a log dir: bit flips and truncations of ``.log``,
``.index``, ``.timeindex``, the checkpoints and the topic config. Opening must never fail
with anything but a clear SeglogError naming the file, and no read may return corrupt
data: every batch returned has a valid CRC, contiguous offsets and the values written."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from _log_checks import check_partition_files, fetch_bytes, make_batch, value_for
from kafka.record.default_records import DefaultRecordBatch

from seglog.logstore.errors import SeglogError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.records.record_format import read_batch_header
from seglog.logstore.storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPIC_CONFIG_FILE,
)

TOPIC = "t"
CONFIG = {"segment.bytes": 16 * 1024, "index.interval.bytes": 256}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cleanly closed log dir: one partition, several segments, 2 start offsets."""
    d = tmp_path_factory.mktemp("pristine") / "logs"
    rnd = random.Random(7)
    with LogManager([d]) as mgr:
        mgr.create_topic(TOPIC, 2, CONFIG)
        for p in (0, 1):
            log = mgr.get_log(TOPIC, p)
            while log.num_segments < 4:
                mgr.append(TOPIC, p, make_batch(log.log_end_offset, rnd.randint(1, 30),
                                                compression=rnd.choice((0, 1))))
        mgr.get_log(TOPIC, 1).maybe_increment_log_start_offset(3)
        mgr.checkpoint_high_watermarks()
    return d


def _segment_file(d: Path, which: str, suffix: str) -> Path:
    files = sorted((d / f"{TOPIC}-0").glob(f"*{suffix}"))
    return files[0] if which == "first" else files[-1]


TARGETS = {
    "first.log": lambda d: _segment_file(d, "first", ".log"),
    "active.log": lambda d: _segment_file(d, "last", ".log"),
    "first.index": lambda d: _segment_file(d, "first", ".index"),
    "active.index": lambda d: _segment_file(d, "last", ".index"),
    "first.timeindex": lambda d: _segment_file(d, "first", ".timeindex"),
    "active.timeindex": lambda d: _segment_file(d, "last", ".timeindex"),
    "recovery-point": lambda d: d / RECOVERY_POINT_CHECKPOINT,
    "log-start-offset": lambda d: d / LOG_START_OFFSET_CHECKPOINT,
    "high-watermark": lambda d: d / HIGH_WATERMARK_CHECKPOINT,
    "topic-config": lambda d: d / f"{TOPIC}-0" / TOPIC_CONFIG_FILE,
}


def _mutate(path: Path, kind: str, rnd: random.Random) -> str:
    data = bytearray(path.read_bytes())
    if not data:
        return "empty file left alone"
    if kind == "flip":
        pos = rnd.randrange(len(data))
        data[pos] ^= 1 << rnd.randrange(8)
        what = f"bit flip at byte {pos}"
    elif kind == "truncate":
        cut = rnd.randrange(len(data))
        del data[cut:]
        what = f"truncated to {cut} bytes"
    else:  # "zero": a run of zeros, like a lost page
        pos = rnd.randrange(len(data))
        n = min(len(data) - pos, rnd.randint(1, 4096))
        data[pos:pos + n] = bytes(n)
        what = f"{n} zero bytes at {pos}"
    path.write_bytes(bytes(data))
    return what


def _read_what_is_there(log, *, contiguous: bool) -> None:
    """Read from the start as far as the log lets us, the way seglog's readers do
    (``Log.read`` then ``decode_batches``, which checks CRCs). A clear SeglogError is a
    refusal, not corrupt data; every record decoded must be exactly what was written at
    its offset. Without recovery, a cut in an old segment shows as a gap (Kafka cannot
    tell it from a compacted range either), so contiguity is checked only after a full
    recovery."""
    offset = log.log_start_offset
    while offset < log.high_watermark:
        try:
            buf = fetch_bytes(log.read(offset, max_bytes=1 << 20))
            if not buf:
                return
            rows = decode_batches(buf, start_offset=offset)
        except SeglogError:
            return
        offsets = rows.column("offset").to_pylist()
        values = rows.column("value").to_pylist()
        assert offsets, f"read({offset}) decoded nothing"
        assert offsets[0] >= offset and offsets == sorted(set(offsets)), (
            f"read({offset}) returned offsets out of order")
        if contiguous:
            assert offsets == list(range(offset, offset + len(offsets))), (
                f"read({offset}) returned offsets {offsets[0]}..{offsets[-1]}")
        assert values == [value_for(o) for o in offsets], f"read({offset}): wrong values"
        offset = offsets[-1] + 1


MODES = ["clean", "unclean", "recover-all"]
# Known engine bugs, reported to the Log/index owner; each case flips to XPASS once fixed.
CASES = [(target, kind, mode)
         for target in TARGETS for kind in ("flip", "truncate", "zero") for mode in MODES]


@pytest.mark.parametrize("target,kind,mode", CASES)
def test_corruption_never_yields_corrupt_data(pristine, tmp_path, target, kind, mode):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    path = TARGETS[target](d)
    what = _mutate(path, kind, random.Random(f"{target}/{kind}/{mode}"))
    if mode == "clean":
        _read_only_reader_survives(d, path, what)
    else:
        (d / CLEAN_SHUTDOWN_FILE).unlink()
    if mode == "recover-all" and path.name != RECOVERY_POINT_CHECKPOINT:
        (d / RECOVERY_POINT_CHECKPOINT).unlink()
    try:
        mgr = LogManager([d])
    except SeglogError as e:
        assert path.name in str(e), f"{what} in {path.name}: error names no file: {e}"
        return
    with mgr:
        for p in (0, 1):
            try:
                log = mgr.get_log(TOPIC, p)
            except SeglogError as e:
                assert path.name in str(e) or str(path.parent) in str(e), (
                    f"{what} in {path.name}: error names no file: {e}")
                continue
            assert log.high_watermark <= log.log_end_offset
            recovered_all = mode == "recover-all" or (
                mode == "unclean" and path.name == RECOVERY_POINT_CHECKPOINT)
            _read_what_is_there(log, contiguous=recovered_all)
            if recovered_all:
                # every batch was validated, the indexes rebuilt, the junk cut off
                check_partition_files(d / f"{TOPIC}-{p}")


def _read_only_reader_survives(d: Path, path: Path, what: str) -> None:
    """A reader in another process never recovers: it must still refuse cleanly or
    read only right data, up to the published high watermark."""
    try:
        reader = LogManager([d], read_only=True)
    except SeglogError as e:
        assert path.name in str(e), f"{what} in {path.name}: error names no file: {e}"
        return
    with reader:
        try:
            reader.high_watermarks()
            reader.log_start_offsets()
            logs = [reader.get_log(TOPIC, p) for p in (0, 1)]
        except SeglogError as e:
            assert path.name in str(e) or str(path.parent) in str(e), (
                f"{what} in {path.name}: error names no file: {e}")
            return
        for log in logs:
            _read_what_is_there(log, contiguous=False)


def test_recovery_cuts_at_the_first_bad_batch_and_drops_later_segments(pristine, tmp_path):
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    (d / CLEAN_SHUTDOWN_FILE).unlink()
    (d / RECOVERY_POINT_CHECKPOINT).unlink()  # recover everything, from offset 0
    segments = sorted((d / f"{TOPIC}-0").glob("*.log"))
    victim = segments[1]
    buf = victim.read_bytes()
    second = read_batch_header(buf, read_batch_header(buf, 0).size)
    flipped = bytearray(buf)
    flipped[second.position + 70] ^= 0x10  # inside the records: only the CRC notices
    victim.write_bytes(bytes(flipped))
    with LogManager([d]) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log.log_end_offset == second.base_offset
        assert [s.name for s in sorted((d / f"{TOPIC}-0").glob("*.log"))] == [
            s.name for s in segments[:2]]
        assert check_partition_files(d / f"{TOPIC}-0") == second.base_offset
        assert len(list(DefaultRecordBatch(victim.read_bytes()))) > 0
        # the log goes on from there
        mgr.append(TOPIC, 0, make_batch(log.log_end_offset, 3))
        assert check_partition_files(d / f"{TOPIC}-0") == second.base_offset + 3
