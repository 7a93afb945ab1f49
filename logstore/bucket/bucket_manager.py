"""``BucketLogManager``: a log dir in an object-store bucket (``s3://bucket/prefix``,
``gs://``, ``az://``, ``memory://name``), with the public API of ``LogManager``.

``LogManager(["s3://bucket/logs"])`` returns one (``LogManager.__new__``), and
``LogManager(uri, read_only=True)`` returns one that refuses writes. Every process may
write: there is no lock. Each operation is one commit of ``bucket_commit_log`` (the
protocol, its retries and crash steps): ``create_topic``, ``alter_topic_config``,
``add_partitions``, ``delete_topic``, ``delete_records`` and ``append``. An append is
checked as ``Log.append`` checks it (``log_validator``: CRC, sizes, timestamps), given
offsets from the committed log end, cut into segments of at most ``segment.bytes``,
uploaded as ``.log``/``.index``/``.timeindex`` objects under unique names, and committed;
a lost race re-stamps the offsets from the new end and uploads again (the first upload
is deleted at once: no commit references it). Nothing is deleted when it leaves the
state: removed segments, deleted topics and dead writers' uploads are collected later
(``file.delete.delay.ms``) by maintenance (``run_maintenance``, ``delete_old_segments``,
``merge_segments``, ``clean``, ``collect``: ``bucket_maintenance``, loaded on first use).
``export`` writes a Kafka log dir, ``check_objects`` checks the state against the objects.
An open refuses a log dir nested in another's prefix or holding one
(``bucket_ownership.check_nesting``), and collection deletes only the log dir's own
objects (``bucket_ownership.owned_objects``): a bucket may be shared.

Reads go through ``get_log(topic, partition)``, a ``bucket_log.BucketLog`` (the shared
read path). ``high_watermarks()``, ``log_start_offsets()`` and ``topics()`` refresh the
state first (one LIST); other lookups refresh only when they miss.

The state, its lookups and the one way to commit live in a ``bucket_committer.BucketCommitter``
(``committer``): the helpers above are handed it, never the manager. The manager keeps
the logs it opened (given the new state whenever the committer folds commits), the append
pipeline and the maintenance.

Over 500 lines: ``LogManager``'s public API for a bucket, one short method each, most
delegating to the helpers above; splitting it would split the API surface itself.

Thread-safety: the public methods are thread-safe (``_lock`` guards the logs opened;
the ``CommitLog`` serializes commits of this process).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from ..config.config import ConfigValues, LogConfig, ManagerConfig
from ..config.topics import (
    altered_overrides,
    parse_overrides,
    validate_topic_name,
    warn_on_collision,
)
from ..errors import (
    ConfigError,
    LogDirError,
    OffsetOutOfRangeError,
    SeglogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from ..log.log import AppendInfo
from ..log.partition_metadata import new_topic_id
from ..log_dirs_api import BeyondLogEnd, ReadPlan, SegmentLayout
from ..records.record_format import TopicPartition
from ..storage.object_storage import ObjectStorage, StorageOptions, is_object_uri
from ..storage.storage import Storage
from ..util.clock import SYSTEM_CLOCK, Clock
from .bucket_commit_log import Change, CommitLog
from .bucket_committer import BucketCommitter, PartitionSource
from .bucket_log import BucketLog
from .bucket_logs import BucketLogs
from .bucket_ownership import check_nesting
from .bucket_read_plan import plan_read
from .bucket_state import (
    NO_VERSION,
    BucketState,
    PartitionChange,
    TopicSpec,
    tp_key,
)
from .bucket_upgrade import UpgradeReport, upgrade_topic_logs

if TYPE_CHECKING:
    from ..log_dirs_api import TaskRun
    from .bucket_check import BucketFinding, PartitionReport
    from .bucket_collect import CollectStats
    from .bucket_compact import CompactStats
    from .bucket_export import ExportStats
    from .bucket_maintenance import BucketMaintenance
    from .bucket_pipeline import AppendPipeline

logger = logging.getLogger(__name__)


def bucket_uri(log_dirs: Iterable[object] | object) -> str | None:
    """The bucket URI when ``log_dirs`` names one (a URI, or a list of exactly one URI);
    None for local paths. A mix of URIs and paths, or several URIs, is refused."""
    dirs = (
        [log_dirs]
        if isinstance(log_dirs, str) or not isinstance(log_dirs, Iterable)
        else list(log_dirs)
    )
    uris = [d for d in dirs if isinstance(d, str) and is_object_uri(d)]
    if not uris:
        return None
    if len(uris) != len(dirs):
        raise LogDirError(
            f"log dirs {[str(d) for d in dirs]} mix object-store URIs and "
            f"local paths; a manager's log dirs are all local or one bucket URI"
        )
    if len(uris) > 1:
        raise LogDirError(
            f"log dirs {uris}: a manager takes one bucket URI (a bucket has no "
            f"per-disk placement to spread partitions over)"
        )
    return uris[0]


def _open_commit_log(
    storage: Storage, clock: Clock, given: CommitLog | None, read_ahead: bool = False
) -> CommitLog:
    """The log dir's commit log (``given``, or one loaded now; ``read_ahead``: a
    reader's, ``CommitLog``'s refresh), after the nesting check
    (a few LISTs, once per open, never per append: no log dir inside another). The two
    are independent reads, made at once: an open costs the longer of them, not both;
    the nesting check's refusal is raised first (it names the cause)."""
    if not isinstance(storage, ObjectStorage):
        return given or CommitLog(storage, clock=clock, read_ahead=read_ahead)
    with ThreadPoolExecutor(1, thread_name_prefix="seglog-open") as pool:
        nesting = pool.submit(check_nesting, storage)
        try:
            commits = given or CommitLog(storage, clock=clock, read_ahead=read_ahead)
        except BaseException:
            nesting.result()
            raise
        nesting.result()
    return commits


