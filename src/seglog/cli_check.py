"""``seglog check [--fix] DIR...``: check partition directories (or log dirs holding them)
without changing anything.

Every batch's CRC and size, offsets by the rules readers apply (``offset_continuity``:
increasing, inside their segment, contiguous unless compacted, reaching the high
watermark), both indexes against the log by the lookup rule, and each ``.txnindex``
(layout, order, and every entry naming an abort marker of its producer in the segment).
In a log dir (one holding seglog or Kafka state files) also every checkpoint and state
file (``logstore.log_check``) and the state of the exactly-once sink in ``.seglog-sink/``
(each ledger against the data it names). Prints problems, notes (a missing index,
rebuilt on load) and a summary line per partition. ``--fix`` (log dirs only, no writer
running) repairs them: damaged high-watermark / log-start-offset checkpoints are rebuilt
from the recovered logs (``docs/checkpoints.md``). A bucket URI is checked as its
committed state against its objects (``logstore.bucket_check``).

The walk is the same for text and ``--json``: a reporter (``cli_check_report``) chooses
the form. Exit status 1 when a batch is invalid, an index disagrees with its log, a state
file is damaged, or a sink ledger is damaged or contradicts the data.
"""

from __future__ import annotations

import argparse
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from seglog.logstore.errors import (
    CorruptRecordError,
    LogDirError,
    MissingDataError,
    SeglogError,
)
from seglog.logstore.index.index_check import SegmentBatches
from seglog.logstore.log.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.log.offset_continuity import ContinuityCheck, OffsetPolicy, offset_policy
from seglog.logstore.records.record_format import verify_all
from seglog.logstore.storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    index_file,
    log_file,
    parse_partition_dir_name,
    parse_segment_file_name,
    time_index_file,
)
from seglog.logstore.storage.object_store_config import is_object_uri

from .cli_check_report import CheckReporter, JsonCheckReport, TextCheckReport
from .cli_commands import Command
from .cli_common import add_json_arg, add_storage_args, storage_options
from .cli_dump_log import map_file, offset_index_problems, time_index_problems
from .cli_output import Progress


def check_partition_dir(
    dir_: Path, report: CheckReporter, progress: Callable[[int], object] | None = None
) -> int:
    """Check one partition directory (read-only); returns the number of problems;
    ``progress`` is told the bytes of each batch read.
    Notes (a missing index Kafka's loader rebuilds) are reported but are no problem.
    Offsets follow ``offset_continuity``'s rules, as readers apply them, up to the high
    watermark of the log dir's ``replication-offset-checkpoint`` when there is one."""
    bases = sorted(
        p[0]
        for p in (parse_segment_file_name(n) for n in os.listdir(dir_))
        if p is not None and p[1] == LOG_SUFFIX and not p[2]
    )
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
        buf = map_file(path)
        headers = []
        markers: set[tuple[int, int]] = set()  # (offset, producer id) of control batches
        try:
            for v in verify_all(buf, segment_base=base):  # offsets: the continuity rules
                h = v.header
                if progress is not None and h is not None:
                    progress(h.size)
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
        for idx, name, rule in (
            (index_file(dir_, base), "offset index", offset_index_problems),
            (time_index_file(dir_, base), "time index", time_index_problems),
        ):
            if not idx.exists():
                report.note(
                    idx,
                    f"no {name}; loading rebuilds it, as Kafka's loader does "
                    "(lookups meanwhile scan the segment)",
                )
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
    report.end_partition(
        dir_, len(bases), batches, max(check.expected, bases[-1] if bases else 0), problems, notes
    )
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


_STATE_FILES = (
    HIGH_WATERMARK_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEAN_SHUTDOWN_FILE,
    LOCK_FILE,
    "meta.properties",
)


def check_state_files(path: Path, report: CheckReporter, *, fix: bool) -> int:
    """Check (``fix``: repair) the checkpoints and state files of the log dir ``path``;
    returns the number of problems left. A directory that holds none of a log dir's
    state files is only a directory of partitions: nothing to check."""
    from seglog.logstore.manager.log_manager import check_log_dirs

    if not fix and not any(os.path.lexists(path / n) for n in _STATE_FILES):
        return 0
    left = 0
    for p in check_log_dirs([path], fix=fix):
        report.state_finding(p)
        left += not (p.note or p.fixed)
    return left


