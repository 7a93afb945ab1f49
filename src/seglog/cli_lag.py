"""``seglog lag --checkpoint CHK``: how far a streaming query reading seglog is behind,
per partition (``kafka-consumer-groups.sh --describe`` for a Spark query).

Spark's checkpoint keeps a write-ahead log of offsets (``offsets/<batch>``) and the
batches it finished (``commits/<batch>``). An offsets file is ``v1``, a metadata JSON line,
then one line per source of the query: its end offset for that batch as JSON, or ``-``.
A seglog source's offset is ``{"topic": {"partition": next offset}}`` (plus
``$lastTriggerMs`` with ``minOffsetsPerTrigger``; see ``streaming/source_offsets.py``).
The committed position is the end offsets of the last batch in ``commits/``; a later
batch in ``offsets/`` is planned or running but not committed ("pending").

Lag = the partition's end (high watermark) - the committed offset; a partition without a
committed offset (new, or nothing committed yet) counts from its log start offset.

Only the checkpoint files are read: this never touches the query. A damaged file is an
error naming it, never "no progress"; so is a topic of the checkpoint that is not in the
log dirs (a wrong ``--path``, or a deleted topic), which would otherwise read as no lag.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from seglog.logstore.errors import ConfigError, CorruptCheckpointError
from seglog.logstore.records.record_format import TopicPartition

from .cli_commands import Command
from .cli_common import EXIT_OK, add_json_arg, add_path_args, log_dirs, open_reader
from .cli_output import write_json, write_table

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView

SourceOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class QueryProgress:
    """What a Spark checkpoint says about its sources. ``committed``/``pending``: per
    source index (its line in the offsets file), the seglog offsets, or None for a source
    whose offset is not seglog-shaped (another source type) or absent."""

    checkpoint: Path
    committed_batch: int | None
    committed: tuple[SourceOffsets | None, ...]
    pending_batch: int | None
    pending: tuple[SourceOffsets | None, ...]


def _batch_ids(directory: Path) -> list[int]:
    """Batch files of ``offsets/`` or ``commits/`` (Spark also leaves ``.crc`` and
    ``.tmp`` files there, which are not batches)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def _read_log_file(path: Path) -> list[str]:
    """The lines of a Spark metadata log file after its version line, checked."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"Spark checkpoint file {path} is not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0] != "v1":
        first = lines[0][:20] if lines else ""
        raise CorruptCheckpointError(
            f"Spark checkpoint file {path}: expected version line 'v1', got {first!r}")
    if len(lines) < 2:
        raise CorruptCheckpointError(f"Spark checkpoint file {path} is truncated: no metadata")
    try:
        meta = json.loads(lines[1])
    except ValueError as e:
        raise CorruptCheckpointError(
            f"Spark checkpoint file {path}, line 2: not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(f"Spark checkpoint file {path}, line 2: not a JSON object")
    return lines[2:]


def _seglog_offsets(value: Any) -> SourceOffsets | None:
    """A source offset in seglog's shape, else None (another kind of source)."""
    if not isinstance(value, dict):
        return None
    out: SourceOffsets = {}
    for topic, parts in value.items():
        if topic.startswith("$"):
            continue
        if not isinstance(parts, dict):
            return None
        for p, off in parts.items():
            if not (isinstance(p, str) and p.lstrip("-").isdigit()) or \
                    isinstance(off, bool) or not isinstance(off, int):
                return None
            out[(topic, int(p))] = off
    return out


def read_offsets_file(path: Path) -> tuple[SourceOffsets | None, ...]:
    """Per source line of ``offsets/<batch>``: seglog offsets or None."""
    out: list[SourceOffsets | None] = []
    for i, line in enumerate(_read_log_file(path), start=3):
        if line == "-":
            out.append(None)
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise CorruptCheckpointError(
                f"Spark checkpoint file {path}, line {i}: not a source offset ({e})") from None
        out.append(_seglog_offsets(value))
    return tuple(out)


