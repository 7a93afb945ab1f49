"""The ``seglog`` command line.

Subcommands (``seglog <command> --help`` for each):

* ``dump-log FILE...`` — like Kafka's ``kafka-dump-log.sh``: the batches of ``.log`` files
  (``--print-data-log`` adds the records), the entries of ``.index`` / ``.timeindex``
  files with a sanity check against the ``.log`` beside them.
* ``check [--fix] DIR...`` — check partition directories (or log dirs holding them)
  without changing anything: every batch's CRC and size, offsets increasing across
  segments, each segment's first batch at or above its base offset, both indexes against
  the log, and each ``.txnindex`` (layout, order, and every entry naming an abort marker
  of its producer in the segment). In a log dir (one holding seglog or Kafka state files)
  also every checkpoint and state file (``logstore.log_check``) and the state of the
  exactly-once sink in ``.seglog-sink/`` (each ledger against the data it names). Prints
  only problems, notes and a summary line per partition. ``--fix`` (log dirs only, no
  writer running) repairs them: damaged high-watermark / log-start-offset checkpoints are
  rebuilt from the recovered logs (``docs/checkpoints.md``).

Exit status: 0 when everything read is valid (or was fixed), 1 when a batch is invalid,
an index disagrees with its log, a state file is damaged, or a sink ledger is damaged or
contradicts the data, 2 on bad usage. New subcommands register in ``_COMMANDS``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from seglog.logstore.batch_header import BatchHeader, compute_crc, read_batch_header
from seglog.logstore.errors import CorruptRecordError, SeglogError
from seglog.logstore.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    INDEX_SUFFIX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    TIME_INDEX_SUFFIX,
    log_file,
    parse_segment_file_name,
)
from seglog.logstore.offset_index import OffsetIndex
from seglog.logstore.time_index import TimeIndex

from .cli_commands import register as _register_operations
from .cli_output import Progress

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _batches(buf) -> Iterator[tuple[BatchHeader | None, str]]:
    """Every batch of ``buf``; a final ``(None, reason)`` when it ends in junk."""
    pos = 0
    while pos < len(buf):
        try:
            h = read_batch_header(buf, pos)
        except CorruptRecordError as e:
            yield None, str(e)
            return
        if h is None:
            yield None, f"{len(buf) - pos} trailing bytes at position {pos} (a partial batch)"
            return
        yield h, ""
        pos = h.end_position


def _map(path: Path) -> mmap.mmap | bytes:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _text(value) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _print_records(out: TextIO, raw: bytes) -> None:
    from seglog.logstore.record_codec import decode_batches

    records = decode_batches(raw, include_headers=True).to_pylist()
    for r in records:
        ts_name = {1: "LogAppendTime", 0: "CreateTime"}.get(r["timestampType"], "NoTimestamp")
        headers = ",".join(f"{h['key']}:{_text(h['value'])}" for h in (r["headers"] or []))
        out.write(f"| offset: {r['offset']} {ts_name}: {r['timestamp']} "
                  f"keySize: {len(r['key']) if r['key'] is not None else -1} "
                  f"valueSize: {len(r['value']) if r['value'] is not None else -1} "
                  f"headers: [{headers}] key: {_text(r['key'])} "
                  f"payload: {_text(r['value'])}\n")


def dump_log_file(path: Path, out: TextIO, *, print_data: bool = False) -> int:
    """Print a ``.log`` file's batches; returns the number of problems found."""
    parsed = parse_segment_file_name(path.name)
    out.write(f"Dumping {path}\n")
    if parsed is not None:
        out.write(f"Log starting offset: {parsed[0]}\n")
    buf = _map(path)
    problems = 0
    bar = Progress(f"dump-log {path.name}", len(buf), unit=" bytes", hide_if_tty=out)
    try:
        for h, reason in _batches(buf):
            bar.advance(h.size if h is not None else 0)
            if h is None:
                out.write(f"Found invalid data: {reason}\n")
                problems += 1
                break
            valid = compute_crc(buf, h) == h.crc
            problems += not valid
            ts_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
            out.write(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} "
                f"count: {h.records_count} baseSequence: {h.base_sequence} "
                f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} "
                f"isControl: {str(h.is_control).lower()} position: {h.position} "
                f"{ts_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
                f"compresscodec: {_CODECS.get(h.compression, h.compression)} "
                f"crc: {h.crc} isvalid: {str(valid).lower()}\n")
            if print_data and valid and not h.is_control:
                try:
                    _print_records(out, bytes(buf[h.position:h.end_position]))
                except SeglogError as e:
                    out.write(f"Found invalid records: {e}\n")
                    problems += 1
    finally:
        bar.close()
        if isinstance(buf, mmap.mmap):
            buf.close()
    return problems


