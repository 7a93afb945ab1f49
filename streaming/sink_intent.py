"""The exactly-once sink's commit intent: durable proof that a commit is (or was) in flight.

File ``<log dir>/.seglog-sink/intent/<sink id>.json`` (one per sink and log dir)::

    {"version": 1, "sink": "<sink id>", "producerId": <the sink's producerId>,
     "batch": <micro-batch id>, "partitions": [["topic", <partition>, <start>, <end>], ...]}

Life cycle (``sink_commit``): written atomically (temp file, fsync, rename, dir fsync)
under the log dir's ``.lock``, after the commit has cleared the partitions' tails and
before its first append to the dir; each entry names the offsets ``[start, end)`` the
commit is about to append to the partition. Removed after the high-watermark checkpoint
rename (the commit point), or after a failed commit rolled its appends back.

Why it exists: a commit that dies between its first append and its checkpoint leaves its
batches above the high watermark. The same sink removes such a tail on its own replay
(``sink_replay.check_unpublished_tail``); a *different* writer (another batch job, another
query) may remove a batch of producer ``P`` and micro-batch ``B`` only if ``P``'s intent
for exactly ``B`` is still here and its range for the partition covers the batch. Staging
files cannot serve: ``abort()`` deletes them without the lock (Spark calls it when a
commit's worker dies), and they age out after 24 hours while the tail stays.

Staleness: a commit killed right after its checkpoint leaves an intent whose data is
visible. Every commit therefore removes, under the lock, the intents that explain nothing
any more (no offset of their ranges lies between a partition's high watermark and its log
end: the commit finished, was rolled back, or its tail was removed); only a high watermark
lowered *exactly* to such an intent's start, before any commit ran in the dir, could make
a published range look unfinished.

Damage policy: a damaged intent (not JSON, truncated, impossible, another sink's name) is
not evidence: a tail it might explain is refused (the error names the file), it is never
removed automatically, and ``seglog check`` reports it as a problem.

Not thread-safe: callers hold the log dir's ``.lock``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from seglog.logstore.errors import UnknownTopicOrPartitionError
from seglog.logstore.storage.checkpoint_file import write_atomically
from seglog.logstore.storage.storage import LOCAL

from .errors import IntentDamagedError
from .sink_staging import MAX_BATCH_ID, producer_id_of, sink_state_dir, staging_root

if TYPE_CHECKING:
    from seglog.logstore.manager.log_dirs_reader import LogDirsReader
    from seglog.logstore.manager.log_manager import LogManager

logger = logging.getLogger(__name__)

__all__ = ["CommitIntent", "IntentRange", "DirIntents", "IntentDamagedError", "intent_dir",
           "intent_file", "read_intents", "remove_intent", "remove_obsolete_intents"]

TopicPartition = tuple[str, int]
VERSION = 1
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class IntentRange:
    """Offsets ``[start, end)`` a commit was about to append to ``topic-partition``."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class CommitIntent:
    """One sink's commit of micro-batch ``batch_id`` in progress in one log dir."""

    sink_id: str
    batch_id: int
    ranges: tuple[IntentRange, ...]
    path: Path | None = field(default=None, compare=False)

    @property
    def producer_id(self) -> int:
        return producer_id_of(self.sink_id)

    def covers(self, topic: str, partition: int, producer_id: int, batch_id: int,
               base_offset: int, next_offset: int) -> bool:
        """Whether a batch ``[base_offset, next_offset)`` of ``producer_id`` and
        ``batch_id`` in ``topic-partition`` is part of what this commit appended."""
        if producer_id != self.producer_id or batch_id != self.batch_id:
            return False
        return any(r.topic == topic and r.partition == partition and r.start <= base_offset
                   and next_offset <= r.end for r in self.ranges)

    def to_json(self) -> bytes:
        return json.dumps({
            "version": VERSION, "sink": self.sink_id, "producerId": self.producer_id,
            "batch": self.batch_id,
            "partitions": [[r.topic, r.partition, r.start, r.end] for r in self.ranges],
        }).encode()


@dataclass(frozen=True, slots=True)
class DirIntents:
    """The intents of one log dir: the valid ones, and (path, problem) of damaged ones."""

    intents: tuple[CommitIntent, ...] = ()
    damaged: tuple[tuple[Path, str], ...] = ()


def intent_dir(log_dir: str | os.PathLike[str]) -> Path:
    return sink_state_dir(log_dir) / "intent"


