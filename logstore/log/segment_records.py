"""The records of a segment, its ``.log`` (Kafka's ``FileRecords``): where its batches are
read from and, for a local writer, appended to.

A segment (``segment_reads.SegmentReads``) is handed one of these with its indexes
(``segment_parts``); it never asks which medium it is on. Each source knows its own
size rule and what "the same file" means:

* ``FileRecords``: a file of a filesystem, opened on first use (a segment loaded
  lazily), read with ``pread`` and ``preadv``; a writer appends through ``writer``. A
  reader's size is the file's size now (it grows while its writer appends); a writer's
  is what it wrote.
* ``RangeRecords``: a file or object of any ``Storage`` that never changes, read through
  one ``RangeReader`` opened on first use; its size is given (no request asks for it).

A bucket's committed object, read with ranged GETs, is ``bucket_segment.ObjectRecords``.

Thread-safety: reads may run from any thread; ``_open_lock`` guards the handle while it
is opened or released.
"""

from __future__ import annotations

import threading
from pathlib import Path, PurePath
from typing import Protocol

import numpy as np

from ..errors import InvalidOffsetError, KafkaStorageError
from ..storage.file_handle import FileHandle
from ..storage.storage import PosixStorage, RangeReader, Storage
from ..util.pooled_arrays import pooled_empty

ReadBuffer = bytes | bytearray | memoryview


class SegmentRecords(Protocol):
    """What a segment reads its ``.log`` through; see the module docstring."""

    @property
    def path(self) -> PurePath:
        """The ``.log``'s name (a local path, or an object's URI), for messages."""

    @property
    def size(self) -> int:
        """Bytes of records."""

    @property
    def known_size(self) -> int | None:
        """The size when known without asking (None: not asked yet)."""

    @property
    def immutable(self) -> bool:
        """Whether the bytes never change (an object, not a file a writer appends to)."""

    @property
    def closed(self) -> bool: ...

    @property
    def is_open(self) -> bool:
        """Whether it holds an open file (a lazily opened one opens on use)."""

    def pread(self, position: int, size: int) -> bytes: ...

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        """Fill ``buf`` from ``position``; the bytes read (short at the end)."""

    def read_chunk(self, position: int, max_bytes: int) -> tuple[ReadBuffer, int]:
        """A fresh buffer of up to ``max_bytes`` from ``position`` and how many bytes it
        holds."""

    def is_file_at_path(self) -> bool:
        """Whether what is read is still what ``path`` names."""

    def identity(self) -> tuple[int | str, int] | None:
        """What tells this version of the ``.log`` from another at the same name."""

    def mtime_ms(self) -> int | None:
        """The file's modification time (Kafka ages timestamp-less segments by it), None
        where there is none."""

    def open(self) -> None:
        """Open now (a segment not loaded lazily), learning the size."""

    def release(self) -> None:
        """Release the open file, staying usable (reopened on next use)."""

    def close(self) -> None: ...


def _read_error(path: PurePath, position: int, e: OSError) -> KafkaStorageError:
    return KafkaStorageError(f"cannot read {path} at {position}: {e}")


