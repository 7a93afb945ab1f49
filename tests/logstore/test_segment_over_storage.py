"""A read-only LogSegment over any ``Storage`` (``LogSegment.open_read_only``): the read
path ``log_read.LogReads`` serves it with nothing but the ``Storage`` protocol, and gives
the same answers as a ``LogReader`` of the same files."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_batches import BASE_TS, batch

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.log.log import Log
from seglog.logstore.log.log_read import LogReads
from seglog.logstore.log.log_reader import LogReader
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.storage import storage as storage_mod
from seglog.logstore.storage.file_names import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from seglog.logstore.storage.storage import Entry, PosixStorage, RangeReader, Storage, StoragePath

_FILESYSTEM_ONLY = (
    "open_file",
    "fsync_file",
    "fsync_dir",
    "rename",
    "link",
    "stat",
    "lstat",
    "is_dir",
    "is_file",
    "is_link",
    "lexists",
    "resolve",
    "accessible",
    "set_mtime",
    "list_names",
    "scan_dir",
    "makedirs",
    "mkdir",
    "rmdir",
    "rmtree",
    "walk_files",
)


class _Ranges:
    """A RangeReader exposing only the protocol (no fd, no ``readinto``)."""

    def __init__(self, inner: RangeReader, log: list) -> None:
        self._inner = inner
        self._log = log

    @property
    def size(self) -> int:
        return self._inner.size

    def pread(self, position: int, length: int) -> bytes:
        self._log.append(("pread", position, length))
        return self._inner.pread(position, length)

    def close(self) -> None:
        self._inner.close()


class ProtocolOnly:
    """``Storage`` and nothing more, over a PosixStorage, recording every call; anything
    a filesystem alone offers raises."""

    def __init__(self) -> None:
        self._fs = PosixStorage()
        self.calls: list[tuple] = []

    @property
    def uri(self) -> str:
        return "protocol-only://"

    def read(self, path: StoragePath) -> bytes:
        self.calls.append(("read", str(path)))
        return self._fs.read(path)

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes:
        self.calls.append(("read_range", str(path)))
        return self._fs.read_range(path, position, length)

    def read_range_view(self, path: StoragePath, position: int, length: int) -> memoryview:
        self.calls.append(("read_range_view", str(path)))
        return self._fs.read_range_view(path, position, length)

    def open_range_reader(self, path: StoragePath) -> RangeReader:
        self.calls.append(("open_range_reader", str(path)))
        return _Ranges(self._fs.open_range_reader(path), self.calls)

    def size(self, path: StoragePath) -> int:
        self.calls.append(("size", str(path)))
        return self._fs.size(path)

    def exists(self, path: StoragePath) -> bool:
        self.calls.append(("exists", str(path)))
        return self._fs.exists(path)

    def list_dir(self, path: StoragePath) -> list[Entry]:
        self.calls.append(("list_dir", str(path)))
        return self._fs.list_dir(path)

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        self.calls.append(("list_after", str(path)))
        return self._fs.list_after(path, start_after)

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        raise AssertionError(f"a reader wrote {path}")

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool:
        raise AssertionError(f"a reader created {path}")

    def delete(self, path: StoragePath) -> None:
        raise AssertionError(f"a reader deleted {path}")

    def __getattr__(self, name: str):
        raise AssertionError(f"a read used {name}, which only a filesystem has")


class _StorageLog(LogReads):
    """What a bucket reader is: LogReads over segments it was handed."""

    def __init__(self, segments: list[LogSegment], high_watermark: int) -> None:
        self.dir = Path("events-0")
        self.topic, self.partition = "events", 0
        self.config = LogConfig.from_properties(None)
        self._segments = segments
        self._bases = tuple(s.base_offset for s in segments)
        self._log_start_offset = self._bases[0]
        self._high_watermark = high_watermark
        self._contiguous = True

    def _view(self):
        return self._bases, lambda i: self._segments[i]

    def _read_end(self) -> int:
        return self._high_watermark


@pytest.fixture
def written(tmp_path) -> tuple[Path, int]:
    """A partition of 40 batches of 5 records over several segments, closed cleanly."""
    cfg = LogConfig.from_properties({"segment.bytes": "2000", "index.interval.bytes": "200"})
    log = Log.open(tmp_path / "events-0", cfg)
    for i in range(40):
        log.append(batch(5, ts=BASE_TS + 100 * i, tag=i))
    end = log.log_end_offset
    assert log.num_segments >= 3
    log.close()
    return tmp_path / "events-0", end


def _refuse_local(monkeypatch) -> None:
    """The engine's own PosixStorage refuses everything: reads must use the one given."""

    def refuse(name):
        def call(*a, **k):
            raise AssertionError(f"LOCAL.{name} used by a read over another Storage")

        return call

    for name in (
        *_FILESYSTEM_ONLY,
        "read",
        "read_range",
        "read_range_view",
        "open_range_reader",
        "size",
        "exists",
        "list_dir",
        "list_after",
        "write_atomic",
        "create",
        "delete",
    ):
        monkeypatch.setattr(storage_mod.LOCAL, name, refuse(name))


