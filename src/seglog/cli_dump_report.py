"""Where ``seglog dump-log`` sends what it reads: the lines ``kafka-dump-log`` prints,
or JSON lines (``--json``), one object per batch, index entry, file entry or problem.

``cli_dump_log`` reads each file once and hands every item to a reporter; the reporter only
decides the form. Not thread-safe: one command's main thread owns it.

Every JSON object has ``type`` and ``file`` (keys documented in docs/cli.md): ``batch``
(Kafka's dump fields, ``records`` with ``--print-data-log``), ``offsetIndexEntry``,
``timeIndexEntry``, ``producerSnapshotEntry``, ``txnIndexEntry``, ``problem``, ``note``,
``kafkaDumpLogMismatch`` (what Kafka's stricter tool would report: no problem) and
``ignored``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Protocol, TextIO

from seglog.logstore.log.producer_state import ProducerEntry
from seglog.logstore.records.control_records import ControlRecord
from seglog.logstore.records.record_format import CODEC_NAMES, BatchHeader

from .cli_consume import record_fields
from .cli_output import write_json
from .kafka_files import (
    control_record_json,
    format_control_record,
    format_producer_snapshot_entry,
    producer_snapshot_entry_json,
)

TxnEntry = tuple[int, int, int, int, int]


class DumpReporter(Protocol):
    out: TextIO  # the command's output (a progress bar hides when it is a terminal)

    def begin_file(self, path: PurePath, heading: str | None = None) -> None: ...
    def batch(self, path: PurePath, h: BatchHeader, valid: bool, *,
              records: Sequence[dict[str, Any]] | None = None,
              controls: Sequence[ControlRecord] | None = None) -> None: ...
    def problem(self, path: PurePath, message: str, *, text: str) -> None: ...
    def note(self, path: PurePath, message: str) -> None: ...
    def offset_index_entry(self, path: PurePath, offset: int, position: int) -> None: ...
    def time_index_entry(self, path: PurePath, timestamp: int, offset: int) -> None: ...
    def offset_mismatches(self, path: PurePath, pairs: Sequence[tuple[int, int]]) -> None: ...
    def time_mismatches(self, path: PurePath, messages: Sequence[str]) -> None: ...
    def producer_entry(self, path: PurePath, e: ProducerEntry) -> None: ...
    def txn_entry(self, path: PurePath, e: TxnEntry) -> None: ...
    def ignored(self, path: PurePath) -> None: ...


def _ts_type(h: BatchHeader) -> str:
    if h.is_log_append_time:
        return "LogAppendTime"
    return "CreateTime" if h.magic > 0 else "NoTimestampType"


def _text(value: object) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


class TextDumpReport:
    """The lines ``kafka-dump-log.sh`` prints (and ``seglog dump-log`` always printed)."""

    def __init__(self, out: TextIO, *, payload: bool = True) -> None:
        self.out = out
        # False: ``--deep-iteration`` alone, as Kafka prints it: each record's offset,
        # timestamp, sizes and header keys, not its key, value or header values.
        self.payload = payload

    def begin_file(self, path: PurePath, heading: str | None = None) -> None:
        self.out.write(f"Dumping {path}\n")
        if heading is not None:
            self.out.write(heading + "\n")

    def batch(self, path: PurePath, h: BatchHeader, valid: bool, *,
              records: Sequence[dict[str, Any]] | None = None,
              controls: Sequence[ControlRecord] | None = None) -> None:
        tail = (f"position: {h.position} {_ts_type(h)}: {h.max_timestamp} size: {h.size} "
                f"magic: {h.magic} compresscodec: "
                f"{CODEC_NAMES.get(h.compression, h.compression)} "
                f"crc: {h.crc} isvalid: {str(valid).lower()}\n")
        if h.magic < 2:  # a legacy message: Kafka's tool prints only its offset
            self.out.write(f"offset: {h.last_offset} {tail}")
        else:
            self.out.write(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} "
                f"count: {h.records_count} baseSequence: {h.base_sequence} "
                f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} "
                f"isControl: {str(h.is_control).lower()} {tail}")
        for r in records or ():
            ts_name = {1: "LogAppendTime", 0: "CreateTime"}.get(r["timestampType"],
                                                                 "NoTimestamp")
            sizes = (f"| offset: {r['offset']} {ts_name}: {r['timestamp']} "
                     f"keySize: {len(r['key']) if r['key'] is not None else -1} "
                     f"valueSize: {len(r['value']) if r['value'] is not None else -1} ")
            if not self.payload:
                keys = ",".join(x["key"] for x in (r["headers"] or []))
                self.out.write(f"{sizes}headerKeys: [{keys}]\n")
                continue
            headers = ",".join(f"{x['key']}:{_text(x['value'])}" for x in (r["headers"] or []))
            self.out.write(f"{sizes}headers: [{headers}] key: {_text(r['key'])} "
                           f"payload: {_text(r['value'])}\n")
        ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
        for c in controls or ():
            self.out.write(
                f"| offset: {c.offset} {ts_type}: "
                f"{h.max_timestamp if h.is_log_append_time else c.timestamp} "
                f"keySize: {len(c.key)} valueSize: {-1 if c.value is None else len(c.value)} "
                f"{format_control_record(c)}\n")

    def problem(self, path: PurePath, message: str, *, text: str) -> None:
        self.out.write(text + "\n")

    def note(self, path: PurePath, message: str) -> None:
        self.out.write(message + "\n")

    def offset_index_entry(self, path: PurePath, offset: int, position: int) -> None:
        self.out.write(f"offset: {offset} position: {position}\n")

    def time_index_entry(self, path: PurePath, timestamp: int, offset: int) -> None:
        self.out.write(f"timestamp: {timestamp} offset: {offset}\n")

    def offset_mismatches(self, path: PurePath, pairs: Sequence[tuple[int, int]]) -> None:
        if pairs:
            self.out.write(f"kafka-dump-log would report (a healthy index of brokers before "
                           f"Kafka 3.x differs so; lookups are not misled): Mismatches in "
                           f":{path}\n")
            self.out.writelines(f"  Index offset: {e}, log offset: {o}\n" for e, o in pairs)

    def time_mismatches(self, path: PurePath, messages: Sequence[str]) -> None:
        if messages:
            self.out.write(f"kafka-dump-log would report (entries naming a record inside a "
                           f"batch are healthy; lookups are not misled) for {path}:\n")
            self.out.writelines(f"  {m}\n" for m in messages)

    def producer_entry(self, path: PurePath, e: ProducerEntry) -> None:
        self.out.write(format_producer_snapshot_entry(e) + "\n")

    def txn_entry(self, path: PurePath, e: TxnEntry) -> None:
        v, pid, first, last, lso = e
        self.out.write(f"version: {v} producerId: {pid} firstOffset: {first} "
                       f"lastOffset: {last} lastStableOffset: {lso}\n")

    def ignored(self, path: PurePath) -> None:
        self.out.write(f"Dumping {path}\nIgnoring unknown file {path}\n")


class JsonDumpReport:
    """One JSON object per line for each item ``TextDumpReport`` prints."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def _emit(self, kind: str, path: PurePath, **fields: Any) -> None:
        write_json(self.out, {"type": kind, "file": str(path), **fields})

    def begin_file(self, path: PurePath, heading: str | None = None) -> None:
        pass  # every object names its file

    def batch(self, path: PurePath, h: BatchHeader, valid: bool, *,
              records: Sequence[dict[str, Any]] | None = None,
              controls: Sequence[ControlRecord] | None = None) -> None:
        doc: dict[str, Any] = {
            "baseOffset": h.base_offset, "lastOffset": h.last_offset,
            "count": h.records_count, "position": h.position,
            "timestampType": _ts_type(h), "maxTimestamp": h.max_timestamp, "size": h.size,
            "magic": h.magic,
            "compresscodec": CODEC_NAMES.get(h.compression, str(h.compression)),
            "crc": h.crc, "isValid": valid}
        if h.magic >= 2:
            doc |= {"baseSequence": h.base_sequence, "producerId": h.producer_id,
                    "producerEpoch": h.producer_epoch,
                    "partitionLeaderEpoch": h.partition_leader_epoch,
                    "isTransactional": h.is_transactional, "isControl": h.is_control}
        if records is not None:
            doc["records"] = [record_fields(r) for r in records]
        if controls is not None:
            ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
            doc["records"] = [
                {"offset": c.offset, "timestamp": h.max_timestamp if h.is_log_append_time
                 else c.timestamp, "timestampType": ts_type, **control_record_json(c)}
                for c in controls]
        self._emit("batch", path, **doc)

    def problem(self, path: PurePath, message: str, *, text: str) -> None:
        self._emit("problem", path, message=message)

    def note(self, path: PurePath, message: str) -> None:
        self._emit("note", path, message=message)

    def offset_index_entry(self, path: PurePath, offset: int, position: int) -> None:
        self._emit("offsetIndexEntry", path, offset=offset, position=position)

    def time_index_entry(self, path: PurePath, timestamp: int, offset: int) -> None:
        self._emit("timeIndexEntry", path, timestamp=timestamp, offset=offset)

    def offset_mismatches(self, path: PurePath, pairs: Sequence[tuple[int, int]]) -> None:
        for e, o in pairs:
            self._emit("kafkaDumpLogMismatch", path, indexOffset=e, logOffset=o,
                       message=f"Index offset: {e}, log offset: {o}")

    def time_mismatches(self, path: PurePath, messages: Sequence[str]) -> None:
        for m in messages:
            self._emit("kafkaDumpLogMismatch", path, message=m)

    def producer_entry(self, path: PurePath, e: ProducerEntry) -> None:
        self._emit("producerSnapshotEntry", path, **producer_snapshot_entry_json(e))

    def txn_entry(self, path: PurePath, e: TxnEntry) -> None:
        v, pid, first, last, lso = e
        self._emit("txnIndexEntry", path, version=v, producerId=pid, firstOffset=first,
                   lastOffset=last, lastStableOffset=lso)

    def ignored(self, path: PurePath) -> None:
        self._emit("ignored", path)
