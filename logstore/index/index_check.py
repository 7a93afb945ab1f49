"""Which index entries a lookup can use: the one implementation of Kafka's index rules,
used by ``seglog check``, ``LogManager.check(deep=True)`` and ``seglog dump-log``.

A lookup for offset ``o`` takes the largest offset-index entry ``(e, p)`` with ``e <= o``
(else ``(base, 0)``) and scans batches forward from position ``p`` to the first one whose
last offset is ``>= o``. A lookup for timestamp ``T`` takes the largest time-index entry
``(t, o)`` with ``t <= T`` (else ``(-1, base)``), finds ``p`` by the offset lookup of ``o``
and scans forward from ``p`` to the first batch whose max timestamp is ``>= T``. A scan
never looks back, so an entry is usable exactly when nothing the lookup wants lies before
the position it starts at:

* **Offset entry** ``(e, p)``: ``p`` is the start of a batch in the ``.log``, every batch
  before ``p`` has a last offset ``< e``, and offsets grow from entry to entry. Brokers
  before Kafka 3.x index a multi-batch append at the append's first batch with the
  append's LAST offset; newer ones index one batch at its own position with its own last
  offset. Both satisfy the rule. An entry whose ``e`` is not above the last offset of a
  batch before ``p`` sends lookups for offsets ``e..`` that batch's last offset past the
  batch that holds them; one whose ``p`` is no batch boundary starts a scan mid-batch.
* **Time entry** ``(t, o)``: with ``p`` the offset lookup's position for ``o``, every
  batch before ``p`` has a max timestamp ``< t``, and timestamps do not decrease from
  entry to entry. Every lookup that takes this entry has ``T >= t``, so no record it
  wants lies before ``p``. Kafka appends ``(max timestamp so far, offset of that
  timestamp)``: the offset is the last offset of a batch (followers, recovery, Kafka 3.x)
  or the offset of the record inside a batch that holds the max timestamp (leaders before
  3.x); the timestamp is a running maximum, so every record before it is older, and both
  forms satisfy the rule. Timestamps compare batch max timestamps (what the scan reads).

``kafka-dump-log`` is stricter: it reports an offset entry whose batch at ``p`` does not
end at ``e``, and a time entry whose ``o`` is not a batch's last offset or whose batch's
max timestamp is not ``t``. Old brokers' healthy indexes fail that test by the hundred,
so ``dump-log`` prints those lines labelled as what Kafka's tool would report and does
not count them as problems (``kafka_dump_log_*``).

Index files are read as the read-only indexes read them: whole entries up to the first
all-zero one (the free tail of an index left untrimmed by a crash). Thread-safety: pure
functions over arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..records.record_format import BatchHeader
from ..storage.storage import LOCAL


@dataclass(frozen=True, slots=True)
class SegmentBatches:
    """What the rules need of a segment's ``.log``: each whole batch's start position,
    last offset and max timestamp, in file order."""

    positions: np.ndarray  # int64
    last_offsets: np.ndarray  # int64
    max_timestamps: np.ndarray  # int64

    @classmethod
    def from_headers(cls, headers: Iterable[BatchHeader]) -> SegmentBatches:
        rows = [(h.position, h.last_offset, h.max_timestamp) for h in headers]
        arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy())

    def __len__(self) -> int:
        return len(self.positions)


@dataclass(frozen=True, slots=True)
class IndexEntries:
    """The entries of an index file as absolute values: ``keys`` (offsets of an offset
    index, timestamps of a time index) and ``values`` (positions, offsets)."""

    keys: np.ndarray  # int64
    values: np.ndarray  # int64
    torn_bytes: int = 0  # bytes after the last whole entry (a length no entry size divides)

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True, slots=True)
class Violation:
    """An entry that would mislead a lookup: its slot and why."""

    slot: int
    message: str


_OFFSET_ENTRY = np.dtype([("rel", ">i4"), ("pos", ">i4")])
_TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])


def _leading_entries(data: bytes, dtype: np.dtype) -> tuple[np.ndarray, int]:
    raw = np.frombuffer(data, dtype=np.uint8)
    size = dtype.itemsize
    whole = len(raw) // size * size
    entries = raw[:whole].view(dtype)
    zero = (
        np.flatnonzero(~raw[:whole].reshape(-1, size).any(axis=1))
        if whole
        else np.empty(0, np.intp)
    )
    return (entries[: zero[0]] if len(zero) else entries), len(raw) - whole


def read_offset_index(path: Path, base_offset: int) -> IndexEntries:
    """An ``.index`` file's entries (offset = base + relative offset, position)."""
    return offset_index_entries(LOCAL.read(path), base_offset)


