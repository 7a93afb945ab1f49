"""``PartitionTable``: what the writer ``LogManager`` and the ``LogDirsReader`` share.

Both hold a list of log dirs, their partitions by topic-partition and the topics'
configs, and answer the same questions about them: which topics and partitions exist,
a topic's config and persisted overrides, and the one high-watermark rule every reader
of a published high watermark applies (an unlisted partition's HW is its log start
offset; a checkpointed HW above the log end is clamped to it with a warning; a
checkpointed log start offset above the log end is ignored). Opening, loading a log and
what "refresh" means differ between the two and stay in their own classes
(``log_manager``, ``log_dirs_reader``).

Thread-safety: ``_lock`` guards ``_partitions``, ``_topic_configs`` and the checkpoint
values of the ``LogDir``s; a subclass adds its own locks after it in the lock order.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, overload

from ..config.config import LogConfig, ManagerConfig
from ..config.topics import load_topic_config, read_topic_config
from ..errors import CorruptPartitionMetadataError, LogDirError, UnknownTopicOrPartitionError
from ..log.offset_checkpoints import HW_CHECK, probe_log_end_offset, warn_beyond_log_end
from ..log.partition_metadata import read_topic_id, topic_ids_differ
from ..log_dirs_api import ReadPlan, SegmentLayout
from ..records.record_format import TopicPartition
from ..storage.file_names import HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LOG_SUFFIX
from ..storage.storage import LOCAL
from ..util.clock import Clock
from .log_dirs import LogDir, LogT, Partition, first_segment_base

logger = logging.getLogger(__name__)


class PartitionTable(Generic[LogT]):
    """The log dirs, their partitions and topic configs, and the lookups over them.

    A base class only: ``load`` (open a partition's log) and ``_refresh`` (see what
    changed on disk) belong to the writer or the reader. ``LogT``: the kind of log a
    partition holds once loaded (the writer's ``Log``, the reader's ``LogReader``)."""

    def __init__(
        self,
        config: ManagerConfig | Mapping[str, Any] | None,
        default_topic_config: LogConfig | Mapping[str, Any] | None,
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.config = ManagerConfig.of(config)
        self.default_topic_config = LogConfig.of(default_topic_config)
        self._lock = threading.RLock()  # guards _partitions, _topic_configs
        self._partitions: dict[TopicPartition, Partition[LogT]] = {}
        # topic -> (the topic id its config was read with, the config): a config read
        # under another id is a deleted topic's (re-created since under the same name)
        self._topic_configs: dict[str, tuple[str | None, LogConfig]] = {}
        # clamped by the last high_watermarks(): tp -> (checkpoint, published HW, log end)
        self._beyond_log_end: dict[TopicPartition, tuple[Path, int, int]] = {}
        self.log_dirs: list[LogDir] = []

    is_remote = False
    """Local dirs (``log_dirs_api.LogDirsView.is_remote``)."""

    @property
    def location(self) -> str:
        """The log dirs' paths, comma-separated (for messages)."""
        return self.dirs_text()

    @property
    def exists(self) -> bool:
        """True: opening checked (a reader) or made (a writer) every dir."""
        return True

    @contextmanager
    def one_refresh(self, refresh: bool = True) -> Iterator[None]:
        """Nothing to hold: local checkpoints are read again on each call and listings
        are cached by mtime (a bucket manager answers a block from one LIST)."""
        yield

    # -- what a subclass provides ----------------------------------------------------

    def load(self, p: Partition[LogT]) -> LogT:
        """Open ``p``'s log if not yet open (thread-safe, idempotent)."""
        log = p.log
        if log is not None:
            return log
        config = self.config_of(p)  # before p.lock: lock order is _lock, then p.lock
        with p.lock:
            if p.log is None:
                p.log = self._open_log(p, config)
            return p.log

    def _open_log(self, p: Partition[LogT], config: LogConfig) -> LogT:
        """Open ``p``'s log (writer: a Log, recovered when due; reader: a LogReader),
        called under ``p.lock`` by ``load``."""
        raise NotImplementedError

    def _refresh(self) -> None:
        """Pick up what changed on disk since the last look (a reader); a writer knows."""

    def _probe_log_end(self, p: Partition[LogT]) -> int:
        """The log end of ``p``, whose log is not loaded, from its files."""
        return probe_log_end_offset(p.dir)

    # -- the table's own state, for its owner's components -------------------------

    @property
    def lock(self) -> threading.RLock:
        """The table lock (first in the lock order): guards the partitions, the topic
        configs and the checkpoint values of the ``LogDir``s."""
        return self._lock

    def add_partition(self, p: Partition[LogT]) -> None:
        """Enter a partition made by its owner (a writer's new topic or partition)."""
        with self._lock:
            self._partitions[p.tp] = p

    def remove_partition(self, tp: TopicPartition) -> None:
        """Forget a partition its owner deleted."""
        with self._lock:
            del self._partitions[tp]

    # -- listing ----------------------------------------------------------------------

    def _add_listed(self, found: list[Partition[LogT]]) -> None:
        """Enter a log dir's listed partitions; one partition in two dirs is refused."""
        with self._lock:
            for p in found:
                other = self._partitions.get(p.tp)
                if other is not None:
                    raise LogDirError(
                        f"partition {p.topic}-{p.partition} is in two log dirs: {other.dir} "
                        f"and {p.dir}; remove one of them"
                    )
                self._partitions[p.tp] = p

    def topics(self) -> list[str]:
        """Every topic with at least one partition, sorted."""
        self._refresh()
        with self._lock:
            return sorted({t for t, _ in self._partitions})

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition numbers, sorted; UnknownTopicOrPartitionError if none."""
        self._refresh()
        with self._lock:
            parts = sorted(p for t, p in self._partitions if t == topic)
        if not parts:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} in {self.dirs_text()}")
        return parts

    def partitions_in(self, log_dir: LogDir) -> list[Partition[LogT]]:
        """The partitions listed in ``log_dir``."""
        with self._lock:
            return [p for p in self._partitions.values() if p.log_dir is log_dir]

    def partition(self, topic: str, partition: int) -> Partition[LogT]:
        """The partition's entry (directory, log dir, lock); UnknownTopicOrPartitionError."""
        return self._partition(topic, partition)

    def _partition(self, topic: str, partition: int) -> Partition[LogT]:
        with self._lock:
            p = self._partitions.get((topic, partition))
        if p is None:
            self._refresh()
            with self._lock:
                p = self._partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(
                f"unknown partition {topic}-{partition} in {self.dirs_text()}"
            )
        return p

    def loaded(self) -> list[Partition[LogT]]:
        """The partitions whose log is open."""
        with self._lock:
            return [p for p in self._partitions.values() if p.log is not None]

    def listed(self) -> list[Partition[LogT]]:
        """Every partition listed now (a copy: safe to iterate without the lock)."""
        with self._lock:
            return list(self._partitions.values())

    def get_log(self, topic: str, partition: int) -> LogT:
        """The partition's log (a writer's ``Log``, a reader's ``LogReader``), loaded on
        first use."""
        return self.load(self._partition(topic, partition))

    # -- topic ids ----------------------------------------------------------------------

    def topic_id_of(self, topic: str, partition: int) -> str | None:
        """The topic id in the partition directory's ``partition.metadata`` (None: it has
        none); read once per listed directory, so asking every trigger costs nothing."""
        return self._topic_id(self._partition(topic, partition))

    def segment_layout(self, topic: str, partition: int) -> SegmentLayout | None:
        """``log_dirs_api.LogDirsView.segment_layout``: one listing of the partition dir."""
        try:
            p = self._partition(topic, partition)
        except UnknownTopicOrPartitionError:
            return None
        return list_segment_layout(str(p.dir))

    def read_plan(self, topic: str, partition: int, start: int, end: int) -> ReadPlan | None:
        """``log_dirs_api.LogDirsView.read_plan``: None. A local read's look at its log
        (a directory's mtime, a checkpoint file) costs no round trip: nothing to plan."""
        return None

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str | None]:
        """Per topic of ``topics`` that exists, the id its partitions hold (None: none
        holds one; partitions without the file, from before ids, are left out). Partitions
        holding different ids are ``CorruptPartitionMetadataError``: one damaged or
        moved-in file must not read as a re-created topic (a query would read the topic
        again from its earliest offset). Each file is read once per listed directory."""
        wanted = set(topics)
        self._refresh()  # once, and one pass over the entries: not per topic
        with self._lock:
            entries = sorted((tp, p) for tp, p in self._partitions.items() if tp[0] in wanted)
        by_topic: dict[str, dict[str, list[int]]] = {}
        for (topic, n), p in entries:
            ids = by_topic.setdefault(topic, {})
            try:
                topic_id = self._topic_id(p)
            except UnknownTopicOrPartitionError:
                continue  # its directory vanished meanwhile: nothing of it to compare
            if topic_id is not None:
                ids.setdefault(topic_id, []).append(n)
        for topic, ids in by_topic.items():
            if len(ids) > 1:
                raise CorruptPartitionMetadataError(
                    f"{topic_ids_differ(topic, ids)}; `seglog check` names the files"
                )
        return {topic: next(iter(ids), None) for topic, ids in by_topic.items()}

    def _topic_id(self, p: Partition[LogT]) -> str | None:
        if p.topic_id_read:
            return p.topic_id
        with p.lock:
            if not p.topic_id_read:
                self._identify(p)
            return p.topic_id

    def _identify(self, p: Partition[LogT]) -> None:
        """Read ``p``'s topic id and take the inode of the directory it came from, so the
        entry names one directory: the one its id, and its log once loaded, were read
        from (called under ``p.lock``). UnknownTopicOrPartitionError if it vanished."""
        while True:
            before = dir_stat(p)
            topic_id = read_topic_id(p.dir)
            if inode_of(p) == before.st_ino:  # not replaced while it was read
                break
        p.inode, p.topic_id, p.topic_id_read = before.st_ino, topic_id, True
        p.id_confirmed_mtime_ns = before.st_mtime_ns

    # -- topic configs ------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        """The default topic config plus the topic's persisted overrides."""
        return self.config_of(self._partition(topic, self.partitions(topic)[0]))

    def topic_overrides(self, name: str) -> dict[str, str]:
        """The config overrides persisted for ``name`` (its lowest partition's file, the
        one ``check`` holds the others to); ``{}`` when it has none."""
        return read_topic_config(self._partition(name, self.partitions(name)[0]).dir) or {}

    def forget_topic_config(self, topic: str) -> None:
        """Read the topic's config file again on next use (after it was rewritten)."""
        with self._lock:
            self._topic_configs.pop(topic, None)

    def config_of(self, p: Partition[LogT]) -> LogConfig:
        """``p``'s topic config, read from its directory once per topic id: a config
        cached under another id than ``p``'s is the deleted topic's, read again."""
        topic_id = self._topic_id(p)
        with self._lock:
            cached = self._topic_configs.get(p.topic)
        if cached is not None and cached[0] == topic_id:
            return cached[1]
        config = load_topic_config(p.dir, self.default_topic_config)
        with self._lock:
            self._topic_configs[p.topic] = (topic_id, config)
        return config

    # -- the published offsets' rules ---------------------------------------------------

    def _clamped_high_watermarks(self, listed: list[tuple[Partition[LogT], int]]) -> list[int]:
        """Checkpointed high watermarks, each clamped to its partition's log end with a
        warning; a log end is read only when its value changed since last verified."""

        def log_end(i: int) -> int:
            p = listed[i][0]
            log = p.log
            return log.log_end_offset if log is not None else self._probe_log_end(p)

        hws = [hw for _, hw in listed]
        ends = HW_CHECK.clamp_all([(p.log_dir.key, p.tp) for p, _ in listed], hws, log_end)
        out = []
        beyond: dict[TopicPartition, tuple[Path, int, int]] = {}
        for (p, hw), end in zip(listed, ends, strict=True):
            if end is not None and hw > end:
                checkpoint = p.log_dir.path / HIGH_WATERMARK_CHECKPOINT
                warn_beyond_log_end(checkpoint, p.tp, hw, end)
                beyond[p.tp] = (checkpoint, hw, end)
                hw = end
            out.append(hw)
        self._beyond_log_end = beyond
        return out

    def high_watermarks_beyond_log_end(self) -> dict[TopicPartition, tuple[Path, int, int]]:
        """The partitions the last ``high_watermarks()`` clamped: ``(checkpoint file,
        published high watermark, log end offset)``. Published records are missing there
        (a truncated segment) or the checkpoint value is damaged; the two look the same, so
        a caller that must not lose data silently (a source with failOnDataLoss) reports
        it rather than reading short."""
        return dict(self._beyond_log_end)

    def _stored_start_offset(self, p: Partition[LogT]) -> int:
        first = first_segment_base(p.dir)
        stored = p.log_dir.log_start_offsets.get(p.tp, 0)
        return self._checked_start_offset(p, stored, first) if stored > first else first

    def _checked_start_offset(self, p: Partition[LogT], stored: int, first: int) -> int:
        """A checkpointed log start offset above the first segment's base, or that base
        when it is beyond the log end (warned, as when a log is loaded)."""
        log = p.log
        end = log.log_end_offset if log is not None else probe_log_end_offset(p.dir)
        if stored <= end:
            return stored
        warn_start_beyond_log_end(p, stored, end, first)
        return first

    def dirs_text(self) -> str:
        """The log dirs, for messages."""
        return ", ".join(str(d.path) for d in self.log_dirs) or "no log dir"