def intent_file(log_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """``<log dir>/.seglog-sink/intent/<sink id, file-name safe>.json``."""
    return intent_dir(log_dir) / (staging_root(log_dir, sink_id).name + _SUFFIX)


def parse_intent(path: Path, raw: bytes) -> CommitIntent:
    """Parse one intent file's bytes; IntentDamagedError says what is wrong."""
    if not raw:
        raise IntentDamagedError("empty file")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise IntentDamagedError(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise IntentDamagedError("not a version-1 intent object")
    sink, batch, rows = doc.get("sink"), doc.get("batch"), doc.get("partitions")
    if not isinstance(sink, str) or path.name != intent_file(path.parent, sink).name:
        raise IntentDamagedError(f"names sink {sink!r}, whose intent is not this file")
    if doc.get("producerId") != producer_id_of(sink):
        raise IntentDamagedError(f"producerId {doc.get('producerId')!r} is not sink "
                                 f"{sink!r}'s")
    if type(batch) is not int or not 0 <= batch <= MAX_BATCH_ID:
        raise IntentDamagedError(f"impossible micro-batch id {batch!r}")
    if not isinstance(rows, list) or not rows:
        raise IntentDamagedError("no 'partitions' entries")
    ranges = []
    for row in rows:
        if (not isinstance(row, list) or len(row) != 4 or not isinstance(row[0], str)
                or not all(type(v) is int for v in row[1:])
                or row[1] < 0 or not 0 <= row[2] < row[3]):
            raise IntentDamagedError(f"impossible entry {row!r}")
        ranges.append(IntentRange(*row))
    return CommitIntent(sink, batch, tuple(ranges), path)


def read_intents(log_dir: str | os.PathLike[str]) -> DirIntents:
    """Every intent file of ``log_dir`` (``.tmp`` leftovers of an interrupted write are
    ignored: the write had not happened)."""
    d = intent_dir(log_dir)
    try:
        names = sorted(LOCAL.list_names(d))
    except FileNotFoundError:
        return DirIntents()
    intents, damaged = [], []
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        path = d / name
        try:
            intents.append(parse_intent(path, LOCAL.read(path)))
        except FileNotFoundError:
            continue  # removed by its commit meanwhile (readers take no lock)
        except (OSError, IntentDamagedError) as e:
            damaged.append((path, str(e) or type(e).__name__))
    return DirIntents(tuple(intents), tuple(damaged))


def write_intent(log_dir: str | os.PathLike[str], intent: CommitIntent) -> Path:
    """Make ``intent`` durable in ``log_dir`` (replacing the sink's previous one)."""
    path = intent_file(log_dir, intent.sink_id)
    LOCAL.makedirs(path.parent)
    write_atomically(path, intent.to_json())
    return path


def remove_intent(path: Path) -> None:
    """Remove an intent file. The removal is not fsynced: an intent that comes back after
    a power cut is harmless. Removed after the commit point, its ranges lie below the
    fsynced high watermark and explain nothing (the next commit removes it again);
    removed after a rollback, the truncation of its tail was not fsynced either, and an
    intent only ever explains batches of its own sink and micro-batch in its own ranges
    (``covers``), so it lets a writer remove nothing but that commit's tail. The next
    ``write_intent`` in the dir fsyncs the directory anyway."""
    try:
        LOCAL.unlink(path)
    except FileNotFoundError:
        return


def unexplained_tail(intent: CommitIntent, mgr: LogManager | LogDirsReader
                     ) -> list[tuple[IntentRange, int, int]]:
    """(range, first, end) for each range of ``intent`` that still has offsets between its
    partition's high watermark and log end: what the intent explains today."""
    out: list[tuple[IntentRange, int, int]] = []
    for r in intent.ranges:
        try:
            log = mgr.get_log(r.topic, r.partition)
        except UnknownTopicOrPartitionError:
            continue  # deleted since: nothing left to explain
        first = max(r.start, log.high_watermark)
        end = min(r.end, log.log_end_offset)
        if first < end:
            out.append((r, first, end))
    return out


def remove_obsolete_intents(log_dir: str | os.PathLike[str], mgr: LogManager) -> int:
    """Under the dir lock: remove ``log_dir``'s valid intents that explain no offset above
    a high watermark any more. Damaged ones stay (evidence). Returns how many went."""
    removed = 0
    found = read_intents(log_dir)
    for intent in found.intents:
        if intent.path is not None and not unexplained_tail(intent, mgr):
            remove_intent(intent.path)
            removed += 1
            logger.info("removed the commit intent of sink %s, micro-batch %d, in %s: its "
                        "offsets are published or gone", intent.sink_id, intent.batch_id,
                        log_dir)
    for path, problem in found.damaged:
        logger.warning("commit intent %s is damaged (%s): it proves nothing, and a tail it "
                       "might explain will be refused", path, problem)
    return removed
