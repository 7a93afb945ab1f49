"""``seglog alter | get-offsets | delete-records``: what ``kafka-topics.sh --alter
--partitions``, ``kafka-get-offsets.sh`` and ``kafka-delete-records.sh`` do, on log dirs
and buckets.

``alter`` grows a topic (the engine's ``add_partitions``; Kafka never shrinks one).
``get-offsets`` is read-only: per partition, the latest offset (``--time -1``, the high
watermark), the earliest (``-2``, the log start offset) or the first offset whose record
timestamp is at or after ``--time T`` (the time index's lookup, as Kafka's ListOffsets
answers it). ``delete-records`` raises log start offsets (Kafka's DeleteRecords), from
Kafka's ``--offset-json-file`` or ``--partition``/``--offset``; offset -1 means the high
watermark. Records below the new log start vanish for readers at once; their segments go
at the next retention pass (``seglog maintain``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeGuard

from seglog.logstore.errors import ConfigError, UnknownTopicOrPartitionError

from .cli_commands import Command
from .cli_common import (
    EXIT_OK,
    add_json_arg,
    add_path_args,
    add_topic_arg,
    add_writer_args,
    open_reader,
    writing,
)
from .cli_output import write_json

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirs, LogDirsView

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
_NAMED_TIMES = {"latest": LATEST, "earliest": EARLIEST}


# ------------------------------------------------------------------------------- alter
def _alter(args: argparse.Namespace, out: TextIO) -> int:
    if args.partitions is None:
        raise ConfigError(
            "alter needs --partitions N (the new total; seglog alters a "
            "topic's config with alter-config)"
        )
    with writing(args) as mgr:
        before = len(mgr.partitions(args.topic))
        mgr.add_partitions(args.topic, args.partitions)
    if args.json:
        write_json(
            out, {"topic": args.topic, "partitions": args.partitions, "previousPartitions": before}
        )
    else:
        out.write(f"Topic {args.topic} now has {args.partitions} partition(s) (was {before}).\n")
    sys.stderr.write(
        "seglog alter: keyed records now go to other partitions than before "
        "(murmur2 of the key modulo the new count), as in Kafka\n"
    )
    return EXIT_OK


def _alter_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="the new partition count (higher than the current one)",
    )
    add_writer_args(p)
    add_json_arg(p)


# ------------------------------------------------------------------------- get-offsets
def parse_time(text: str) -> int:
    """``--time``: epoch milliseconds, -1/latest, -2/earliest."""
    value = _NAMED_TIMES.get(text.strip().lower())
    if value is not None:
        return value
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"--time {text!r}: expected epoch milliseconds, -1 (latest) or -2 (earliest)"
        ) from None
    if value == MAX_TIMESTAMP:
        raise ConfigError(
            "--time -3 (the offset of the largest timestamp) is not supported; "
            "use -1, -2 or a timestamp"
        )
    if value < EARLIEST:
        raise ConfigError(
            f"--time {value}: expected epoch milliseconds, -1 (latest) or -2 (earliest)"
        )
    return value


def partition_list(text: str | None, existing: list[int], topic: str) -> list[int]:
    """``--partitions 0,2`` (kafka-get-offsets.sh's spelling); None: every partition."""
    if text is None:
        return existing
    try:
        wanted = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--partitions {text!r}: expected partition numbers separated by commas"
        ) from None
    for p in wanted:
        if p not in existing:
            raise ConfigError(
                f"--partitions: topic {topic!r} has no partition {p} (it has "
                f"{existing[0]}..{existing[-1]})"
            )
    return wanted


def offsets_for_time(
    mgr: LogDirsView, topic: str, partitions: list[int], time_ms: int
) -> dict[int, int | None]:
    """Per partition, the offset ``--time`` names (None: no record at or after it)."""
    hws = mgr.high_watermarks()
    starts = mgr.log_start_offsets()
    out: dict[int, int | None] = {}
    for p in partitions:
        lso = starts.get((topic, p), 0)
        end = max(hws.get((topic, p), 0), lso)
        if time_ms == LATEST:
            out[p] = end
        elif time_ms == EARLIEST:
            out[p] = lso
        else:
            found = mgr.get_log(topic, p).offset_for_timestamp(time_ms)
            out[p] = None if found is None or found >= end else max(found, lso)
    return out


def _get_offsets(args: argparse.Namespace, out: TextIO) -> int:
    time_ms = parse_time(args.time)
    with open_reader(args) as mgr:
        existing = mgr.partitions(args.topic)
        partitions = partition_list(args.partitions, existing, args.topic)
        offsets = offsets_for_time(mgr, args.topic, partitions, time_ms)
    if args.json:
        write_json(
            out,
            {
                "topic": args.topic,
                "time": time_ms,
                "offsets": [{"partition": p, "offset": o} for p, o in offsets.items()],
            },
        )
    else:
        out.writelines(f"{args.topic}:{p}:{'' if o is None else o}\n" for p, o in offsets.items())
    return EXIT_OK