def inode_of(p: Partition[LogT]) -> int:
    """``p``'s directory's inode now; UnknownTopicOrPartitionError if it is gone."""
    return dir_stat(p).st_ino


def dir_stat(p: Partition[LogT]) -> os.stat_result:
    """``p``'s directory's stat now; UnknownTopicOrPartitionError if it is gone."""
    try:
        return LOCAL.stat(p.dir)
    except FileNotFoundError:
        raise UnknownTopicOrPartitionError(
            f"partition directory {p.dir} no longer exists"
        ) from None


def warn_start_beyond_log_end(p: Partition[LogT], stored: int, end: int, first: int) -> None:
    # A start offset past the end would hide every record, and retention would then
    # delete them: damage, so the first segment's base instead.
    logger.warning(
        "%s says log start offset %d for %s-%d, beyond its log end offset "
        "%d: using its first segment's base offset %d",
        p.log_dir.path / LOG_START_OFFSET_CHECKPOINT,
        stored,
        p.topic,
        p.partition,
        end,
        first,
    )


def list_segment_layout(path: str) -> SegmentLayout | None:
    """The segments of the partition dir ``path`` (``SegmentLayout``), from its names;
    None if it is gone. Sizes are stat'ed when asked (``SegmentSizes``)."""
    try:
        names = LOCAL.list_names(path)  # names only: a query's first trigger lists all
    except FileNotFoundError:
        return None
    # "<20 digits>.log" only: cheaper than the general parser.
    logs = sorted(
        [n for n in names if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit()]
    )
    bases = tuple([int(n[:20]) for n in logs])
    return bases, SegmentSizes(path, bases)


