"""``BucketCommitter``: what the bucket helpers do to a bucket log dir, handed to them by
``bucket_manager.BucketLogManager`` instead of the manager itself.

The appends (``bucket_append``, ``bucket_pipeline``), the maintenance
(``bucket_maintenance``), ``bucket_export`` and ``bucket_import`` need the committed state
(refreshed when a lookup misses), the topic configs of that state, the writability check
and one call that commits a change: this object owns those (the ``BucketLogs``: the
catalog and the topic logs; the refresh depth of ``one_refresh``, the parsed configs,
the read-only and closed flags), with public methods only. The manager keeps what is
its own (the ``BucketLog``s it opened, the append pipeline, the maintenance). It never
calls its owner: a fold of new commits only replaces the state it holds, and the logs
take it from there themselves, each through the ``PartitionSource`` it is handed (a part
of this module, not a method of the manager), whenever they answer from their state.

It imports nothing of the manager: the helpers depend on this module, the manager on
them, never the other way round (``tests/test_import_cycles.py``).

Thread-safety: the public methods are thread-safe (``CommitLog`` serializes the commits of
this process; ``_lock`` guards the parsed configs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from ..config.config import LogConfig, ManagerConfig
from ..errors import LogDirError, ReadOnlyError, UnknownTopicOrPartitionError
from ..storage.storage import Storage
from ..util.clock import Clock
from .bucket_commit_log import Change
from .bucket_logs import BucketLogs
from .bucket_segment import INLINE_INDEX_BYTES
from .bucket_state import BucketState, PartitionState, TopicSpec


class _RefreshDepth(threading.local):
    """How many ``one_refresh`` blocks the current thread is in."""

    def __init__(self) -> None:
        self.depth = 0


class BucketCommitter:
    """The committed state of one bucket log dir and the one way to change it; see the
    module docstring."""

    def __init__(
        self,
        storage: Storage,
        commits: BucketLogs,
        *,
        clock: Clock,
        config: ManagerConfig,
        default_topic_config: LogConfig,
        read_only: bool,
    ) -> None:
        self.storage = storage
        self.commits = commits
        self.clock = clock
        self.config = config
        self.default_topic_config = default_topic_config
        self.read_only = read_only
        self.closed = False
        self.inline_index_bytes: int = INLINE_INDEX_BYTES
        """New segments whose indexes together are at most this size carry them in
        their commit entry (``bucket_segment.INLINE_INDEX_BYTES``); 0: always index
        objects."""
        self._lock = threading.Lock()  # guards _configs
        self._configs: dict[str, tuple[TopicSpec, LogConfig]] = {}
        self._held = _RefreshDepth()

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def state(self) -> BucketState:
        return self.commits.state

    def check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"log dir {self.uri} is open read-only")
        if self.closed:
            raise LogDirError(f"the manager of {self.uri} is closed")

    # -- the state ---------------------------------------------------------------------

    def refresh(self, topics: Iterable[str] | None = None) -> bool:
        """Fold the commits other processes made since (``BucketLogs.refresh``: the
        catalog, then every topic log at once; ``topics``: only their logs); True if
        there were any. Inside ``one_refresh`` of this thread, no request: the state that
        block refreshed."""
        if self._held.depth:
            return False
        return self.commits.refresh(topics)

    @contextmanager
    def one_refresh(self, refresh: bool = True) -> Iterator[None]:
        """Refresh once (unless ``refresh`` is False), then answer every lookup of the
        block that would refresh from that state."""
        if refresh:
            self.refresh()
        self._held.depth += 1
        try:
            yield
        finally:
            self._held.depth -= 1

    def reload(self) -> None:
        """Ask the bucket for newer commits (one LIST) even inside ``one_refresh``."""
        self.commits.refresh()

    def commit(
        self,
        operation: str,
        build: Callable[[BucketState], Change | None],
        *,
        snapshot: bool = True,
    ) -> BucketState | None:
        """One commit of ``bucket_commit_log`` (``CommitLog.commit``: ``build`` may run
        again on a newer state after a lost race)."""
        return self.commits.commit(operation, build, snapshot=snapshot)

    # -- lookups (refreshed once when they miss) ---------------------------------------

    def spec(self, topic: str) -> TopicSpec:
        """``topic``'s spec; UnknownTopicOrPartitionError naming it and the log dir."""
        spec = self.state.topics.get(topic)
        if spec is None:
            self.refresh()
            spec = self.state.topics.get(topic)
        if spec is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} in {self.uri}")
        return spec

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """The partition's committed state; UnknownTopicOrPartitionError naming it."""
        ps = self.state.partition(topic, partition)
        if ps is None:
            self.refresh()
            ps = self.state.partition(topic, partition)
        if ps is None:
            raise UnknownTopicOrPartitionError(
                f"unknown partition {topic}-{partition} in {self.uri}"
            )
        return ps

    def topics(self) -> list[str]:
        self.refresh()
        return sorted(self.state.topics)

    def topic_config(self, topic: str) -> LogConfig:
        return self.config_of(topic, self.spec(topic))

    def config_of(self, topic: str, spec: TopicSpec) -> LogConfig:
        """``topic``'s config under ``spec`` (parsed once per spec; no request)."""
        with self._lock:
            cached = self._configs.get(topic)
            if cached is not None and cached[0] == spec:
                return cached[1]
        config = LogConfig.from_properties(dict(spec.config), base=self.default_topic_config)
        with self._lock:
            self._configs[topic] = (spec, config)
        return config

    def delete_topic(self, name: str) -> None:
        """Remove ``name`` from the state: one commit for a legacy topic; for a topic in
        its own log, its tombstone, then the catalog commit (``bucket_logs``). Its
        objects are collected later."""
        self.check_writable()

        def build(state: BucketState) -> Change:
            if name not in state.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r} in {self.uri}")
            return Change(topics={name: None})

        try:
            self.commit("delete_topic", build)
        except UnknownTopicOrPartitionError:
            # A delete that died between its two commits: finish its catalog step.
            self.commits.finish_delete(name)
            raise