def offset_index_entries(data: bytes, base_offset: int) -> IndexEntries:
    """The entries of an offset index's bytes (a file's, or a bucket's index object)."""
    entries, torn = _leading_entries(data, _OFFSET_ENTRY)
    return IndexEntries(
        entries["rel"].astype(np.int64) + base_offset, entries["pos"].astype(np.int64), torn
    )


def read_time_index(path: Path, base_offset: int) -> IndexEntries:
    """A ``.timeindex`` file's entries (timestamp, offset = base + relative offset)."""
    return time_index_entries(LOCAL.read(path), base_offset)


def time_index_entries(data: bytes, base_offset: int) -> IndexEntries:
    """The entries of a time index's bytes (a file's, or a bucket's index object)."""
    entries, torn = _leading_entries(data, _TIME_ENTRY)
    return IndexEntries(
        entries["ts"].astype(np.int64), entries["rel"].astype(np.int64) + base_offset, torn
    )


def offset_lookup_positions(offset_entries: IndexEntries | None, targets: np.ndarray) -> np.ndarray:
    """Where an offset lookup for each target starts: the position of the largest entry
    with offset <= target, else 0 (entries must be sorted; the offset rule checks that)."""
    if offset_entries is None or not len(offset_entries):
        return np.zeros(len(targets), dtype=np.int64)
    slot = np.searchsorted(offset_entries.keys, targets, side="right") - 1
    return np.where(slot >= 0, offset_entries.values[np.maximum(slot, 0)], 0)


def entry_usable_for_lookup(entry_offset: int, batch: BatchHeader | None) -> bool:
    """The offset-entry rule as one lookup can check it without reading the batches
    before the entry's position: ``batch`` (the header parsed at the position, None when
    nothing parses there) starts at or below the entry's offset. Offsets increase, so
    every batch before it then ends below the entry's offset. Every entry a broker or
    seglog writes passes (its offset is the last offset of the batch or append starting
    there); a reader falls back to a scan from the segment start for one that does not."""
    return batch is not None and batch.base_offset <= entry_offset


def _first_at_or_above(values: np.ndarray, upto: int, limits: np.ndarray) -> int:
    """Index of the first of ``values[:upto]`` that is >= ``limits`` (for a report)."""
    return int(np.argmax(values[:upto] >= limits))


