"""``seglog dump-log FILE...``: like Kafka's ``kafka-dump-log.sh``.

The batches of ``.log`` files and KRaft ``.checkpoint`` snapshots (``--print-data-log``
adds the records and control records), the entries of ``.index`` / ``.timeindex`` files
checked against the ``.log`` beside them by Kafka's lookup rule (``index_check``; Kafka's
stricter report is printed, labelled, without failing), producer ``.snapshot`` and
``.txnindex`` files; any other file is ignored, as Kafka's tool does. A bucket's ``.log``
object is dumped as its stored bytes.

Each file is read once and every item handed to a reporter (``cli_dump_report``): text
as Kafka prints it, or JSON lines with ``--json``. Exit status 1 when a batch is invalid
or an index disagrees with its log.
"""

from __future__ import annotations

import argparse
import mmap
import os
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath
from typing import Any, TextIO, TypeVar

from seglog.logstore.errors import ConfigError, CorruptRecordError, SeglogError
from seglog.logstore.index.index_check import (
    SegmentBatches,
    kafka_dump_log_offset_mismatches,
    kafka_dump_log_time_mismatches,
    read_offset_index,
    read_time_index,
)
from seglog.logstore.log.partition_scan import offset_index_problems, time_index_problems
from seglog.logstore.records.record_format import verify_all
from seglog.logstore.storage.file_names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    index_file,
    log_file,
    parse_segment_file_name,
)
from seglog.logstore.storage.object_store_config import is_object_uri

from .cli_commands import Command
from .cli_common import add_json_arg, add_storage_args, storage_options
from .cli_dump_report import DumpReporter, JsonDumpReport, TextDumpReport
from .cli_output import Progress
from .kafka_files import (
    BOOTSTRAP_SNAPSHOT,
    KRAFT_SNAPSHOT_SUFFIX,
    control_records,
    parse_kraft_snapshot_name,
    read_producer_snapshot,
    read_txn_index,
)

_Entry = TypeVar("_Entry")  # one entry of a dumped state file


def map_file(path: Path) -> mmap.mmap | bytes:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def dump_log_file(
    path: PurePath,
    report: DumpReporter,
    *,
    print_data: bool = False,
    data: bytes | None = None,
    base_offset: int | None = None,
    progress: bool = True,
) -> int:
    """Report the batches of a ``.log`` file or a KRaft ``.checkpoint`` snapshot (records
    and control records too with ``print_data``); returns the number of problems.
    ``data``/``base_offset``: a bucket's ``.log`` object, already read. ``progress``: a
    bar of the bytes walked (on a terminal; never with ``--json``)."""
    parsed = parse_segment_file_name(path.name)
    heading = None
    if base_offset is not None:
        heading = f"Log starting offset: {base_offset}"
    elif parsed is not None:
        heading = f"Log starting offset: {parsed[0]}"
    elif path.name == BOOTSTRAP_SNAPSHOT:
        heading = "KRaft bootstrap snapshot"
    elif (snap := parse_kraft_snapshot_name(path.name)) is not None:
        heading = f"Snapshot end offset: {snap[0]}, epoch: {snap[1]}"
    report.begin_file(path, heading)
    buf = map_file(Path(path)) if data is None else data  # data: a bucket's object
    problems = 0
    bar = Progress(
        f"dump-log {path.name}", len(buf), in_bytes=True, hide_if_tty=report.out, enabled=progress
    )
    try:
        for check in verify_all(buf):
            h = check.header
            bar.advance(h.size if h is not None else 0)
            if h is None:
                report.problem(
                    path,
                    f"invalid data: {check.reason}",
                    text=f"Found invalid data: {check.reason}",
                )
                problems += 1
                break
            valid = check.valid
            problems += not valid
            if not (print_data and valid):
                report.batch(path, h, valid)
                continue
            try:
                if h.is_control:
                    report.batch(path, h, valid, controls=list(control_records(buf, h)))
                else:
                    report.batch(
                        path, h, valid, records=_records(bytes(buf[h.position : h.end_position]))
                    )
            except SeglogError as e:
                report.batch(path, h, valid)
                report.problem(
                    path,
                    f"invalid records in the batch at position {h.position}: {e}",
                    text=f"Found invalid records: {e}",
                )
                problems += 1
    finally:
        bar.close()
        if isinstance(buf, mmap.mmap):
            buf.close()
    return problems