def _get_offsets_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.add_argument(
        "--time",
        default="-1",
        metavar="MS|-1|-2",
        help="epoch ms: the first offset whose timestamp is at or after it; -1 "
        "(latest, the default) the high watermark; -2 (earliest) the log "
        "start offset",
    )
    p.add_argument("--partitions", metavar="P[,P...]", help="only these partitions (default: all)")
    add_path_args(p)
    add_json_arg(p)


# ---------------------------------------------------------------------- delete-records
def read_offset_json_file(path: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records.sh's file: ``{"partitions": [{"topic": "t", "partition": 0,
    "offset": 3}], "version": 1}``; every problem names the file and the entry."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--offset-json-file {path}: no such file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"--offset-json-file {path}: not JSON ({e})") from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(
            f'--offset-json-file {path}: expected {{"partitions": [{{"topic"'
            ': ..., "partition": ..., "offset": ...}}], "version": 1}}'
        )
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(entries):
        fields = entry if isinstance(entry, dict) else {}
        topic, partition = fields.get("topic"), fields.get("partition")
        offset = fields.get("offset")
        if not (isinstance(topic, str) and _is_int(partition) and _is_int(offset)):
            raise ConfigError(
                f"--offset-json-file {path}: partitions[{i}] needs a string "
                f"'topic' and integer 'partition' and 'offset', got {entry!r}"
            )
        if (topic, partition) in out:
            raise ConfigError(
                f"--offset-json-file {path}: partition {topic}-{partition} is listed twice"
            )
        out[(topic, partition)] = offset
    if not out:
        raise ConfigError(f"--offset-json-file {path}: no partitions listed")
    return out


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def delete_records(
    mgr: LogDirs, wanted: dict[tuple[str, int], int]
) -> dict[str, int]:
    """Raise each partition's log start offset (-1: to its high watermark); returns the
    new log start offsets by ``topic-partition``. Every partition is checked before any
    is changed."""
    hws = mgr.high_watermarks()
    targets: dict[tuple[str, int], int] = {}
    for (topic, p), offset in wanted.items():
        if p not in mgr.partitions(topic):
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{p}")
        end = hws.get((topic, p), 0)
        target = end if offset == -1 else offset
        if not 0 <= target <= end:
            raise ConfigError(
                f"offset {offset} for partition {topic}-{p}: expected -1 (the "
                f"high watermark) or 0..{end}"
            )
        targets[(topic, p)] = target
    # One call per partition: a commit each on a bucket, a checkpoint each locally.
    return {f"{topic}-{p}": mgr.delete_records(topic, p, target)
            for (topic, p), target in targets.items()}


def _delete_records(args: argparse.Namespace, out: TextIO) -> int:
    simple = args.topic is not None or args.partition is not None or args.offset is not None
    if args.offset_json_file is not None and simple:
        raise ConfigError("give --offset-json-file, or TOPIC --partition P --offset N, not both")
    if args.offset_json_file is not None:
        wanted = read_offset_json_file(args.offset_json_file)
    elif args.topic is None or args.partition is None or args.offset is None:
        raise ConfigError(
            "delete-records needs --offset-json-file FILE, or TOPIC --partition P --offset N"
        )
    else:
        wanted = {(args.topic, args.partition): args.offset}
    with writing(args) as mgr:
        result = delete_records(mgr, wanted)
    if args.json:
        write_json(
            out, {"partitions": [{"partition": k, "lowWatermark": v} for k, v in result.items()]}
        )
    else:
        out.write("Records delete operation completed:\n")
        out.writelines(f"partition: {k}\tlow_watermark: {v}\n" for k, v in result.items())
    return EXIT_OK


def _delete_records_args(p: argparse.ArgumentParser) -> None:
    add_topic_arg(p)
    p.set_defaults(topic_required=False)  # --offset-json-file names the topics instead
    p.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='kafka-delete-records.sh\'s file: {"partitions": [{"topic": "t", '
        '"partition": 0, "offset": 3}], "version": 1}',
    )
    p.add_argument("--partition", type=int, metavar="P")
    p.add_argument(
        "--offset", type=int, metavar="N", help="the new log start offset (-1: the high watermark)"
    )
    add_writer_args(p)
    add_json_arg(p)


COMMANDS = {
    "alter": Command(_alter_args, _alter),
    "get-offsets": Command(_get_offsets_args, _get_offsets),
    "delete-records": Command(_delete_records_args, _delete_records),
}
