"""The storage seam: the operations every kind of log dir offers, and the POSIX one.

A log dir lives either in a filesystem (``PosixStorage``: local disks, or a shared POSIX
filesystem whose locks and renames hold across nodes) or in an object store
(``object_storage.ObjectStorage``: S3 and S3-compatible servers, GCS, Azure, memory).
``Storage`` is what both offer, and what every reader of log dirs, the bucket engine and
the tools use; the local writer (``Log``, ``LogSegment``, the indexes, the checkpoints,
the dir lock) also uses the filesystem-only operations ``PosixStorage`` adds.

Paths: a ``PosixStorage`` takes filesystem paths; an ``ObjectStorage`` takes keys
relative to its root (``PurePosixPath`` or ``str``, ``/``-separated). Engine code joins
them with ``/`` either way.

The contract (also in docs/internals.md, "Storage contract"):

- ``read``/``read_range``/``open_range_reader`` return bytes as last written. A
  ``RangeReader`` reads the one version that existed when it was opened: a file's open fd
  keeps it readable after an unlink or a replace; an object reader checks its ETag, so a
  replaced object is an error, never mixed bytes (the engines never rewrite a data object,
  and delete one only ``file.delete.delay.ms`` after it left the log).
- ``write_atomic`` makes the whole new content visible at once, durably, or leaves the old
  content (or absence): a reader never sees part of it.
- ``create`` is ``write_atomic`` only if nothing exists at the path; of any number of
  concurrent creators exactly one gets ``True``, the others ``False``, and the content is
  the winner's, whole. This is the commit primitive of the bucket engine.
- ``list_dir`` shows every path whose ``write_atomic``/``create`` returned before the call
  started (read-after-write and list-after-write consistency; S3, GCS and Azure give both).
- ``list_after(path, start_after)`` is ``list_dir`` restricted to the files (objects)
  whose names sort after ``start_after``, in name order; an object store starts the
  listing there, so "commits after version v" costs the new names, not the history.
- ``delete`` of a missing path is not an error.
- A missing path raises ``FileNotFoundError``; any other failure raises
  ``KafkaStorageError`` naming the path (or URI) and the cause.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from .errors import KafkaStorageError

StoragePath = str | os.PathLike[str]


@dataclass(frozen=True)
class Entry:
    """One name in a listed directory (or under a key prefix)."""

    name: str
    size: int
    mtime_ms: int
    is_dir: bool = False


@runtime_checkable
class RangeReader(Protocol):
    """One file or object, opened for positioned reads of the version seen at open."""

    @property
    def size(self) -> int: ...

    def pread(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position`` (fewer only at the end)."""

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """What every log dir offers; see the module docstring for the contract."""

    @property
    def uri(self) -> str:
        """Where this storage is rooted, for messages (a path or ``s3://bucket/prefix``)."""

    def read(self, path: StoragePath) -> bytes: ...

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes: ...

    def open_range_reader(self, path: StoragePath) -> RangeReader: ...

    def size(self, path: StoragePath) -> int: ...

    def exists(self, path: StoragePath) -> bool: ...

    def list_dir(self, path: StoragePath) -> list[Entry]:
        """Direct children of ``path`` (names, not paths), in name order; ``[]`` when
        nothing is there."""

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        """Files directly in ``path`` named after ``start_after`` (``""``: all), in name
        order."""

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None: ...

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool: ...

    def delete(self, path: StoragePath) -> None: ...


class _FileRangeReader:
    """An open fd: reads keep working after the file is unlinked or replaced."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    @property
    def size(self) -> int:
        return self._size

    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> _FileRangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fsync_dir(path: StoragePath) -> None:
    """Makes a directory's entries (a create, rename or unlink in it) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fsynced(path: str, data: bytes | bytearray | memoryview, flags: int) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


class PosixStorage:
    """A filesystem: today's behaviour of every local log dir."""

    def __init__(self, root: StoragePath = "/") -> None:
        self._root = Path(root)

    @property
    def uri(self) -> str:
        return str(self._root)

    def read(self, path: StoragePath) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: StoragePath, position: int, length: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, length, position)
        finally:
            os.close(fd)

    def open_range_reader(self, path: StoragePath) -> _FileRangeReader:
        return _FileRangeReader(os.fspath(path))

    def size(self, path: StoragePath) -> int:
        return os.stat(path).st_size

    def exists(self, path: StoragePath) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: StoragePath) -> list[Entry]:
        try:
            with os.scandir(path) as it:
                entries = []
                for e in it:
                    try:
                        st = e.stat()
                    except FileNotFoundError:  # removed between listing and stat
                        continue
                    entries.append(Entry(e.name, st.st_size, st.st_mtime_ns // 1_000_000,
                                         e.is_dir()))
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: e.name)
        return entries

    def list_after(self, path: StoragePath, start_after: str) -> list[Entry]:
        return [e for e in self.list_dir(path) if not e.is_dir and e.name > start_after]

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        target = os.fspath(path)
        tmp = f"{target}.tmp"
        _write_fsynced(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.replace(tmp, target)
        fsync_dir(os.path.dirname(target) or ".")

    def create(self, path: StoragePath, data: bytes | bytearray | memoryview) -> bool:
        # Written whole under a unique name, then hard-linked: link(2) fails with EEXIST
        # atomically, so a reader never sees a partial file and exactly one creator wins.
        target = os.fspath(path)
        tmp = f"{target}.{uuid.uuid4().hex}.tmp"
        _write_fsynced(tmp, data, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno == errno.EEXIST:
                return False
            raise KafkaStorageError(f"cannot create {target}: {e}") from e
        finally:
            os.unlink(tmp)
        fsync_dir(os.path.dirname(target) or ".")
        return True

    def delete(self, path: StoragePath) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return

    def walk_files(self, path: StoragePath) -> Iterator[str]:
        """Every file below ``path``, as paths relative to it, sorted."""
        base = os.fspath(path)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                yield os.path.relpath(os.path.join(dirpath, name), base)
