"""Admission control: how far one micro-batch may go, per partition.

PySpark's ``latestOffset(start, limit)`` receives either ``ReadAllAvailable`` or the
source's own default limit, and the built-in limits cannot express Kafka's combination
(``minOffsetsPerTrigger`` + ``maxOffsetsPerTrigger`` + ``maxTriggerDelay``) nor bytes and
offsets together. So the source reports one representative default limit and, whenever
the engine passes anything but ``ReadAllAvailable``, ``admit`` applies *all* the
configured limits from the options:

- ``maxOffsetsPerTrigger``: the budget is split across partitions proportionally to their
  lag, as Kafka's connector does (small partitions get at least one offset while the
  budget lasts); unlike Kafka, the total never exceeds the budget.
- ``maxBytesPerTrigger``: bytes are *estimated* from segment file sizes and base offsets
  (``SegmentLayout``), assuming bytes spread evenly over a segment's offsets; no data is
  read. The budget is split across partitions proportionally to their offset lag, and
  each partition admits what its share covers from its start (only those segments are
  sized); a share a partition does not need goes to the others. Every lagging partition
  admits at least one offset so a huge batch cannot stall the query.
- ``minOffsetsPerTrigger`` + ``maxTriggerDelay``: a batch is delayed (``latestOffset``
  returns ``start``) while fewer offsets are available than the minimum, unless
  ``maxTriggerDelay`` has passed since the last admitted batch.

The time of the last admitted batch must survive restarts, and the reader object does
not (PySpark may recreate it), so it travels *in the offset*: an end offset admitted under
``minOffsetsPerTrigger`` carries ``"$lastTriggerMs"`` (see ``source_offsets``), and the
next ``latestOffset`` reads it back from ``start``. After a restart the delay therefore
continues from the last batch that was really planned, not from the restart. An offset
without the key (the initial offset, or one written without ``minOffsetsPerTrigger``)
counts as "long ago": the first batch is admitted at once, as Kafka's connector does.

Admission is by offsets, as Kafka's: on compacted topics an offset range may hold fewer
records than its length.

>>> admit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 90, ("t", 1): 10},
...       AdmissionLimits(max_offsets=50), now_ms=0).end
{('t', 0): 45, ('t', 1): 5}
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.object_store_config import NO_STORAGE_OPTIONS, StorageOptions

from .log_readers import segment_files
from .source_options import SourceOptions


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """The admission-control options of a source; all None means no limit."""

    max_offsets: int | None = None
    min_offsets: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    max_bytes: int | None = None

    @classmethod
    def from_options(cls, options: SourceOptions) -> AdmissionLimits:
        return cls(
            options.max_offsets_per_trigger,
            options.min_offsets_per_trigger,
            options.max_trigger_delay_ms,
            options.max_bytes_per_trigger,
        )

    @property
    def unlimited(self) -> bool:
        return self.max_offsets is None and self.min_offsets is None and self.max_bytes is None


@dataclass(frozen=True, slots=True)
class Admission:
    """The end offsets admitted, and whether a new batch was admitted (for the stamp)."""

    end: dict[TopicPartition, int]
    delayed: bool = False


@dataclass(frozen=True, slots=True)
class SegmentLayout:
    """Base offsets and byte sizes of one partition's segments, for byte estimates.

    ``bytes_between(a, b)`` estimates the bytes holding offsets ``[a, b)``: each segment's
    size is spread evenly over the offsets from its base to the next base (the last one up
    to ``end_offset``).
    """

    base_offsets: tuple[int, ...]
    sizes: Sequence[int]  # local dirs: each stat'ed when first asked (``SegmentSizes``)
    end_offset: int

    def _span(self, i: int) -> tuple[int, int]:
        """Segment ``i``'s offsets ``[lo, hi)`` (never empty)."""
        bases = self.base_offsets
        base = bases[i]
        nxt = bases[i + 1] if i + 1 < len(bases) else max(self.end_offset, base + 1)
        return base, max(nxt, base + 1)

    def _first_span(self, offset: int) -> int:
        """The first segment whose span may hold ``offset`` or later ones: the spans
        before it end at or below ``offset``, so a trigger near the log end looks at its
        last segments only, not at every segment of the partition."""
        return max(bisect_right(self.base_offsets, offset) - 1, 0)

    def bytes_between(self, a: int, b: int) -> float:
        bases, sizes = self.base_offsets, self.sizes
        first = self._first_span(a)
        last = max(bisect_left(bases, b, first) - 1, first)  # the last span below ``b``
        total = 0.0
        for i in (first, last) if last > first else (first,):
            lo, hi = self._span(i)
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                total += sizes[i] * overlap / (hi - lo)
        # The spans between lie wholly inside [a, b): their sizes count in full.
        return total + sum(sizes[first + 1:last])

    def offset_after_bytes(self, a: int, budget: float, limit: int) -> int:
        """The largest ``b ≤ limit`` with ``bytes_between(a, b) ≤ budget`` (at least ``a``)."""
        return self.admit_bytes(a, budget, limit)[0]

    def admit_bytes(self, a: int, budget: float, limit: int) -> tuple[int, float]:
        """``(b, bytes_between(a, b))`` for ``b = offset_after_bytes(a, budget, limit)``:
        the sizes of the segments from ``a`` up to ``b`` only are looked at."""
        if budget <= 0:
            return a, 0.0
        pos = a
        spent = 0.0
        for i in range(self._first_span(a), len(self.base_offsets)):
            lo, hi = self._span(i)
            if hi <= pos:
                continue
            if lo >= limit:
                break
            seg_hi = min(hi, limit)
            per = self.sizes[i] / (hi - lo)
            span = seg_hi - pos
            cost = per * span
            if cost <= budget:
                budget -= cost
                spent += cost
                pos = seg_hi
            else:
                n = int(budget // per) if per > 0 else span
                return pos + n, spent + n * per
        return min(pos, limit), spent


def segment_layout(
    log_dirs: Sequence[str], tp: TopicPartition, end_offset: int,
    storage: StorageOptions = NO_STORAGE_OPTIONS,
) -> SegmentLayout | None:
    """A partition's segment bases and ``.log`` sizes (``log_readers.segment_files``:
    listed again only when the directory changed, so a trigger stats one growing file
    per partition); None if not found."""
    found = segment_files(log_dirs, tp, storage)
    if found is None:
        return None
    bases, sizes = found
    return SegmentLayout(bases, sizes, end_offset)


def admit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    limits: AdmissionLimits,
    *,
    now_ms: int,
    last_trigger_ms: int | None = None,
    layouts: Callable[[TopicPartition], SegmentLayout | None] | None = None,
) -> Admission:
    """End offsets for the next batch, from ``start`` towards ``latest``.

    ``start`` and ``latest`` have the same keys; ``latest[tp] ≥ start[tp]``.
    """
    end = dict(latest)
    if limits.unlimited:
        return Admission(end)
    lag = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] > start[tp]}
    total = sum(lag.values())
    if limits.min_offsets is not None and total < limits.min_offsets:
        waited = now_ms - last_trigger_ms if last_trigger_ms is not None else math.inf
        if waited < limits.max_trigger_delay_ms:
            return Admission(dict(start), delayed=True)
    if limits.max_offsets is not None and total > limits.max_offsets:
        for tp, n in split_budget(lag, limits.max_offsets).items():
            end[tp] = start[tp] + n
    if limits.max_bytes is not None and layouts is not None:
        end = _limit_bytes(start, end, limits.max_bytes, layouts)
    return Admission(end)