def check_txn_index(
    dir_: Path, base: int, markers: set[tuple[int, int]], report: CheckReporter
) -> int:
    """Check a segment's ``.txnindex`` (absent is fine: no aborted transaction, or lost,
    which readers and the writer's loader handle); returns the number of problems."""
    from seglog.logstore.errors import CorruptIndexError
    from seglog.logstore.index.txn_index import TransactionIndex
    from seglog.logstore.storage.file_names import txn_index_file

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
            report.problem(
                path,
                f"entry for producer {entry.producer_id} names offset "
                f"{entry.last_offset}, which holds no control batch of that "
                "producer",
            )
            return 1
    return 0


def _check(args: argparse.Namespace, out: TextIO) -> int:
    report: CheckReporter = JsonCheckReport(out) if args.json else TextCheckReport(out)
    problems = 0
    options = storage_options(args, args.dirs)
    for name in args.dirs:
        if is_object_uri(name):
            problems += _check_bucket(
                name, report, fix=args.fix, options=options, progress=not args.json
            )
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
        dirs = (
            [path]
            if has_segments
            else sorted(
                p
                for p in path.iterdir()
                if p.is_dir() and any(n.endswith(LOG_SUFFIX) for n in os.listdir(p))
            )
        )
        if not dirs:
            report.dir_note(path, "no segments here or in its subdirectories")
        total = sum(
            os.path.getsize(d / n) for d in dirs for n in os.listdir(d) if n.endswith(LOG_SUFFIX)
        )
        with Progress(f"check {path}", total, in_bytes=True, enabled=not args.json) as bar:
            if isinstance(report, TextCheckReport):
                report.before_write = bar.clear  # a finding's line, then the bar again
            for d in dirs:
                problems += check_partition_dir(d, report, progress=bar.advance)
        problems += _check_sink_state(path, report)
    code = 1 if problems else 0
    report.finish(code)
    return code


def _check_bucket(
    uri: str, report: CheckReporter, *, fix: bool, options: dict[str, str], progress: bool
) -> int:
    """A bucket log dir: its committed state against its objects (``bucket_check``);
    returns the number of problems. Unreferenced objects are notes."""
    from seglog.logstore.bucket.bucket_manager import BucketLogManager
    from seglog.logstore.bucket.bucket_segment import ObjectPath
    from seglog.logstore.bucket.bucket_state import COMMIT_DIR, NO_VERSION

    path = ObjectPath(uri)
    report.begin_dir(path)
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
        report.dir_problem(path, refusal)
        return 1
    with mgr, Progress(f"check {uri}", in_bytes=True, enabled=progress) as bar:
        findings, partitions = mgr.check_objects(progress=bar.on_bytes)
    for f in findings:
        where = ObjectPath(f.where)
        if f.problem:
            report.problem(where, f.message)
        else:
            report.note(where, f.message)
    for p in partitions:
        report.end_partition(
            ObjectPath(p.where),
            p.segments,
            p.batches,
            p.log_end_offset,
            p.problems,
            p.notes,
        )
    return sum(f.problem for f in findings)


def _check_sink_state(log_dir: Path, report: CheckReporter) -> int:
    """The exactly-once sink's ledgers and state files in a log dir (docs/sink-state.md)."""
    from seglog.streaming.sink_check import check_sink_state

    findings = check_sink_state(log_dir)
    for f in findings:
        report.sink_finding(f)
    return sum(f.problem for f in findings)


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", help="partition directories, or log dirs holding them")
    p.add_argument(
        "--fix",
        action="store_true",
        help="repair the log dirs (no writer may run): rebuild damaged checkpoints "
        "from the recovered logs, rewrite bad state files",
    )
    add_json_arg(p)
    add_storage_args(p)


COMMANDS = {"check": Command(_check_args, _check, guarded=False)}