def _batch_at(buf, position: int) -> BatchHeader | None:
    try:
        return read_batch_header(buf, position)
    except CorruptRecordError:
        return None


def dump_index_file(path: Path, out: TextIO) -> int:
    """Print an ``.index`` file and check each entry against the ``.log`` beside it
    (the entry's offset must be the last offset of the batch at its position)."""
    base = parse_segment_file_name(path.name)[0]  # type: ignore[index]
    out.write(f"Dumping {path}\n")
    idx = OffsetIndex(path, base, writable=False, count_leading_nonzero=True)
    log_path = log_file(path.parent, base)
    buf = _map(log_path) if log_path.exists() else None
    problems = 0
    try:
        for e in idx.all_entries():
            out.write(f"offset: {e.offset} position: {e.position}\n")
            if buf is None:
                continue
            h = _batch_at(buf, e.position)
            if h is None or h.last_offset != e.offset:
                problems += 1
                found = "no batch" if h is None else f"a batch ending at offset {h.last_offset}"
                out.write(f"Index mismatch in {path.name}: offset {e.offset} points at position "
                          f"{e.position}, where the log has {found}\n")
        if buf is None:
            out.write(f"No {log_path.name} beside the index: entries not checked\n")
    finally:
        idx.close_handler()
        if isinstance(buf, mmap.mmap):
            buf.close()
    return problems


def dump_time_index_file(path: Path, out: TextIO) -> int:
    """Print a ``.timeindex`` file and check it against the ``.log`` beside it (each
    entry's offset must end a batch whose max timestamp is the entry's timestamp, and
    timestamps must grow)."""
    base = parse_segment_file_name(path.name)[0]  # type: ignore[index]
    out.write(f"Dumping {path}\n")
    idx = TimeIndex(path, base, writable=False, count_leading_nonzero=True)
    log_path = log_file(path.parent, base)
    ends: dict[int, int] = {}
    if log_path.exists():
        buf = _map(log_path)
        try:
            ends = {h.last_offset: h.max_timestamp for h, _ in _batches(buf) if h is not None}
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
    problems = 0
    previous = -1
    try:
        for e in idx.all_entries():
            out.write(f"timestamp: {e.timestamp} offset: {e.offset}\n")
            if e.timestamp <= previous:
                problems += 1
                out.write(f"Time index mismatch in {path.name}: timestamp {e.timestamp} does not "
                          f"grow (previous {previous})\n")
            previous = e.timestamp
            if log_path.exists() and ends.get(e.offset) != e.timestamp:
                problems += 1
                found = ends.get(e.offset, "no batch ending there")
                out.write(f"Time index mismatch in {path.name}: offset {e.offset} timestamp "
                          f"{e.timestamp}, the log has {found}\n")
    finally:
        idx.close_handler()
    return problems


def _dump_log(args: argparse.Namespace, out: TextIO) -> int:
    problems = 0
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            out.write(f"{path}: no such file\n")
            problems += 1
            continue
        parsed = parse_segment_file_name(path.name)
        ext = parsed[1] if parsed else path.suffix
        if ext == LOG_SUFFIX:
            problems += dump_log_file(path, out, print_data=args.print_data_log)
        elif ext == INDEX_SUFFIX and parsed:
            problems += dump_index_file(path, out)
        elif ext == TIME_INDEX_SUFFIX and parsed:
            problems += dump_time_index_file(path, out)
        else:
            out.write(f"{path}: not a .log, .index or .timeindex file named by its base offset\n")
            problems += 1
    return 1 if problems else 0


def check_partition_dir(dir_: Path, out: TextIO) -> int:
    """Check one partition directory (read-only); returns the number of problems."""
    import io

    bases = sorted(p[0] for p in (parse_segment_file_name(n) for n in os.listdir(dir_))
                   if p is not None and p[1] == LOG_SUFFIX and not p[2])
    problems = 0
    next_offset = -1
    batches = 0
    for base in bases:
        path = log_file(dir_, base)
        buf = _map(path)
        markers: set[tuple[int, int]] = set()  # (offset, producer id) of control batches
        try:
            for h, reason in _batches(buf):
                if h is None:
                    out.write(f"{path}: {reason}\n")
                    problems += 1
                    break
                batches += 1
                if h.is_control:
                    markers.add((h.base_offset, h.producer_id))
                if compute_crc(buf, h) != h.crc:
                    out.write(f"{path}: batch at position {h.position} (offsets "
                              f"{h.base_offset}..{h.last_offset}) has a bad CRC\n")
                    problems += 1
                if h.base_offset < max(next_offset, base):
                    out.write(f"{path}: batch at position {h.position} starts at offset "
                              f"{h.base_offset}, below {max(next_offset, base)}\n")
                    problems += 1
                next_offset = h.next_offset
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
        problems += check_txn_index(dir_, base, markers, out)
        for checker, suffix in ((dump_index_file, INDEX_SUFFIX),
                                (dump_time_index_file, TIME_INDEX_SUFFIX)):
            idx = path.with_suffix(suffix)
            if not idx.exists():
                out.write(f"{idx}: missing (recovery rebuilds it)\n")
                problems += 1
                continue
            sink = io.StringIO()
            found = checker(idx, sink)
            if found:
                problems += found
                out.writelines(ln + "\n" for ln in sink.getvalue().splitlines()
                               if "mismatch" in ln)
    status = "OK" if not problems else f"{problems} problem(s)"
    out.write(f"{dir_}: {len(bases)} segment(s), {batches} batch(es), log end offset "
              f"{max(next_offset, bases[-1] if bases else 0)}: {status}\n")
    return problems


