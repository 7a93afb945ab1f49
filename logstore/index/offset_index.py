"""The sparse offset index of a segment (Kafka's ``OffsetIndex``).

Byte layout: 8-byte big-endian entries ``relativeOffset int32 | position int32``, sorted
by offset. The offset (``base_offset + relativeOffset``) is the LAST offset of the batch
that starts at byte ``position`` of the ``.log``. An entry is added when more than
``index.interval.bytes`` were appended since the previous one, checked before the append,
so the first batch of a segment never has one and no entry has relative offset 0.
Brokers before Kafka 3.x wrote one entry per append instead: the append's LAST offset at
its FIRST batch's position. Lookups read both; an entry is healthy when a batch starts at
its position, every batch before it ends below its offset, and offsets grow (the rule
lives in ``index_check``, used by ``check`` and ``dump-log``).

Crash policy: rebuilt on recovery (see ``abstract_index``). Thread-safety: as
``AbstractIndex`` (one writer, any number of reader threads).

>>> idx = OffsetIndex(path, base_offset=100, max_index_size=4096)  # doctest: +SKIP
>>> idx.append(150, 8192); idx.lookup(170)                          # doctest: +SKIP
OffsetPosition(offset=150, position=8192)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import CorruptIndexError, InvalidOffsetError
from .abstract_index import AbstractIndex


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """Offset → file position. See the module docstring."""

    ENTRY: ClassVar[struct.Struct] = struct.Struct(">ii")
    KEY_FIELD: ClassVar[int] = 0
    REL_OFFSET_FIELD: ClassVar[int] = 0

    def _parse(self, fields: tuple[Any, ...]) -> OffsetPosition:
        return OffsetPosition(self.base_offset + fields[0], fields[1])

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when there is none."""
        last = self.last_entry()
        return last.offset if last is not None else self.base_offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must grow (InvalidOffsetError otherwise)."""
        rel = self.relative(offset)
        with self._lock:
            if self._entries and offset <= self.last_offset:
                raise InvalidOffsetError(
                    f"offset {offset} is not above the last entry {self.last_offset} of "
                    f"index {self.path}")
            self._append_raw(rel, position)

    def load_entries(self, entries: np.ndarray) -> None:
        """Append rebuilt entries in bulk: an int64 array of (relative offset, position)
        rows, in order (recovery)."""
        packed = np.empty(len(entries), dtype=[("rel", ">i4"), ("pos", ">i4")])
        packed["rel"] = entries[:, 0]
        packed["pos"] = entries[:, 1]
        self._load_packed(packed.tobytes(), len(entries))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``target_offset``, else ``(base_offset, 0)``."""
        with self._lock:
            slot = self._largest_lower_bound_slot(target_offset - self.base_offset)
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            return self._parse(self._unpack(slot))

    def position_past(self, offset: int) -> int | None:
        """A position at or past the end of every batch holding an offset below
        ``offset``: the position of the entry after the first one at or above
        ``offset - 1`` (entries point at batch starts, so that entry's batch ends where the
        next entry's begins), or None when there is none (the segment's end). A reader
        uses it to bound a read, never to decide what it returns."""
        with self._lock:
            target = offset - 1 - self.base_offset
            slot = self._largest_lower_bound_slot(target)
            if slot < 0 or self._unpack(slot)[0] != target:
                slot += 1
            if slot + 1 >= self._entries:
                return None
            return self._parse(self._unpack(slot + 1)).position

    def position_at_or_below(self, position: int) -> int | None:
        """The largest entry's position that is <= ``position`` (a batch start), or None
        when there is none."""
        with self._lock:
            slot = self._largest_lower_bound_slot(position, field=1)
            return None if slot < 0 else self._parse(self._unpack(slot)).position

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        with self._lock:
            slot = self._largest_lower_bound_slot(offset - self.base_offset)
            if slot < 0:
                keep = 0
            elif self._parse(self._unpack(slot)).offset == offset:
                keep = slot
            else:
                keep = slot + 1
            self.truncate_to_entries(keep)

    def _check_entries(self) -> None:
        if self._entries:
            first, last = self._unpack(0), self._unpack(self._entries - 1)
            if last[0] <= 0 or first[0] <= 0 or last[0] < first[0] or last[1] < first[1]:
                raise CorruptIndexError(
                    f"corrupt index {self.path}: entries run from {first} to {last} "
                    f"(relative offset, position); base offset {self.base_offset}")