def _records(raw: bytes) -> list[dict[str, Any]]:
    from seglog.logstore.records.record_codec import decode_batches

    # An Arrow table's rows as Python values: one type per column, so Any per field.
    rows: list[dict[str, Any]] = decode_batches(raw, include_headers=True).to_pylist()
    return rows


def segment_batches(log_path: Path) -> SegmentBatches | None:
    """The whole batches of a ``.log`` up to the first invalid header (None: no file)."""
    if not log_path.exists():
        return None
    buf = map_file(log_path)
    try:
        return SegmentBatches.from_headers(
            c.header for c in verify_all(buf, check_crc=False) if c.header is not None
        )
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _batches_beside(path: Path, base: int, report: DumpReporter) -> SegmentBatches | None:
    """The batches of the ``.log`` beside the index ``path`` (a note when there is none:
    its entries cannot be checked)."""
    batches = segment_batches(log_file(path.parent, base))
    if batches is None:
        report.note(
            path, f"No {log_file(path.parent, base).name} beside the index: entries not checked"
        )
    return batches


def _check_index(
    path: Path,
    base: int,
    report: DumpReporter,
    label: str,
    problems_of: Callable[[Path, int, SegmentBatches], list[str]],
) -> tuple[SegmentBatches | None, int]:
    """The lookup rule's problems of the index ``path`` against the ``.log`` beside it,
    reported as ``<label> problem: ...``; returns those batches (None: no ``.log``) and
    how many problems."""
    batches = _batches_beside(path, base, report)
    if batches is None:
        return None, 0
    problems = problems_of(path, base, batches)
    for m in problems:
        report.problem(path, m, text=f"{label} problem: {path}: {m}")
    return batches, len(problems)


def dump_index_file(path: Path, base: int, report: DumpReporter) -> int:
    """Report an ``.index`` file of the segment at ``base``; check it against the ``.log``
    beside it with the lookup rule (problems) and report what Kafka's stricter dump tool
    would report (no problem)."""
    report.begin_file(path)
    entries = read_offset_index(path, base)
    for e, p in zip(entries.keys.tolist(), entries.values.tolist(), strict=True):
        report.offset_index_entry(path, e, p)
    batches, problems = _check_index(path, base, report, "Index", offset_index_problems)
    if batches is not None:
        report.offset_mismatches(path, kafka_dump_log_offset_mismatches(entries, batches))
    return problems


def dump_time_index_file(path: Path, base: int, report: DumpReporter) -> int:
    """Report a ``.timeindex`` file of the segment at ``base``; check it against the
    ``.log`` and ``.index`` beside it with the lookup rule (problems) and report what
    Kafka's stricter dump tool would report (no problem)."""
    report.begin_file(path)
    entries = read_time_index(path, base)
    for t, o in zip(entries.keys.tolist(), entries.values.tolist(), strict=True):
        report.time_index_entry(path, t, o)
    batches, problems = _check_index(path, base, report, "Time index", time_index_problems)
    if batches is not None:
        offsets = index_file(path.parent, base)
        offset_entries = read_offset_index(offsets, base) if offsets.exists() else None
        report.time_mismatches(
            path, kafka_dump_log_time_mismatches(entries, offset_entries, batches)
        )
    return problems


def _dump_entries(
    path: Path,
    report: DumpReporter,
    read: Callable[[Path], Iterable[_Entry]],
    each: Callable[[Path, _Entry], object],
) -> int:
    """Report every entry of a file ``read`` parses, or its damage (one problem)."""
    report.begin_file(path)
    try:
        entries = read(path)
    except CorruptRecordError as e:
        report.problem(path, str(e), text=str(e))
        return 1
    for entry in entries:
        each(path, entry)
    return 0


def dump_producer_snapshot(path: Path, report: DumpReporter) -> int:
    return _dump_entries(path, report, read_producer_snapshot, report.producer_entry)


