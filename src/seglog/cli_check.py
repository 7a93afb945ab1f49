"""``seglog check [--fix] DIR...``: check partition directories (or log dirs holding them)
without changing anything.

Each partition by ``logstore.log.partition_scan``, the deep check
``LogManager.check(deep=True)`` runs too: every batch's CRC and size, offsets by the
rules readers apply (``offset_continuity``: increasing, inside their segment, contiguous
unless compacted, reaching the high watermark), partial batches by Kafka's recovery rule,
both indexes against the log by the lookup rule, and each ``.txnindex`` (layout, order,
and every entry naming an abort marker of its producer in the segment). This module only
formats the findings.
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
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from seglog.logstore.errors import LogDirError
from seglog.logstore.log.partition_scan import (
    ScanTotals,
    published_high_watermark,
    scan_partition,
)
from seglog.logstore.storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
)
from seglog.logstore.storage.object_store_config import is_object_uri

from .cli_check_report import CheckReporter, JsonCheckReport, TextCheckReport
from .cli_commands import Command
from .cli_common import add_json_arg, add_storage_args, storage_options
from .cli_output import Progress


def check_partition_dir(
    dir_: Path, report: CheckReporter, progress: Callable[[int], object] | None = None
) -> int:
    """Check one partition directory (read-only) by ``partition_scan``, the deep check
    ``LogManager.check(deep=True)`` runs too; returns the number of problems. ``progress``
    is told the bytes of each batch read. Notes (a missing index Kafka's loader rebuilds)
    are reported but are no problem. Offsets are checked up to the high watermark of the
    log dir's ``replication-offset-checkpoint`` when there is one."""
    totals = ScanTotals()
    problems = notes = 0
    for f in scan_partition(
        dir_, high_watermark=published_high_watermark(dir_), totals=totals, progress=progress
    ):
        if f.note:
            report.note(f.file, f.message)
            notes += 1
        else:
            report.problem(f.file, f.message, text=f.text)
            problems += 1
    report.end_partition(
        dir_, totals.segments, totals.batches, totals.log_end_offset, problems, notes
    )
    return problems


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
    refusal = (
        "--fix is for local log dirs (a bucket is repaired by its commits; seglog "
        "maintain collects leftovers)"
    )
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
                refusal = (
                    f"no log dir here: nothing under {uri}/{COMMIT_DIR}/ (a mistyped "
                    "bucket or prefix?)"
                )
    if mgr is None:
        report.dir_problem(path, refusal)
        return 1
    with mgr, Progress(f"check {uri}", in_bytes=True, enabled=progress) as bar:
        findings, partitions = mgr.check_objects(progress=bar.on_bytes)
        state = mgr.state
    # Not a problem: they work, but their writers still serialise through the catalog.
    for topic in sorted(state.topics.keys() - state.topic_logs.keys()):
        report.dir_note(
            path, f"topic {topic}: legacy (in the catalog log): `seglog upgrade` moves it"
        )
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
