"""``seglog consume TOPIC``: print records, as ``kafka-console-consumer.sh`` does.

Read-only: no lock, nothing written, and only what is published (below the high
watermark) is read. Without ``--follow`` it stops at the high watermark it saw when it
reached the end; with ``--follow`` it polls for more until ``--max`` records,
``--timeout-ms`` without a new record, or an interrupt.

Where it starts, per partition, like the Kafka tool: the end (``latest``, the default),
``--from-beginning``, ``--offset N|earliest|latest`` (a number needs ``--partition``), or
``--timestamp T`` (the first record at or after ``T``: milliseconds since the epoch or
an ISO-8601 time, UTC unless it names a zone).

Text output is Kafka's ``DefaultMessageFormatter`` (``--property print.key=true`` and
friends); ``--format json`` prints one JSON object per record: bytes as UTF-8 text when
valid, else base64, with ``keyEncoding``/``valueEncoding`` saying which.

A corrupt batch stops the read as it stops a Kafka consumer, but only after every valid
record before it is printed; the error names the partition, the segment file, the
batch's position in it and its offsets, as ``seglog check`` does. ``Processed a total of
N messages`` goes to stderr at the end whatever ended the read (the last record, an
error, Ctrl-C).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import functools
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from seglog.logstore.errors import ConfigError, CorruptRecordError, OffsetOutOfRangeError
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.log.transactions import READ_COMMITTED, READ_UNCOMMITTED
from seglog.logstore.records.record_format import LOG_OVERHEAD, BatchHeader, read_batch_header

from .cli_commands import Command
from .cli_common import (
    EXIT_OK,
    add_path_args,
    add_topic_arg,
    open_reader,
    parse_key_values,
    property_flag,
    property_values,
)
from .cli_output import write_json

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView, PartitionLogView

READ_CHUNK_BYTES = 1 << 20
_TS_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
_FORMATTER = {"print.timestamp": "false", "print.partition": "false", "print.offset": "false",
              "print.headers": "false", "print.key": "false", "print.value": "true",
              "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
              "null.literal": "null"}


@dataclass(frozen=True, slots=True)
class TextFormat:
    """Kafka's DefaultMessageFormatter properties."""

    timestamp: bool
    partition: bool
    offset: bool
    headers: bool
    key: bool
    value: bool
    key_separator: str
    line_separator: str
    headers_separator: str
    null_literal: str

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> TextFormat:
        merged = property_values(props, _FORMATTER)
        flag = functools.partial(property_flag, merged)

        def text(name: str) -> str:
            return merged[name].replace("\\t", "\t").replace("\\n", "\n")

        return cls(flag("print.timestamp"), flag("print.partition"), flag("print.offset"),
                   flag("print.headers"), flag("print.key"), flag("print.value"),
                   text("key.separator"), text("line.separator"), text("headers.separator"),
                   text("null.literal"))

    def render(self, topic: str, partition: int, r: dict[str, Any]) -> str:
        def show(b: bytes | None) -> str:
            return self.null_literal if b is None else b.decode("utf-8", "backslashreplace")

        fields = []
        if self.timestamp:
            ts_type = _TS_TYPES.get(r["timestampType"])
            fields.append(f"{ts_type}:{r['timestamp']}" if ts_type else "NO_TIMESTAMP")
        if self.partition:
            fields.append(f"Partition:{partition}")
        if self.offset:
            fields.append(f"Offset:{r['offset']}")
        if self.headers:
            hs = r.get("headers") or []
            fields.append(self.headers_separator.join(f"{h['key']}:{show(h['value'])}"
                                                      for h in hs) or "NO_HEADERS")
        if self.key:
            fields.append(show(r["key"]))
        if self.value:
            fields.append(show(r["value"]))
        return self.key_separator.join(fields) + self.line_separator


def encode_bytes(b: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding): UTF-8 text when valid, else base64; (None, None) for null."""
    if b is None:
        return None, None
    try:
        return b.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(b).decode("ascii"), "base64"


def record_json(topic: str, partition: int, r: dict[str, Any]) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, **record_fields(r)}


def record_fields(r: dict[str, Any]) -> dict[str, Any]:
    """A decoded record as JSON: offset, timestamp (and type), key, value and headers
    (bytes as ``encode_bytes`` gives them, with their encoding named)."""
    key, key_enc = encode_bytes(r["key"])
    value, value_enc = encode_bytes(r["value"])
    headers = []
    for h in r.get("headers") or []:
        hv, hv_enc = encode_bytes(h["value"])
        headers.append({"key": h["key"], "value": hv, "valueEncoding": hv_enc})
    return {"offset": r["offset"], "timestamp": r["timestamp"],
            "timestampType": _TS_TYPES.get(r["timestampType"], "NoTimestampType"),
            "key": key, "keyEncoding": key_enc, "value": value, "valueEncoding": value_enc,
            "headers": headers}


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC unless it says)."""
    if text.strip().lstrip("+-").isdigit():
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--timestamp {text!r}: expected milliseconds since the epoch or "
                          "an ISO-8601 time such as 2024-05-01T12:00:00Z") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def start_offsets(mgr: LogDirsView, topic: str, partitions: list[int],
                  args: argparse.Namespace) -> dict[int, int]:
    """Per partition, the first offset to print (see the module docstring)."""
    hws = mgr.high_watermarks()
    starts = mgr.log_start_offsets()
    out = {}
    for p in partitions:
        lso = starts.get((topic, p), 0)
        end = max(hws.get((topic, p), 0), lso)
        if args.timestamp is not None:
            found = mgr.get_log(topic, p).offset_for_timestamp(parse_timestamp(args.timestamp))
            out[p] = end if found is None else max(found, lso)
        elif args.from_beginning or args.offset == "earliest":
            out[p] = lso
        elif args.offset in (None, "latest"):
            out[p] = end
        else:
            n = int(args.offset)
            if not lso <= n <= end:
                raise OffsetOutOfRangeError(
                    f"--offset {n} is outside partition {topic}-{p}: its offsets run from "
                    f"{lso} to {end}")
            out[p] = n
    return out