class PartitionSource:
    """One partition's committed state as its ``bucket_log.BucketLog`` takes it, handed
    to the log when it is opened: called as ``source(refresh)``, it returns the version
    of the committer's state, the partition's state in it (None: the partition is gone),
    the topic's config and topic id in it; ``refresh``: ask the bucket first (its
    topic's log only, one LIST; the catalog's too when the topic is no longer in it).

    A part beneath the manager, so that a log asks no method of the manager for its
    state, and the committer tells no one of a fold: the log takes the newest state
    itself, whenever it answers from it."""

    __slots__ = ("committer", "topic", "partition")

    def __init__(self, committer: BucketCommitter, topic: str, partition: int) -> None:
        self.committer = committer
        self.topic = topic
        self.partition = partition

    def __call__(
        self, refresh: bool
    ) -> tuple[int, PartitionState | None, LogConfig | None, str | None]:
        committer, topic = self.committer, self.topic
        if refresh:
            # Its topic's log only (one LIST; the catalog's for a legacy topic): a reader
            # behind on one partition asks nothing else.
            committer.refresh([topic])
            if topic not in committer.state.topics:
                # Its log ends with a tombstone: was the name re-created? The catalog
                # says (one more LIST, only now).
                committer.refresh()
        state = committer.state
        # The config of the same state: a log kept across an alter_topic_config (a
        # worker's cached reader) must not check a now-compacted topic's gaps with the
        # policy it was opened under.
        spec = state.topics.get(topic)
        if spec is None:
            return state.version, None, None, None
        return (
            state.version,
            state.partition(topic, self.partition),
            committer.config_of(topic, spec),
            spec.topic_id,
        )
