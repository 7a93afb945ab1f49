"""The ``seglog`` command line.

Subcommands (``seglog <command> --help`` for each):

* ``dump-log FILE...`` — like Kafka's ``kafka-dump-log.sh``: the batches of ``.log`` files
  and KRaft ``.checkpoint`` snapshots (``--print-data-log`` adds the records and control
  records), the entries of ``.index`` / ``.timeindex`` files checked against the ``.log``
  beside them by Kafka's lookup rule (``index_check``; Kafka's stricter report is printed,
  labelled, without failing), producer ``.snapshot`` and ``.txnindex`` files; any other
  file is ignored, as Kafka's tool does.
* ``check [--fix] DIR...`` — check partition directories (or log dirs holding them)
  without changing anything: every batch's CRC and size, offsets by the rules readers
  apply (``offset_continuity``: increasing, inside their segment, contiguous unless
  compacted, reaching the high watermark), both indexes against the log by the lookup
  rule, and each ``.txnindex`` (layout, order, and every entry
  naming an abort marker of its producer in the segment). In a log dir (one holding
  seglog or Kafka state files) also every checkpoint and state file
  (``logstore.log_check``) and the state of the exactly-once sink in ``.seglog-sink/``
  (each ledger against the data it names). Prints problems, notes (a missing index,
  rebuilt on load) and a summary line per partition. ``--fix`` (log dirs only, no writer
  running) repairs them: damaged high-watermark / log-start-offset checkpoints are
  rebuilt from the recovered logs (``docs/checkpoints.md``).

Both take bucket URIs too: ``dump-log`` a ``.log`` object, ``check`` a bucket log dir
(its committed state against the objects, ``logstore.bucket_check``).

Exit status: 0 when everything read is valid (or was fixed), 1 when a batch is invalid,
an index disagrees with its log, a state file is damaged, or a sink ledger is damaged or
contradicts the data, 2 on bad usage. New subcommands register in ``_COMMANDS``.

Both take ``--json`` (``check``: one document, ``dump-log``: JSON lines; keys in
docs/cli.md): the walk is the same, a reporter (``cli_check_report``, ``cli_dump_report``)
chooses the form.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np

from seglog import __version__
from seglog.logstore.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.errors import (
    ConfigError,
    CorruptRecordError,
    LogDirError,
    MissingDataError,
    SeglogError,
)
from seglog.logstore.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    INDEX_SUFFIX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    index_file,
    log_file,
    parse_partition_dir_name,
    parse_segment_file_name,
    time_index_file,
)
from seglog.logstore.index_check import (
    SegmentBatches,
    kafka_dump_log_offset_mismatches,
    kafka_dump_log_time_mismatches,
    offset_index_violations,
    read_offset_index,
    read_time_index,
    time_index_violations,
)
from seglog.logstore.object_store_config import is_object_uri
from seglog.logstore.offset_continuity import ContinuityCheck, OffsetPolicy, offset_policy
from seglog.logstore.record_format import verify_all

from .cli_check_report import CheckReporter, JsonCheckReport, TextCheckReport
from .cli_commands import register as _register_operations
from .cli_common import (
    add_json_arg,
    add_kafka_compat_args,
    add_storage_args,
    reader_gone,
    resolve_kafka_compat_args,
    storage_options,
)
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


def _map(path: Path) -> mmap.mmap | bytes:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def dump_log_file(path: Path, report: DumpReporter, *, print_data: bool = False,
                  data: bytes | None = None, base_offset: int | None = None) -> int:
    """Report the batches of a ``.log`` file or a KRaft ``.checkpoint`` snapshot (records
    and control records too with ``print_data``); returns the number of problems.
    ``data``/``base_offset``: a bucket's ``.log`` object, already read."""
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
    buf = _map(path) if data is None else data
    problems = 0
    bar = Progress(f"dump-log {path.name}", len(buf), unit=" bytes",
                   hide_if_tty=report.out)
    try:
        for check in verify_all(buf):
            h = check.header
            bar.advance(h.size if h is not None else 0)
            if h is None:
                report.problem(path, f"invalid data: {check.reason}",
                               text=f"Found invalid data: {check.reason}")
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
                    report.batch(path, h, valid,
                                 records=_records(bytes(buf[h.position:h.end_position])))
            except SeglogError as e:
                report.batch(path, h, valid)
                report.problem(path, f"invalid records in the batch at position "
                                     f"{h.position}: {e}", text=f"Found invalid records: {e}")
                problems += 1
    finally:
        bar.close()
        if isinstance(buf, mmap.mmap):
            buf.close()
    return problems


