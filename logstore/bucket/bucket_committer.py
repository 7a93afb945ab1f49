"""``BucketCommitter``: what the bucket helpers do to a bucket log dir, handed to them by
``bucket_manager.BucketLogManager`` instead of the manager itself.

The appends (``bucket_append``, ``bucket_pipeline``), the maintenance
(``bucket_maintenance``), ``bucket_export`` and ``bucket_import`` need the committed state
(refreshed when a lookup misses), the topic configs of that state, the writability check
and one call that commits a change: this object owns those (the ``BucketLogs``: the
catalog and the topic logs; the refresh depth of ``one_refresh``, the parsed configs,
the read-only and closed flags), with public methods only. The manager keeps what is
its own (the ``BucketLog``s it opened, the append pipeline, the maintenance) and is
told after every fold of new commits through ``on_change``, so it can give its opened
logs the new state.

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
        on_change: Callable[[], None],
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
        self._on_change = on_change
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
        catalog, then every topic log at once; ``topics``: only their logs) and tell the
        owner (``on_change``); True if there were any. Inside ``one_refresh`` of this
        thread, no request: the state that block refreshed."""
        if self._held.depth:
            return False
        changed = self.commits.refresh(topics)
        if changed:
            self._on_change()
        return changed

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
        """Ask the bucket for newer commits (one LIST) even inside ``one_refresh``, and
        tell the owner."""
        self.commits.refresh()
        self._on_change()

    def sync_logs(self) -> None:
        """Tell the owner the state changed (no request): a maintenance pass committed
        through a commit log of its own making."""
        self._on_change()

    def commit(
        self,
        operation: str,
        build: Callable[[BucketState], Change | None],
        *,
        snapshot: bool = True,
    ) -> BucketState | None:
        """One commit of ``bucket_commit_log`` (``CommitLog.commit``: ``build`` may run
        again on a newer state after a lost race); the owner is told afterwards, whatever
        happened: a lost race may have folded other writers' commits too."""
        try:
            return self.commits.commit(operation, build, snapshot=snapshot)
        finally:
            self._on_change()

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
            if self.commits.finish_delete(name):
                self._on_change()
            raise
