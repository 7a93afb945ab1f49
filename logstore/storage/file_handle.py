"""``FileHandle``: one open file of a filesystem (Kafka's ``FileChannel``), the fd behind
every read, append, fsync, mapping and lock of a local log dir. ``storage.PosixStorage``
opens it (``open_file``, ``open_range_reader``); with ``storage.py`` this module is the
storage seam, the only code that touches a file (``tests/test_storage_seam.py``).
"""

from __future__ import annotations

import errno
import fcntl
import io
import logging
import mmap
import os
from typing import Any

logger = logging.getLogger(__name__)


class FileHandle:
    """One open file of a filesystem: a ``RangeReader`` (``size`` is the file's size now:
    a file grows while its writer appends) plus what only a file offers, each one system
    call on the raw fd, nothing buffered and nothing copied.

    An open fd keeps the file readable after an unlink or a replace (readers rely on it).
    Errors are the ``OSError`` of the call (callers name the file in what they raise); a
    closed handle raises ``OSError(EBADF)``, never touches a reused fd number.

    Thread-safety: the positioned calls (``pread``, ``readinto``, ``pwrite``) may run from
    several threads at once; ``write`` appends (``O_APPEND``) from one writer thread;
    ``close`` must not race the others (owners guard it with their lock).
    """

    __slots__ = ("path", "_fd")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    def fileno(self) -> int:
        if self._fd < 0:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def fstat(self) -> os.stat_result:
        return os.fstat(self._fd)

    def is_file_at(self, path: str | os.PathLike[str]) -> bool:
        """True while this open file is the one named ``path`` (no replace, no unlink)."""
        try:
            opened = os.fstat(self._fd)
            named = os.stat(path)
        except OSError:
            return False
        return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)

    def pread(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position`` (fewer only at the end)."""
        return os.pread(self._fd, length, position)

    def readinto(self, buf: bytearray | memoryview | Any, position: int) -> int:
        """Fill ``buf`` (any writable buffer) from ``position`` with one ``preadv``;
        returns the bytes read (short only at the end)."""
        return os.preadv(self._fd, [buf], position)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """One ``write``: the bytes written (at the end of the file with ``O_APPEND``)."""
        return os.write(self._fd, data)

    def write_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> int:
        return os.pwrite(self._fd, data, position)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def buffered_reader(self) -> io.BufferedReader:
        """A buffered reader over this fd from its current position (what
        ``open(path, "rb")`` gives); closing it leaves the fd to this handle."""
        return open(self._fd, "rb", closefd=False)  # noqa: SIM115 - the caller closes it

    def buffered_writer(self) -> io.BufferedWriter:
        """A buffered writer over this fd (what ``open(path, "xb")`` gives: small writes
        coalesce into one ``write``); flush it before ``fsync``. Closing it flushes and
        leaves the fd to this handle."""
        return open(self._fd, "wb", closefd=False)  # noqa: SIM115 - the caller closes it

    def truncate(self, length: int) -> None:
        os.ftruncate(self._fd, length)

    def allocate(self, position: int, length: int) -> None:
        """Reserve real blocks (``posix_fallocate``): a full filesystem is ENOSPC here, not
        a SIGBUS at a later store through a mapping."""
        os.posix_fallocate(self._fd, position, length)

    def data_prefix(self, length: int) -> int:
        """Bytes before the first hole (``SEEK_HOLE``), at most ``length``."""
        if length == 0:
            return 0
        try:
            return min(os.lseek(self._fd, 0, os.SEEK_HOLE), length)
        except OSError as e:  # ENXIO: nothing but a hole
            logger.debug("SEEK_HOLE on %s: %s", self.path, e)
            return 0

    def map(self, length: int, *, writable: bool) -> mmap.mmap:
        """A shared memory map of the first ``length`` bytes (read-only or read-write)."""
        return mmap.mmap(
            self._fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        )

    def wait_for_exclusive_lock(self) -> None:
        """An exclusive ``fcntl.lockf`` lock on the whole file, waiting for its holder
        (a machine-wide mutex between processes; released by ``close``)."""
        fcntl.lockf(self._fd, fcntl.LOCK_EX)

    def lock_exclusive(self) -> None:
        """A non-blocking exclusive ``fcntl.lockf`` lock on the whole file (POSIX record
        locks hold across NFS); ``BlockingIOError``/``PermissionError`` when held."""
        fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> FileHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileHandle({self.path!r}, fd={self._fd})"
