"""``seglog produce TOPIC``: lines from stdin or ``--file`` become records, as
``kafka-console-producer.sh`` makes them.

Each line (without its ``\\n`` or ``\\r\\n``) is one record. With ``parse.key`` a line is
``key<key.separator>value``; with ``parse.headers`` it starts with
``h1:v1,h2:v2<headers.delimiter>`` (Kafka's ``LineMessageReader`` properties and defaults,
set with ``--property name=value``; ``--key-separator SEP`` is ``parse.key=true`` plus
``key.separator=SEP``). A key, value or header value equal to ``null.marker`` is null (a
null value is a tombstone).

A missing topic is created first, as a Kafka broker creates it on first produce
(``auto.create.topics.enable``) and as the seglog sink does (its ``createTopics``,
``numPartitions`` and ``topic.<config>`` options): ``--num-partitions`` partitions (1)
and the ``--topic-config`` overrides, said on stderr; ``--no-create-topic`` refuses.

Records go to ``--partition`` or where Kafka's default partitioner puts their key
(murmur2); keyless records by the murmur2 of their value, as the seglog sink places them.
Rows are encoded in chunks through the Arrow codec into batches of up to 1 MiB, and
published (the high watermark checkpoint) once at the end: all or nothing. On any error
or an interrupt, what this run appended is truncated and nothing becomes visible.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TextIO, TypedDict

import numpy as np
import pyarrow as pa

from seglog.logstore.errors import ConfigError, UnknownTopicOrPartitionError
from seglog.logstore.records.record_codec import CompressionType, encode_batches
from seglog.streaming.partitioner import assign_partitions

from . import cli_common
from .cli_commands import Command
from .cli_common import (
    EXIT_OK,
    add_json_arg,
    add_topic_arg,
    add_writer_args,
    log_dirs,
    parse_key_values,
    property_flag,
    property_values,
    writing,
)
from .cli_output import write_json

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirs

logger = logging.getLogger(__name__)

CHUNK_ROWS = 10_000
CHUNK_BYTES = 8 << 20
MAX_BATCH_BYTES = 1 << 20
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
               "headers.delimiter": "\t", "headers.separator": ",",
               "headers.key.separator": ":", "null.marker": None}


@dataclass(frozen=True, slots=True)
class LineFormat:
    """How a line splits into headers, key and value (Kafka's LineMessageReader)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineFormat:
        merged = property_values(props, _PROPERTIES)
        flag = functools.partial(property_flag, merged)

        def sep(name: str) -> bytes:
            value = _unescape(str(merged[name])).encode()
            if not value:
                raise ConfigError(f"--property {name} must not be empty")
            return value

        marker = merged["null.marker"]
        return cls(flag("parse.key"), sep("key.separator"), flag("parse.headers"),
                   sep("headers.delimiter"), sep("headers.separator"),
                   sep("headers.key.separator"),
                   None if marker is None else _unescape(marker).encode())


def _unescape(text: str) -> str:
    """``\\t`` and ``\\n`` as a shell user types them."""
    return text.replace("\\t", "\t").replace("\\n", "\n")


@dataclass(frozen=True, slots=True)
class Row:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


def parse_line(line: bytes, number: int, fmt: LineFormat) -> Row:
    """One input line → a record; errors name the line number."""
    headers = None
    if fmt.parse_headers:
        head, sep, line = line.partition(fmt.headers_delimiter)
        if not sep:
            raise ConfigError(f"line {number}: no headers delimiter "
                              f"{fmt.headers_delimiter.decode()!r} (parse.headers=true)")
        headers = []
        for pair in head.split(fmt.headers_separator) if head else []:
            hk, hsep, hv = pair.partition(fmt.headers_key_separator)
            if not hsep:
                raise ConfigError(f"line {number}: header {pair!r} has no key separator "
                                  f"{fmt.headers_key_separator.decode()!r}")
            try:
                name = hk.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"line {number}: header key {hk!r} is not UTF-8") from None
            headers.append((name, None if hv == fmt.null_marker else hv))
    key = None
    if fmt.parse_key:
        key, sep, line = line.partition(fmt.key_separator)
        if not sep:
            raise ConfigError(f"line {number}: no key separator "
                              f"{fmt.key_separator.decode()!r} (parse.key=true)")
        if key == fmt.null_marker:
            key = None
    value = None if line == fmt.null_marker else line
    return Row(key, value, headers)


