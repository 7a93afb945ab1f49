"""Checks of an append before it reaches a segment (Kafka's ``LogValidator``): every
batch is a whole v2 RecordBatch with a valid CRC, within ``max.message.bytes``, with a
record count matching its offsets; timestamps within ``message.timestamp.*``; on a
compacted topic no null keys; ``LogAppendTime`` stamped in place. Then offsets are
assigned by rewriting each batch's base offset.

Pure functions over the caller's buffer: no file, no lock (``log.Log.append`` calls them).
"""

from __future__ import annotations

from ..config.config import LogConfig
from ..errors import CorruptRecordError, InvalidOffsetError, InvalidRecordError, RecordTooLargeError
from ..records.record_format import (
    LONG_MAX,
    MAGIC_V2,
    NO_TIMESTAMP,
    REASON_TOO_LARGE,
    TIMESTAMP_RULE,
    BatchHeader,
    read_batch_header,
    set_base_offset,
    stamp_log_append_time,
    verify,
)


def validate_batches(buf: bytearray | memoryview, cfg: LogConfig, *, tp: str,
                     now_ms: int, assign_offsets: bool) -> list[BatchHeader]:
    """Check every batch of an append (Kafka's ``validateMessagesAndAssignOffsets``,
    the checking half) and apply ``message.timestamp.type=LogAppendTime`` in place;
    returns the headers. Errors name the topic-partition and the batch position."""
    headers: list[BatchHeader] = []
    pos = 0
    now = now_ms
    records_before = 0  # records of the append in the batches before this one
    while pos < len(buf):
        check = verify(buf, pos, max_message_bytes=cfg.max_message_bytes)
        h = check.header
        if check.code == REASON_TOO_LARGE:
            raise RecordTooLargeError(f"append to {tp}: {check.reason}")
        if h is None or not check.valid:
            what = " is not a whole record batch" if check.partial else ""
            raise CorruptRecordError(f"append to {tp}: {check.reason}{what}")
        if h.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"append to {tp}: batch at position {pos} has magic {h.magic}; "
                f"only v2 record batches are written")
        if h.records_count < 1 or (assign_offsets and
                                   h.records_count != h.last_offset - h.base_offset + 1):
            raise CorruptRecordError(
                f"append to {tp}: batch at position {pos} has {h.records_count} "
                f"records but last offset delta {h.last_offset - h.base_offset}")
        if cfg.message_timestamp_type == "LogAppendTime":
            stamp_log_append_time(buf, h, now)
            h = read_batch_header(buf, pos)
            assert h is not None
        else:
            _check_timestamps_valid(h, tp, records_before)
            if not h.is_log_append_time:
                _check_create_time(h, cfg, tp, now)
        records_before += h.records_count
        headers.append(h)
        pos = h.end_position
    if headers and (cfg.compact or cfg.message_timestamp_before_max_ms < LONG_MAX):
        _check_records(buf, cfg, tp, now)
    return headers

def _check_timestamps_valid(h: BatchHeader, tp: str, records_before: int) -> None:
    """Kafka's rule for a timestamp: at or after the epoch, or -1 (none), applied to the
    header's two (the first record's and the largest). A record after the first whose
    negative delta takes it below -1 is caught where the append is decoded anyway
    (``_check_records``) and by ``record_codec.encode_batches``; walking every record of
    every append here would cost appends a record decode (and the numba kernels, which
    an appending process never loads)."""
    if h.is_log_append_time:
        ts = h.max_timestamp
    elif h.base_timestamp < NO_TIMESTAMP or h.max_timestamp < NO_TIMESTAMP:
        ts = h.base_timestamp if h.base_timestamp < NO_TIMESTAMP else h.max_timestamp
    else:
        return
    if ts < NO_TIMESTAMP:
        # The base timestamp is the first record's; a max below -1 makes every record's so.
        raise InvalidRecordError(
            f"append to {tp}: record {records_before} (the first of the batch at position "
            f"{h.position}) has timestamp {ts}: {TIMESTAMP_RULE}")


def _check_create_time(h: BatchHeader, cfg: LogConfig, tp: str, now: int) -> None:
    if h.max_timestamp - now > cfg.message_timestamp_after_max_ms:
        raise InvalidRecordError(
            f"append to {tp}: batch at position {h.position} has timestamp "
            f"{h.max_timestamp}, more than message.timestamp.after.max.ms="
            f"{cfg.message_timestamp_after_max_ms} ahead of now ({now})")
    if h.base_timestamp >= 0 and now - h.base_timestamp > cfg.message_timestamp_before_max_ms:
        raise InvalidRecordError(
            f"append to {tp}: batch at position {h.position} has timestamp "
            f"{h.base_timestamp}, more than message.timestamp.before.max.ms="
            f"{cfg.message_timestamp_before_max_ms} before now ({now})")

def _check_records(buf: bytearray | memoryview, cfg: LogConfig, tp: str, now: int) -> None:
    """Record-level checks (decodes the batches, vectorised): null keys on a
    compacted topic, CreateTime timestamps below -1 or older than allowed."""
    import pyarrow.compute as pc

    from ..records.record_codec import decode_batches

    table = decode_batches(bytes(buf), include_headers=False)
    if cfg.compact and table.column("key").null_count:
        raise InvalidRecordError(
            f"append to compacted topic-partition {tp}: records with a null "
            f"key are not allowed (cleanup.policy=compact)")
    if not table.num_rows:
        return
    create = pc.equal(table.column("timestampType"), 0)
    ts = pc.filter(table.column("timestamp"), create)
    oldest = pc.min(ts).as_py() if len(ts) else None
    if oldest is None:
        return
    if oldest < NO_TIMESTAMP:
        first = pc.index(table.column("timestamp"), oldest).as_py()
        raise InvalidRecordError(f"append to {tp}: record {first} has timestamp {oldest}: "
                                 f"{TIMESTAMP_RULE}")
    limit = cfg.message_timestamp_before_max_ms
    if limit < LONG_MAX and now - oldest > limit:
        raise InvalidRecordError(
            f"append to {tp}: a record has timestamp {oldest}, more than "
            f"message.timestamp.before.max.ms={limit} before now ({now})")

def assign_offsets_from(buf: bytearray | memoryview, headers: list[BatchHeader],
                        next_offset: int, *,
                        tp: str, assign: bool) -> list[BatchHeader]:
    """Give the batches consecutive offsets from ``next_offset`` by rewriting each base
    offset (the CRC does not cover it); with ``assign=False`` check that they keep
    increasing from there instead. Returns the updated headers."""
    out = []
    for h in headers:
        if assign:
            set_base_offset(buf, h.position, next_offset)
            h = h.with_base_offset(next_offset)
        elif h.base_offset < next_offset:
            raise InvalidOffsetError(
                f"append to {tp}: batch at position {h.position} starts at offset "
                f"{h.base_offset}, below the next expected offset {next_offset}")
        out.append(h)
        next_offset = h.last_offset + 1
    return out
