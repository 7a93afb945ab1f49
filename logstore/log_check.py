"""``check``: what the checkpoints and topic configs of a LogManager's dirs say vs what is
on disk, reported and optionally repaired (python-diskcache's ``Cache.check``).

Checked per log dir: every checkpoint file parses; no checkpoint entry names a partition
that does not exist; no entry is beyond its partition's log end; no temporary leftovers
(``*.tmp``, unfinished partition directories). Per partition: the topic config file
exists and agrees with the topic's other partitions. With ``deep=True`` every segment is
read: batch sizes, CRCs, increasing offsets, and every offset index entry pointing at the
start of a batch with the right last offset.

``fix=True`` (writer only) rewrites checkpoints from the logs' own state, removes
leftovers, rewrites missing or disagreeing topic configs from the lowest partition, and
for a deep problem truncates the log before the first bad batch (what crash recovery
would do; the data after it is lost).
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .batch_header import iter_batch_headers, verify_crc
from .errors import ConfigError, CorruptCheckpointError, CorruptRecordError, SeglogError
from .file_names import (
    HIGH_WATERMARK_CHECKPOINT,
    INDEX_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_segment_file_name,
)
from .topics import read_topic_config, write_topic_config

if TYPE_CHECKING:
    from .log_manager import LogManager

logger = logging.getLogger(__name__)

OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                      HIGH_WATERMARK_CHECKPOINT)


@dataclass(frozen=True, slots=True)
class Problem:
    """One inconsistency: a short ``kind``, the file or directory, what is wrong, and
    whether ``fix`` repaired it."""

    kind: str
    path: Path
    message: str
    fixed: bool = False


def check(mgr: LogManager, *, fix: bool = False, deep: bool = False) -> list[Problem]:
    """Every inconsistency found in ``mgr``'s dirs (repaired with ``fix``)."""
    if fix:
        mgr._check_writable()
    problems: list[Problem] = []
    for ld in mgr.log_dirs:
        problems += _check_dir(mgr, ld, fix)
    for topic in mgr.topics():
        problems += _check_topic_configs(mgr, topic, fix)
    if deep:
        for topic in mgr.topics():
            for n in mgr.partitions(topic):
                problems += _check_partition_data(mgr, topic, n, fix)
    for p in problems:
        logger.warning("check: %s%s: %s", p.kind, " (fixed)" if p.fixed else "", p.message)
    return problems


def _check_dir(mgr: LogManager, ld, fix: bool) -> list[Problem]:
    out = []
    parts = {p.tp: p for p in mgr._partitions.values() if p.log_dir is ld}
    rewrite = False
    for name in OFFSET_CHECKPOINTS:
        path = ld.path / name
        try:
            entries = ld.checkpoint(name).read()
        except (CorruptCheckpointError, SeglogError) as e:
            out.append(Problem("corrupt-checkpoint", path, str(e), fix))
            rewrite = True
            continue
        for tp, offset in sorted(entries.items()):
            if tp not in parts:
                out.append(Problem("stale-checkpoint-entry", path,
                                   f"{path} lists {tp[0]}-{tp[1]}, which is not in {ld.path}",
                                   fix))
                rewrite = True
                continue
            end = _log_end(mgr, parts[tp])
            if end is not None and offset > end:
                out.append(Problem("checkpoint-beyond-log-end", path,
                                   f"{path} says {offset} for {tp[0]}-{tp[1]}, whose log "
                                   f"ends at {end}", fix))
                rewrite = True
    for entry in os.scandir(ld.path):
        if entry.name.endswith(".tmp") or entry.name.startswith(".seglog-new-"):
            out.append(Problem("leftover", Path(entry.path),
                               f"{entry.path} is left over from an interrupted write", fix))
            if fix:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
    if fix and rewrite:
        for p in parts.values():
            mgr._load(p)  # the logs' own state is the truth to write back
        for name in OFFSET_CHECKPOINTS:
            mgr._write_checkpoint(ld, name)
    return out