def _largest_before(values: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per entry, the largest of ``values[:j]`` (a per-batch column, ``j`` the batches
    before each entry's lookup position): what a lookup starting there skips. The int64
    minimum where no batch lies before."""
    lowest = np.iinfo(np.int64).min
    if not len(values):
        return np.full(len(j), lowest)
    prefix_max = np.maximum.accumulate(values)
    return np.where(j > 0, prefix_max[np.maximum(j - 1, 0)], lowest)


def _violations(
    bad: np.ndarray, limit: int, why: Callable[[int], str]
) -> tuple[list[Violation], int]:
    """The first ``limit`` entries flagged in ``bad``, each with ``why(i)``, and how many
    are flagged in all."""
    slots = np.flatnonzero(bad)
    return [Violation(i, why(i)) for i in slots[:limit].tolist()], len(slots)


def offset_index_violations(
    entries: IndexEntries, batches: SegmentBatches, limit: int = 10
) -> tuple[list[Violation], int]:
    """Entries of an offset index that would mislead a lookup (the module's rule): the
    first ``limit`` of them, and how many there are in all."""
    n = len(entries)
    if not n:
        return [], 0
    e, p = entries.keys, entries.values
    j = np.searchsorted(batches.positions, p, side="left")  # batches before p
    boundary = (
        (j < len(batches)) & (batches.positions[np.minimum(j, len(batches) - 1)] == p)
        if len(batches)
        else np.zeros(n, dtype=bool)
    )
    before_max = _largest_before(batches.last_offsets, j)
    not_growing = np.zeros(n, dtype=bool)
    not_growing[1:] = e[1:] <= e[:-1]
    bad = not_growing | ~boundary | (before_max >= e)

    def why(i: int) -> str:
        head = f"entry {i} (offset {e[i]}, position {p[i]})"
        if not_growing[i]:
            return f"{head}: offset not above the previous entry's {e[i - 1]}; offsets must grow"
        if not boundary[i]:
            return (
                f"{head}: no batch starts at position {p[i]}, so a lookup would start "
                "scanning mid-batch"
            )
        k = _first_at_or_above(batches.last_offsets, int(j[i]), e[i])
        return (
            f"{head}: the batch at position {batches.positions[k]} before it ends "
            f"at offset {batches.last_offsets[k]}, so lookups for offsets "
            f"{e[i]}..{batches.last_offsets[k]} would start past their batch"
        )

    return _violations(bad, limit, why)


def time_index_violations(
    entries: IndexEntries,
    offset_entries: IndexEntries | None,
    batches: SegmentBatches,
    limit: int = 10,
) -> tuple[list[Violation], int]:
    """Entries of a time index that would mislead a lookup (the module's rule), given
    the segment's offset index (None: missing, so every lookup scans from position 0)."""
    n = len(entries)
    if not n:
        return [], 0
    t, o = entries.keys, entries.values
    p = offset_lookup_positions(offset_entries, o)
    j = np.searchsorted(batches.positions, p, side="left")
    before_max = _largest_before(batches.max_timestamps, j)
    decreasing = np.zeros(n, dtype=bool)
    decreasing[1:] = t[1:] < t[:-1]
    bad = decreasing | (before_max >= t)

    def why(i: int) -> str:
        head = f"entry {i} (timestamp {t[i]}, offset {o[i]})"
        if decreasing[i]:
            return (
                f"{head}: timestamp below the previous entry's {t[i - 1]}; timestamps "
                "must not decrease"
            )
        k = _first_at_or_above(batches.max_timestamps, int(j[i]), t[i])
        return (
            f"{head}: a lookup starts at position {p[i]}, but the batch at position "
            f"{batches.positions[k]} before it (last offset {batches.last_offsets[k]}) "
            f"has timestamp {batches.max_timestamps[k]}, so lookups for timestamps "
            f"{t[i]}..{batches.max_timestamps[k]} would miss it"
        )

    return _violations(bad, limit, why)


def kafka_dump_log_offset_mismatches(
    entries: IndexEntries, batches: SegmentBatches
) -> list[tuple[int, int]]:
    """``(index offset, log offset)`` pairs Kafka's ``kafka-dump-log`` reports as
    "Mismatches": entries whose batch at their position does not end at their offset
    (-1 when no batch starts there)."""
    at = dict(zip(batches.positions.tolist(), batches.last_offsets.tolist(), strict=True))
    return [
        (e, at.get(p, -1))
        for e, p in zip(entries.keys.tolist(), entries.values.tolist(), strict=True)
        if at.get(p, -1) != e
    ]


def kafka_dump_log_time_mismatches(
    entries: IndexEntries, offset_entries: IndexEntries | None, batches: SegmentBatches
) -> list[str]:
    """The lines Kafka's ``kafka-dump-log`` prints for a time index it finds wrong: an
    offset that is no batch's last offset (it finds the batch from the offset lookup's
    position on), a timestamp that is not that batch's max timestamp, a timestamp not
    above the previous one."""
    out = []
    positions = offset_lookup_positions(offset_entries, entries.values)
    previous = -1
    for t, o, p in zip(
        entries.keys.tolist(), entries.values.tolist(), positions.tolist(), strict=True
    ):
        start = int(np.searchsorted(batches.positions, p, side="left"))
        later = np.flatnonzero(batches.last_offsets[start:] >= o)
        if not len(later):
            out.append(f"Indexed offset: {o}, found log offset: -1")
        else:
            k = start + int(later[0])
            if batches.last_offsets[k] != o:
                out.append(f"Indexed offset: {o}, found log offset: {batches.last_offsets[k]}")
            else:
                if batches.max_timestamps[k] != t:
                    out.append(
                        f"Found timestamp mismatch: Index timestamp: {t}, "
                        f"log timestamp: {batches.max_timestamps[k]}"
                    )
                if previous >= t:
                    out.append(
                        f"Found out of order timestamp: Index timestamp: {t}, "
                        f"Previously indexed timestamp: {previous}"
                    )
        previous = t
    return out
