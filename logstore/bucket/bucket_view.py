"""The merged view of a bucket's commit logs (``bucket_logs.BucketLogs.state``) and what
callers read off it: the catalog's topics plus each named log's topic (``merge``), the
groups one commit may change (``topic_groups``), a sink's ledger for one topic
(``ledger``), the topics a change touches (``change_topics``). Pure functions of states:
no request, no lock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .bucket_commit_log import Change
from .bucket_state import BucketState


def topic_of(partition_key: str) -> str:
    """The topic of ``<topic>-<partition>`` (a topic name may hold '-')."""
    return partition_key.rpartition("-")[0]


def change_topics(change: Change) -> set[str]:
    """Every topic a change touches (its specs and its partitions)."""
    return set(change.topics) | {topic_of(k) for k in change.partitions}


def merge(catalog: BucketState, logs: Mapping[str, BucketState]) -> BucketState:
    """The view of every topic: the catalog's own plus, per name the catalog maps to a
    log, that log's topic unless it ends with a tombstone (or is not open). ``sinks``:
    per sink, its ledger of the highest batch over the logs (what a person asks: how far
    did it get); ``topic_sinks``: per topic, the ledgers of the log that holds it (what
    decides a replay: ``ledger``)."""
    if not catalog.topic_logs:
        return catalog
    topics = dict(catalog.topics)
    parts = dict(catalog.partitions)
    topic_sinks: dict[str, Mapping[str, Any]] = dict.fromkeys(catalog.topics, catalog.sinks)
    sinks = dict(catalog.sinks)
    for name, log_id in catalog.topic_logs.items():
        state = logs.get(log_id)
        spec = state.topics.get(name) if state is not None else None
        if state is None or spec is None:
            continue
        topics[name] = spec
        parts.update(state.partitions)
        topic_sinks[name] = state.sinks
        for sink, held in state.sinks.items():
            if batch_of(held) > batch_of(sinks.get(sink)):
                sinks[sink] = held
    return BucketState(catalog.version, topics, parts, sinks, catalog.topic_logs, topic_sinks)


def batch_of(held: Any) -> int:
    batch = held.get("batch_id") if isinstance(held, dict) else None
    return batch if isinstance(batch, int) and not isinstance(batch, bool) else -1


def with_version(state: BucketState, version: int) -> BucketState:
    return BucketState(
        version, state.topics, state.partitions, state.sinks, state.topic_logs, state.topic_sinks
    )


def topic_groups(state: BucketState, topics: Iterable[str]) -> list[list[str]]:
    """``topics`` in the groups one commit may change: the catalog's together (first),
    then each topic in its own log alone, in name order (a topic ``state`` does not hold
    is a group of its own: creating it gives it its own log)."""
    names = sorted(set(topics))
    legacy = [t for t in names if t in state.topics and t not in state.topic_logs]
    own = [[t] for t in names if t not in legacy]
    return ([legacy] if legacy else []) + own


def ledger(state: BucketState, sink_id: str, topic: str) -> Any:
    """The ledger of ``sink_id`` for ``topic``: its own log's, or the catalog's for a
    legacy topic; None when there is none (nor any topic: nothing was published to a
    topic that does not exist, whatever the catalog's ledger says)."""
    if topic not in state.topics:
        return None
    if topic in state.topic_sinks:
        return state.topic_sinks[topic].get(sink_id)
    return state.sinks.get(sink_id)  # a view of a catalog alone (no topic logs)
