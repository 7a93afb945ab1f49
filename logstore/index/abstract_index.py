"""What the offset index and the time index share (Kafka's ``AbstractIndex``).

An index is a file of fixed-size, big-endian entries sorted by their key. Subclasses say
only what an entry is (``ENTRY`` struct, which field is the key, how an entry becomes a
value); this class owns the file: preallocation, the entry count, resizing, trimming,
the binary search for the largest entry whose key is <= a target, and the sanity check.

Byte layout: ``entries * ENTRY.size`` bytes of entries, then (for the active segment of
a writer) zeros up to ``segment.index.bytes`` rounded down to a whole entry.

Crash policy: an index is a cache of the ``.log``. Kafka counts the whole length of an
index file as entries when it opens one, so a file left untrimmed by a crash is not
trusted: recovery rebuilds it (``LogLoader``). A clean close trims it to its entries.

Which entries a lookup can use (Kafka's index rules, for every broker version) is written
down, and checked, in ``index_check``.

Allocation (why a full filesystem never kills the writer with SIGBUS): the preallocated
length is set with ``ftruncate``, which makes a sparse file, as Kafka's ``setLength`` does.
A store through a shared mapping into a hole is a page fault that must allocate a block
there and then; when the filesystem is full the kernel cannot return an error from a
memory store, so it sends SIGBUS and the process dies. So the writer stores only below
``_allocated``: bytes it reserved beforehand with ``posix_fallocate``, a system call that
reports a full filesystem as ENOSPC, raised here as ``KafkaStorageError`` naming the file
(nothing written, the log intact). It reserves ``ALLOCATION_CHUNK`` bytes ahead of the
last entry, so the rest of the file stays sparse (a partition costs no 20 MiB of real
blocks). Reads beyond ``_allocated`` (entries of an existing file, which may be holes
left by Kafka or a crash) use ``pread``, which reads a hole as zeros without allocating;
a read through the mapping could fault a page in and die the same way on tmpfs.

Two ways to open an index:

* writable (the writer's process): the file is memory-mapped read-write and preallocated;
  the entry count is kept in memory.
* read-only (readers in other processes): the file is read with ``pread`` and never
  mapped, because the writer trims the file on roll and a mapping past the new end of
  file would kill the reader with SIGBUS. With ``count_leading_nonzero`` (the index of an
  active segment, which the writer preallocated with zeros) the entries are the leading
  entries that are not all zeros: a real offset-index entry never has relative offset 0,
  since a segment's first batch never gets an entry, and a real time-index entry has a
  timestamp. That count is found by binary search
  and re-read when a lookup needs entries beyond it.

Thread-safety: every method is safe to call from several threads; ``_lock`` serialises
access to the mapping, so lookups by reader threads never see it resized or closed under
them. One writer thread appends.
"""

from __future__ import annotations

import errno
import logging
import struct
import sys
import threading
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from ..storage.file_handle import FileHandle
from ..storage.storage import (
    LOCAL,
    BytesRangeReader,
    PosixStorage,
    RangeReader,
    Storage,
)

if TYPE_CHECKING:
    import mmap

logger = logging.getLogger(__name__)

# Linux's page cache holds a shared mapping's pages: fsync(2) writes back what stores
# through the mapping dirtied (their write faults mark the pages dirty), as msync does.
_FSYNC_COVERS_MAPPINGS = sys.platform.startswith("linux")

E = TypeVar("E")
_Index = TypeVar("_Index", bound="AbstractIndex[Any]")
INT32_MAX = 2**31 - 1
ALLOCATION_CHUNK = 64 * 1024
"""Bytes of an index reserved at a time ahead of its last entry (8,192 offset-index
entries, about 32 MiB of log at the default ``index.interval.bytes``)."""


