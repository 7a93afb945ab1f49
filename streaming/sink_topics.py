"""Executor side of the exactly-once sink: what a task knows of the topics it writes.

``PartitionStager`` meets a topic's name in the rows and asks its ``TopicDescriber``
for the topic's partition count and config (a missing topic: the sink's creation
settings, after ``require_creatable``); the backend's ``StagingArea`` is handed the same
part, so neither calls the other back for it:

- ``LocalTopics``: from the directory listing of the log dirs, through the process's
  shared reader (``log_readers``), and where each partition's directory is.
- ``BucketTopics``: from the driver's view shipped with the writer (``sink_view``: no
  request), else (a topic the view lacks, or no view) from the committed state of the
  process's shared manager of the bucket (the log of each topic a task writes refreshed
  once per task), and which config overrides the rows were checked against (the commit
  message carries them: the commit refuses a topic whose config changed since).

Not thread-safe: one describer per task.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import cast

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.config.config import LogConfig
from seglog.logstore.config.topics import parse_overrides
from seglog.logstore.errors import LogDirError, SeglogError
from seglog.logstore.storage.file_names import partition_dir_name
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.storage.storage import LOCAL, Storage

from .log_readers import bucket_storage, reader
from .sink_options import SinkOptions, require_creatable
from .sink_staging import StagingTopic, check_partition_count
from .sink_view import TopicView

__all__ = ["LocalTopics", "BucketTopics", "shared_bucket", "shared_storage"]


class LocalTopics:
    """The topics of the sink's local log dirs (see the module docstring)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self._default_config = LogConfig.from_properties(options.topic_config or {})

    def describe_topic(self, name: str) -> StagingTopic:
        """Partition count, config and placement of a topic, from the directory listing
        (no segment is read); a missing topic gets the sink's creation settings.

        Through the process's shared reader (``log_readers``): a reused Python worker
        describes the topic of every task and micro-batch without opening the log dirs
        again; the reader re-lists a dir only when its mtime moved (a topic created by a
        commit since), so nothing published is missed."""
        options = self.options
        dirs = [Path(d) for d in options.log_dirs]
        try:
            if not all(LOCAL.is_dir(d) for d in dirs):
                for d in dirs:
                    LOCAL.makedirs(d)
            with reader(options.log_dirs, options.storage) as mgr:
                # topics() first: a missing topic is no error here (the shared reader is
                # dropped after a call that raises).
                exists = name in mgr.topics()
                if exists:
                    numbers = mgr.partitions(name)
                    config = mgr.topic_config(name)
        except OSError as e:
            raise LogDirError(
                f"the seglog sink cannot use log dir {e.filename or dirs}: {e.strerror}"
            ) from e
        if not exists:
            require_creatable(options, name)
            return StagingTopic(name, options.num_partitions, self._default_config, {})
        check_partition_count(options, name, len(numbers))
        placement = {}
        for n in numbers:
            for d in dirs:
                if LOCAL.is_dir(d / partition_dir_name(name, n)):
                    placement[n] = d
                    break
        if numbers != list(range(len(numbers))):
            raise LogDirError(f"topic {name!r} has partitions {numbers}: some are missing")
        return StagingTopic(name, len(numbers), config, placement)


class BucketTopics:
    """The topics of the sink's bucket (see the module docstring): from the driver's
    view shipped with the writer (``view``: ``sink_view``, no request), else from the
    process's shared manager of the bucket, the log of each topic refreshed once per
    task (the look). ``storage()`` is what the staging area uploads through."""

    def __init__(self, options: SinkOptions, view: TopicView | None = None) -> None:
        self.options = options
        self.view = view
        self.bucket: BucketLogManager | None = None
        self.validated: dict[str, dict[str, str]] = {}
        """Per topic described, the config overrides its rows are checked against."""
        self._refreshed: set[str] = set()

    def manager(self) -> BucketLogManager:
        """The process's shared manager of the bucket (its storage, its state as of the
        topics this task refreshed: ``refreshed``)."""
        if self.bucket is None:
            self.bucket = shared_bucket(self.options)
        return self.bucket

    def storage(self) -> Storage:
        """The process's client of the sink's bucket (``shared_storage``): no request, and
        no manager opened for a task whose topics the driver's view described."""
        return shared_storage(self.options)

    def refreshed(self, topics: Iterable[str]) -> BucketLogManager:
        """The shared manager, with the logs of ``topics`` refreshed once in this task
        (at once): the commits made since the last task, of those topics only."""
        mgr = self.manager()
        todo = sorted(set(topics) - self._refreshed)
        if not todo:
            return mgr
        if all(mgr.commits.topic_log(t) is not None for t in todo):
            mgr.refresh(todo)
        else:
            # A topic without a log of its own here yet (new to this reader, or in the
            # catalog's log): the whole refresh, which reads the catalog and opens the
            # logs it names in the same round trips.
            mgr.refresh()
        self._refreshed.update(todo)
        return mgr

    def describe_topic(self, name: str) -> StagingTopic:
        options = self.options
        held = self.view.get(name) if self.view is not None else None
        if held is not None:
            partitions, overrides = held
            check_partition_count(options, name, partitions)
            self.validated[name] = overrides
            return StagingTopic(name, partitions, _config(overrides), {})
        mgr = self.refreshed([name])
        spec = mgr.state.topics.get(name)
        if spec is None:
            require_creatable(options, name)
            overrides = parse_overrides(
                dict(options.topic_config or {}), base=mgr.default_topic_config
            )
            self.validated[name] = overrides
            config = LogConfig.from_properties(overrides, base=mgr.default_topic_config)
            return StagingTopic(name, options.num_partitions, config, {})
        check_partition_count(options, name, spec.partitions)
        self.validated[name] = dict(spec.config)
        return StagingTopic(name, spec.partitions, mgr.topic_config(name), {})

    def checked_configs(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """``StagedTask.topic_configs``: each topic's overrides, sorted."""
        return tuple(
            sorted((name, tuple(sorted(config.items()))) for name, config in self.validated.items())
        )


_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}
"""Configs parsed from a view's overrides, per process (a task per micro-batch asks)."""


def _config(overrides: dict[str, str]) -> LogConfig:
    """A topic's config from its overrides, as the bucket's managers parse it (over the
    defaults: the sink's managers are given no other ``default_topic_config``)."""
    key = tuple(sorted(overrides.items()))
    config = _configs.get(key)
    if config is None:
        config = _configs[key] = LogConfig.from_properties(overrides, base=LogConfig.of(None))
    return config


def shared_storage(options: SinkOptions) -> Storage:
    """This process's client of the sink's bucket (``log_readers.bucket_storage``: the one
    the source's planned reads use too; its connections reused by every task of a Python
    worker; a forked child builds its own)."""
    uri = options.bucket_uri
    if uri is None:
        raise SeglogError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    return bucket_storage([uri], options.storage)


def shared_bucket(options: SinkOptions) -> BucketLogManager:
    """This process's manager of the sink's bucket (``log_readers.reader``: the source's
    shared one, opened once per Python worker). Tasks only read its state and PUT and
    DELETE their own objects through its storage."""
    if options.bucket_uri is None:
        raise SeglogError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    with reader(options.log_dirs, options.storage) as mgr:
        return cast(BucketLogManager, mgr)