def read_query_progress(checkpoint: str | os.PathLike[str]) -> QueryProgress:
    chk = Path(checkpoint)
    if not chk.is_dir():
        raise ConfigError(f"--checkpoint {chk}: no such directory")
    if not (chk / "offsets").is_dir():
        raise ConfigError(f"--checkpoint {chk} holds no offsets/ directory: not a Spark "
                          "streaming checkpoint, or the query never planned a batch")
    offsets = _batch_ids(chk / "offsets")
    commits = _batch_ids(chk / "commits")
    committed_batch = commits[-1] if commits else None
    committed: tuple[SourceOffsets | None, ...] = ()
    if committed_batch is not None:
        _read_log_file(chk / "commits" / str(committed_batch))  # checked, content unused
        path = chk / "offsets" / str(committed_batch)
        if not path.exists():
            raise CorruptCheckpointError(
                f"Spark checkpoint {chk}: batch {committed_batch} is committed but {path} "
                "is missing")
        committed = read_offsets_file(path)
    pending_batch = offsets[-1] if offsets and (committed_batch is None
                                                or offsets[-1] > committed_batch) else None
    pending = (read_offsets_file(chk / "offsets" / str(pending_batch))
               if pending_batch is not None else ())
    return QueryProgress(chk, committed_batch, committed, pending_batch, pending)


def checkpoint_topics(progress: QueryProgress) -> set[str]:
    """Every topic the checkpoint's seglog sources name (committed or pending)."""
    return {t for offsets in (*progress.committed, *progress.pending) if offsets
            for t, _ in offsets}


def require_topics(mgr: LogDirsView, progress: QueryProgress, dirs: list[str]) -> None:
    """Refuse a checkpoint naming topics the log dirs do not hold: its lag would be
    reported as nothing, which reads as "caught up"."""
    missing = sorted(checkpoint_topics(progress) - set(mgr.topics()))
    if missing:
        raise ConfigError(
            f"--checkpoint {progress.checkpoint} reads topic(s) {', '.join(missing)}, which "
            f"are not in {', '.join(dirs)} (--path): the wrong log dir, or deleted topics")


def lag_rows(mgr: LogDirsView, progress: QueryProgress) -> list[dict[str, Any]]:
    """One row per (source, topic, partition) of the seglog sources."""
    hws = mgr.high_watermarks()
    starts = mgr.log_start_offsets()
    existing = set(mgr.topics())
    rows = []
    count = max(len(progress.committed), len(progress.pending))
    for i in range(count):
        committed = progress.committed[i] if i < len(progress.committed) else None
        pending = progress.pending[i] if i < len(progress.pending) else None
        if committed is None and pending is None:
            continue  # not a seglog source
        committed = committed or {}
        pending = pending or {}
        tps = set(committed) | set(pending)
        for topic in sorted({t for t, _ in tps} & existing):
            tps |= {(topic, p) for p in mgr.partitions(topic)}
        for tp in sorted(tps):
            topic, p = tp
            end: int | None = None
            start: int | None = None
            lag: int | None = None
            done = committed.get(tp)
            if topic in existing and tp in hws:
                start = starts.get(tp, 0)
                end = max(hws[tp], start)
                lag = end - (start if done is None else done)
            rows.append({"source": i, "topic": topic, "partition": p, "committed": done,
                         "pending": pending.get(tp), "end": end, "lag": lag})
    return rows


def _lag(args: argparse.Namespace, out: TextIO) -> int:
    progress = read_query_progress(args.checkpoint)
    with open_reader(args) as mgr:
        require_topics(mgr, progress, log_dirs(args))
        rows = lag_rows(mgr, progress)
    total = sum(r["lag"] for r in rows if r["lag"] is not None)
    if args.json:
        write_json(out, {"checkpoint": str(progress.checkpoint),
                         "committedBatch": progress.committed_batch,
                         "pendingBatch": progress.pending_batch,
                         "partitions": rows, "totalLag": total})
        return EXIT_OK
    out.write(f"Checkpoint {progress.checkpoint}: committed batch "
              f"{_show(progress.committed_batch)}, pending batch "
              f"{_show(progress.pending_batch)}\n")
    several = len({r["source"] for r in rows}) > 1
    headers = ["TOPIC", "PARTITION", "COMMITTED", "PENDING", "END", "LAG"]
    table = [[r["topic"], r["partition"], r["committed"], r["pending"], r["end"], r["lag"]]
             for r in rows]
    if several:
        headers = ["SOURCE", *headers]
        table = [[r["source"], *t] for r, t in zip(rows, table, strict=True)]
    write_table(out, headers, table)
    out.write(f"Total lag: {total}\n")
    return EXIT_OK


def _show(value: int | None) -> str:
    return "none" if value is None else str(value)


def _lag_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="the streaming query's checkpointLocation")
    add_path_args(p)
    add_json_arg(p)


COMMANDS = {"lag": Command(_lag_args, _lag)}