def _records(raw: bytes) -> list[dict]:
    from seglog.logstore.record_codec import decode_batches

    return decode_batches(raw, include_headers=True).to_pylist()


def segment_batches(log_path: Path) -> SegmentBatches | None:
    """The whole batches of a ``.log`` up to the first invalid header (None: no file)."""
    if not log_path.exists():
        return None
    buf = _map(log_path)
    try:
        return SegmentBatches.from_headers(c.header for c in verify_all(buf, check_crc=False)
                                           if c.header is not None)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _violation_messages(found: list, total: int) -> list[str]:
    messages = [v.message for v in found]
    if total > len(found):
        messages.append(f"... and {total - len(found)} more entries like these")
    return messages


def offset_index_problems(path: Path, base: int, batches: SegmentBatches) -> list[str]:
    """Why entries of an ``.index`` would mislead a lookup (``index_check``'s rule); each
    message is about ``path``."""
    entries = read_offset_index(path, base)
    messages = [f"{entries.torn_bytes} bytes after the last whole entry"] \
        if entries.torn_bytes else []
    return messages + _violation_messages(*offset_index_violations(entries, batches))


def time_index_problems(path: Path, base: int, batches: SegmentBatches) -> list[str]:
    """Why entries of a ``.timeindex`` would mislead a lookup (``index_check``'s rule),
    with lookups through the ``.index`` beside it; each message is about ``path``."""
    entries = read_time_index(path, base)
    messages = [f"{entries.torn_bytes} bytes after the last whole entry"] \
        if entries.torn_bytes else []
    offsets = index_file(path.parent, base)
    offset_entries = read_offset_index(offsets, base) if offsets.exists() else None
    if offset_entries is not None and np.any(np.diff(offset_entries.keys) <= 0):
        return messages + [f"not checked: {offsets.name} is not sorted by offset"]
    return messages + _violation_messages(
        *time_index_violations(entries, offset_entries, batches))


def dump_index_file(path: Path, base: int, report: DumpReporter) -> int:
    """Report an ``.index`` file of the segment at ``base``; check it against the ``.log``
    beside it with the lookup rule (problems) and report what Kafka's stricter dump tool
    would report (no problem)."""
    report.begin_file(path)
    entries = read_offset_index(path, base)
    for e, p in zip(entries.keys.tolist(), entries.values.tolist(), strict=True):
        report.offset_index_entry(path, e, p)
    batches = segment_batches(log_file(path.parent, base))
    if batches is None:
        report.note(path, f"No {log_file(path.parent, base).name} beside the index: entries "
                          "not checked")
        return 0
    problems = offset_index_problems(path, base, batches)
    for m in problems:
        report.problem(path, m, text=f"Index problem: {path}: {m}")
    report.offset_mismatches(path, kafka_dump_log_offset_mismatches(entries, batches))
    return len(problems)


def dump_time_index_file(path: Path, base: int, report: DumpReporter) -> int:
    """Report a ``.timeindex`` file of the segment at ``base``; check it against the
    ``.log`` and ``.index`` beside it with the lookup rule (problems) and report what
    Kafka's stricter dump tool would report (no problem)."""
    report.begin_file(path)
    entries = read_time_index(path, base)
    for t, o in zip(entries.keys.tolist(), entries.values.tolist(), strict=True):
        report.time_index_entry(path, t, o)
    batches = segment_batches(log_file(path.parent, base))
    if batches is None:
        report.note(path, f"No {log_file(path.parent, base).name} beside the index: entries "
                          "not checked")
        return 0
    problems = time_index_problems(path, base, batches)
    for m in problems:
        report.problem(path, m, text=f"Time index problem: {path}: {m}")
    offsets = index_file(path.parent, base)
    report.time_mismatches(path, kafka_dump_log_time_mismatches(
        entries, read_offset_index(offsets, base) if offsets.exists() else None, batches))
    return len(problems)


def dump_producer_snapshot(path: Path, report: DumpReporter) -> int:
    report.begin_file(path)
    try:
        entries = read_producer_snapshot(path)
    except CorruptRecordError as e:
        report.problem(path, str(e), text=str(e))
        return 1
    for entry in entries:
        report.producer_entry(path, entry)
    return 0


def dump_txn_index(path: Path, report: DumpReporter) -> int:
    report.begin_file(path)
    try:
        entries = read_txn_index(path)
    except CorruptRecordError as e:
        report.problem(path, str(e), text=str(e))
        return 1
    for entry in entries:
        report.txn_entry(path, entry)
    return 0


