"""The transaction index of a segment, ``<base>.txnindex`` (Kafka's ``TransactionIndex``).

One entry per ABORTED transaction whose abort marker lies in the segment, appended when
the marker is appended (``Log.append``) or when recovery replays the segment. 34 bytes,
big-endian::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64
    lastStableOffset int64

``firstOffset`` is the transaction's first offset (possibly in an earlier segment),
``lastOffset`` the abort marker's offset, and ``lastStableOffset`` the partition's last
stable offset when the marker was written: the first offset of the earliest other
transaction still ongoing then, or ``lastOffset + 1``. Entries are in marker order, so
``lastOffset`` increases. A read_committed fetch of ``[start, upper)`` collects every
entry with ``lastOffset >= start`` and ``firstOffset < upper``, from the segment holding
``start`` on, and stops at the first entry whose ``lastStableOffset >= upper``: no
transaction beginning below ``upper`` was still open then, so no later entry overlaps.

Like Kafka's, the file is created lazily, by the first entry: a segment without aborted
transactions normally has no ``.txnindex`` (readers that find none compute the entries
from the log, see ``transactions``).

Crash policy: appended without an fsync of its own (``flush`` does, with the segment);
recovery resets and rebuilds it for every segment it replays, and the writer's loader
rebuilds one that fails ``sanity_check``. Readers never trust a damaged file: a size that
is not a multiple of 34, an unknown version, or entries out of order raise
``CorruptIndexError`` naming the file.

Thread-safety: one writer thread appends; readers read the file through their own
``entries`` call (a read of the whole file: entries are few).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np

from ..errors import CorruptIndexError, KafkaStorageError
from ..storage.file_handle import FileHandle
from ..storage.storage import LOCAL, PosixStorage, Storage

logger = logging.getLogger(__name__)

ENTRY_SIZE = 34
CURRENT_VERSION = 0
_DTYPE = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                   ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert _DTYPE.itemsize == ENTRY_SIZE


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class TxnSearchResult:
    """Entries overlapping a fetch, and whether later segments can hold more."""

    aborted: tuple[AbortedTxn, ...]
    complete: bool


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    arr = np.zeros(len(entries), _DTYPE)
    for i, e in enumerate(entries):
        arr[i] = (CURRENT_VERSION, e.producer_id, e.first_offset, e.last_offset,
                  e.last_stable_offset)
    return arr.tobytes()


def decode_entries(data: bytes, path: PurePath, base_offset: int) -> list[AbortedTxn]:
    """Parse and check a whole ``.txnindex`` (see the module docstring for the checks)."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index {path} has {len(data)} bytes, not a multiple of the "
            f"{ENTRY_SIZE}-byte entry size")
    arr = np.frombuffer(data, _DTYPE)
    bad = np.flatnonzero(arr["version"] != CURRENT_VERSION)
    if len(bad):
        raise CorruptIndexError(
            f"transaction index {path}: entry {bad[0]} has version "
            f"{int(arr['version'][bad[0]])}, not {CURRENT_VERSION}")
    first, last, lso = arr["first_offset"], arr["last_offset"], arr["last_stable_offset"]
    # The last stable offset may lie below the entry's first offset (an older transaction
    # was still open) but never past its marker.
    bad = np.flatnonzero((last < base_offset) | (first < 0) | (first > last) | (lso < 0)
                         | (lso > last + 1) | (arr["producer_id"] < 0))
    if len(bad):
        i = int(bad[0])
        raise CorruptIndexError(
            f"transaction index {path}: entry {i} (producer {int(arr['producer_id'][i])}, "
            f"offsets {int(first[i])}..{int(last[i])}, last stable offset {int(lso[i])}) is "
            f"impossible in a segment based at {base_offset}")
    if len(arr) > 1:
        back = np.flatnonzero(last[1:] <= last[:-1])
        if len(back):
            i = int(back[0]) + 1
            raise CorruptIndexError(
                f"transaction index {path}: entry {i} ends at offset {int(last[i])}, not "
                f"after the previous entry's {int(last[i - 1])}")
    return [AbortedTxn(int(p), int(f), int(la), int(s))
            for p, f, la, s in zip(arr["producer_id"].tolist(), first.tolist(), last.tolist(),
                                   lso.tolist(), strict=True)]