def records(mgr: LogDirsView, topic: str, positions: dict[int, int],
            hws: dict[int, int], isolation_level: str = READ_UNCOMMITTED
            ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every record from ``positions`` up to ``hws`` (``read_committed``: up to the last
    stable offset, without aborted transactions' records), partition by partition;
    advances ``positions`` as it goes (so a follow-up call continues where this one
    stopped)."""
    for p in sorted(positions):
        end = hws[p]
        if positions[p] >= end:
            continue
        log = mgr.get_log(topic, p)
        for chunk in log.read_chunks(positions[p], end, READ_CHUNK_BYTES,
                                     isolation_level=isolation_level):
            for r in decode_chunk(log, chunk, positions[p], end):
                positions[p] = r["offset"] + 1
                yield p, r
        readable = (log.last_stable_offset if isolation_level == READ_COMMITTED
                    else log.high_watermark)
        positions[p] = max(positions[p], min(end, readable))


def decode_chunk(log: PartitionLogView, chunk: memoryview, start: int, end: int
                 ) -> Iterator[dict[str, Any]]:
    """The records of a chunk of whole batches. A chunk holding a corrupt batch is
    decoded again batch by batch, so the records before the bad batch are still given
    before the error (``bad_batch_error``) that names it."""
    # numba's kernels: loaded to decode, not by check and dump-log, which share
    # record_fields, nor by consume --help
    from seglog.logstore.records.record_codec import decode_batches

    try:
        rows = decode_batches(chunk, start_offset=start, end_offset=end).to_pylist()
    except CorruptRecordError:
        rows = None  # decoded again below, one batch at a time
    if rows is not None:
        yield from rows
        return
    position = 0
    while position < len(chunk):
        try:
            header = read_batch_header(chunk, position)
        except CorruptRecordError as e:
            raise bad_batch_error(log, start, None, e) from None
        if header is None:
            return
        try:
            rows = decode_batches(chunk[position:header.end_position], start_offset=start,
                                  end_offset=end).to_pylist()
        except CorruptRecordError as e:
            raise bad_batch_error(log, header.base_offset, header, e) from None
        yield from rows
        if rows:
            start = rows[-1]["offset"] + 1
        position = header.end_position


def bad_batch_error(log: PartitionLogView, offset: int, header: BatchHeader | None,
                    error: CorruptRecordError) -> CorruptRecordError:
    """``error`` (about a batch decoded alone, at position 0 of its own buffer) restated
    with the partition, the segment file and the batch's position in that file."""
    reason = str(error)
    if header is not None:
        own = f"batch at position 0 (offsets {header.base_offset}..{header.last_offset}) "
        reason = reason.removeprefix(own)
    segment = _segment_of(log, offset)
    if segment is None:
        return CorruptRecordError(f"partition {log.topic}-{log.partition}, offset {offset}: "
                                  f"{reason}")
    position = _batch_position(segment, offset) if header is not None else None
    at = f", position {position}" if position is not None else ""
    offsets = (f"offsets {header.base_offset}..{header.last_offset}" if header is not None
               else f"after offset {offset - 1}")
    return CorruptRecordError(f"partition {log.topic}-{log.partition}: corrupt batch in "
                              f"{segment.log_path}{at} ({offsets}): {reason}; records before "
                              "it were printed (seglog check DIR reports every problem)")


def _segment_of(log: PartitionLogView, offset: int) -> LogSegment | None:
    below = [s for s in log.segments if s.base_offset <= offset]
    return below[-1] if below else None


def _batch_position(segment: LogSegment, offset: int) -> int | None:
    """Where the batch starting at ``offset`` sits in ``segment``'s file: from the
    offset index's entry at or below it, stepping over batches by their length field."""
    position = segment.offset_index.lookup(offset).position
    while position + LOG_OVERHEAD <= segment.size:
        head = segment.pread(position, LOG_OVERHEAD)
        base = int.from_bytes(head[:8], "big", signed=True)
        if base == offset:
            return position
        if base > offset:
            return None
        position += LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
    return None


def _validate(args: argparse.Namespace) -> None:
    chosen = [n for n, v in (("--from-beginning", args.from_beginning),
                             ("--offset", args.offset is not None),
                             ("--timestamp", args.timestamp is not None)) if v]
    if len(chosen) > 1:
        raise ConfigError(f"{' and '.join(chosen)} conflict: give one starting point")
    if args.offset not in (None, "earliest", "latest"):
        try:
            int(args.offset)
        except ValueError:
            raise ConfigError(f"--offset {args.offset!r}: expected a number, earliest or "
                              "latest") from None
        if args.partition is None or len(args.partition) != 1:
            raise ConfigError("--offset N needs exactly one --partition")
    if args.max is not None and args.max < 1:
        raise ConfigError(f"--max must be at least 1, got {args.max}")


def _consume(args: argparse.Namespace, out: TextIO) -> int:
    _validate(args)
    if args.group is not None:
        sys.stderr.write(f"seglog consume: --group {args.group} ignored: seglog keeps no "
                         "consumer group offsets (start with --from-beginning, --offset or "
                         "--timestamp; a Spark query's progress: seglog lag)\n")
    fmt = TextFormat.from_properties(parse_key_values(args.property, "--property"))
    with open_reader(args) as mgr:
        existing = mgr.partitions(args.topic)
        partitions = args.partition or existing
        for p in partitions:
            if p not in existing:
                raise ConfigError(f"--partition {p}: topic {args.topic!r} has partitions "
                                  f"{existing[0]}..{existing[-1]}")
        positions = start_offsets(mgr, args.topic, partitions, args)
        printed = [0]
        try:
            _print_records(mgr, args, fmt, positions, out, printed)
        finally:
            # Kafka's console consumer says it however the run ends (Ctrl-C, an error).
            out.flush()
            sys.stderr.write(f"Processed a total of {printed[0]} messages\n")
    return EXIT_OK


def _print_records(mgr: LogDirsView, args: argparse.Namespace, fmt: TextFormat,
                   positions: dict[int, int], out: TextIO, printed: list[int]) -> None:
    """Print records from ``positions`` (see the module docstring for when it stops);
    ``printed[0]`` counts them as they go, so an interrupt still knows the total."""
    idle_since = time.monotonic()
    while True:
        hw = mgr.high_watermarks()
        ends = {p: hw.get((args.topic, p), 0) for p in positions}
        for p, r in records(mgr, args.topic, positions, ends, args.isolation_level):
            # Counted before it is written: a Ctrl-C between a write that reached the
            # terminal and the count would leave a record printed but not counted.
            printed[0] += 1
            if args.format == "json":
                write_json(out, record_json(args.topic, p, r))
            else:
                out.write(fmt.render(args.topic, p, r))
            idle_since = time.monotonic()
            if args.max is not None and printed[0] >= args.max:
                return
        if not args.follow or (args.timeout_ms is not None and
                               time.monotonic() - idle_since >= args.timeout_ms / 1000):
            return
        out.flush()
        time.sleep(args.poll_ms / 1000)


def _consume_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument("--partition", type=int, action="append", metavar="P",
                   help="read only partition P (repeatable; default: all)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at each partition's log start offset")
    p.add_argument("--offset", metavar="N|earliest|latest",
                   help="start offset (a number needs one --partition; default latest)")
    p.add_argument("--timestamp", metavar="T",
                   help="start at the first record at or after T (epoch ms or ISO-8601)")
    p.add_argument("--max", "--max-messages", type=int, metavar="N", dest="max",
                   help="stop after N records")
    p.add_argument("--isolation-level", choices=(READ_UNCOMMITTED, READ_COMMITTED),
                   default=READ_UNCOMMITTED,
                   help="read_committed: stop at the last stable offset and skip the records "
                        "of aborted transactions (Kafka's consumer isolation.level)")
    p.add_argument("--group", metavar="GROUP",
                   help="accepted (kafka-console-consumer.sh's option) and ignored: seglog "
                        "keeps no consumer group offsets; start with --from-beginning, "
                        "--offset or --timestamp")
    p.add_argument("--format", choices=("text", "json"), default="text")
    # --formatter-property: Kafka 4's name for the same option
    p.add_argument("--property", "--formatter-property", action="append", default=[],
                   dest="property", metavar="NAME=VALUE",
                   help="text format (kafka-console-consumer): print.key, print.offset, "
                        "print.partition, print.timestamp, print.headers, print.value, "
                        "key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--follow", action="store_true",
                   help="at the end, keep polling for new records")
    p.add_argument("--poll-ms", type=int, default=500, metavar="MS",
                   help="with --follow: pause between polls (default 500)")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="with --follow: stop after MS without a new record")
    add_path_args(p)


COMMANDS = {"consume": Command(_consume_args, _consume)}