def _dump_files(args: argparse.Namespace) -> list[str]:
    """FILE... and kafka-dump-log.sh's ``--files`` (comma-separated, repeatable)."""
    files = [*args.files, *(f for item in args.files_flag for f in item.split(",") if f)]
    if not files:
        raise ConfigError("dump-log needs files: FILE... or --files FILE[,FILE...]")
    return files


def _dump_log(args: argparse.Namespace, out: TextIO) -> int:
    files = _dump_files(args)
    report: DumpReporter = (JsonDumpReport(out) if args.json
                            else TextDumpReport(out, payload=args.print_data_log))
    print_data = args.print_data_log or args.deep_iteration
    problems = 0
    options = storage_options(args, files)
    for name in files:
        if is_object_uri(name):
            problems += _dump_object(name, report, print_data=print_data, options=options)
            continue
        path = Path(name)
        if not path.is_file():
            report.problem(path, "no such file", text=f"{path}: no such file")
            problems += 1
            continue
        parsed = parse_segment_file_name(path.name)
        ext = parsed[1] if parsed else path.suffix
        if ext in (LOG_SUFFIX, KRAFT_SNAPSHOT_SUFFIX):
            problems += dump_log_file(path, report, print_data=print_data)
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


def _dump_object(uri: str, report: DumpReporter, *, print_data: bool,
                 options: dict[str, str]) -> int:
    """``dump-log`` of a bucket's ``.log`` object (``<uri>/<topic>-<p>/<base>-<id>.log``):
    its stored bytes, as Kafka's tool shows a file (an ``offset_delta`` of its commit is
    not applied: this is what the object holds)."""
    from seglog.logstore.bucket_segment import ObjectPath
    from seglog.logstore.bucket_state import parse_segment_stem
    from seglog.logstore.object_storage import ObjectStorage

    path = ObjectPath(uri)
    root, _, name = uri.rpartition("/")
    parsed = parse_segment_stem(name[:-len(LOG_SUFFIX)]) if name.endswith(LOG_SUFFIX) else None
    if parsed is None:
        message = ("dump-log reads a bucket's .log objects "
                   "(<topic>-<p>/<20-digit base>-<16 hex id>.log)")
        report.problem(path, message, text=f"{uri}: {message}")  # type: ignore[arg-type]
        return 1
    try:
        data = ObjectStorage(root, options).read(name)
    except FileNotFoundError:
        report.problem(path, "no such object", text=f"{uri}: no such object")  # type: ignore[arg-type]
        return 1
    return dump_log_file(path, report, print_data=print_data, data=data,  # type: ignore[arg-type]
                         base_offset=parsed[0])


def check_partition_dir(dir_: Path, report: CheckReporter) -> int:
    """Check one partition directory (read-only); returns the number of problems.
    Notes (a missing index Kafka's loader rebuilds) are reported but are no problem.
    Offsets follow ``offset_continuity``'s rules, as readers apply them, up to the high
    watermark of the log dir's ``replication-offset-checkpoint`` when there is one."""
    bases = sorted(p[0] for p in (parse_segment_file_name(n) for n in os.listdir(dir_))
                   if p is not None and p[1] == LOG_SUFFIX and not p[2])
    problems = notes = 0
    batches = 0
    policy = offset_policy(dir_)
    check = ContinuityCheck(dir_.name, contiguous=policy is OffsetPolicy.CONTIGUOUS,
                            expected=bases[0] if bases else 0,
                            note_gaps=policy is OffsetPolicy.UNKNOWN)
    for i, base in enumerate(bases):
        path = log_file(dir_, base)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        try:
            check.enter(path, base, next_base)
        except MissingDataError as e:
            report.problem(path, str(e), text=str(e))
            problems += 1
            check.expected = e.end
            check.enter(path, base, next_base)
        buf = _map(path)
        headers = []
        markers: set[tuple[int, int]] = set()  # (offset, producer id) of control batches
        try:
            for v in verify_all(buf, segment_base=base):  # offsets: the continuity rules
                h = v.header
                if not v.valid:
                    report.problem(path, v.reason)
                    problems += 1
                if h is None or v.partial:
                    break
                headers.append(h)
                if h.is_control:
                    markers.add((h.base_offset, h.producer_id))
                try:
                    check.batch(h)
                except CorruptRecordError as e:
                    report.problem(path, str(e), text=str(e))
                    problems += 1
                    check.resync(h)
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
        problems += check_txn_index(dir_, base, markers, report)
        batches += len(headers)
        seg = SegmentBatches.from_headers(headers)
        for idx, name, rule in ((index_file(dir_, base), "offset index", offset_index_problems),
                                (time_index_file(dir_, base), "time index",
                                 time_index_problems)):
            if not idx.exists():
                report.note(idx, f"no {name}; loading rebuilds it, as Kafka's loader does "
                                 "(lookups meanwhile scan the segment)")
                notes += 1
                continue
            found = rule(idx, base, seg)
            problems += len(found)
            for message in found:
                report.problem(idx, message)
    hw = _high_watermark(dir_)
    if hw is not None and bases:
        try:
            check.finish(hw, hw)
        except SeglogError as e:
            report.problem(dir_, str(e), text=str(e))
            problems += 1
    gaps = check.gap_note()
    if gaps is not None:
        report.note(dir_, gaps)
        notes += 1
    report.end_partition(dir_, len(bases), batches,
                         max(check.expected, bases[-1] if bases else 0), problems, notes)
    return problems


