"""Maintenance of a bucket log dir, run by any process that can write it (there is no
lock: every step is an optimistic commit, and two maintainers at once only waste work).

``BucketLogManager`` exposes it under the local manager's names: ``run_maintenance``,
``delete_old_segments`` (retention), ``clean`` (compaction), plus ``merge_segments`` and
``collect``. A pass runs, in this order (the task names of ``run_maintenance``):

1. ``log-retention``: ``bucket_retention``'s plan for every partition, one commit
   (``"operation": "retention"``), re-planned on the new state after a lost race.
2. ``segment-merge``: ``bucket_merge`` per partition (one commit each).
3. ``log-cleaner``: ``bucket_compact`` over the dirtiest compacted partition.
4. ``object-collect``: ``bucket_collect`` (removed objects after
   ``file.delete.delay.ms``, orphans after the orphan grace, old commits and snapshots).

Named crash steps (``SEGLOG_CRASH_AT``, as the commit's): ``merge-after-upload``,
``merge-after-commit``, ``retention-after-commit``, ``compact-after-upload``,
``compact-after-commit``, ``collect-after-data``; and the commit's own ``after-upload``,
``after-commit``, ``after-snapshot``. A maintainer killed at any of them leaves the old
or the new version whole; its uploads are orphans the collector deletes after the grace.

Thread-safety: one pass at a time per manager (``_lock``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config.config import LogConfig
from ..log_dirs_api import TaskRun
from ..manager.scheduler import RETENTION
from ..util.crash_points import crash_point
from .bucket_collect import CollectStats, collect, orphan_grace_ms
from .bucket_commit_log import Attempt, Change
from .bucket_committer import BucketCommitter
from .bucket_merge import merge_partition
from .bucket_retention import plan_retention
from .bucket_state import BucketState, PartitionChange, TopicSpec
from .bucket_view import topic_groups

if TYPE_CHECKING:
    from .bucket_compact import BucketCompactor, CompactStats

logger = logging.getLogger(__name__)

MERGE_TASK = "segment-merge"
CLEANER_TASK = "log-cleaner"
COLLECT_TASK = "object-collect"
TASKS = (RETENTION, MERGE_TASK, CLEANER_TASK, COLLECT_TASK)
MAINTENANCE_CRASH_STEPS = ("merge-after-upload", "merge-after-commit", "retention-after-commit",
                           "compact-after-upload", "compact-after-commit", "collect-after-data")


class BucketMaintenance:
    """Retention, merging, compaction and collection of one bucket log dir; see the
    module docstring. ``orphan_grace_ms``: None for ``max(file.delete.delay.ms, 1 h)``."""

    def __init__(self, committer: BucketCommitter, orphan_grace_ms: int | None = None) -> None:
        self.committer = committer
        self.commits = committer.commits
        self.clock = committer.clock
        self._orphan_grace = orphan_grace_ms
        self._configs: dict[str, tuple[TopicSpec, LogConfig]] = {}
        self._compactor: BucketCompactor | None = None
        self._lock = threading.Lock()  # one pass at a time; guards _configs, _compactor

    # -- configs --------------------------------------------------------------------------

    def _config(self, topic: str, spec: TopicSpec | None) -> LogConfig:
        if spec is None:
            return self.committer.default_topic_config
        cached = self._configs.get(topic)
        if cached is None or cached[0] != spec:
            cached = (spec, LogConfig.from_properties(
                dict(spec.config), base=self.committer.default_topic_config))
            self._configs[topic] = cached
        return cached[1]

    def _delete_delay(self, topic: str) -> int:
        return self._config(topic, self.commits.state.topics.get(topic)).file_delete_delay_ms

    def _max_delete_delay(self) -> int:
        state = self.commits.state
        return max([self.committer.default_topic_config.file_delete_delay_ms,
                    *(self._config(t, s).file_delete_delay_ms for t, s in state.topics.items())])

    def grace_ms(self) -> int:
        """The orphan grace now (the configured one, else from the largest delay)."""
        return orphan_grace_ms(self._max_delete_delay(), self._orphan_grace)

    def _partitions(self) -> list[tuple[str, int]]:
        state = self.commits.state
        return [(t, n) for t, spec in sorted(state.topics.items())
                for n in range(spec.partitions)]

    # -- the tasks ------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Retention over every partition, one commit per log (``topic_groups``: the
        legacy topics together, each topic in its own log alone); returns the segments
        removed from the log (their objects go after ``file.delete.delay.ms``)."""
        with self._lock:
            self.committer.refresh()
            state = self.commits.state
            return sum(self._retention(group)
                       for group in topic_groups(state, state.topics))

    def _retention(self, group: list[str]) -> int:
        """Retention of the partitions of ``group``'s topics, in one commit."""
        removed: list[int] = []
        topics = set(group)

        def build(state: BucketState) -> Change | None:
            now = self.clock.milliseconds()
            changes = {}
            removed.clear()
            for key, ps in state.partitions.items():
                topic = key.rpartition("-")[0]
                if topic not in topics:
                    continue
                plan = plan_retention(ps, self._config(topic, state.topics.get(topic)), now)
                if plan is None:
                    continue
                changes[key] = PartitionChange(remove=tuple(s.key for s in plan.remove),
                                               log_start_offset=plan.log_start_offset)
                removed.append(len(plan.remove))
                logger.info("%s: retention of %s: %s; log start offset %d", self.commits.uri,
                            key, "; ".join(plan.reasons) or "log start offset moved",
                            plan.log_start_offset)
            return Change(partitions=changes) if changes else None

        attempt = Attempt()
        for state in self.commits.commit_steps("retention", attempt):
            with attempt:
                attempt.change = build(state)
        if attempt.result is None:
            return 0
        crash_point("retention-after-commit")
        return sum(removed)

    def merge_segments(self) -> int:
        """Merge small segments of every partition; returns the segments merged away."""
        with self._lock:
            self.committer.refresh()
            grace = self.grace_ms()
            merged = 0
            for topic, n in self._partitions():
                spec = self.commits.state.topics.get(topic)
                if spec is None:
                    continue
                result = merge_partition(self.commits, topic, n, self._config(topic, spec),
                                         self.clock, grace // 2)
                merged += result.merged
            return merged

    def clean(self) -> CompactStats | None:
        """One compaction pass over the dirtiest compacted partition, or None."""
        from .bucket_compact import BucketCompactor  # numba kernels: loaded on first use

        with self._lock:
            self.committer.refresh()
            if self._compactor is None:
                self._compactor = BucketCompactor(
                    self.commits, self.committer.config, self.clock, self._config,
                    lambda: self.grace_ms() // 2)
            return self._compactor.clean_dirtiest()

    def collect(self) -> CollectStats:
        """Delete what no reader can need (see ``bucket_collect``)."""
        with self._lock:
            self.committer.refresh()
            stats = collect(self.commits.storage, delete_delay_ms=self._delete_delay,
                            max_delete_delay_ms=self._max_delete_delay(),
                            orphan_grace=self.grace_ms())
            logger.info("%s: collected %d removed object(s), %d orphan(s), %d commit(s), "
                        "%d snapshot(s); %d waiting for file.delete.delay.ms",
                        self.commits.uri, stats.removed_objects, stats.orphans, stats.commits,
                        stats.snapshots, stats.waiting)
            return stats

    def run(self, before_task: Callable[[str, int, int], None] | None = None,
            tasks: tuple[str, ...] = TASKS) -> list[TaskRun]:
        """Each task of ``tasks`` once, in order; a failing task is reported in its
        ``TaskRun`` and the next one still runs."""
        actions: dict[str, Callable[[], object]] = {
            RETENTION: self.delete_old_segments, MERGE_TASK: self.merge_segments,
            CLEANER_TASK: self.clean, COLLECT_TASK: self.collect}
        runs = []
        for i, name in enumerate(tasks):
            if before_task is not None:
                before_task(name, i, len(tasks))
            try:
                runs.append(TaskRun(name, actions[name]()))
            except Exception as e:  # noqa: BLE001 - reported in the TaskRun, as the scheduler does
                logger.error("%s: maintenance task %s failed: %s", self.commits.uri, name, e)
                runs.append(TaskRun(name, error=e))
        return runs