def dump_txn_index(path: Path, report: DumpReporter) -> int:
    return _dump_entries(path, report, read_txn_index, report.txn_entry)


def _dump_files(args: argparse.Namespace) -> list[str]:
    """FILE... and kafka-dump-log.sh's ``--files`` (comma-separated, repeatable)."""
    files = [*args.files, *(f for item in args.files_flag for f in item.split(",") if f)]
    if not files:
        raise ConfigError("dump-log needs files: FILE... or --files FILE[,FILE...]")
    return files


def _dump_log(args: argparse.Namespace, out: TextIO) -> int:
    files = _dump_files(args)
    report: DumpReporter = (
        JsonDumpReport(out) if args.json else TextDumpReport(out, payload=args.print_data_log)
    )
    print_data = args.print_data_log or args.deep_iteration
    problems = 0
    options = storage_options(args, files)
    for name in files:
        if is_object_uri(name):
            problems += _dump_object(
                name, report, print_data=print_data, options=options, progress=not args.json
            )
            continue
        path = Path(name)
        if not path.is_file():
            report.problem(path, "no such file", text=f"{path}: no such file")
            problems += 1
            continue
        parsed = parse_segment_file_name(path.name)
        ext = parsed[1] if parsed else path.suffix
        if ext in (LOG_SUFFIX, KRAFT_SNAPSHOT_SUFFIX):
            problems += dump_log_file(path, report, print_data=print_data, progress=not args.json)
        elif ext == INDEX_SUFFIX and parsed:
            problems += dump_index_file(path, parsed[0], report)
        elif ext == TIME_INDEX_SUFFIX and parsed:
            problems += dump_time_index_file(path, parsed[0], report)
        elif ext == SNAPSHOT_SUFFIX:
            problems += dump_producer_snapshot(path, report)
        elif ext == TXN_INDEX_SUFFIX:
            problems += dump_txn_index(path, report)
        else:
            # Kafka's tool skips every other file (checkpoints, partition.metadata,
            # meta.properties, ...) the same way, without failing.
            report.ignored(path)
    return 1 if problems else 0


def _dump_object(
    uri: str, report: DumpReporter, *, print_data: bool, options: dict[str, str], progress: bool
) -> int:
    """``dump-log`` of a bucket's ``.log`` object (``<uri>/<topic>-<p>/<base>-<id>.log``):
    its stored bytes, as Kafka's tool shows a file (an ``offset_delta`` of its commit is
    not applied: this is what the object holds)."""
    from seglog.logstore.bucket.bucket_segment import ObjectPath
    from seglog.logstore.bucket.bucket_state import parse_segment_stem
    from seglog.logstore.storage.object_storage import ObjectStorage

    path = ObjectPath(uri)
    root, _, name = uri.rpartition("/")
    parsed = parse_segment_stem(name[: -len(LOG_SUFFIX)]) if name.endswith(LOG_SUFFIX) else None
    if parsed is None:
        message = (
            "dump-log reads a bucket's .log objects (<topic>-<p>/<20-digit base>-<16 hex id>.log)"
        )
        report.problem(path, message, text=f"{uri}: {message}")
        return 1
    try:
        data = ObjectStorage(root, options).read(name)
    except FileNotFoundError:
        report.problem(path, "no such object", text=f"{uri}: no such object")
        return 1
    return dump_log_file(
        path,
        report,
        print_data=print_data,
        data=data,
        base_offset=parsed[0],
        progress=progress,
    )


def _dump_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help=".log, .index or .timeindex files")
    p.add_argument(
        "--files",
        action="append",
        default=[],
        dest="files_flag",
        metavar="FILE[,FILE...]",
        help="the same, as kafka-dump-log.sh takes them",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print every record (offset, timestamp, key, payload, headers)",
    )
    p.add_argument(
        "--deep-iteration",
        action="store_true",
        help="print every record's offset, timestamp, sizes and header keys, "
        "without its data (kafka-dump-log.sh; --print-data-log implies it)",
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"dump-log": Command(_dump_log_args, _dump_log, check_usage=_dump_files, guarded=False)}
