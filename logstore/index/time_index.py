"""The sparse time index of a segment (Kafka's ``TimeIndex``).

Byte layout: 12-byte big-endian entries ``timestamp int64 | relativeOffset int32``,
where the offset is the last offset of the batch holding the largest timestamp seen so
far. An entry is appended only when the timestamp grows (alongside offset-index entries),
and a final one with the segment's max timestamp when the segment becomes inactive
(roll, close). The last slot is kept free for that final entry: ``is_full`` is true one
entry early. Leaders before Kafka 3.x name the record holding the max timestamp, inside
its batch. An entry is healthy when every batch before the offset lookup's start
position for its offset is older than its timestamp and timestamps never decrease
(``index_check``).

Crash policy: rebuilt on recovery; a missing time index is created empty. Thread-safety:
as ``AbstractIndex``.

>>> idx.maybe_append(1_700_000_000_000, 150); idx.lookup(1_700_000_000_500)  # doctest: +SKIP
TimestampOffset(timestamp=1700000000000, offset=150)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import CorruptIndexError, InvalidOffsetError
from .abstract_index import AbstractIndex

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex[TimestampOffset]):
    """Timestamp → offset. See the module docstring."""

    ENTRY: ClassVar[struct.Struct] = struct.Struct(">qi")
    KEY_FIELD: ClassVar[int] = 0
    REL_OFFSET_FIELD: ClassVar[int] = 1

    def _parse(self, fields: tuple[Any, ...]) -> TimestampOffset:
        return TimestampOffset(fields[0], self.base_offset + fields[1])

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries - 1

    def last(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)``."""
        entry = self.last_entry()
        return entry if entry is not None else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is above the last entry's."""
        with self._lock:
            if not skip_full_check and self.is_full:
                raise InvalidOffsetError(f"time index {self.path} is full")
            last = self.last()
            if self._entries and offset < last.offset:
                raise InvalidOffsetError(
                    f"offset {offset} is below the last entry {last.offset} of {self.path}")
            if self._entries and timestamp < last.timestamp:
                raise InvalidOffsetError(
                    f"timestamp {timestamp} is below the last entry {last.timestamp} of "
                    f"{self.path}")
            if timestamp > last.timestamp:
                self._append_raw(timestamp, self.relative(offset))

    def load_entries(self, entries: np.ndarray) -> None:
        """Append rebuilt entries in bulk: an int64 array of (timestamp, relative offset)
        rows, in order (recovery)."""
        packed = np.empty(len(entries), dtype=[("ts", ">i8"), ("rel", ">i4")])
        packed["ts"] = entries[:, 0]
        packed["rel"] = entries[:, 1]
        self._load_packed(packed.tobytes(), len(entries))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= ``target_timestamp``, else
        ``(-1, base_offset)``."""
        with self._lock:
            slot = self._largest_lower_bound_slot(target_timestamp)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            return self._parse(self._unpack(slot))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        with self._lock:
            slot = self._largest_lower_bound_slot(offset - self.base_offset - 1,
                                                  self.REL_OFFSET_FIELD)
            self.truncate_to_entries(slot + 1)

    def _check_entries(self) -> None:
        if self._entries:
            first, last = self._unpack(0), self._unpack(self._entries - 1)
            if last[0] < first[0] or last[1] < first[1] or last[1] < 0:
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: entries run from {first} to {last} "
                    f"(timestamp, relative offset); base offset {self.base_offset}")
