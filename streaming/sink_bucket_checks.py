"""What the bucket sink's driver checks before a commit whose writer's view it cannot
trust (``sink_bucket_commit``, step 3: a writer opened by that commit, a topic it does
not know): the uploads its tasks reported are there with their sizes (``check_uploads``,
one flat LIST, beside the refresh of the logs the batch writes: ``check_and_refresh``),
and what
the sink's ledger holds (``ledger_batch``, per topic's log: ``holds``), which decides a
replay. No commit is made here."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import BucketState
from seglog.logstore.bucket.bucket_view import ledger
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.storage import Storage

from .errors import SinkCommitError
from .sink_bucket_staging import BucketFragment, staging_prefix

__all__ = [
    "check_and_refresh",
    "check_uploads",
    "holds",
    "ledger_batch",
    "ledger_of",
    "list_uploads",
]


def check_and_refresh(
    mgr: BucketLogManager,
    sink_id: str,
    batch_id: int,
    plan: dict[TopicPartition, list[BucketFragment]],
    *,
    refresh: bool,
    listing: Future[dict[str, int]] | None = None,
) -> bool:
    """Check the uploads (``check_uploads``, one LIST) and return True to commit, False
    when the batch turns out to be a replay.

    Made only where the commit cannot trust its writer's view (a writer opened by this
    commit, a topic it does not know: ``sink_bucket_commit``'s step 3); a steady commit
    makes neither the LIST nor the refresh. Here the writer's refresh (``refresh``: one
    LIST of each log the plan writes, at once, a GET per commit other writers made
    since) runs beside the uploads' LIST, not before it; ``listing``: that LIST made
    already, beside the writer's open (``list_uploads``). A failed check is believed
    only on a refreshed view: the ledger may hold the batch already (a replay is never
    refused)."""
    # Only the logs the commit writes: the catalog and other topics' logs cannot change
    # what it builds (a topic not known yet asks the catalog: BucketLogs.refresh).
    topics = sorted({t for t, _ in plan})
    if not refresh:
        try:
            check_uploads(mgr, sink_id, batch_id, plan, listing)
        except SinkCommitError:
            mgr.refresh(topics)
            if holds(mgr.state, sink_id, batch_id, plan):
                return False
            raise
        return True
    with ThreadPoolExecutor(1, thread_name_prefix="seglog-sink-refresh") as pool:
        refreshed = pool.submit(mgr.refresh, topics)
        try:
            check_uploads(mgr, sink_id, batch_id, plan, listing)
        except SinkCommitError:
            refreshed.result()
            if holds(mgr.state, sink_id, batch_id, plan):
                return False
            raise
        refreshed.result()
    return True


def list_uploads(storage: Storage, sink_id: str, batch_id: int) -> dict[str, int]:
    """The objects under the batch's staging prefix: name below it -> size (one LIST)."""
    return {e.name: e.size for e in storage.list_tree(staging_prefix(sink_id, batch_id))}


def holds(
    state: BucketState,
    sink_id: str,
    batch_id: int,
    plan: dict[TopicPartition, list[BucketFragment]],
) -> bool:
    """Whether the ledger of every log the plan writes holds the batch (a replay)."""
    return all(ledger_batch(state, sink_id, [t]) >= batch_id for t in sorted({t for t, _ in plan}))


def check_uploads(
    mgr: BucketLogManager,
    sink_id: str,
    batch_id: int,
    plan: dict[TopicPartition, list[BucketFragment]],
    listing: Future[dict[str, int]] | None = None,
) -> None:
    """One flat LIST of ``<sink>/<batch>/`` (``list_uploads``; ``listing``: made already):
    every object the commit will reference must be there with the size its task
    uploaded. Nothing should have removed one (the collector keeps a batch in flight), so
    a gap is refused, never published."""
    prefix = staging_prefix(sink_id, batch_id)
    listed = list_uploads(mgr.storage, sink_id, batch_id) if listing is None else listing.result()
    for frags in plan.values():
        for f in frags:
            for key, size in f.object_sizes():
                name = key[len(prefix) + 1 :] if key.startswith(prefix + "/") else None
                found = listed.get(name) if name is not None else None
                if found != size:
                    what = (
                        "is not under " + prefix
                        if name is None
                        else "is missing"
                        if found is None
                        else f"has {found} bytes, not {size}"
                    )
                    raise SinkCommitError(
                        f"fragment {mgr.uri}/{key} of {f.topic}-{f.partition} {what}: batch "
                        f"{batch_id} of sink {sink_id} is not published (a restart of the "
                        "query runs it again)"
                    )


def ledger_of(state: BucketState, sink_id: str, topics: Sequence[str] = ()) -> Any:
    """The sink's ledger that decides for ``topics`` (one log's: ``topic_groups``): the
    first topic's own log's, or the catalog's (legacy topics, or no topic)."""
    return ledger(state, sink_id, topics[0]) if topics else state.sinks.get(sink_id)


def ledger_batch(state: BucketState, sink_id: str, topics: Sequence[str] = ()) -> int:
    """The last batch id the sink's ledger holds (``ledger_of``: for ``topics``); -1 for
    none. A ledger that is not what this sink writes is corruption of the commit that
    wrote it, never "no batch"."""
    held = ledger_of(state, sink_id, topics)
    if held is None:
        return -1
    batch = held.get("batch_id") if isinstance(held, dict) else None
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise SinkCommitError(
            f"the ledger of sink {sink_id!r} in the bucket's state (version "
            f"{state.version}) is not a sink ledger: {held!r}"
        )
    return batch
