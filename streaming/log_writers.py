"""One paused writer ``LogManager`` per process and set of log dirs, for the sink's commits
(and one ``BucketLogManager`` per bucket: ``bucket_writer``).

A commit opened a writer of the sink's log dirs, published, and closed it. A fresh open
lists every partition directory it loads and builds every segment of it, so that cost
grew with the topic's history (a micro-batch's commit took 29.5 -> 45.4 ms early in a
log and 40.8 -> 69.2 ms after 1,000 segments). PySpark 4.3 reuses the Python worker that
runs a query's commits (``spark.python.worker.reuse``, on by default: the dir's ``.lock``
names the same pid for every micro-batch), so a commit now *pauses* its writer
(``LogManager.pause``: the dirs are left as a clean close leaves them, the locks
released) and the next commit of the process resumes it (``LogManager.resume``): the
locks again, one marker read and a few ``stat`` calls per log dir and loaded partition,
no listing.

Nothing is trusted that another writer may have changed: ``resume`` fails when a marker
no longer holds the token the pause wrote (any writer that opened the dir removed it) or
a checkpoint, partition directory or active segment changed, and the commit then opens a
new writer as before. Only a commit that succeeded pauses its writer; every failure path
closes it as before (``sink_local_writer.fail_publish``). The cache is keyed by process
id: a forked child never resumes its parent's writer.

Thread-safety: ``_lock`` guards the cache; a writer taken out of it is the taker's alone.
"""

from __future__ import annotations

import logging
import os
import threading

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import SeglogError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage.object_store_config import NO_STORAGE_OPTIONS, StorageOptions
from seglog.logstore.util.clock import Clock

logger = logging.getLogger(__name__)

_lock = threading.Lock()  # guards _paused, _buckets and _pid
_paused: dict[tuple[str, ...], LogManager] = {}
_buckets: dict[tuple[str, StorageOptions], BucketLogManager] = {}
_pid = os.getpid()


def _forget_parent() -> None:
    """Called under ``_lock``: a forked child starts with no paused writers."""
    global _pid
    if os.getpid() != _pid:
        _paused.clear()
        _buckets.clear()
        _pid = os.getpid()


def open_writer(log_dirs: tuple[str, ...], clock: Clock) -> LogManager:
    """A writer of ``log_dirs``: this process's paused one, resumed if nothing changed,
    else a new ``LogManager``. Raises ``LogDirLockedError`` while another writer holds a
    dir (a paused writer then stays paused, for the next try)."""
    with _lock:
        _forget_parent()
        mgr = _paused.pop(log_dirs, None)
    if mgr is not None and mgr.clock is clock:
        try:
            resumed = mgr.resume()
        except SeglogError:
            if mgr.paused:  # locked by another writer: still good for a later try
                with _lock:
                    _paused.setdefault(log_dirs, mgr)
            raise
        if resumed:
            return mgr
    elif mgr is not None:
        mgr.close()  # another clock (tests): nothing to write, it was paused
    return LogManager(list(log_dirs), clock=clock)


def pause(log_dirs: tuple[str, ...], mgr: LogManager) -> None:
    """After a successful commit: pause ``mgr`` (the dirs as a clean close leaves them)
    and keep it for the next ``open_writer`` of ``log_dirs`` in this process."""
    mgr.pause()
    with _lock:
        _forget_parent()
        other = _paused.setdefault(log_dirs, mgr)
    if other is not mgr:  # another thread paused one meanwhile: keep one
        mgr.close()


def bucket_writer(uri: str, clock: Clock,
                  storage: StorageOptions = NO_STORAGE_OPTIONS) -> BucketLogManager:
    """This process's writer of the bucket ``uri`` with object-store options ``storage``
    (the key, as ``log_readers``'), opened on first use. A bucket has no
    lock to release, so nothing is paused: the caller refreshes it (one LIST, a GET per
    commit made since), and a commit on a stale state loses its create and builds again.
    Opening reads the newest snapshot, whose size grows with the history: once per
    process, not once per micro-batch."""
    with _lock:
        _forget_parent()
        mgr = _buckets.get((uri, storage))
        if mgr is None or mgr.clock is not clock:  # another clock: tests
            mgr = _buckets[(uri, storage)] = BucketLogManager(uri, clock=clock,
                                                              storage_options=storage)
        return mgr


def cached_bucket_writer(uri: str, clock: Clock,
                         storage: StorageOptions = NO_STORAGE_OPTIONS) -> BucketLogManager | None:
    """This process's writer of the bucket ``uri`` if ``bucket_writer`` opened it already
    (None: the next ``bucket_writer`` opens it), without opening it."""
    with _lock:
        _forget_parent()
        mgr = _buckets.get((uri, storage))
    return mgr if mgr is not None and mgr.clock is clock else None


def close_all() -> None:
    """Forget every paused writer and bucket writer (tests; nothing is written: they are
    paused, and a bucket writer holds nothing)."""
    with _lock:
        writers: list[LogManager | BucketLogManager] = [*_paused.values(), *_buckets.values()]
        _paused.clear()
        _buckets.clear()
    for mgr in writers:
        mgr.close()