def _high_watermark(dir_: Path) -> int | None:
    """The partition's entry in its log dir's high-watermark checkpoint, if readable (a
    damaged one is reported by the log dir's own check)."""
    parsed = parse_partition_dir_name(dir_.name)
    path = dir_.parent / HIGH_WATERMARK_CHECKPOINT
    if parsed is None or not path.exists():
        return None
    try:
        return OffsetCheckpointFile(path).read().get(parsed)
    except SeglogError:
        return None


_STATE_FILES = (HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                LOG_START_OFFSET_CHECKPOINT, CLEAN_SHUTDOWN_FILE, LOCK_FILE, "meta.properties")


def check_state_files(path: Path, report: CheckReporter, *, fix: bool) -> int:
    """Check (``fix``: repair) the checkpoints and state files of the log dir ``path``;
    returns the number of problems left. A directory that holds none of a log dir's
    state files is only a directory of partitions: nothing to check."""
    from seglog.logstore.log_manager import check_log_dirs

    if not fix and not any(os.path.lexists(path / n) for n in _STATE_FILES):
        return 0
    left = 0
    for p in check_log_dirs([path], fix=fix):
        report.state_finding(p)
        left += not (p.note or p.fixed)
    return left


def check_txn_index(dir_: Path, base: int, markers: set[tuple[int, int]],
                    report: CheckReporter) -> int:
    """Check a segment's ``.txnindex`` (absent is fine: no aborted transaction, or lost,
    which readers and the writer's loader handle); returns the number of problems."""
    from seglog.logstore.errors import CorruptIndexError
    from seglog.logstore.file_names import txn_index_file
    from seglog.logstore.txn_index import TransactionIndex

    path = txn_index_file(dir_, base)
    if not path.exists():
        return 0
    try:
        entries = TransactionIndex(path, base, writable=False).entries()
    except CorruptIndexError as e:
        message = f"{e} (the writer's recovery rebuilds it)"
        report.problem(path, message, text=message)
        return 1
    for entry in entries:
        if (entry.last_offset, entry.producer_id) not in markers:
            report.problem(path, f"entry for producer {entry.producer_id} names offset "
                                 f"{entry.last_offset}, which holds no control batch of that "
                                 "producer")
            return 1
    return 0


def _check(args: argparse.Namespace, out: TextIO) -> int:
    report: CheckReporter = JsonCheckReport(out) if args.json else TextCheckReport(out)
    problems = 0
    options = storage_options(args, args.dirs)
    for name in args.dirs:
        if is_object_uri(name):
            problems += _check_bucket(name, report, fix=args.fix, options=options)
            continue
        path = Path(name)
        report.begin_dir(path)
        if not path.is_dir():
            report.dir_problem(path, "no such directory")
            problems += 1
            continue
        has_segments = any(n.endswith(LOG_SUFFIX) for n in os.listdir(path))
        if args.fix and has_segments:
            report.dir_problem(path, "--fix needs the log dir holding this partition")
            problems += 1
            continue
        if not has_segments:
            # First: after --fix, the scan below sees the repaired files.
            problems += check_state_files(path, report, fix=args.fix)
        dirs = [path] if has_segments else sorted(
            p for p in path.iterdir()
            if p.is_dir() and any(n.endswith(LOG_SUFFIX) for n in os.listdir(p)))
        if not dirs:
            report.dir_note(path, "no segments here or in its subdirectories")
        with Progress(f"check {path}", len(dirs)) as bar:
            for d in dirs:
                bar.clear()
                problems += check_partition_dir(d, report)
                bar.advance()
        problems += _check_sink_state(path, report)
    code = 1 if problems else 0
    report.finish(code)
    return code