class FileRecords:
    """A segment's ``.log`` in a filesystem; see the module docstring."""

    def __init__(self, fs: PosixStorage, path: Path, *, writable: bool) -> None:
        self._fs = fs
        self._path = path
        self.writable = writable
        self._open_lock = threading.Lock()
        self._handle: FileHandle | None = None
        self._closed = False
        self._known_size: int | None = None

    def open(self) -> None:
        self._known_size = self.handle.size

    @property
    def path(self) -> Path:
        return self._path

    @property
    def fs(self) -> PosixStorage:
        """The filesystem the file is in (renames, deletes, the index files)."""
        return self._fs

    def _open(self) -> FileHandle:
        try:
            if self.writable:
                return self._fs.open_file(self._path, "append_read")
            return self._fs.open_range_reader(self._path)
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment file {self._path}: {e}") from e

    @property
    def handle(self) -> FileHandle:
        """The open file (opened now if it was not)."""
        handle = self._handle
        if handle is None:
            with self._open_lock:
                if self._handle is None:
                    if self._closed:
                        raise KafkaStorageError(f"segment {self._path} is closed")
                    self._handle = self._open()
                handle = self._handle
        return handle

    @property
    def writer(self) -> FileHandle:
        """The writer's open file (a read-only segment has none)."""
        if not self.writable:
            raise InvalidOffsetError(f"segment {self._path} is open read-only")
        return self.handle

    @property
    def written_size(self) -> int:
        """The size as this process knows it (asked of the filesystem once)."""
        if self._known_size is None:
            try:
                self._known_size = self._fs.size(self._path)
            except OSError as e:
                raise KafkaStorageError(f"cannot stat segment file {self._path}: {e}") from e
        return self._known_size

    @written_size.setter
    def written_size(self, value: int) -> None:
        self._known_size = value

    @property
    def size(self) -> int:
        if self.writable:
            return self.written_size
        try:
            return self.handle.size  # a reader's file grows while its writer appends
        except OSError as e:
            raise KafkaStorageError(f"cannot stat segment file {self._path}: {e}") from e

    @property
    def known_size(self) -> int | None:
        return self._known_size

    @property
    def immutable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    def pread(self, position: int, size: int) -> bytes:
        try:
            return self.handle.pread(position, size)
        except OSError as e:
            raise _read_error(self._path, position, e) from e

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        try:
            return self.handle.readinto(buf, position)  # one preadv, no copy
        except OSError as e:
            raise _read_error(self._path, position, e) from e

    def read_chunk(self, position: int, max_bytes: int) -> tuple[ReadBuffer, int]:
        # Not zero-filled: the read overwrites what is used. From Arrow's pool, not
        # np.empty: a fresh 8 MiB of pages is zeroed by the kernel on every chunk.
        buf = pooled_empty(max_bytes, np.uint8).data
        return buf, self.readinto(buf, position)

    def is_file_at_path(self) -> bool:
        return self.handle.is_file_at(self._path)

    def identity(self) -> tuple[int | str, int] | None:
        try:
            st = self.handle.fstat()
        except OSError:
            return None
        return (st.st_ino, st.st_size)

    def mtime_ms(self) -> int | None:
        try:
            return int(self._fs.stat(self._path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def move_to(self, path: Path) -> None:
        """Rename the file (the open handle keeps working)."""
        self._fs.rename(self._path, path)
        self._path = path

    def update_path(self, path: Path) -> None:
        """The directory was renamed under the file: it is now ``path``."""
        self._path = path

    def release(self) -> None:
        with self._open_lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
            if self._handle is not None:
                self._handle.close()


class RangeRecords:
    """A ``.log`` of any ``Storage`` read through one ``RangeReader``; see the module
    docstring. ``size``: its length when it never changes (None: it may grow, ask the
    reader)."""

    def __init__(self, storage: Storage, path: PurePath, size: int | None) -> None:
        self._storage = storage
        self._path = path
        self._immutable_size = size
        self._open_lock = threading.Lock()
        self._reader: RangeReader | None = None
        self._closed = False

    @property
    def path(self) -> PurePath:
        return self._path

    def open(self) -> None:
        self._reader = self._open

    @property
    def _open(self) -> RangeReader:
        reader = self._reader
        if reader is None:
            with self._open_lock:
                if self._reader is None:
                    if self._closed:
                        raise KafkaStorageError(f"segment {self._path} is closed")
                    try:
                        self._reader = self._storage.open_range_reader(self._path)
                    except OSError as e:
                        raise KafkaStorageError(
                            f"cannot open segment file {self._path}: {e}"
                        ) from e
                reader = self._reader
        return reader

    @property
    def size(self) -> int:
        if self._immutable_size is not None:
            return self._immutable_size
        try:
            return self._open.size
        except OSError as e:
            raise KafkaStorageError(f"cannot stat segment file {self._path}: {e}") from e

    @property
    def known_size(self) -> int | None:
        return self._immutable_size

    @property
    def immutable(self) -> bool:
        return self._immutable_size is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        return self._reader is not None

    def pread(self, position: int, size: int) -> bytes:
        try:
            return self._open.pread(position, size)
        except OSError as e:
            raise _read_error(self._path, position, e) from e

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        data = self.pread(position, len(buf))
        memoryview(buf).cast("B")[: len(data)] = data
        return len(data)

    def read_chunk(self, position: int, max_bytes: int) -> tuple[ReadBuffer, int]:
        # Not zero-filled: the read overwrites what is used. From Arrow's pool, not
        # np.empty: a fresh 8 MiB of pages is zeroed by the kernel on every chunk.
        buf = pooled_empty(max_bytes, np.uint8).data
        return buf, self.readinto(buf, position)

    def is_file_at_path(self) -> bool:
        return self._immutable_size is not None  # an immutable object is never replaced

    def identity(self) -> tuple[int | str, int] | None:
        if self._immutable_size is None:
            return None
        return (str(self._path), self._immutable_size)

    def mtime_ms(self) -> int | None:
        return None

    def release(self) -> None:
        with self._open_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
            if self._reader is not None:
                self._reader.close()
