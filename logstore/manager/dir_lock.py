"""The ``.lock`` of a log dir: one writer at a time, across processes and hosts.

A writer takes a non-blocking exclusive POSIX record lock (``fcntl.lockf``, which NFS
forwards to the server, like Kafka's ``FileChannel.tryLock``) on ``<dir>/.lock`` and
writes who it is into the file (``pid=... host=... since=...``), so a second writer's
error can name the holder. Readers take no lock.

POSIX record locks belong to a process, not to a file descriptor: a second lock in the
same process would succeed silently, and closing any descriptor of the file would drop
the lock. A process-wide registry of held locks (by device and inode) therefore refuses
the second attempt in the same process too; it is cleared in a forked child, which does
not inherit the parent's locks.

Crash policy: the kernel releases the lock when its process dies; the stale holder text
left in the file is harmless (it is rewritten by the next writer).

>>> with DirLock(path):  # doctest: +SKIP
...     ...              # this process is the only writer of `path`
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from pathlib import Path

from ..errors import LogDirError, LogDirLockedError
from ..storage.file_handle import FileHandle
from ..storage.file_names import LOCK_FILE
from ..storage.storage import LOCAL

logger = logging.getLogger(__name__)

_registry_lock = threading.Lock()  # guards _held
_held: dict[tuple[int, int], Path] = {}  # (st_dev, st_ino) of a .lock file -> its dir


def _forget_locks_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    _held.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


class DirLock:
    """The exclusive writer lock of one log dir. Not thread-safe (owned by one LogManager).

    ``acquire()`` raises LogDirLockedError naming the dir and, where known, the holder.
    """

    def __init__(self, log_dir: Path | str) -> None:
        self.dir = Path(log_dir)
        self.path = self.dir / LOCK_FILE
        self._handle: FileHandle | None = None  # the open, locked ``.lock``
        self._key: tuple[int, int] | None = None

    @property
    def locked(self) -> bool:
        return self._handle is not None

    def acquire(self) -> DirLock:
        if self._handle is not None:
            raise LogDirLockedError(f"log dir {self.dir} is already locked by this DirLock")
        with _registry_lock:
            # Checked before opening: closing a second descriptor of a file this process
            # has locked would silently drop the lock.
            try:
                st = LOCAL.stat(self.path)
            except FileNotFoundError:
                st = None
            except OSError as e:
                raise LogDirError(f"cannot open the lock file {self.path}: {e}") from e
            if st is not None and (st.st_dev, st.st_ino) in _held:
                raise LogDirLockedError(
                    f"log dir {self.dir} is already locked by this process "
                    f"(pid {os.getpid()}): open it with one writer only")
            try:
                handle = LOCAL.open_file(self.path, "read_write")
            except OSError as e:
                raise LogDirError(f"cannot open the lock file {self.path}: {e}") from e
            try:
                st = handle.fstat()
                key = (st.st_dev, st.st_ino)
                handle.lock_exclusive()
            except OSError as e:
                holder = self._holder(handle)
                handle.close()
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise LogDirLockedError(
                        f"log dir {self.dir} is locked by another writer ({holder})") from None
                raise LogDirError(f"cannot lock {self.path}: {e}") from e
            _held[key] = self.dir
        self._handle, self._key = handle, key
        self._write_holder(handle)
        return self

    def release(self) -> None:
        """Drop the lock (idempotent). The holder text stays; the next writer rewrites it."""
        if self._handle is None:
            return
        handle, key = self._handle, self._key
        self._handle = self._key = None
        if key is not None:  # set with _handle
            with _registry_lock:
                _held.pop(key, None)
        # closing the descriptor releases the POSIX lock; no explicit unlock needed
        handle.close()

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DirLock({str(self.dir)!r}, locked={self.locked})"

    @staticmethod
    def _holder(handle: FileHandle) -> str:
        try:
            text = handle.pread(0, 512).decode("utf-8", "replace").strip()
        except OSError as e:
            logger.debug("cannot read the lock holder: %s", e)
            text = ""
        return f"holder: {text}" if text else "holder unknown"

    @staticmethod
    def _write_holder(handle: FileHandle) -> None:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        text = f"pid={os.getpid()} host={socket.gethostname()} since={since}\n".encode()
        try:
            handle.truncate(0)
            handle.pwrite(text, 0)
        except OSError as e:
            # the lock itself is held; only the courtesy text is missing
            logger.warning("cannot record the lock holder in the lock file: %s", e)