_STATE_FILES = (HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                LOG_START_OFFSET_CHECKPOINT, CLEAN_SHUTDOWN_FILE, LOCK_FILE, "meta.properties")


def check_state_files(path: Path, out: TextIO, *, fix: bool) -> int:
    """Check (``fix``: repair) the checkpoints and state files of the log dir ``path``;
    returns the number of problems left. A directory that holds none of a log dir's
    state files is only a directory of partitions: nothing to check."""
    from seglog.logstore.log_check import check_log_dirs

    if not fix and not any(os.path.lexists(path / n) for n in _STATE_FILES):
        return 0
    left = 0
    for p in check_log_dirs([path], fix=fix):
        status = "note" if p.note else "fixed" if p.fixed else "problem"
        out.write(f"{status}: {p.message}\n")
        left += not (p.note or p.fixed)
    return left


def check_txn_index(dir_: Path, base: int, markers: set[tuple[int, int]], out: TextIO) -> int:
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
        out.write(f"{e} (the writer's recovery rebuilds it)\n")
        return 1
    for e in entries:
        if (e.last_offset, e.producer_id) not in markers:
            out.write(f"{path}: entry for producer {e.producer_id} names offset "
                      f"{e.last_offset}, which holds no control batch of that producer\n")
            return 1
    return 0


def _check(args: argparse.Namespace, out: TextIO) -> int:
    problems = 0
    for name in args.dirs:
        path = Path(name)
        if not path.is_dir():
            out.write(f"{path}: no such directory\n")
            problems += 1
            continue
        has_segments = any(n.endswith(LOG_SUFFIX) for n in os.listdir(path))
        if args.fix and has_segments:
            out.write(f"{path}: --fix needs the log dir holding this partition\n")
            problems += 1
            continue
        if not has_segments:
            # First: after --fix, the scan below sees the repaired files.
            problems += check_state_files(path, out, fix=args.fix)
        dirs = [path] if has_segments else sorted(
            p for p in path.iterdir()
            if p.is_dir() and any(n.endswith(LOG_SUFFIX) for n in os.listdir(p)))
        if not dirs:
            out.write(f"{path}: no segments here or in its subdirectories\n")
        with Progress(f"check {path}", len(dirs)) as bar:
            for d in dirs:
                bar.clear()
                problems += check_partition_dir(d, out)
                bar.advance()
        problems += _check_sink_state(path, out)
    return 1 if problems else 0


def _check_sink_state(log_dir: Path, out: TextIO) -> int:
    """The exactly-once sink's ledgers and state files in a log dir (docs/sink-state.md)."""
    from seglog.streaming.sink_check import check_sink_state

    findings = check_sink_state(log_dir)
    for f in findings:
        out.write(f"{f.path}: {f.text}\n")
    return sum(f.problem for f in findings)


_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                           Callable[[argparse.Namespace, TextIO], int]]] = {}


def _dump_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help=".log, .index or .timeindex files")
    p.add_argument("--print-data-log", action="store_true",
                   help="print every record (offset, timestamp, key, payload, headers)")


_COMMANDS["dump-log"] = ("print the batches and index entries of segment files "
                         "(like kafka-dump-log.sh)", _dump_log_args, _dump_log)


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", help="partition directories, or log dirs holding them")
    p.add_argument("--fix", action="store_true",
                   help="repair the log dirs (no writer may run): rebuild damaged checkpoints "
                        "from the recovered logs, rewrite bad state files")


_COMMANDS["check"] = ("check partition directories (batches, offsets, indexes) and log dirs "
                      "(checkpoints, state files); --fix repairs", _check_args, _check)


_register_operations(_COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seglog", description="seglog tools")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, run) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, out or sys.stdout)
    except (SeglogError, OSError) as e:
        sys.stderr.write(f"seglog {args.command}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