def read_rows(stream: BinaryIO, fmt: LineFormat) -> Iterator[list[Row]]:
    """Parsed rows in chunks of at most ``CHUNK_ROWS`` rows or ``CHUNK_BYTES`` bytes."""
    chunk: list[Row] = []
    size = 0
    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        chunk.append(parse_line(line, number, fmt))
        size += len(line)
        if len(chunk) >= CHUNK_ROWS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class PartitionSummary(TypedDict):
    """What ``produce`` appended to one partition (the ``--json`` output's keys)."""

    partition: int
    firstOffset: int
    lastOffset: int
    records: int


class ProduceSummary(TypedDict):
    topic: str
    records: int
    partitions: list[PartitionSummary]


class Producer:
    """Appends chunks of rows to one topic of a writer (``log_dirs_api.LogDirs``);
    remembers where each touched partition ended before, so ``abort`` can take everything back. Not
    thread-safe."""

    def __init__(self, mgr: LogDirs, topic: str, partition: int | None,
                 compression: CompressionType) -> None:
        self.mgr = mgr
        self.topic = topic
        self.partitions = mgr.partitions(topic)
        if partition is not None and partition not in self.partitions:
            raise ConfigError(f"--partition {partition}: topic {topic!r} has partitions "
                              f"{self.partitions[0]}..{self.partitions[-1]}")
        self.partition = partition
        self.compression = compression
        config = mgr.topic_config(topic)
        self.max_batch_bytes = max(1, min(MAX_BATCH_BYTES, config.max_message_bytes))
        self.start: dict[int, int] = {}  # partition -> its log end before this run
        self.last: dict[int, int] = {}
        self.records: dict[int, int] = {}

    def add(self, rows: list[Row]) -> None:
        values = pa.array([r.value for r in rows], pa.binary())
        keys = (pa.array([r.key for r in rows], pa.binary())
                if any(r.key is not None for r in rows) else None)
        headers = (pa.array([[{"key": k, "value": v} for k, v in r.headers]
                             if r.headers else None for r in rows], HEADERS_TYPE)
                   if any(r.headers for r in rows) else None)
        if self.partition is not None:
            target = np.full(len(rows), self.partition, dtype=np.int32)
        else:
            target = assign_partitions(keys, values, len(self.partitions))
        chunk: dict[tuple[str, int], bytearray] = {}
        counts: dict[int, int] = {}
        for p in np.unique(target).tolist():
            idx = pa.array(np.flatnonzero(target == p))
            chunk[(self.topic, p)] = encode_batches(
                values.take(idx), keys.take(idx) if keys is not None else None, None,
                headers.take(idx) if headers is not None else None,
                compression=self.compression, now_ms=cli_common.CLOCK.milliseconds(),
                max_batch_bytes=self.max_batch_bytes)
            counts[p] = len(idx)
            self.start.setdefault(p, self.mgr.get_log(self.topic, p).log_end_offset)
        # Every partition of the chunk at once: one commit on a bucket. A local log dir
        # publishes at the end (``produce``), so ``abort`` can still take them back.
        infos = self.mgr.append_many(chunk, publish=False)
        for (_, p), info in infos.items():
            self.last[p] = info.last_offset
            self.records[p] = self.records.get(p, 0) + counts[p]

    def abort(self) -> None:
        """Truncate what this run appended (it was never published). On a bucket every
        append is a commit, visible at once: nothing can be taken back."""
        for p, offset in self.start.items():
            if not self.mgr.truncate_unpublished(self.topic, p, offset):
                logger.warning("%s: the records appended before the failure stay committed "
                               "(a bucket commits every chunk): %s", self.topic, self.start)
                return

    def summary(self) -> ProduceSummary:
        parts: list[PartitionSummary] = [
            {"partition": p, "firstOffset": self.start[p], "lastOffset": self.last[p],
             "records": self.records[p]} for p in sorted(self.records)]
        return {"topic": self.topic, "records": sum(self.records.values()), "partitions": parts}