def _check_bucket(uri: str, report: CheckReporter, *, fix: bool,
                  options: dict[str, str]) -> int:
    """A bucket log dir: its committed state against its objects (``bucket_check``);
    returns the number of problems. Unreferenced objects are notes."""
    from seglog.logstore.bucket_manager import BucketLogManager
    from seglog.logstore.bucket_segment import ObjectPath
    from seglog.logstore.bucket_state import COMMIT_DIR, NO_VERSION

    path = ObjectPath(uri)
    report.begin_dir(path)  # type: ignore[arg-type]
    refusal = ("--fix is for local log dirs (a bucket is repaired by its commits; seglog "
               "maintain collects leftovers)")
    mgr = None
    if not fix:
        try:
            mgr = BucketLogManager(uri, read_only=True, storage_options=options)
        except LogDirError as e:  # a partition's prefix, or a log dir nested in another
            refusal = str(e)
        else:
            if mgr.state.version == NO_VERSION:
                # As a missing local dir: a mistyped or empty prefix is no log dir to pass.
                mgr.close()
                mgr = None
                refusal = (f"no log dir here: nothing under {uri}/{COMMIT_DIR}/ (a mistyped "
                           "bucket or prefix?)")
    if mgr is None:
        report.dir_problem(path, refusal)  # type: ignore[arg-type]
        return 1
    with mgr:
        findings, partitions = mgr.check_objects()
    for f in findings:
        where = ObjectPath(f.where)
        if f.problem:
            report.problem(where, f.message)  # type: ignore[arg-type]
        else:
            report.note(where, f.message)  # type: ignore[arg-type]
    for p in partitions:
        report.end_partition(ObjectPath(p.where), p.segments, p.batches,  # type: ignore[arg-type]
                             p.log_end_offset, p.problems, p.notes)
    return sum(f.problem for f in findings)


def _check_sink_state(log_dir: Path, report: CheckReporter) -> int:
    """The exactly-once sink's ledgers and state files in a log dir (docs/sink-state.md)."""
    from seglog.streaming.sink_check import check_sink_state

    findings = check_sink_state(log_dir)
    for f in findings:
        report.sink_finding(f)
    return sum(f.problem for f in findings)


_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                           Callable[[argparse.Namespace, TextIO], int]]] = {}


def _dump_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help=".log, .index or .timeindex files")
    p.add_argument("--files", action="append", default=[], dest="files_flag",
                   metavar="FILE[,FILE...]", help="the same, as kafka-dump-log.sh takes them")
    p.add_argument("--print-data-log", action="store_true",
                   help="print every record (offset, timestamp, key, payload, headers)")
    p.add_argument("--deep-iteration", action="store_true",
                   help="print every record's offset, timestamp, sizes and header keys, "
                        "without its data (kafka-dump-log.sh; --print-data-log implies it)")
    add_json_arg(p)
    add_storage_args(p)


_COMMANDS["dump-log"] = ("print the batches and index entries of segment files "
                         "(like kafka-dump-log.sh)", _dump_log_args, _dump_log)


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", help="partition directories, or log dirs holding them")
    p.add_argument("--fix", action="store_true",
                   help="repair the log dirs (no writer may run): rebuild damaged checkpoints "
                        "from the recovered logs, rewrite bad state files")
    add_json_arg(p)
    add_storage_args(p)


_COMMANDS["check"] = ("check partition directories (batches, offsets, indexes) and log dirs "
                      "(checkpoints, state files); --fix repairs", _check_args, _check)


_register_operations(_COMMANDS)


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="seglog", description="seglog tools")
    parser.add_argument("--version", action="version", version=f"seglog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for name, (help_text, add_args, run) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        add_kafka_compat_args(p)
        p.set_defaults(run=run)
        commands[name] = p
    return parser, commands


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    parser, commands = _build()
    args, unknown = parser.parse_known_args(argv)
    command = commands[args.command]
    if unknown:
        # the subcommand's usage, not the top-level one (argparse's default here)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        resolve_kafka_compat_args(args)
        if args.command == "dump-log":
            _dump_files(args)  # none given: a usage error, with dump-log's usage
    except ConfigError as e:
        command.error(str(e))
    stream = out or sys.stdout
    try:
        code: int = args.run(args, stream)
        # what is still buffered goes out here, where a closed pipe is handled below,
        # not in the interpreter's exit (status 120 and a warning)
        stream.flush()
        return code
    except BrokenPipeError:
        return reader_gone(stream)
    except (SeglogError, OSError) as e:
        sys.stderr.write(f"seglog {args.command}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
