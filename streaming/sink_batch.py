"""The values of one sink commit, beneath the protocol and its backends: the batch to
publish (``SinkBatch``, the topics its tasks assumed) and what a commit did
(``CommitResult``, ``PublishedPartition``).

``sink_protocol`` drives a commit over a backend and each backend
(``sink_commit``, ``sink_bucket_commit``) reads the batch it is handed: both import
these from here, so a backend asking the batch for its topics never calls back into the
protocol that called it (``tests/test_one_pass_through_modules.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seglog.logstore.records.record_format import TopicPartition

from .errors import SinkCommitError

if TYPE_CHECKING:
    from .sink_staging import Fragment, StagedTask

__all__ = [
    "SinkBatch",
    "AssumedTopic",
    "CommitResult",
    "PublishedPartition",
    "assumed_topics",
    "config_differences",
]


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class PublishedPartition:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    records: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did: the partitions it published, the ones that already held the
    batch (a replay), the staging files or objects it removed."""

    batch_id: int
    published: tuple[PublishedPartition, ...] = ()
    skipped: tuple[TopicPartition, ...] = ()
    removed_files: int = 0

    @property
    def records(self) -> int:
        return sum(p.records for p in self.published)


# ---------------------------------------------------------------------------- the batch
@dataclass(frozen=True, slots=True)
class AssumedTopic:
    """What the tasks routed and checked a topic's rows with: its partition count and
    (when they recorded it) its config overrides. A commit refuses a topic that differs."""

    partitions: int
    config: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class SinkBatch:
    """One micro-batch to publish: the chosen attempts and their fragments per partition."""

    sink_id: str
    batch_id: int
    chosen: tuple[StagedTask, ...]
    plan: Mapping[TopicPartition, Sequence[Fragment]]
    use_ledger: bool

    def topics(self) -> dict[str, AssumedTopic]:
        """The topics the tasks routed rows for (raises when tasks disagree)."""
        return assumed_topics(self.chosen)


def assumed_topics(chosen: Sequence[StagedTask]) -> dict[str, AssumedTopic]:
    """Per topic, the partition count the tasks routed with and the config overrides
    they checked the rows against (None: tasks that recorded none)."""
    counts: dict[str, int] = {}
    for m in chosen:
        for topic, n in m.topic_partitions:
            if counts.setdefault(topic, n) != n:
                raise SinkCommitError(
                    f"tasks routed rows of topic {topic!r} with different partition counts "
                    f"({counts[topic]} and {n}): the topic changed during the batch"
                )
    configs: dict[str, dict[str, str]] = {}
    for m in chosen:
        for topic, pairs in m.topic_configs:
            config = dict(pairs)
            if configs.setdefault(topic, config) != config:
                raise SinkCommitError(
                    f"tasks checked rows of topic {topic!r} against different configs "
                    f"({config_differences(configs[topic], config)}): the topic changed "
                    "during the batch"
                )
    return {t: AssumedTopic(n, configs.get(t)) for t, n in counts.items()}


def config_differences(was: Mapping[str, str], now: Mapping[str, str]) -> str:
    keys = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    return "; ".join(
        f"{k}: {was.get(k, '(default)')!r} then {now.get(k, '(default)')!r}" for k in keys
    )