def produce(mgr: LogDirs, topic: str, chunks: Iterable[list[Row]], *,
            partition: int | None = None,
            compression: CompressionType = CompressionType.NONE) -> ProduceSummary:
    """Append every chunk, then publish; on any failure take it all back and re-raise."""
    producer = Producer(mgr, topic, partition, compression)
    try:
        for rows in chunks:
            producer.add(rows)
    except BaseException:
        try:
            producer.abort()
        except Exception:  # the original error matters more; recovery handles the rest
            logger.exception("cannot take back the records of the failed produce to %s",
                             topic)
            raise
        raise
    mgr.checkpoint_high_watermarks()
    return producer.summary()


def ensure_topic(mgr: LogDirs, topic: str, *, create: bool, partitions: int,
                 config: dict[str, str], where: str) -> None:
    """The sink's ``createTopics`` rule for ``produce``: a missing topic is created (said
    on stderr, since a typo then makes a new topic), or refused without ``create``."""
    if topic in mgr.topics():
        return
    if not create:
        raise UnknownTopicOrPartitionError(
            f"unknown topic {topic!r} in {where} (--no-create-topic: create it first with "
            "seglog create)")
    mgr.create_topic(topic, partitions, config)
    sys.stderr.write(f"seglog produce: created topic {topic!r} with {partitions} "
                     "partition(s) (Kafka's auto-create on first produce; "
                     "--no-create-topic refuses instead)\n")


def _produce(args: argparse.Namespace, out: TextIO) -> int:
    props = parse_key_values(args.property, "--property")
    if args.key_separator is not None:
        props.update({"parse.key": "true", "key.separator": args.key_separator})
    if args.parse_headers:
        props["parse.headers"] = "true"
    fmt = LineFormat.from_properties(props)
    compression = CompressionType[args.compression_codec.upper()]
    topic_config = parse_key_values(args.topic_config, "--topic-config")
    if args.num_partitions < 1:
        raise ConfigError(f"--num-partitions must be at least 1, got {args.num_partitions}")
    stream: BinaryIO
    with writing(args) as mgr:
        ensure_topic(mgr, args.topic, create=args.create_topic,
                     partitions=args.num_partitions, config=topic_config,
                     where=", ".join(log_dirs(args)))
        if args.file is not None:
            with open(args.file, "rb") as stream:
                summary = produce(mgr, args.topic, read_rows(stream, fmt),
                                  partition=args.partition, compression=compression)
        else:
            summary = produce(mgr, args.topic, read_rows(sys.stdin.buffer, fmt),
                              partition=args.partition, compression=compression)
    if args.json:
        write_json(out, summary)
    else:
        ranges = ", ".join(f"partition {p['partition']} offsets {p['firstOffset']}.."
                           f"{p['lastOffset']}" for p in summary["partitions"])
        out.write(f"Produced {summary['records']} record(s) to {args.topic}"
                  f"{': ' + ranges if ranges else ''}\n")
    return EXIT_OK


def _produce_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument("--file", metavar="FILE", help="read lines from FILE (default: stdin)")
    p.add_argument("--partition", type=int, metavar="P",
                   help="put every record in partition P (default: by key, murmur2)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="lines are KEY<SEP>VALUE (parse.key=true, key.separator=SEP)")
    p.add_argument("--parse-headers", action="store_true",
                   help="lines start with h1:v1,h2:v2<TAB> (parse.headers=true)")
    # --reader-property: Kafka 4's name for the same option
    p.add_argument("--property", "--reader-property", action="append", default=[],
                   dest="property", metavar="NAME=VALUE",
                   help="a kafka-console-producer property: parse.key, key.separator, "
                        "parse.headers, headers.delimiter, headers.separator, "
                        "headers.key.separator, null.marker")
    p.add_argument("--create-topic", action=argparse.BooleanOptionalAction, default=True,
                   help="create a missing topic, as a broker does on first produce and the "
                        "sink's createTopics option (default: yes)")
    p.add_argument("--num-partitions", type=int, default=1, metavar="N",
                   help="partitions of a topic this creates (default 1, the sink's "
                        "numPartitions)")
    p.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override for a topic this creates (repeatable; the "
                        "sink's topic.<config> options)")
    p.add_argument("--compression-codec", default="none",
                   choices=[c.name.lower() for c in CompressionType])
    add_writer_args(p)
    add_json_arg(p)


COMMANDS = {"produce": Command(_produce_args, _produce)}