class SegmentSizes(Sequence[int]):
    """The ``.log`` sizes of the segments ``bases`` of the partition dir ``path``, each
    stat'ed when first asked (0 for one deleted since it was listed).

    A byte bound over 1,000 partitions needs the sizes of the few segments it may admit,
    not of all 11,000: stat'ing every one was most of a new query's first trigger. Equal
    to any sequence of the same sizes (``== (300, 200)``)."""

    __slots__ = ("_bases", "_known", "_last", "_prefix")

    def __init__(
        self, path: str, bases: tuple[int, ...], sealed: list[int | None] | None = None
    ) -> None:
        self._prefix = path + os.sep  # a string, not a Path: built per stat
        self._bases = bases
        # Every segment but the last cannot grow: their sizes may be shared by ``renewed``
        # copies. The last one's is this object's own.
        self._known: list[int | None] = (
            sealed if sealed is not None else [None] * max(len(bases) - 1, 0)
        )
        self._last: int | None = None

    def renewed(self) -> SegmentSizes:
        """The same segments, the last one's size asked again (the active segment grows);
        the sealed ones' sizes learnt so far are shared, not stat'ed again."""
        return SegmentSizes(self._prefix[:-1], self._bases, self._known)

    def __len__(self) -> int:
        return len(self._bases)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...

    def __getitem__(self, i: int | slice) -> int | tuple[int, ...]:
        n = len(self._bases)
        if isinstance(i, slice):
            return tuple([self._size(j) for j in range(*i.indices(n))])
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"segment {i} of {n}")
        return self._size(i)

    def _size(self, i: int) -> int:
        sealed = i < len(self._known)
        size = self._known[i] if sealed else self._last
        if size is None:
            try:
                size = LOCAL.size(f"{self._prefix}{self._bases[i]:020d}{LOG_SUFFIX}")
            except FileNotFoundError:  # deleted by retention since it was listed
                size = 0
            if sealed:
                self._known[i] = size
            else:
                self._last = size
        return size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"SegmentSizes({tuple(self)!r})"
