"""Pausing and resuming a reused writer ``LogManager`` (the sink's commits write the same
log dirs again and again).

``pause()`` leaves the log dirs as ``close()`` does (flushed logs, checkpoints,
producer snapshots, trimmed indexes, ``.kafka_cleanshutdown``, that one not fsynced: it
only spares the next open a recovery) and releases the locks and every file, but keeps
what was loaded; ``resume()`` takes the locks again and goes on
with it when nothing changed since: each marker still holds the pause's token and no file
the manager relies on changed (``clean_shutdown``'s fingerprint). Otherwise the paused
manager is dropped, without writing anything, and the caller opens a new one.

``PauseController`` is a component of ``log_manager.LogManager``, handed the manager's
partition table, its maintenance and what it needs of the manager's lifecycle: the
writability check, the process that opened it, closing as after an exception and marking
it closed. Thread-safety: as ``LogManager``; pause and resume are not meant to race
other calls on the manager.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING

from ..errors import ConfigError, KafkaStorageError, LogDirError
from ..log.clean_shutdown import Fingerprint, fingerprint, holds_token, marker_content, new_token
from ..log.offset_checkpoints import OFFSET_CHECKPOINTS
from ..storage.file_names import CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT
from ..storage.storage import LOCAL
from .dir_lock import DirLock
from .log_manager_maintenance import ManagerMaintenance
from .partition_table import PartitionTable

if TYPE_CHECKING:
    from ..log.log import Log

# The LogManager's messages keep the one logger name users configure, whichever of its
# modules logs them.
logger = logging.getLogger("seglog.logstore.manager.log_manager")


class PauseController:
    """``pause()``/``resume()`` of a writer; a component of ``LogManager``.

    ``pid``: the process that opened the writer and holds its dir locks;
    ``close_unclean``: close as after an exception (no clean-shutdown claim);
    ``mark_closed``: the writer is closed from now on (dropped while paused)."""

    def __init__(self, table: PartitionTable[Log], maintenance: ManagerMaintenance, *,
                 check_writable: Callable[[], None], pid: int,
                 close_unclean: Callable[[], None], mark_closed: Callable[[], None]) -> None:
        self._table = table
        self._maintenance = maintenance
        self._check_writable = check_writable
        self._pid = pid
        self._close_unclean = close_unclean
        self._mark_closed = mark_closed
        # Set while paused: the token of the markers written and what the files looked
        # like then.
        self._paused: tuple[str, Fingerprint] | None = None

    def pause(self) -> None:
        """Writer: leave the log dirs as ``close()`` does (logs flushed,
        checkpoints, producer snapshots, trimmed indexes, ``.kafka_cleanshutdown``, the
        marker not fsynced) and release the locks and every file, but keep what was
        loaded for ``resume()``.

        For a process that writes the same dirs again and again (the sink's commits): a
        resumed writer skips the listing, checkpoint parsing and per-segment loading a new
        ``LogManager`` pays. While paused, other writers may open the dirs. On failure
        the manager is closed as by an exception (no clean-shutdown claim), and it raises.
        Not with ``background=True`` (the maintenance thread would need the lock)."""
        self._check_writable()
        if self._maintenance.scheduler.running:
            raise ConfigError(f"the LogManager of {self._table.dirs_text()} runs background "
                              "maintenance: it cannot pause")
        self._maintenance.publisher.stop()  # its pending publish is the checkpoints written below
        try:
            self._maintenance.flush_all()
            self._maintenance.save_last_runs()
            for ld in self._table.log_dirs:
                self._maintenance.write_checkpoints(ld)
            for p in self._table.loaded():
                with p.lock:
                    if p.log is not None:
                        p.log.pause()
            token = new_token()
            for ld in self._table.log_dirs:
                # Not fsynced, unlike close()'s: everything the marker vouches for is
                # durable before it is written, and the loader asks only whether it
                # exists. A power cut that loses it costs the next open a recovery of
                # the active segments, never a byte; and a paused writer's marker is
                # removed again (durably) by the next resume, micro-batches later.
                LOCAL.write_atomic_unsynced(ld.path / CLEAN_SHUTDOWN_FILE,
                                            marker_content(token))
            self._paused = (token, self._fingerprint())
        except BaseException:
            self._close_unclean()
            raise
        for ld in self._table.log_dirs:
            if ld.lock is not None:
                ld.lock.release()

    @property
    def paused(self) -> bool:
        return self._paused is not None

    def resume(self) -> bool:
        """Take the locks of a paused writer again. True: no writer opened the dirs since
        ``pause()`` (each marker still holds this pause's token) and no file the manager
        relies on changed (``clean_shutdown``): the manager goes on with what it had
        loaded, and removes the markers as an open does. False: the manager is closed,
        without writing anything, and the caller opens a new one.

        Raises ``LogDirLockedError`` while another writer holds a dir (still paused: try
        again later)."""
        if self._paused is None:
            raise KafkaStorageError(f"this LogManager of {self._table.dirs_text()} is not paused")
        if os.getpid() != self._pid:
            raise LogDirError(f"this writer LogManager of {self._table.dirs_text()} was paused by "
                              f"process {self._pid}; a forked child must open its own")
        token, seen = self._paused
        taken: list[DirLock] = []
        try:
            for ld in self._table.log_dirs:
                # A writer's dirs keep their DirLock (released, not dropped, by pause).
                lock = ld.lock if ld.lock is not None else DirLock(ld.path)
                taken.append(lock.acquire())
                ld.lock = lock
        except BaseException:
            for lock in taken:
                lock.release()
            raise
        if (not all(holds_token(ld.path, token) for ld in self._table.log_dirs)
                or self._fingerprint() != seen):
            logger.info("%s changed since this writer paused: it opens afresh",
                        self._table.dirs_text())
            self.drop()
            return False
        self._paused = None
        try:
            for ld in self._table.log_dirs:
                LOCAL.unlink(ld.path / CLEAN_SHUTDOWN_FILE)
                LOCAL.fsync_dir(ld.path)
            for p in self._table.loaded():
                with p.lock:
                    if p.log is not None:
                        p.log.resume()
        except BaseException:
            self._close_unclean()
            raise
        return True

    def _fingerprint(self) -> Fingerprint:
        """The files a paused writer's state depends on (``clean_shutdown``)."""
        paths: list[PurePath] = []
        for ld in self._table.log_dirs:
            paths.append(ld.path / CLEAN_SHUTDOWN_FILE)
            paths.extend(ld.path / name for name in (*OFFSET_CHECKPOINTS,
                                                     CLEANER_OFFSET_CHECKPOINT))
        for p in sorted(self._table.loaded(), key=lambda p: p.tp):
            log = p.log
            if log is not None:
                paths.append(log.dir)
                paths.append(log.segments[-1].log_path)
        return fingerprint(paths)

    def drop(self) -> None:
        """Forget a paused writer whose files changed: its logs hold no open file, and
        nothing may be written (the dirs are someone else's state now)."""
        self._paused = None
        self._mark_closed()
        for p in self._table.loaded():
            p.log = None
        for ld in self._table.log_dirs:
            if ld.lock is not None:
                ld.lock.release()
