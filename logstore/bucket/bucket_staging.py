"""The staging area of a bucket log dir: where Spark sink tasks upload fragments before
a commit gives them offsets, and which uploads the collector must leave alone.

Layout: ``_seglog/staging/<sink dir>/<batch, 20 digits>/<attempt uid>/<topic>-<p>.<n>``
plus ``.log``/``.index``/``.timeindex``. ``<sink dir>`` is the sink id when it is a safe
object name, else a hash of it (``sink_dir_name``); the batch id is zero-padded so a
listing's name order is batch order (a flat listing can start after a batch).

**Batches in flight.** A micro-batch may run for hours (a slow task, a large
``df.write``): its fragments wait under ``<sink dir>/<batch>/`` until the driver commits.
So an unreferenced upload is never judged by its age alone. The collector deletes one
only when (1) no commit still present ever referenced it, (2) it is older than the
orphan grace by the store's clock (``store_now_ms``: both sides of the comparison are the
store's timestamps, so no writer's clock skew matters), and (3) its batch is settled:
the sink's ledger in the state holds that batch or a later one, or some fragment of the
batch was committed (a ``df.write`` keeps no ledger), or the sink is gone, meaning
nothing under its directory changed for ``SINK_EXPIRY_MS`` (7 days, Kafka's
``transactional.id.expiration.ms``).

Thread-safe: functions only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import KafkaStorageError
from ..storage.storage import Entry, Storage
from .bucket_state import META_DIR, STAGING_DIR

__all__ = ["SINK_EXPIRY_MS", "CLOCK_KEY", "sink_dir_name", "staging_prefix",
           "parse_staging_key", "store_now_ms", "InFlight"]

SINK_EXPIRY_MS = 7 * 24 * 3600 * 1000
"""A sink whose staging directory saw no upload for this long is gone (Kafka's
``transactional.id.expiration.ms``): its unsettled uploads become orphans."""
CLOCK_KEY = f"{META_DIR}/clock"
"""An empty object written to read the store's clock (its last-modified time)."""
_BATCH_DIGITS = 20


def sink_dir_name(sink_id: str) -> str:
    """A safe object-name form of a sink id (query ids are UUIDs; job ids are ours)."""
    if all(c.isalnum() or c in "-_." for c in sink_id) and sink_id not in ("", ".", ".."):
        return sink_id
    return hashlib.sha256(sink_id.encode()).hexdigest()[:32]


def batch_dir_name(batch_id: int) -> str:
    return f"{batch_id:0{_BATCH_DIGITS}d}"


def staging_prefix(sink_id: str, batch_id: int | None = None) -> str:
    """``_seglog/staging/<sink dir>[/<batch, 20 digits>]``: where a sink's tasks upload."""
    prefix = f"{STAGING_DIR}/{sink_dir_name(sink_id)}"
    return prefix if batch_id is None else f"{prefix}/{batch_dir_name(batch_id)}"


def parse_staging_key(key: str) -> tuple[str, int] | None:
    """(sink dir, batch id) of a staging object key; None for anything else."""
    if not key.startswith(STAGING_DIR + "/"):
        return None
    parts = key[len(STAGING_DIR) + 1:].split("/")
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def store_now_ms(storage: Storage) -> int:
    """The store's clock now: the last-modified time of an object written for the
    purpose (one PUT and one LIST of ``_seglog/``)."""
    storage.write_atomic(CLOCK_KEY, b"")
    name = CLOCK_KEY.rpartition("/")[2]
    for e in storage.list_dir(META_DIR):
        if e.name == name and not e.is_dir:
            return e.mtime_ms
    raise KafkaStorageError(f"{storage.uri}/{CLOCK_KEY} was written but is not listed: the "
                            "store's clock cannot be read")


@dataclass(frozen=True, slots=True)
class InFlight:
    """Which staging batches are unsettled (see the module docstring), from the ledgers
    of the state, the keys commits referenced, and a listing of the staging objects."""

    ledgers: Mapping[str, int]
    committed: frozenset[tuple[str, int]]
    newest_upload_ms: Mapping[str, int]
    now_ms: int

    @classmethod
    def build(cls, sinks: Mapping[str, Any], known: Iterable[str],
              staged: Iterable[tuple[str, Entry]], now_ms: int) -> InFlight:
        ledgers: dict[str, int] = {}
        for sink_id, ledger in sinks.items():
            batch = ledger.get("batch_id") if isinstance(ledger, dict) else None
            if isinstance(batch, int) and not isinstance(batch, bool):
                ledgers[sink_dir_name(sink_id)] = batch
        committed = frozenset(p for p in map(parse_staging_key, known) if p is not None)
        newest: dict[str, int] = {}
        for key, entry in staged:
            parsed = parse_staging_key(key)
            if parsed is not None:
                newest[parsed[0]] = max(newest.get(parsed[0], 0), entry.mtime_ms)
        return cls(ledgers, committed, newest, now_ms)

    def holds(self, key: str) -> bool:
        """True when ``key`` is an upload of a batch still in flight: keep it."""
        parsed = parse_staging_key(key)
        if parsed is None:
            return False
        sink, batch = parsed
        if batch <= self.ledgers.get(sink, -1) or parsed in self.committed:
            return False
        return self.now_ms - self.newest_upload_ms.get(sink, 0) < SINK_EXPIRY_MS
