"""A segment's parts, assembled per medium (Kafka hands its ``LogSegment`` a
``FileRecords``, two ``LazyIndex``es and a ``TransactionIndex`` the same way).

``SegmentParts`` is everything a segment reads and writes through: the records
(``segment_records``), the offset and time indexes (opened on first use), the
transaction index and, for a segment in a filesystem, the ``FileRecords`` its writer
appends to, renames and deletes. The medium is decided here, once, by the functions that
build the parts; the segment (``segment_reads``, ``log_segment``) never asks:

* ``file_parts``: a segment in a filesystem, writable or read-only (mapped writer
  indexes; a reader's indexes counted by their leading non-zero entries);
* ``storage_parts``: a read-only segment by path in any other ``Storage``;
* ``immutable_parts``: a segment of any ``Storage`` whose files never change, its
  indexes given as bytes (``SegmentReads.open_read_only``);
* a bucket's committed segment: ``bucket_segment.bucket_segment_parts``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..errors import KafkaStorageError
from ..index.lazy_index import IndexT, LazyIndex
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..index.txn_index import TransactionIndex
from ..storage.file_names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    index_file,
    log_file,
    time_index_file,
    txn_index_file,
)
from ..storage.storage import PosixStorage, Storage
from .segment_records import FileRecords, RangeRecords, SegmentRecords


@dataclass(slots=True)  # not frozen: built once per segment, a frozen init costs more
class SegmentParts:
    """What a segment is built from; see the module docstring."""

    records: SegmentRecords
    offset_index: LazyIndex[OffsetIndex]
    time_index: LazyIndex[TimeIndex]
    txn_index: Callable[[str], TransactionIndex]
    """Builds the transaction index for the segment's file suffix now (on first use:
    most segments never need one)."""
    file: FileRecords | None = None
    """``records`` when they are a file of a filesystem (what a writer appends to,
    renames and deletes); None elsewhere."""


def segment_parts(
    storage: Storage,
    dir_: Path,
    base_offset: int,
    *,
    file_suffix: str,
    read_only: bool,
    max_index_size: int,
) -> SegmentParts:
    """The parts of the segment ``<dir_>/<base_offset>.log`` in ``storage``: the one
    place that asks which medium a path-named segment is on."""
    if isinstance(storage, PosixStorage):
        return file_parts(
            storage,
            dir_,
            base_offset,
            file_suffix=file_suffix,
            read_only=read_only,
            max_index_size=max_index_size,
        )
    if not read_only:
        raise KafkaStorageError(
            f"segment {log_file(dir_, base_offset, file_suffix)} is not in a filesystem: it "
            "can only be opened read-only"
        )
    return storage_parts(storage, dir_, base_offset, file_suffix=file_suffix)


def file_parts(
    fs: PosixStorage,
    dir_: Path,
    base_offset: int,
    *,
    file_suffix: str = "",
    read_only: bool = False,
    max_index_size: int = 10 * 1024 * 1024,
) -> SegmentParts:
    """A segment in a filesystem. A reader counts a preallocated index's entries by its
    leading non-zero ones (the writer may still be appending)."""
    records = FileRecords(fs, log_file(dir_, base_offset, file_suffix), writable=not read_only)
    offset_index, time_index = _path_indexes(
        dir_, base_offset, file_suffix, writable=not read_only, fs=fs, max_index_size=max_index_size
    )
    return SegmentParts(
        records,
        offset_index,
        time_index,
        lambda suffix: TransactionIndex(
            txn_index_file(records.path.parent, base_offset, suffix),
            base_offset,
            writable=not read_only,
            fs=fs,
        ),
        records,
    )


def storage_parts(
    storage: Storage, dir_: Path, base_offset: int, *, file_suffix: str = ""
) -> SegmentParts:
    """A read-only segment by path in a ``Storage`` other than a filesystem."""
    offset_index, time_index = _path_indexes(
        dir_, base_offset, file_suffix, writable=False, fs=None, storage=storage
    )
    return SegmentParts(
        RangeRecords(storage, log_file(dir_, base_offset, file_suffix), None),
        offset_index,
        time_index,
        lambda suffix: TransactionIndex(
            txn_index_file(dir_, base_offset, suffix),
            base_offset,
            writable=False,
            fs=None,
            storage=storage,
        ),
    )


def _path_indexes(
    dir_: Path,
    base_offset: int,
    file_suffix: str,
    *,
    writable: bool,
    fs: PosixStorage | None,
    storage: Storage | None = None,
    max_index_size: int = -1,
) -> tuple[LazyIndex[OffsetIndex], LazyIndex[TimeIndex]]:
    """The offset and time indexes of the path-named segment ``<dir_>/<base_offset>``,
    each opened on first use with one medium's arguments. A read-only one counts its
    entries by the leading non-zero ones (a writer may be appending to it)."""

    def opener(kind: type[IndexT]) -> Callable[[PurePath], IndexT]:
        return lambda path: kind(
            path,
            base_offset,
            max_index_size,
            writable=writable,
            count_leading_nonzero=not writable,
            fs=fs,
            storage=storage,
        )

    return (
        LazyIndex(opener(OffsetIndex), lambda: index_file(dir_, base_offset, file_suffix)),
        LazyIndex(opener(TimeIndex), lambda: time_index_file(dir_, base_offset, file_suffix)),
    )


def immutable_parts(
    storage: Storage,
    stem: str,
    base_offset: int,
    *,
    size: int,
    offset_index: bytes | None,
    time_index: bytes | None,
    txn_index: bytes | None,
) -> SegmentParts:
    """A read-only segment of ``storage`` whose files never change: ``<stem>.log`` of
    ``size`` bytes, its indexes' bytes given (None: absent, read as empty)."""
    txn = TransactionIndex.from_bytes(PurePath(stem + TXN_INDEX_SUFFIX), base_offset, txn_index)
    return SegmentParts(
        RangeRecords(storage, PurePath(stem + LOG_SUFFIX), size),
        LazyIndex(
            lambda path: OffsetIndex.from_bytes(path, base_offset, offset_index),
            PurePath(stem + INDEX_SUFFIX),
        ),
        LazyIndex(
            lambda path: TimeIndex.from_bytes(path, base_offset, time_index),
            PurePath(stem + TIME_INDEX_SUFFIX),
        ),
        lambda _suffix: txn,
    )
