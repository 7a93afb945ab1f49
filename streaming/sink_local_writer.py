"""What the local sink's publish does through the writer ``LogManager``
(``sink_commit.LocalPublication``, steps 2, 5 and 7 of ``sink_commit``'s docstring):
open the writer of the log dirs, waiting for another writer's ``.lock``; create the
missing topics (``createTopics``); append a staging file in chunks of whole batches
(bounded memory, the bytes stamped in place); roll a failed publish back; and run the
LogManager's maintenance when ``maintenanceIntervalMs`` has passed for every sink on the
dirs.

Not thread-safe: one commit at a time per sink, as ``sink_commit``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from seglog.logstore.errors import (
    CorruptRecordError,
    LogDirLockedError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import TopicPartition, iter_batch_headers
from seglog.logstore.storage.checkpoint_file import write_atomically
from seglog.logstore.storage.file_handle import FileHandle
from seglog.logstore.storage.storage import LOCAL
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

from . import log_writers
from .errors import SinkCommitError
from .sink_intent import remove_intent
from .sink_options import SinkOptions, require_creatable
from .sink_staging import StagedFragment, sink_state_dir

# The local sink's messages keep the logger name users configure, whichever of its
# modules logs them.
logger = logging.getLogger("seglog.streaming.sink_commit")

_APPEND_CHUNK = 8 << 20
_MAINTENANCE_FILE = "maintenance.json"


def open_writer(options: SinkOptions, *, clock: Clock = SYSTEM_CLOCK) -> LogManager:
    """A writer LogManager of the sink's log dirs (the process's paused one when nothing
    changed since: ``log_writers``), waiting up to ``lockTimeoutMs`` for another writer
    to release a ``.lock``."""
    deadline = time.monotonic() + options.lock_timeout_ms / 1000
    pause = 0.02
    while True:
        try:
            return log_writers.open_writer(tuple(options.log_dirs), clock)
        except LogDirLockedError as e:
            if time.monotonic() + pause > deadline:
                raise LogDirLockedError(
                    f"{e}; the seglog sink waited {options.lock_timeout_ms} ms for it "
                    "(option 'lockTimeoutMs')"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def ensure_topics(mgr: LogManager, options: SinkOptions, assumed: dict[str, int]) -> list[str]:
    """Create the missing topics (``createTopics``); returns the ones created."""
    created = []
    for topic, n in sorted(assumed.items()):
        try:
            actual = len(mgr.partitions(topic))
        except UnknownTopicOrPartitionError:
            require_creatable(options, topic)
            mgr.create_topic(topic, n, dict(options.topic_config or {}))
            created.append(topic)
            logger.info("created topic %s with %d partition(s)", topic, n)
            continue
        if actual != n:
            raise SinkCommitError(
                f"topic {topic!r} has {actual} partition(s) but the tasks routed rows for "
                f"{n}: it changed during the batch; the batch is not published"
            )
    return created


def append_fragment(mgr: LogManager, frag: StagedFragment) -> None:
    """Append a staging file in chunks of whole batches (bounded memory)."""
    try:
        handle = LOCAL.open_file(frag.path, "read")
    except FileNotFoundError:
        raise SinkCommitError(
            f"staging file {frag.path} of {frag.topic}-{frag.partition} is missing: was the "
            "batch already cleaned up, or the log dir not shared by every executor?"
        ) from None
    try:
        total, pending = _append_chunks(mgr, frag, handle)
    except CorruptRecordError as e:
        # Power-cut damage (staging files are not fsynced): the file is named, the
        # commit fails before its commit point, and Spark runs the micro-batch again.
        raise CorruptRecordError(
            f"staging file {frag.path} of {frag.topic}-{frag.partition} is corrupt: {e}"
        ) from None
    if pending or total != frag.size:
        raise CorruptRecordError(
            f"staging file {frag.path} holds {total} bytes of whole batches, the task "
            f"wrote {frag.size}: it is truncated or corrupt"
        )


def _append_chunks(mgr: LogManager, frag: StagedFragment, handle: FileHandle) -> tuple[int, int]:
    """(bytes appended, bytes left that are no whole batch)."""
    with handle, handle.buffered_reader() as f:
        # One buffer for the whole file: a batch that straddles two reads is moved to
        # the front (less than one batch), never joined into a new bytes object.
        buf = bytearray(_APPEND_CHUNK)
        filled = total = 0
        while True:
            if filled == len(buf):  # one batch larger than the buffer
                buf.extend(bytes(len(buf)))
            with memoryview(buf) as mv:
                n = f.readinto(mv[filled:])
                filled += n
                end = 0
                for h in iter_batch_headers(mv[:filled]):
                    end = h.end_position
                if end:
                    # The bytes are consumed here: the Log stamps offsets in them.
                    mgr.append(frag.topic, frag.partition, mv[:end], in_place=True, publish=False)
                    total += end
            if end:
                buf[: filled - end] = buf[end:filled]
                filled -= end
            if not n:
                break
        return total, filled


def fail_publish(
    mgr: LogManager,
    touched: dict[TopicPartition, int],
    intents: list[Path],
    *,
    rollback: bool,
    created: Sequence[str] = (),
) -> None:
    """Error path: undo what was appended (nothing of it is visible yet) and close; if the
    checkpoint step had started, close without claiming a clean shutdown instead. Topics
    this commit created are deleted again: nothing else wrote to them (the lock was held
    throughout), and a failed write must not leave a topic behind. The intents stay
    unless the rollback succeeded: they are the proof the next writer needs."""
    if not rollback:
        mgr.__exit__(SeglogError, None, None)
        return
    try:
        for (topic, partition), start in touched.items():
            mgr.get_log(topic, partition).truncate_to(start)
        for path in intents:
            remove_intent(path)
        for topic in created:
            mgr.delete_topic(topic)
            logger.info("deleted topic %s again: the write that created it failed", topic)
        mgr.close()
    except BaseException:
        logger.exception("cannot roll back a failed publish; the next commit will")
        mgr.__exit__(SeglogError, None, None)


# ---------------------------------------------------------------------------- maintenance
def maybe_run_maintenance(mgr: LogManager, options: SinkOptions, clock: Clock) -> bool:
    """Run the LogManager's maintenance if ``maintenanceIntervalMs`` has passed since the
    last run by any sink on these log dirs (the time is kept in the first log dir)."""
    state = sink_state_dir(options.log_dirs[0]) / _MAINTENANCE_FILE
    now = clock.milliseconds()
    try:
        last = int(json.loads(LOCAL.read(state))["last_run_ms"])
    except FileNotFoundError:
        last = None
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("cannot read %s (%s): running maintenance now", state, e)
        last = None
    if last is not None and now - last < options.maintenance_interval_ms:
        return False
    for run in mgr.run_maintenance():
        if not run.ok:
            logger.error("maintenance task %s failed: %s", run.name, run.error)
    LOCAL.makedirs(state.parent)
    write_atomically(state, json.dumps({"last_run_ms": now}).encode())
    return True
