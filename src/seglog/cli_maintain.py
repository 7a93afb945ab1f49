"""``seglog maintain [DIR...]``: the LogManager's maintenance, now or on its schedule.

Retention, compaction, flushing, the offset checkpoints and delayed deletions otherwise
run only inside a sink commit (or a process that runs a scheduler), so an idle topic is
never cleaned. One pass runs every task now; ``--loop`` then keeps running each task when
its interval (``log.retention.check.interval.ms``, ``log.cleaner.backoff.ms``, ...; set
with ``--manager-config``) is due, until SIGINT or SIGTERM, which end the current task
and close the manager cleanly (the dirs keep ``.kafka_cleanshutdown``).

A deleted topic's ``-delete`` directories are removed by the writer as it opens the
dirs (``LogManager``'s open: no delay, the process that deleted the topic is gone); the
first pass reports them (``removedDirectories``).

Segments removed by retention or compaction are renamed ``.deleted`` and unlinked after
``file.delete.delay.ms`` (readers may still have them open): by a running ``--loop``, or
else by the next writer that loads the partition (the next ``maintain``).

On a bucket URI (``seglog maintain s3://bucket/logs``) a pass is the bucket's
maintenance (``logstore.bucket_maintenance``: retention, merging small segments,
compaction, collection of unreferenced objects); ``--loop`` runs a pass every
``log.retention.check.interval.ms``. Any number of processes may run it at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from seglog.logstore.log_dirs_api import TaskRun
from seglog.logstore.manager.log_manager import CLEANER_TASK
from seglog.logstore.manager.scheduler import DELETE_LOGS, FLUSH, RETENTION
from seglog.logstore.storage.file_names import is_delete_dir_name
from seglog.logstore.storage.object_store_config import is_object_uri

from .cli_commands import Command
from .cli_common import (
    EXIT_OK,
    EXIT_PROBLEMS,
    add_json_arg,
    add_writer_args,
    log_dirs,
    parse_key_values,
    writing,
)
from .cli_output import Progress, write_json

if TYPE_CHECKING:
    from seglog.logstore.bucket.bucket_collect import CollectStats
    from seglog.logstore.cleaner.cleaner import CleanerStats  # not imported at run time: numba
    from seglog.logstore.log_dirs_api import LogDirs

COLLECT_TASK = "object-collect"  # bucket_maintenance's (not imported: it loads numba)
MERGE_TASK = "segment-merge"
_COUNTS = {
    RETENTION: "segment(s) deleted by retention",
    FLUSH: "log(s) flushed",
    DELETE_LOGS: "file(s) and directories removed",
    MERGE_TASK: "small segment(s) merged",
}


def task_json(run: TaskRun) -> dict[str, Any]:
    result = run.result
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    elif not isinstance(result, (int, float, str)) or isinstance(result, bool):
        result = None
    return {
        "task": run.name,
        "ok": run.ok,
        "result": result,
        "error": None if run.error is None else str(run.error),
    }


def task_text(run: TaskRun) -> str | None:
    """One line for a task that did something or failed; None for a quiet one."""
    if run.error is not None:
        return f"{run.name}: FAILED: {run.error}"
    r = run.result
    if run.name == CLEANER_TASK and r is not None:
        r = cast("CleanerStats", r)  # the cleaner task's result (LogManager.clean)
        return (
            f"{run.name}: cleaned {r.topic}-{r.partition} offsets "
            f"{r.first_dirty_offset}..{r.end_offset}: {r.segments_cleaned} segment(s), "
            f"{r.records_read} record(s) read, {r.records_retained} kept, "
            f"{r.bytes_read} -> {r.bytes_written} bytes"
        )
    if run.name in _COUNTS and isinstance(r, int) and r:
        return f"{run.name}: {r} {_COUNTS[run.name]}"
    if run.name == COLLECT_TASK and r is not None:
        c = cast("CollectStats", r)  # the collect task's result (bucket_collect.collect)
        if c.removed_objects or c.orphans or c.commits or c.snapshots:
            return (
                f"{run.name}: deleted {c.removed_objects} removed object(s), "
                f"{c.orphans} orphan(s), {c.commits} old commit(s), "
                f"{c.snapshots} old snapshot(s)"
            )
    return None


def one_pass(mgr: LogDirs, *, force: bool, progress: bool = True) -> list[TaskRun]:
    """Run the tasks (all with ``force``, else the due ones), with a bar of the tasks on
    a terminal (``progress``: not with ``--json``)."""
    with Progress("maintain", unit="task", enabled=progress) as bar:

        def before(name: str, index: int, count: int) -> None:
            bar.set_total(count)
            bar.advance(0 if index == 0 else 1, label=f"maintain: {name}")

        return mgr.run_maintenance(force=force, before_task=before)


def delete_dirs(dirs: list[str]) -> list[Path]:
    """The ``-delete`` directories (deleted topics' partitions) in the local log dirs."""
    found = []
    for d in dirs:
        if is_object_uri(d) or not os.path.isdir(d):
            continue
        found += [Path(d, n) for n in sorted(os.listdir(d)) if is_delete_dir_name(n)]
    return found


def report(
    out: TextIO,
    mgr: LogDirs,
    runs: list[TaskRun],
    number: int,
    as_json: bool,
    *,
    quiet_if_idle: bool,
    removed: list[Path] | None = None,
) -> None:
    """One pass's report; ``removed``: the deleted topics' directories the writer
    removed as it opened the dirs (first pass only)."""
    pending = mgr.files_awaiting_deletion(runs)
    lines = [f"{DELETE_LOGS}: removed {d} (a deleted topic's partition)" for d in removed or []]
    lines += [t for t in (task_text(r) for r in runs) if t]
    if quiet_if_idle and not lines:
        return
    if as_json:
        write_json(
            out,
            {
                "pass": number,
                "tasks": [task_json(r) for r in runs],
                "removedDirectories": [str(d) for d in removed or []],
                "pendingFileDeletions": pending,
            },
        )
    else:
        out.writelines(f"{line}\n" for line in lines)
        out.write(
            f"pass {number}: {len(runs)} task(s) run, {sum(not r.ok for r in runs)} "
            f"failed, {pending} file(s) waiting for file.delete.delay.ms\n"
        )
    out.flush()


def _maintain(args: argparse.Namespace, out: TextIO) -> int:
    config = parse_key_values(args.manager_config, "--manager-config")
    dirs = log_dirs(args, extra=args.dirs)
    stop = threading.Event()
    failed = False
    previous = {}
    if args.loop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    doomed = delete_dirs(dirs)
    try:
        with writing(args, dirs, config) as mgr:
            number = 1
            removed = [d for d in doomed if not d.exists()]
            runs = one_pass(mgr, force=True, progress=not args.json)
            failed |= not all(r.ok for r in runs)
            report(out, mgr, runs, number, args.json, quiet_if_idle=False, removed=removed)
            while args.loop and not stop.is_set():
                wait_ms = mgr.next_maintenance_ms()
                if wait_ms > 0 and stop.wait(wait_ms / 1000):
                    break
                number += 1
                runs = one_pass(mgr, force=False, progress=not args.json)
                failed |= not all(r.ok for r in runs)
                report(out, mgr, runs, number, args.json, quiet_if_idle=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_PROBLEMS if failed else EXIT_OK


def _maintain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="*", metavar="DIR", help="log dirs (or use --path)")
    p.add_argument(
        "--loop",
        action="store_true",
        help="keep running each task on its schedule until SIGINT/SIGTERM",
    )
    p.add_argument(
        "--manager-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker-level setting, e.g. log.retention.check.interval.ms=60000 "
        "or log.cleaner.enable=false (repeatable)",
    )
    add_writer_args(p)
    add_json_arg(p)


COMMANDS = {"maintain": Command(_maintain_args, _maintain)}