class AbstractIndex(Generic[E]):
    """Base of ``OffsetIndex`` and ``TimeIndex``; see the module docstring."""

    ENTRY: ClassVar[struct.Struct]
    KEY_FIELD: ClassVar[int]  # which unpacked field is sorted (the search key)
    REL_OFFSET_FIELD: ClassVar[int]  # which unpacked field is the relative offset

    def __init__(self, path: PurePath, base_offset: int, max_index_size: int = -1, *,
                 writable: bool = True, count_leading_nonzero: bool = False,
                 fs: PosixStorage | None = LOCAL, storage: Storage | None = None,
                 data: bytes | None = None) -> None:
        """``fs``: the filesystem holding the file (written, renamed and deleted through
        it), None for an index elsewhere, which is read-only. ``storage``: where a
        read-only index is read (default ``fs``); ``data``: its bytes, already read
        (``from_bytes``). Whoever assembles a segment's parts picks these per medium."""
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._count_leading_nonzero = count_leading_nonzero and not writable
        # Guards _mmap, _entries, _max_entries, _file and _closed: resize/close swap them
        # while reader threads search.
        self._lock = threading.RLock()
        self._mmap: mmap.mmap | None = None
        self._closed = False
        size = self.ENTRY.size
        # Bytes from the start of the file known to have real blocks: the mapping is
        # stored into (and read through) only below it (see the module docstring).
        self._allocated = 0
        self._fs_or_none = fs
        self._handle: FileHandle | None = None  # the writer's open file
        # Whether the writer changed the file (entries, length, blocks) since its last
        # fsync, or may have (opened: a crashed writer's changes may not be durable).
        self._unsynced = writable
        self._file: RangeReader
        if writable:
            if fs is None:
                raise KafkaStorageError(f"index {self.path} is not in a filesystem: it cannot "
                                        "be written")
            new = not fs.exists(self.path)
            if new and max_index_size < size:
                raise ValueError(f"max index size {max_index_size} holds no entry")
            try:
                handle = fs.open_file(self.path, "read_write")
            except OSError as e:
                raise KafkaStorageError(
                    f"cannot open index {self.path} for writing: {e.strerror}") from e
            self._file = self._handle = handle
            try:
                length = handle.size
                if new:
                    length = max_index_size - max_index_size % size
                    handle.truncate(length)
                self._entries = 0 if new else length // size
                self._length = length
                self._allocated = handle.data_prefix(length)
                self._map(length)
            except OSError as e:
                handle.close()
                raise KafkaStorageError(f"cannot prepare index {self.path}: {e.strerror}") \
                    from e
            self._max_entries = length // size
            self._max_index_size = max_index_size if max_index_size >= size else length
        else:
            source = storage if storage is not None else fs
            if data is not None or source is None:
                self._file = BytesRangeReader(data or b"")
            else:
                try:
                    self._file = source.open_range_reader(self.path)
                except FileNotFoundError:
                    # A reader may not rebuild anything: a missing index (a hand-made or
                    # half-copied Kafka dir) reads as an empty one, so lookups start at the
                    # segment's first batch and scan forward, which is slower but exact.
                    logger.debug("index %s is missing: reading it as empty", self.path)
                    self._file = BytesRangeReader()
                except OSError as e:
                    raise KafkaStorageError(f"cannot open index {self.path}: {e}") from e
            self._length = self._file.size
            self._max_entries = self._length // size
            self._max_index_size = self._length
            self._entries = (self._find_leading_nonzero(0) if self._count_leading_nonzero
                             else self._length // size)

    @classmethod
    def from_bytes(cls: type[_Index], path: PurePath, base_offset: int,
                   data: bytes | None) -> _Index:
        """A read-only index over ``data``, an in-memory buffer (None: absent, read as
        empty), e.g. an object's bytes or a commit entry's inline index; ``path`` only
        names it in messages. Entries are its whole length, as Kafka counts them."""
        return cls(path, base_offset, writable=False, fs=None, data=data or b"")

    # -- file mechanics -----------------------------------------------------------------

    def _writer(self) -> FileHandle:
        handle = self._handle
        if handle is None:
            raise InvalidOffsetError(f"index {self.path} is open read-only")
        return handle

    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if length > 0:
            self._mmap = self._writer().map(length, writable=True)

    def _raw(self, n: int) -> bytes:
        """Entry ``n`` as bytes (caller holds the lock)."""
        size = self.ENTRY.size
        if self._mmap is not None and (n + 1) * size <= self._allocated:
            return self._mmap[n * size:(n + 1) * size]
        try:
            return self._file.pread(n * size, size)
        except OSError as e:  # EBADF: closed (the segment was deleted)
            raise KafkaStorageError(f"cannot read index {self.path}: {e}") from e

    def _unpack(self, n: int) -> tuple[Any, ...]:
        raw = self._raw(n)
        if len(raw) < self.ENTRY.size:  # a read-only file the writer has just trimmed
            raw = bytes(self.ENTRY.size)
        return self.ENTRY.unpack(raw)

    def _find_leading_nonzero(self, known: int) -> int:
        """Binary search of the first all-zero entry, from ``known`` on."""
        self._length = self._file.size
        lo, hi = known, self._length // self.ENTRY.size
        while lo < hi:
            mid = (lo + hi) // 2
            raw = self._raw(mid)
            if len(raw) == self.ENTRY.size and any(raw):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _refresh(self) -> None:
        """Read-only active index: pick up entries the writer appended since."""
        if self._count_leading_nonzero:
            self._entries = self._find_leading_nonzero(self._entries)

    @property
    def entries(self) -> int:
        with self._lock:
            self._refresh()
            return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.ENTRY.size

    def _append_raw(self, *fields: int) -> None:
        if not self.writable:
            raise InvalidOffsetError(f"index {self.path} is open read-only")
        with self._lock:
            if self._entries >= self._max_entries:
                raise InvalidOffsetError(
                    f"index {self.path} is full ({self._entries} entries); cannot append")
            size = self.ENTRY.size
            assert self._mmap is not None
            self._allocate((self._entries + 1) * size)
            self._unsynced = True
            self.ENTRY.pack_into(self._mmap, self._entries * size, *fields)
            self._entries += 1

    def _allocate(self, end: int) -> None:
        """Reserve real blocks for bytes ``[0, end)`` (and a chunk ahead) before a store
        through the mapping; raises KafkaStorageError on ENOSPC (caller holds the lock)."""
        if end <= self._allocated:
            return
        target = min(self._length, end + ALLOCATION_CHUNK)
        self._unsynced = True
        try:
            self._writer().allocate(self._allocated, target - self._allocated)
        except OSError as e:
            raise KafkaStorageError(
                f"cannot allocate {target - self._allocated} bytes of index {self.path}: "
                f"{e.strerror}; nothing was written to it") from e
        self._allocated = target

    def _load_packed(self, packed: bytes, count: int) -> None:
        """Append ``count`` entries already packed big-endian (bulk rebuild)."""
        if not self.writable:
            raise InvalidOffsetError(f"index {self.path} is open read-only")
        with self._lock:
            if self._entries + count > self._max_entries:
                raise InvalidOffsetError(
                    f"index {self.path} cannot take {count} more entries ({self._entries} of "
                    f"{self._max_entries})")
            size = self.ENTRY.size
            if count:
                # One pwrite, not stores through the mapping: each first store to a page
                # of a freshly extended file is a write fault that allocates blocks, and
                # a rebuild touches every page. The mapping is shared, so it sees them.
                # A pwrite into holes allocates them and reports a full filesystem as
                # ENOSPC; the entry count moves only once every byte is written.
                start = self._entries * size
                self._unsynced = True
                try:
                    written = self._writer().pwrite(packed, start)
                    if written != len(packed):
                        raise OSError(errno.ENOSPC, f"short write ({written} of "
                                      f"{len(packed)} bytes)")
                except OSError as e:
                    raise KafkaStorageError(
                        f"cannot write {count} entries to index {self.path}: "
                        f"{e.strerror}") from e
                self._entries += count
                self._allocated = max(self._allocated, start + len(packed))

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to a whole entry (never below
        the entries); True if it changed. Used to preallocate an active index again."""
        if not self.writable:
            return False
        with self._lock:
            size = self.ENTRY.size
            length = max(new_size - new_size % size, self._entries * size)
            if length == self._length:
                return False
            if self._mmap is not None and not _FSYNC_COVERS_MAPPINGS:
                self._mmap.flush()  # Linux: unmapped dirty pages stay in the page cache
            self._map(0)
            self._unsynced = True
            try:
                self._writer().truncate(length)
            except OSError as e:
                self._map(self._length)
                raise KafkaStorageError(
                    f"cannot resize index {self.path} to {length} bytes: {e.strerror}") from e
            self._length = length
            self._allocated = min(self._allocated, length)
            self._map(length)
            self._max_entries = length // size
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the file to its entries (on roll and close)."""
        self.resize(self._entries * self.ENTRY.size)

    def truncate_to_entries(self, n: int) -> None:
        """Forget every entry from ``n`` on (zeroed, so a reader's count stays right)."""
        with self._lock:
            if n >= self._entries:
                return
            size = self.ENTRY.size
            if self._mmap is not None:
                self._allocate(self._entries * size)
                self._unsynced = True
                self._mmap[n * size:self._entries * size] = bytes((self._entries - n) * size)
            self._entries = n

    def reset(self) -> None:
        """Forget every entry and preallocate again (recovery rebuilds from here).

        The file is cut to zero first: a crash or corruption can leave bytes that are not
        a whole entry (the file length is no multiple of the entry size), and a reader in
        another process counting leading non-zero entries must not see them.
        """
        with self._lock:
            self._map(0)
            self._unsynced = True
            try:
                self._writer().truncate(0)
            except OSError as e:
                raise KafkaStorageError(f"cannot reset index {self.path}: {e.strerror}") from e
            self._length = 0
            self._entries = 0
            self._max_entries = 0
            self._allocated = 0
        self.resize(self._max_index_size)

    def flush(self) -> None:
        """fsync the file (its length may have changed) and so the mapping's pages: on
        Linux a store through a shared mapping dirties the page in the page cache, which
        fsync writes back, so an msync first would write the same pages twice. Elsewhere
        (or with no file handle) the mapping is msynced first.

        Nothing is done when the writer changed nothing since the last flush that
        succeeded: what it wrote is durable already (an index gets an entry every
        ``index.interval.bytes``, and a publish flushes after every append)."""
        with self._lock:
            if not self._unsynced:
                return
            if self._mmap is not None and (self._handle is None or not _FSYNC_COVERS_MAPPINGS):
                self._mmap.flush()
            if self._handle is not None:
                self._handle.fsync()
            self._unsynced = False

    def close(self) -> None:
        """Trim (writer) and release the file."""
        with self._lock:
            if self._closed:
                return
            if self.writable:
                self.trim_to_valid_size()
            self._map(0)
            self._closed = True
            self._file.close()

    def close_handler(self) -> None:
        """Release the file without trimming (the file is being deleted)."""
        with self._lock:
            self._map(0)
            if not self._closed:
                self._closed = True
                self._file.close()

    def _fs(self) -> PosixStorage:
        if self._fs_or_none is None:
            raise KafkaStorageError(f"index {self.path} is not in a filesystem")
        return self._fs_or_none

    def rename_to(self, path: PurePath) -> None:
        self._fs().rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close_handler()
        self._fs().delete(self.path)

    # -- search ---------------------------------------------------------------------------

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} does not fit index {self.path} (base {self.base_offset})")
        return rel

    def _largest_lower_bound_slot(self, key: int, field: int | None = None) -> int:
        """Slot of the largest entry whose ``field`` (default: the key) is <= ``key``, or
        -1 (caller holds the lock)."""
        self._refresh()
        n = self._entries
        if n == 0:
            return -1
        kf = self.KEY_FIELD if field is None else field
        if self._unpack(0)[kf] > key:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._unpack(mid)[kf] <= key:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def entry(self, n: int) -> E:
        with self._lock:
            self._refresh()
            if not 0 <= n < self._entries:
                raise IndexError(f"entry {n} of {self._entries} in {self.path}")
            return self._parse(self._unpack(n))

    def all_entries(self) -> list[E]:
        with self._lock:
            self._refresh()
            return [self._parse(self._unpack(i)) for i in range(self._entries)]

    def last_entry(self) -> E | None:
        with self._lock:
            self._refresh()
            return self._parse(self._unpack(self._entries - 1)) if self._entries else None

    def _parse(self, fields: tuple[Any, ...]) -> E:
        raise NotImplementedError

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when the file cannot be this index (Kafka's checks)."""
        size = self.ENTRY.size
        with self._lock:
            length = self._file.size
            if length % size != 0:
                raise CorruptIndexError(
                    f"index {self.path} has length {length}, not a multiple of {size}")
            self._check_entries()

    def _check_entries(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Index) -> _Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}, entries={self._entries})"