class BucketLogManager:
    """Every partition of one bucket log dir; see the module docstring."""

    max_in_flight_appends: int = 5
    """``append_async``: the most appends uploading at once (Kafka's producer
    ``max.in.flight.requests.per.connection``, whose default this is). Appends beyond it
    wait, checked and stamped, for an upload thread (the caller does not: it blocks only
    on ``max_in_flight_bytes``, as Kafka's producer blocks only on ``buffer.memory``).
    Set it on the manager before its first ``append_async``."""

    max_in_flight_bytes: int = 32 << 20
    """``append_async``: the most bytes of appends between their call and their commit
    (Kafka's producer ``buffer.memory``, whose default this is); a caller beyond it blocks.
    A single larger append is still taken, alone.

    ``append_async`` lingers as Kafka's producer does: the manager config's ``linger.ms``
    (default 5, the local manager's key) is how long an append whose upload ended may
    wait for the uploads still running behind it, so that one commit takes them all. It
    waits only while such an upload runs: a lone append, or the last of a burst, is
    committed at once; 0 commits every finished upload at once."""

    def __init__(
        self,
        uri: str | Storage,
        *,
        read_only: bool = False,
        config: ManagerConfig | ConfigValues | None = None,
        default_topic_config: LogConfig | ConfigValues | None = None,
        clock: Clock = SYSTEM_CLOCK,
        storage_options: Mapping[str, object] | StorageOptions | None = None,
        commit_log: CommitLog | None = None,
        orphan_grace_ms: int | None = None,
        topic_logs: bool = True,
    ) -> None:
        """``topic_logs=False``: topics created by this manager go to the catalog log, as
        before per-topic commit logs, so that seglog versions before them can still read
        the bucket during a rolling upgrade (docs/upgrading.md)."""
        self.storage: Storage = ObjectStorage(uri, storage_options) if isinstance(uri, str) else uri
        self.clock = clock
        self.config = ManagerConfig.of(config)
        self.default_topic_config = LogConfig.of(default_topic_config)
        self.commits = BucketLogs(
            self.storage,
            clock=clock,
            catalog=_open_commit_log(self.storage, clock, commit_log, read_ahead=read_only),
            topic_logs=topic_logs,
        )
        self.committer = BucketCommitter(
            self.storage,
            self.commits,
            clock=clock,
            config=self.config,
            default_topic_config=self.default_topic_config,
            read_only=read_only,
        )
        self._lock = threading.RLock()  # guards _logs
        self._logs: dict[TopicPartition, BucketLog] = {}
        self._orphan_grace_ms = orphan_grace_ms
        self._maintenance: BucketMaintenance | None = None
        self._pipeline: AppendPipeline | None = None  # guarded by _lock; on first use

    is_remote = True
    """An object-store bucket (``log_dirs_api.LogDirsView.is_remote``)."""

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def state(self) -> BucketState:
        return self.commits.state

    @property
    def read_only(self) -> bool:
        return self.committer.read_only

    @property
    def inline_index_bytes(self) -> int:
        """New segments whose indexes together are at most this size carry them in their
        commit entry (``bucket_segment.INLINE_INDEX_BYTES``); 0: always index objects."""
        return self.committer.inline_index_bytes

    @inline_index_bytes.setter
    def inline_index_bytes(self, value: int) -> None:
        self.committer.inline_index_bytes = value

    @property
    def location(self) -> str:
        """The bucket URI (for messages)."""
        return self.uri

    @property
    def exists(self) -> bool:
        """Whether the log dir has a commit (an empty or mistyped prefix has none)."""
        return self.state.version != NO_VERSION

    def refresh(self, topics: Iterable[str] | None = None) -> bool:
        """Fold the commits other processes made since (one LIST), and give the logs
        opened so far the new state (as a reader of log dirs pushes a new high
        watermark into its logs); True if there were any. ``topics``: only the logs of
        those topics (``BucketLogs.refresh``: the catalog too when one is not known).
        Inside ``one_refresh`` of this thread, no request: the state that block
        refreshed."""
        changed = self.committer.refresh(topics)
        if changed:
            self.sync_logs()
        return changed

    @contextmanager
    def one_refresh(self, refresh: bool = True) -> Iterator[None]:
        """Refresh once (unless ``refresh`` is False), then answer every call of the
        block that would refresh (``topics``, ``high_watermarks``, ...) from that state:
        a source's trigger asks several questions of one state, with one LIST."""
        with self.committer.one_refresh(refresh):
            yield

    def sync_logs(self) -> None:
        """Give the logs opened so far the state the commit log holds (no request), and
        close those whose partition is gone. (Each log also takes the newest state
        itself whenever it answers from it: this only lets go of the gone ones.)"""
        with self._lock:
            logs = list(self._logs.items())
        for tp, log in logs:
            self._follows(tp, log)

    def _follows(self, tp: TopicPartition, log: BucketLog) -> bool:
        """Give ``log`` the newest state; False (and the log closed and forgotten) when
        its partition is gone: deleted by another process, or re-created
        (TopicIdChangedError). The next get_log gives the new topic's log; a holder of
        this one is told by its own next call."""
        try:
            log.sync()
            return True
        except UnknownTopicOrPartitionError:
            with self._lock:
                if self._logs.get(tp) is log:
                    self._logs.pop(tp).close()
            return False

    def check_writable(self) -> None:
        self.committer.check_writable()

    # -- topics ----------------------------------------------------------------------

    def topics(self) -> list[str]:
        return self.committer.topics()

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.committer.spec(topic).partitions))

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self.committer.spec(name).config)

    def topic_config(self, topic: str) -> LogConfig:
        return self.committer.topic_config(topic)

    def create_topic(
        self, name: str, partitions: int = 1, config: ConfigValues | None = None
    ) -> None:
        """Create ``name``; raises InvalidTopicError, TopicExistsError, ConfigError."""
        self.check_writable()
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"partitions must be an integer of at least 1, got {partitions!r}")
        overrides = parse_overrides(config, base=self.default_topic_config)

        def build(state: BucketState) -> Change:
            if name in state.topics:
                raise TopicExistsError(f"topic {name!r} already exists in {self.uri}")
            warn_on_collision(name, state.topics)
            return Change(topics={name: TopicSpec(partitions, overrides, new_topic_id())})

        self.committer.commit("create_topic", build)
        logger.info("created topic %s with %d partition(s) in %s", name, partitions, self.uri)

    def alter_topic_config(
        self, name: str, set_configs: ConfigValues | None = None, delete: Iterable[str] = ()
    ) -> dict[str, str]:
        """Set and delete config overrides of ``name`` (one commit); returns the new ones."""
        self.check_writable()
        delete = list(delete)
        result: dict[str, str] = {}

        def build(state: BucketState) -> Change:
            spec = state.topics.get(name)
            if spec is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.uri}")
            new = altered_overrides(
                spec.config, set_configs, delete, base=self.default_topic_config
            )
            result.clear()
            result.update(new)
            return Change(topics={name: replace(spec, config=new)})

        self.committer.commit("alter_config", build)
        return result

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (never shrinks)."""
        self.check_writable()

        def build(state: BucketState) -> Change:
            spec = state.topics.get(name)
            if spec is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.uri}")
            if isinstance(total, bool) or not isinstance(total, int) or total <= spec.partitions:
                raise ConfigError(
                    f"topic {name!r} has {spec.partitions} partitions; the new "
                    f"total must be higher, got {total!r}"
                )
            return Change(topics={name: replace(spec, partitions=total)})

        self.committer.commit("add_partitions", build)

    def delete_topic(self, name: str) -> None:
        """Remove ``name`` from the state (one commit); its objects are collected later."""
        self.committer.delete_topic(name)
        with self._lock:
            for tp in [tp for tp in self._logs if tp[0] == name]:
                self._logs.pop(tp).close()
        logger.info("deleted topic %s from %s", name, self.uri)

    def upgrade_topic_logs(
        self,
        topics: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
        before_move: Callable[[list[str]], object] | None = None,
    ) -> UpgradeReport:
        """Move ``topics`` (None: every one) still held in the catalog log (legacy
        topics, written before per-topic commit logs) into their own commit logs, without
        copying data (``bucket_upgrade``); topics in their own log already are left as
        they are. ``dry_run``: only say what would move. Once a topic moved, seglog
        versions before per-topic logs refuse the bucket (docs/upgrading.md):
        ``before_move`` is called with the topics to move before anything is written."""
        if not dry_run:
            self.check_writable()
            if not self.commits.topic_logs:
                raise ConfigError(
                    f"{self.uri}: this manager was opened with topic_logs=False, for a "
                    f"bucket that seglog versions before per-topic commit logs must still "
                    f"read; moving topics into their own logs would make them refuse it "
                    f"(open it without topic_logs=False to upgrade)"
                )
        report = upgrade_topic_logs(self.commits, topics, dry_run=dry_run, before_move=before_move)
        if report.moved and not dry_run:
            self.sync_logs()
        return report

    # -- logs ------------------------------------------------------------------------

    def topic_id_of(self, topic: str, partition: int) -> str | None:
        """The topic's id in the state (None: a topic created before topic ids)."""
        self.committer.partition_state(topic, partition)
        return self.committer.spec(topic).topic_id

    def segment_layout(self, topic: str, partition: int) -> SegmentLayout | None:
        """``log_dirs_api.LogDirsView.segment_layout``: from the state last refreshed (no
        request)."""
        ps = self.state.partition(topic, partition)
        if ps is None:
            return None
        return (tuple(s.base_offset for s in ps.segments), tuple(s.size for s in ps.segments))

    def read_plan(self, topic: str, partition: int, start: int, end: int) -> ReadPlan | None:
        """``log_dirs_api.LogDirsView.read_plan``: from the state last refreshed (no
        request; ``bucket_read_plan.plan_read``)."""
        state = self.state
        spec = state.topics.get(topic)
        ps = state.partition(topic, partition)
        if spec is None or ps is None:
            return None
        return plan_read(ps, self.committer.config_of(topic, spec), state.version,
                         spec.topic_id, start, end)

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str | None]:
        """Per topic of ``topics`` in the state, its id (no request)."""
        state = self.state
        return {t: state.topics[t].topic_id for t in topics if t in state.topics}

    def reload_partition(self, topic: str, partition: int) -> None:
        """Ask the bucket for newer commits (one LIST) and give the opened logs the new
        state: what a task does when its plan names another topic id than its log."""
        self.committer.reload()
        self.sync_logs()

    def get_log(self, topic: str, partition: int) -> BucketLog:
        """The partition's reader (the shared read path over its committed segments),
        handed its state source (``bucket_committer.PartitionSource``); a log opened
        before its topic was re-created is replaced (``fail.on.data.loss``: a holder of
        the old one is told by its own next call)."""
        self.committer.partition_state(topic, partition)
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is not None and self._follows((topic, partition), log):
                return log
            log = self._logs[(topic, partition)] = BucketLog(
                self.storage,
                topic,
                partition,
                self.topic_config(topic),
                PartitionSource(self.committer, topic, partition),
                fail_on_data_loss=self.config.fail_on_data_loss,
            )
            return log

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        publish: bool = True,
    ) -> AppendInfo:
        """Validate, upload and commit record batches (one commit); returns their
        ``AppendInfo``. ``publish`` is accepted for the local manager's signature: a
        bucket commit is visible when it returns."""
        return self.append_many({(topic, partition): records})[(topic, partition)]

    def append_many(
        self,
        records: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        publish: bool = True,
    ) -> dict[TopicPartition, AppendInfo]:
        """Append to several partitions in ONE commit (``bucket_append``: every ``.log``
        uploaded at once, then one conditional PUT); each partition's ``AppendInfo``.
        All or nothing: a bad batch in any partition fails the call before any upload.
        ``publish`` is accepted for the local manager's signature: a bucket commit is
        visible at once."""
        from .bucket_append import append_many

        return append_many(self.committer, records)

    def append_async(
        self, topic: str, partition: int, records: bytes | bytearray | memoryview
    ) -> Future[AppendInfo]:
        """Append without waiting for the commit (``bucket_pipeline``): the batches are
        checked at once (a bad batch, an unknown partition: a failed future, nothing
        uploaded), given offsets after the appends still in flight, uploaded
        concurrently and committed in call order, many appends per commit. The future's
        ``AppendInfo`` comes once its commit landed; a failure also fails every later
        append of the partition in flight (``AppendAbortedError``), not the other
        partitions'. The future cannot be cancelled (``cancel()`` is False: the append is
        committed regardless). Blocks while ``max_in_flight_bytes`` are between their
        call and their commit.

        >>> futures = [mgr.append_async("events", 0, batch) for batch in batches]
        >>> mgr.flush()
        >>> last = futures[-1].result().last_offset
        """
        with self._lock:
            pipeline = self._pipeline
            if pipeline is None:
                try:
                    self.check_writable()
                except SeglogError as e:
                    failed: Future[AppendInfo] = Future()
                    failed.set_exception(e)
                    return failed
                from .bucket_pipeline import AppendPipeline

                pipeline = self._pipeline = AppendPipeline(
                    self.committer,
                    self.max_in_flight_appends,
                    self.max_in_flight_bytes,
                    self.config.linger_ms,
                )
        return pipeline.submit(topic, partition, records)

    def flush(self) -> None:
        """Wait until every ``append_async`` made before is committed or failed."""
        with self._lock:
            pipeline = self._pipeline
        if pipeline is not None:
            pipeline.flush()

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: raise the log start offset to ``offset`` (one commit);
        returns the new log start offset."""
        self.check_writable()
        key = tp_key(topic, partition)

        def build(state: BucketState) -> Change | None:
            ps = state.partitions.get(key)
            if ps is None:
                raise UnknownTopicOrPartitionError(f"unknown partition {key} in {self.uri}")
            if not 0 <= offset <= ps.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {key} in {self.uri} below offset {offset}: "
                    f"the log holds [{ps.log_start_offset}, {ps.high_watermark})"
                )
            if offset <= ps.log_start_offset:
                return None
            return Change(partitions={key: PartitionChange(log_start_offset=offset)})

        self.committer.commit("delete_records", build)
        return self.committer.partition_state(topic, partition).log_start_offset

    def truncate_unpublished(self, topic: str, partition: int, offset: int) -> bool:
        """False: nothing to take back, every append was a commit, visible at once (the
        local manager's call, for a caller that undoes its ``publish=False`` appends)."""
        return False

    def checkpoint_high_watermarks(self) -> None:
        """Nothing to do: on a bucket every commit is its own high watermark (kept for
        callers of the local manager's API)."""

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Per partition, the committed log end (refreshed: one LIST)."""
        self.refresh()
        return {_parse_tp(k): p.high_watermark for k, p in self.state.partitions.items()}

    def high_watermarks_beyond_log_end(self) -> BeyondLogEnd:
        """Always empty (the reader-of-log-dirs interface): a bucket's high watermark IS
        its committed log end, so none can be published beyond it."""
        return {}

    def log_start_offsets(self) -> dict[TopicPartition, int]:
        self.refresh()
        return {_parse_tp(k): p.log_start_offset for k, p in self.state.partitions.items()}

    # -- maintenance (bucket_maintenance) ---------------------------------------------

    @property
    def maintenance(self) -> BucketMaintenance:
        self.check_writable()
        with self._lock:
            if self._maintenance is None:
                from .bucket_maintenance import BucketMaintenance

                self._maintenance = BucketMaintenance(self.committer, self._orphan_grace_ms)
            return self._maintenance

    def run_maintenance(
        self, *, force: bool = False, before_task: Callable[[str, int, int], None] | None = None
    ) -> list[TaskRun]:
        """Retention, merging, compaction and collection, each once (a bucket keeps no
        schedule between processes: every call runs every task; ``force`` is accepted
        for the local manager's signature)."""
        return self.maintenance.run(before_task)

    def next_maintenance_ms(self) -> int:
        """``log.retention.check.interval.ms``: a bucket keeps no schedule between
        processes, so every pass runs every task."""
        return self.config.log_retention_check_interval_ms

    def files_awaiting_deletion(self, runs: list[TaskRun]) -> int:
        """The removed objects the collection among ``runs`` kept for readers that may
        still hold them (``file.delete.delay.ms``)."""
        from .bucket_collect import CollectStats
        from .bucket_maintenance import COLLECT_TASK

        return sum(
            r.result.waiting
            for r in runs
            if r.name == COLLECT_TASK and isinstance(r.result, CollectStats)
        )

    def delete_old_segments(self) -> int:
        """Retention over every partition (one commit); the segments removed."""
        return self.maintenance.delete_old_segments()

    def merge_segments(self) -> int:
        """Merge small adjacent segments into ``segment.bytes``-sized ones."""
        return self.maintenance.merge_segments()

    def clean(self, now_ms: int | None = None) -> CompactStats | None:
        """One compaction pass over the dirtiest compacted partition, or None."""
        return self.maintenance.clean()

    def collect(self) -> CollectStats:
        """Delete objects no reader can need any more (``bucket_collect``)."""
        return self.maintenance.collect()

    def check_objects(
        self, progress: Callable[[int, int], object] | None = None
    ) -> tuple[list[BucketFinding], list[PartitionReport]]:
        """The committed state against the objects (``bucket_check``); read-only.
        ``progress(n, total)``: n more bytes of ``total`` read."""
        from .bucket_check import check_bucket

        self.refresh()
        state = self.state
        logs = [(self.commits.catalog.layout, self.commits.catalog.state)]
        logs += [(log.layout, log.state) for log in self.commits.logs().values()]
        return check_bucket(
            self.storage, state, {t: self.topic_config(t) for t in state.topics}, progress, logs
        )

    def export(
        self, target: str | os.PathLike[str], progress: Callable[[int, int], object] | None = None
    ) -> ExportStats:
        """Write the committed state as a plain Kafka log dir (``bucket_export``).
        ``progress(n, total)``: n more bytes of ``total`` written."""
        from .bucket_export import export_log_dir

        return export_log_dir(self.committer, target, progress)

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Flush the appends in flight (``append_async``) and the snapshots being
        written, then close. Idempotent."""
        with self._lock:
            # Closed first: an append called while the pipeline drains is refused, not
            # taken by a pipeline nobody would close.
            self.committer.closed = True
            pipeline = self._pipeline
        if pipeline is not None:
            pipeline.close()
        # Snapshots are written off the commits' path; a closed manager has written its.
        self.commits.flush_snapshots()
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()

    def __enter__(self) -> BucketLogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only " if self.read_only else ""
        return f"BucketLogManager({mode}{self.uri}, version {self.state.version})"


def _parse_tp(key: str) -> TopicPartition:
    topic, _, n = key.rpartition("-")
    return (topic, int(n))
