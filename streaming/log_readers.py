"""One reader (``log_dirs_api.LogDirsView``) per process and set of log dirs, reused by every call.

A streaming query asks the same log dirs the same questions every trigger (high
watermarks, log start offsets, last stable offsets, segment sizes), and every executor
task of a reused Python worker reads the same partitions again. Opening a read-only
manager lists every partition directory and parses every checkpoint, and a fresh one
forgets what its logs learnt (segment listings, open segment files, the producer-state
tail behind ``read_committed``'s last stable offset). So the source keeps one manager per
log-dir tuple for the life of the process (``reader``) and lets its own refresh decide
what to read again: the manager re-lists a log dir only when the dir's mtime moved
(partitions created or deleted), each read-only ``Log`` re-lists its directory only when
its mtime moved (roll, retention, compaction), and the checkpoints are read on every
``high_watermarks()``/``log_start_offsets()`` call, so nothing published is missed.

Invalidation beyond that refresh: a call that fails inside ``reader`` (a damaged file, a
directory that vanished) closes and drops the shared manager, so the next call starts
from a fresh open instead of a state that may be half-updated. A forked child never uses
its parent's manager (the cache is keyed by process id).

The cache is keyed by the log dirs and the object-store options together
(``StorageOptions``: endpoint, credentials): two queries that reach one bucket with
different credentials never share a reader, so neither reads with the other's rights.

``segment_files`` is the same idea for admission's byte estimates: a partition's segment
bases and the sizes of its inactive segments are kept while the directory's mtime is
unchanged (a roll, retention or compaction swap renames or creates files there, which
moves it); only the last segment, the one that grows, is stat'ed again, and each size
only when admission asks for it (the segments a byte bound may admit).

Thread-safe: the cache is guarded by ``_lock``; every backend is thread-safe itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seglog.logstore.errors import SeglogError
from seglog.logstore.manager.partition_table import SegmentSizes, list_segment_layout
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.file_names import partition_dir_name
from seglog.logstore.storage.object_store_config import (
    NO_STORAGE_OPTIONS,
    StorageOptions,
    is_object_uri,
)
from seglog.logstore.storage.storage import LOCAL

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView, SegmentLayout

logger = logging.getLogger(__name__)

_RACY_NS = 2_000_000_000
"""Directory mtimes younger than this are not trusted: a change within the file system's
timestamp granularity would not move them (the engine's readers use the same rule)."""

_lock = threading.Lock()  # guards _readers, _pid and writes to _layouts (read without it)
_Key = tuple[tuple[str, ...], StorageOptions]
_readers: dict[_Key, LogDirsView] = {}


@dataclass(frozen=True, slots=True)
class _Layout:
    """A partition directory's segments as last listed."""

    path: str  # the partition directory
    mtime: int  # its mtime then (ns)
    bases: tuple[int, ...]
    sizes: SegmentSizes  # stat'ed when asked; the sealed ones' kept (they cannot grow)


_layouts: dict[tuple[tuple[str, ...], TopicPartition], _Layout] = {}
_bucket_dirs: dict[tuple[str, ...], bool] = {}
_pid = os.getpid()


def _forget_parent() -> None:
    """Called under ``_lock``: a forked child starts with no readers (its parent's
    open files and caches are the parent's)."""
    global _pid
    if os.getpid() != _pid:
        _readers.clear()
        _layouts.clear()
        _pid = os.getpid()


@contextmanager
def reader(log_dirs: Iterable[str],
           storage: StorageOptions = NO_STORAGE_OPTIONS) -> Iterator[LogDirsView]:
    """The process's ``LogDirsView`` of ``log_dirs`` (a bucket's opened with the
    object-store options ``storage``), opened on first use.

    >>> with reader(["/data/logs"]) as mgr:            # doctest: +SKIP
    ...     mgr.high_watermarks()
    """
    key = (tuple(log_dirs), storage)
    with _lock:
        _forget_parent()
        mgr = _readers.get(key)
        if mgr is None:
            mgr = _open(key)
            _readers[key] = mgr
    try:
        yield mgr
    except (SeglogError, OSError):
        discard(key[0], mgr, storage)
        raise


def peek(log_dirs: Iterable[str],
         storage: StorageOptions = NO_STORAGE_OPTIONS) -> LogDirsView | None:
    """The process's reader of ``log_dirs`` if one is open, else None (never opens one:
    a caller on a critical path that can do without it)."""
    with _lock:
        _forget_parent()
        return _readers.get((tuple(log_dirs), storage))


def _open(key: _Key) -> LogDirsView:
    """A reader of local log dirs, or (one bucket URI) the bucket's read-only manager,
    which answers the same calls from the bucket's commit log (one LIST per refresh)."""
    from seglog.logstore.manager.log_manager import open_log_dirs

    dirs, storage = key
    # (options with local dirs: refused there, naming them, as the parsers do)
    return open_log_dirs(list(dirs), read_only=True, storage_options=storage)


def discard(log_dirs: Iterable[str], mgr: LogDirsView | None = None,
            storage: StorageOptions = NO_STORAGE_OPTIONS) -> None:
    """Close and forget the shared reader of ``log_dirs`` and ``storage`` (only ``mgr``,
    if given)."""
    key = (tuple(log_dirs), storage)
    with _lock:
        current = _readers.get(key)
        if current is None or (mgr is not None and current is not mgr):
            return
        del _readers[key]
    try:
        current.close()
    except (SeglogError, OSError) as e:  # closing read-only files: nothing to lose
        logger.warning("cannot close the shared reader of %s: %s", ", ".join(key[0]), e)


def close_all() -> None:
    """Close every shared reader of this process (tests; a process that is done)."""
    with _lock:
        keys = list(_readers)
        _layouts.clear()
    for dirs, storage in keys:
        discard(dirs, storage=storage)


def segment_files(
    log_dirs: Iterable[str], tp: TopicPartition, storage: StorageOptions = NO_STORAGE_OPTIONS
) -> SegmentLayout | None:
    """A partition's segment base offsets and ``.log`` sizes, oldest first; None if
    no log dir holds the partition. In local dirs each size is stat'ed when first asked
    (``SegmentSizes``): a byte bound sizes only the segments it may admit. Sizes of
    segments deleted since the listing read as 0."""
    dirs = tuple(log_dirs)
    if _is_bucket(dirs):
        return _bucket_segments(dirs, tp, storage)
    # No lock and no fork check to read the cache (a dict read is atomic; every entry
    # is checked against the directory's mtime, so a forked child may use its parent's):
    # 1,000 partitions ask every trigger.
    known = _layouts.get((dirs, tp))
    if known is not None:
        # Every trigger asks again for every partition: two stats, and no path built.
        try:
            mtime = LOCAL.stat(known.path).st_mtime_ns
        except FileNotFoundError:
            mtime = None  # gone from this dir: look in every dir again
        if mtime == known.mtime and time.time_ns() - known.mtime > _RACY_NS:
            return known.bases, known.sizes.renewed()
    name = partition_dir_name(*tp)
    for d in dirs:
        path = os.path.join(d, name)
        try:
            mtime = LOCAL.stat(path).st_mtime_ns
        except FileNotFoundError:
            continue  # not in this log dir: another one may hold the partition
        listed = _listed_layout(dirs, tp, path, storage)
        if listed is None:  # deleted since the stat
            continue
        bases = listed[0]
        sizes = SegmentSizes(path, bases)
        with _lock:
            _layouts[(dirs, tp)] = _Layout(path, mtime, bases, sizes)
        return bases, sizes.renewed()
    return None


def _listed_layout(dirs: tuple[str, ...], tp: TopicPartition, path: str,
                   storage: StorageOptions) -> SegmentLayout | None:
    """The segments of ``tp``'s directory ``path``: from the shared reader when one is
    open, which reuses its listing for the log start offsets while the directory is
    unchanged (a new query's ``initialOffset`` listed every partition: its first
    trigger need not list them again), else listed here."""
    with _lock:
        _forget_parent()
        mgr = _readers.get((dirs, storage))
    if mgr is not None:
        layout = mgr.segment_layout(*tp)
        if layout is not None:
            return layout
    return list_segment_layout(path)


def _is_bucket(dirs: tuple[str, ...]) -> bool:
    """Whether ``dirs`` name a bucket (remembered: asked per partition per trigger)."""
    known = _bucket_dirs.get(dirs)
    if known is None:  # two threads may both compute it: the same answer
        known = _bucket_dirs[dirs] = any(is_object_uri(d) for d in dirs)
    return known


def _bucket_segments(dirs: tuple[str, ...], tp: TopicPartition, storage: StorageOptions
                     ) -> SegmentLayout | None:
    """A bucket partition's segments, from the state the shared reader last refreshed
    (the trigger's snapshot just did): no request."""
    with reader(dirs, storage) as mgr:
        return mgr.segment_layout(*tp)