def collect_aborted(entries: list[AbortedTxn], start: int, upper: int) -> TxnSearchResult:
    """Kafka's ``collectAbortedTxns`` over one segment's entries."""
    out = []
    for e in entries:
        if e.last_offset >= start and e.first_offset < upper:
            out.append(e)
        if e.last_stable_offset >= upper:
            return TxnSearchResult(tuple(out), True)
    return TxnSearchResult(tuple(out), False)


class TransactionIndex:
    """A segment's ``.txnindex``; see the module docstring. The file exists only once
    an entry was appended (or ``write_all`` wrote it)."""

    def __init__(self, path: PurePath, base_offset: int, *, writable: bool = True,
                 fs: PosixStorage | None = LOCAL, storage: Storage | None = None) -> None:
        """``fs``: the filesystem holding the file (written, renamed and deleted through
        it), None for an index elsewhere, which is read-only; ``storage``: where it is
        read (default ``fs``). Whoever assembles a segment's parts picks these per
        medium."""
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._fs_or_none = fs
        self._storage: Storage | None = storage if storage is not None else fs
        self._handle: FileHandle | None = None
        self._last_offset: int | None = None  # of the last entry, once known
        self._data: bytes | None = None  # the whole file, for an index given as bytes

    @classmethod
    def from_bytes(cls, path: PurePath, base_offset: int,
                   data: bytes | None) -> TransactionIndex:
        """A read-only index whose file is ``data`` (None: absent, no entries); ``path``
        only names it in messages."""
        index = cls(path, base_offset, writable=False, fs=None)
        index._data = data or b""
        return index

    def _fs(self) -> PosixStorage:
        if self._fs_or_none is None:
            raise KafkaStorageError(f"transaction index {self.path} is not in a filesystem: "
                                    "it cannot be written")
        return self._fs_or_none

    def has_file(self) -> bool:
        """Whether the file exists (Kafka creates it with its first entry)."""
        if self._data is not None:
            return bool(self._data)
        return self._storage is not None and self._storage.exists(self.path)

    def entries(self) -> list[AbortedTxn]:
        """Every entry, checked (an absent file has none)."""
        if self._data is not None:
            return decode_entries(self._data, self.path, self.base_offset)
        if self._storage is None:
            return []
        try:
            data = self._storage.read(self.path)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"cannot read transaction index {self.path}: {e}") from e
        return decode_entries(data, self.path, self.base_offset)

    def sanity_check(self) -> None:
        self.entries()

    def _open(self) -> FileHandle:
        if self._handle is None:
            try:
                self._handle = self._fs().open_file(self.path, "append")
            except OSError as e:
                raise KafkaStorageError(
                    f"cannot open transaction index {self.path}: {e}") from e
        return self._handle

    def append(self, txn: AbortedTxn) -> None:
        """Append one entry; its ``last_offset`` must pass every earlier one's."""
        if not self.writable:
            raise KafkaStorageError(f"transaction index {self.path} is open read-only")
        if self._last_offset is None:
            existing = self.entries()
            self._last_offset = existing[-1].last_offset if existing else -1
        if txn.last_offset <= self._last_offset:
            raise CorruptIndexError(
                f"cannot append an aborted transaction ending at {txn.last_offset} to "
                f"{self.path}: its last entry ends at {self._last_offset}")
        self._open().write(encode_entries([txn]))
        self._last_offset = txn.last_offset

    def write_all(self, entries: list[AbortedTxn]) -> None:
        """Replace the file with ``entries`` (a rebuild); no entries removes the file."""
        self.close()
        if entries:
            fs = self._fs()
            tmp = self.path.with_name(self.path.name + ".tmp")
            with fs.open_file(tmp, "truncate") as f:
                f.write_all(encode_entries(entries))
                f.fsync()
            fs.rename(tmp, self.path)
            self._last_offset = entries[-1].last_offset
        else:
            self.delete()
            self._last_offset = -1

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them)."""
        self.write_all([])

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose abort marker is at or above ``offset``."""
        entries = self.entries()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self.write_all(kept)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.fsync()

    def rename_to(self, path: PurePath) -> None:
        fs = self._fs()
        if fs.exists(self.path):
            fs.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self._fs().delete(self.path)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
