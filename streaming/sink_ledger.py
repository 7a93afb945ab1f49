"""The exactly-once sink's ledger: a hint that bounds the replay scan, never a witness alone.

File ``<log dir>/.seglog-sink/ledger/<sink id>.json`` (one per sink and log dir), written
atomically (temp file, fsync, rename, dir fsync) by every commit that publishes to the
dir, just before the high-watermark checkpoint::

    {"version": 1, "sink": "<sink id>", "producerId": <the sink's producerId>,
     "partitions": [["topic", <partition>, <batch id>, <start>, <end>], ...]}

Each entry names the last micro-batch of the sink published to the partition and offsets
``[start, end)`` holding it (a rebuilt entry's ``start`` may be a later batch of the same
micro-batch). An entry whose ``end`` is above the partition's high watermark belongs to a
commit that crashed before its checkpoint: the data there is not visible.

Crash and damage policy: the replay decision (``sink_replay``) confirms every entry it
uses against the batch headers in the log, and falls back to walking the headers when the
ledger is missing, damaged or wrong. A damaged ledger (not JSON, truncated, empty, another
sink's, an impossible entry, unreadable) is reported with a warning naming the file and
rebuilt from the data by the next commit; it never means "nothing was published".

Not thread-safe: one commit at a time per sink.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.checkpoint_file import write_atomically
from seglog.logstore.storage.storage import LOCAL

from .errors import LedgerDamagedError
from .sink_staging import MAX_BATCH_ID, producer_id_of, sink_state_dir, staging_root

logger = logging.getLogger(__name__)

__all__ = ["LedgerEntry", "LedgerState", "SinkLedger", "ledger_dir", "ledger_file",
           "read_ledger_file"]

LEDGER_SUFFIX = ".json"


class LedgerState(Enum):
    VALID = "valid"
    MISSING = "missing"  # never written in this dir, or deleted: the data decides
    DAMAGED = "damaged"  # unparseable, impossible or unreadable: the data decides


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The last micro-batch ``batch_id`` of a sink published to a partition: ``[start, end)``."""

    batch_id: int
    start: int
    end: int


def ledger_dir(log_dir: str | os.PathLike[str]) -> Path:
    return sink_state_dir(log_dir) / "ledger"


def ledger_file(log_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """``<log dir>/.seglog-sink/ledger/<sink id, file-name safe>.json``."""
    return ledger_dir(log_dir) / (staging_root(log_dir, sink_id).name + LEDGER_SUFFIX)


def _entries(doc: object, expected_sink: str | None) -> tuple[str, dict[TopicPartition,
                                                                       LedgerEntry]]:
    """(sink id, entries) of a parsed ledger document; LedgerDamagedError if impossible."""
    if not isinstance(doc, dict):
        raise LedgerDamagedError("not a JSON object")
    if doc.get("version") != SinkLedger.VERSION:
        raise LedgerDamagedError(f"unknown version {doc.get('version')!r}")
    sink = doc.get("sink")
    if not isinstance(sink, str) or (expected_sink is not None and sink != expected_sink):
        raise LedgerDamagedError(f"names sink {sink!r}, not {expected_sink!r}")
    if doc.get("producerId") != producer_id_of(sink):
        raise LedgerDamagedError(f"producerId {doc.get('producerId')!r} is not sink "
                                 f"{sink!r}'s ({producer_id_of(sink)})")
    rows = doc.get("partitions")
    if not isinstance(rows, list):
        raise LedgerDamagedError("no 'partitions' list")
    entries: dict[TopicPartition, LedgerEntry] = {}
    for row in rows:
        if (not isinstance(row, list) or len(row) != 5 or not isinstance(row[0], str)
                or not all(type(v) is int for v in row[1:])):
            raise LedgerDamagedError(f"bad entry {row!r}")
        topic, partition, batch, start, end = row
        if partition < 0 or not 0 <= batch <= MAX_BATCH_ID or not 0 <= start < end:
            raise LedgerDamagedError(f"impossible entry {row!r}")
        if (topic, partition) in entries:
            raise LedgerDamagedError(f"two entries for {topic}-{partition}")
        entries[(topic, partition)] = LedgerEntry(batch, start, end)
    return sink, entries


def read_ledger_file(path: Path, expected_sink: str | None = None
                     ) -> tuple[str, dict[TopicPartition, LedgerEntry]]:
    """Parse one ledger file: (sink id, entries). Raises FileNotFoundError, OSError, or
    LedgerDamagedError saying what is wrong (also when the file name does not match the
    sink it names)."""
    raw = LOCAL.read(path)
    if not raw:
        raise LedgerDamagedError("empty file")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise LedgerDamagedError(f"not JSON ({e})") from None
    sink, entries = _entries(doc, expected_sink)
    if path.name != ledger_file(path.parent, sink).name:
        raise LedgerDamagedError(f"names sink {sink!r}, whose ledger is not this file")
    return sink, entries


class SinkLedger:
    """One sink's ledger in one log dir (see the module docstring).

    ``read()`` never raises for a damaged or missing file: it sets ``state`` (and
    ``problem``) and leaves ``entries`` empty, and the caller decides from the data.
    Not thread-safe."""

    VERSION = 1

    def __init__(self, log_dir: str | os.PathLike[str], sink_id: str) -> None:
        self.path = ledger_file(log_dir, sink_id)
        self.sink_id = sink_id
        self.entries: dict[TopicPartition, LedgerEntry] = {}
        self.state = LedgerState.MISSING
        self.problem: str | None = None
        self.dirty = False  # entries differ from the file (or the file is damaged)

    @property
    def valid(self) -> bool:
        return self.state is LedgerState.VALID

    def read(self) -> SinkLedger:
        self.entries = {}
        try:
            _, self.entries = read_ledger_file(self.path, self.sink_id)
        except FileNotFoundError:
            self.state, self.problem = LedgerState.MISSING, None
            return self
        except (OSError, LedgerDamagedError) as e:
            self.state, self.problem = LedgerState.DAMAGED, str(e) or type(e).__name__
            self.dirty = True
            logger.warning("sink ledger %s is damaged (%s): the replay decision walks the "
                           "batch headers instead, and the next commit rewrites it",
                           self.path, self.problem)
            return self
        self.state, self.problem = LedgerState.VALID, None
        return self

    def write(self) -> None:
        doc = {"version": self.VERSION, "sink": self.sink_id,
               "producerId": producer_id_of(self.sink_id),
               "partitions": [[t, p, e.batch_id, e.start, e.end]
                              for (t, p), e in sorted(self.entries.items())]}
        LOCAL.makedirs(self.path.parent)
        write_atomically(self.path, json.dumps(doc).encode())
        self.state, self.problem, self.dirty = LedgerState.VALID, None, False