def split_budget(lag: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Split ``budget`` offsets across partitions proportionally to ``lag``.

    Kafka's rule (``prorate = budget * lag / total``, rounded down, but up when below 1 so
    small partitions are not starved), then adjusted so the total is exactly
    ``min(budget, total lag)``: budget left by rounding goes to the largest remainders,
    an excess is taken from the largest shares.
    """
    total = sum(lag.values())
    if total <= budget:
        return dict(lag)
    share: dict[TopicPartition, int] = {}
    fraction: dict[TopicPartition, float] = {}
    for tp in sorted(lag):
        prorate = budget * lag[tp] / total
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        share[tp] = min(lag[tp], n)
        fraction[tp] = prorate - math.floor(prorate)
    # Rounding down can leave budget unused: largest remainders get it, one each.
    left = budget - sum(share.values())
    for tp in sorted(share, key=lambda t: (-fraction[t], t)):
        if left <= 0:
            break
        if share[tp] < lag[tp]:
            share[tp] += 1
            left -= 1
    excess = sum(share.values()) - budget
    if excess > 0:
        # Largest shares pay first; the order is deterministic (share, then name).
        for tp in sorted(share, key=lambda t: (-share[t], t)):
            if excess == 0:
                break
            take = min(excess, max(share[tp] - 1, 0))
            share[tp] -= take
            excess -= take
        # More lagging partitions than budget: the first ones (by name) get one each.
        for tp in sorted(share, reverse=True):
            if excess == 0:
                break
            if share[tp] > 0:
                share[tp] -= 1
                excess -= 1
    return share


_BYTE_SHARE_PASSES = 4
"""Rounds of handing the byte budget that partitions left unused (their whole lag fit in
their share) to the others; what is left after them stays unused (the bound is "at most")."""


def _limit_bytes(
    start: Mapping[TopicPartition, int],
    end: dict[TopicPartition, int],
    max_bytes: int,
    layouts: Callable[[TopicPartition], SegmentLayout | None],
) -> dict[TopicPartition, int]:
    """The budget is split across partitions proportionally to their offset lag (Kafka's
    proration, as ``maxOffsetsPerTrigger``), and each partition walks its segments from
    its start until its share is spent: only the segments a batch may admit are sized,
    so a new query's first trigger over 11,000 segments stats about one per partition,
    not all of them. Budget a partition leaves (its whole lag fits) goes to the others."""
    walks: dict[TopicPartition, SegmentLayout] = {}
    for tp in sorted(end):
        if end[tp] <= start[tp]:
            continue
        layout = layouts(tp)
        if layout is not None and layout.base_offsets:
            walks[tp] = layout
    pos = {tp: start[tp] for tp in walks}
    budget = float(max_bytes)
    lagging = list(walks)
    for _ in range(_BYTE_SHARE_PASSES):
        lag = sum(end[tp] - pos[tp] for tp in lagging)
        if lag == 0 or budget <= 0:
            break
        spent = 0.0
        still = []
        for tp in lagging:
            share = budget * (end[tp] - pos[tp]) / lag
            pos[tp], used = walks[tp].admit_bytes(pos[tp], share, end[tp])
            spent += used
            if pos[tp] < end[tp]:
                still.append(tp)
        budget -= spent
        if len(still) == len(lagging):
            break  # every partition spent its share: nothing was left to hand on
        lagging = still
    out = dict(end)
    for tp in walks:
        # At least one offset per lagging partition, so an oversized batch still moves.
        out[tp] = max(min(pos[tp], end[tp]), start[tp] + 1)
    return out


def cap_to_target(
    latest: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """``Trigger.AvailableNow``: never beyond the target fixed when the query started.

    Partitions unknown to the target (created after the query started) are left out.
    """
    return {tp: min(off, target[tp]) for tp, off in latest.items() if tp in target}