def _log_end(mgr: LogManager, p) -> int | None:
    try:
        return mgr._load(p).log_end_offset
    except SeglogError as e:
        logger.warning("check: cannot load %s: %s", p.dir, e)
        return None


def _check_topic_configs(mgr: LogManager, topic: str, fix: bool) -> list[Problem]:
    out = []
    parts = [mgr._partition(topic, n) for n in mgr.partitions(topic)]
    configs = {}
    for p in parts:
        try:
            configs[p.partition] = read_topic_config(p.dir)
        except ConfigError as e:
            out.append(Problem("corrupt-topic-config", p.dir, str(e), False))
            configs[p.partition] = "corrupt"
    reference = next((c for c in configs.values() if isinstance(c, dict)), None)
    for p in parts:
        c = configs[p.partition]
        if c == reference:
            continue
        what = ("has no topic config file" if c is None else
                "has an unreadable topic config" if c == "corrupt" else
                "has a topic config that differs from the topic's other partitions")
        problem = Problem("topic-config", p.dir, f"{p.dir} {what}", fix)
        out = [x for x in out if x.path != p.dir]  # one problem per partition
        out.append(problem)
        if fix:
            write_topic_config(p.dir, topic, reference or {})
    if fix:
        with mgr._lock:
            mgr._topic_configs.pop(topic, None)
    return out


def _check_partition_data(mgr: LogManager, topic: str, n: int, fix: bool) -> list[Problem]:
    p = mgr._partition(topic, n)
    out = []
    expected_next = None
    bad_offset = None
    for path in sorted(p.dir.iterdir()):
        parsed = parse_segment_file_name(path.name)
        if parsed is None or parsed[1:] != (".log", ""):
            continue
        found, expected_next = _scan_segment(path, parsed[0], expected_next)
        for kind, msg, offset in found:
            out.append(Problem(kind, path, msg, fix and offset is not None))
            if offset is not None and bad_offset is None:
                bad_offset = offset
    if fix and bad_offset is not None:
        log = mgr._load(p)
        with p.lock:
            log.truncate_to(bad_offset)
        logger.warning("check: truncated %s to offset %d", p.dir, bad_offset)
        mgr._write_checkpoints(p.log_dir)  # nothing may point past the new end
    return out


def _scan_segment(path: Path, base: int, expected_next: int | None
                  ) -> tuple[list[tuple[str, str, int | None]], int | None]:
    """Problems of one segment as (kind, message, first untrustworthy offset or None),
    and the offset the next segment should start at."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return [], expected_next
        buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    found: list[tuple[str, str, int | None]] = []
    positions: dict[int, int] = {}  # batch position -> last offset
    end = 0
    prev_last = (expected_next - 1) if expected_next is not None else base - 1
    try:
        for h in iter_batch_headers(buf):
            if h.base_offset <= prev_last:
                found.append(("bad-batch", f"{path}: batch at position {h.position} has "
                              f"base offset {h.base_offset}, not above {prev_last}",
                              prev_last + 1))
                break
            verify_crc(buf, h)
            positions[h.position] = h.last_offset
            prev_last, end = h.last_offset, h.end_position
        else:
            if end != size:
                found.append(("bad-batch", f"{path}: {size - end} bytes after the last whole "
                              f"batch (position {end})", prev_last + 1))
    except CorruptRecordError as e:
        found.append(("bad-batch", f"{path}: {e}", prev_last + 1))
    finally:
        buf.close()
    index = path.with_suffix(INDEX_SUFFIX)
    if index.exists() and not found:
        raw = np.fromfile(index, dtype=">i4")
        entries = raw[: len(raw) // 2 * 2].reshape(-1, 2)
        zero = np.flatnonzero((entries == 0).all(axis=1))  # an active index's free tail
        entries = entries[: zero[0]] if len(zero) else entries
        for i, (rel, pos) in enumerate(entries.tolist()):
            if positions.get(pos) != base + rel:
                found.append(("bad-index-entry", f"{index}: entry {i} ({rel}, {pos}) does "
                              "not point at the batch ending at that offset", None))
                break
    return found, prev_last + 1