def _segments(storage: Storage, dir_: Path, *, with_indexes: bool) -> list[LogSegment]:
    fs = PosixStorage()
    segs = []
    for name in sorted(p.name for p in dir_.glob("*.log")):
        stem = str(dir_ / name[: -len(".log")])
        idx = fs.read(stem + INDEX_SUFFIX) if with_indexes else None
        tidx = fs.read(stem + TIME_INDEX_SUFFIX) if with_indexes else None
        segs.append(
            LogSegment.open_read_only(
                storage,
                stem,
                int(name[:20]),
                size=fs.size(stem + ".log"),
                offset_index=idx,
                time_index=tidx,
            )
        )
    return segs


def _values(records: bytes, start: int) -> list[bytes]:
    return decode_batches(records, start_offset=start).column("value").to_pylist()


def _expected(dir_: Path, end: int) -> tuple[dict, bytes, dict]:
    """What the filesystem's own reader (LogReader) answers."""
    with LogReader.open(dir_, LogConfig.from_properties(None), high_watermark=end) as local:
        reads = {start: local.read(start, max_bytes=700) for start in _STARTS(end)}
        chunks = b"".join(bytes(c) for c in local.read_chunks(0, end, chunk_bytes=1000))
        times = {ts: local.offset_for_timestamp(ts) for ts in _TIMES}
    return reads, chunks, times


def _STARTS(end: int) -> tuple[int, ...]:
    return (0, 7, 63, 101, end - 1)


_TIMES = (BASE_TS + 2, BASE_TS + 1302, BASE_TS + 3902, BASE_TS + 4000)


@pytest.mark.parametrize("with_indexes", [True, False])
def test_log_reads_over_a_protocol_only_storage_match_the_local_reader(
    written, monkeypatch, with_indexes
):
    dir_, end = written
    reads, chunks, times = _expected(dir_, end)
    assert times == {BASE_TS + 2: 2, BASE_TS + 1302: 67, BASE_TS + 3902: 197, BASE_TS + 4000: None}
    storage = ProtocolOnly()
    segs = _segments(storage, dir_, with_indexes=with_indexes)
    _refuse_local(monkeypatch)
    assert storage.calls == []  # nothing is opened before a read needs it
    log = _StorageLog(segs, end)
    for start, want in reads.items():
        got = log.read(start, max_bytes=700)
        assert (got.first_offset, got.next_offset) == (want.first_offset, want.next_offset)
        assert got.records == want.records
        assert _values(got.records, start)[0] == f"{start // 5}:{start % 5}".encode().ljust(
            10, b"."
        )
    assert b"".join(bytes(c) for c in log.read_chunks(0, end, chunk_bytes=1000)) == chunks
    assert {ts: log.offset_for_timestamp(ts) for ts in _TIMES} == times
    kinds = {c[0] for c in storage.calls}
    assert kinds == {"open_range_reader", "pread"}  # no size, exists, read or listing
    opened = [c[1] for c in storage.calls if c[0] == "open_range_reader"]
    assert all(p.endswith(".log") for p in opened) and len(opened) == len(set(opened))
    if with_indexes:  # a lookup starts at the index entry, not at the segment's start
        seg = next(s for s in segs if s.base_offset <= 101 < s.base_offset + 50)
        assert seg.index_position(101) > 0
    for seg in segs:
        seg.close_handlers()


def test_an_absent_index_reads_as_empty_and_a_given_one_is_used(written):
    dir_, _end = written
    storage = ProtocolOnly()
    with_idx = _segments(storage, dir_, with_indexes=True)
    without = _segments(storage, dir_, with_indexes=False)
    assert with_idx[0].offset_index.entries > 0 and without[0].offset_index.entries == 0
    assert without[0].time_index.entries == 0
    with LogSegment.open(dir_, 0, read_only=True) as local:
        assert with_idx[0].offset_index.all_entries() == local.offset_index.all_entries()
    for seg in with_idx + without:
        seg.close_handlers()


def test_a_read_only_segment_elsewhere_refuses_to_write(written):
    dir_, _end = written
    seg = _segments(ProtocolOnly(), dir_, with_indexes=False)[0]
    with pytest.raises(KafkaStorageError, match="not in a filesystem"):
        seg.delete()
    with pytest.raises(KafkaStorageError, match="only be opened read-only"):
        LogSegment(dir_, 0, storage=ProtocolOnly())
