"""The fsyncs of one steady micro-batch of the local sink (stage + commit), counted by a
wrapper of ``os.fsync`` in-process: each protects a named crash, none is repeated (the
reasoning per fsync: docs/internals.md, "The local sink's fsyncs")."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

SINK = "fsync-counting-sink"


def rows(batch: int, n: int = 200) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([None] * n, pa.string()),
            "value": pa.array([f"b{batch}-{i}".encode() for i in range(n)], pa.binary()),
        }
    )


class FsyncSpy:
    """Every ``os.fsync`` while ``on``: the file's path relative to the log dir, with
    segment and snapshot offsets replaced by ``N`` (one name per kind of file)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = str(log_dir)
        self.on = False
        self.paths: list[str] = []

    def record(self, fd: int) -> None:
        if self.on:
            path = os.readlink(f"/proc/self/fd/{fd}")
            rel = os.path.relpath(path, self.log_dir)
            rel = re.sub(r"\d{20}", "N", rel)
            self.paths.append(re.sub(r"staging/[^/]+/\d+", "staging/S/B", rel))

    def take(self) -> collections.Counter[str]:
        out = collections.Counter(self.paths)
        self.paths.clear()
        return out


@pytest.fixture
def spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncSpy]:
    spy = FsyncSpy(tmp_path)
    real = os.fsync

    def fsync(fd: int) -> None:
        spy.record(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield spy


def test_a_steady_micro_batch_fsyncs_each_file_once(tmp_path: Path, spy: FsyncSpy) -> None:
    opts = SinkOptions.parse({"path": str(tmp_path), "topic": "out", "numPartitions": "1"})
    cols = SinkColumns.resolve(rows(0).schema, default_topic="out")
    for batch in range(4):  # the first ones create the topic, the ledger, the writer
        spy.on = batch == 3
        task = stage_rows(opts, cols, [rows(batch)], SINK, batch, 0, 0)
        staged = spy.take()
        commit([task], batch, opts)
    committed = spy.take()

    # The task: nothing. The commit reads the staging file back whole (size, batch
    # framing, CRCs) before its commit point; a file a power cut damaged fails the
    # commit, and Spark runs the micro-batch again.
    assert staged == collections.Counter()
    assert committed == collections.Counter(
        {
            # resume: the clean-shutdown marker's removal, before the first append
            # publish: the high watermark (the commit point)
            ".": 2,
            ".seglog-sink/intent/" + SINK + ".json.tmp": 1,
            ".seglog-sink/intent": 1,  # once: its removal after the commit point is not synced
            "out-0/N.log": 1,  # once: the pause's release finds nothing written since
            # Once, at the pause (trimmed, the final time-index entry): at the publish
            # the segment holds the recovery point, and an unclean open rebuilds its
            # indexes (test_power_cut_after_a_publish_rebuilds_the_unsynced_indexes).
            "out-0/N.index": 1,
            "out-0/N.timeindex": 1,
            ".seglog-sink/ledger/" + SINK + ".json.tmp": 1,
            ".seglog-sink/ledger": 1,
            "replication-offset-checkpoint.tmp": 1,
            # Not here: the recovery point (it moved within its segment: an unclean open
            # recovers from that segment either way) and the pause's clean-shutdown
            # marker (written, not synced: it only spares a recovery).
            "out-0/N.snapshot.tmp": 1,
            "out-0": 1,
        }
    )
    assert sum(committed.values()) == 12


@pytest.mark.parametrize("damage", ["zeros", "cut", "gone"])
def test_a_staging_file_a_power_cut_damaged_fails_the_commit_and_the_rerun_publishes_once(
    tmp_path: Path, damage: str
) -> None:
    """Staging files are not fsynced: after a power cut between the task and the commit
    they may be zero-filled (XFS), cut short (ext4's delayed allocation) or gone. The
    commit then refuses with an error naming the file, publishes nothing, and the
    micro-batch that Spark runs again is published exactly once."""
    from seglog.logstore.errors import SeglogError
    from seglog.logstore.manager.log_manager import LogManager

    opts = SinkOptions.parse({"path": str(tmp_path), "topic": "out", "numPartitions": "1"})
    cols = SinkColumns.resolve(rows(0).schema, default_topic="out")
    commit([stage_rows(opts, cols, [rows(0)], SINK, 0, 0, 0)], 0, opts)
    task = stage_rows(opts, cols, [rows(1)], SINK, 1, 0, 0)
    path = Path(task.fragments[0].path)
    size = path.stat().st_size
    if damage == "zeros":
        path.write_bytes(bytes(size))
    elif damage == "cut":
        path.write_bytes(path.read_bytes()[: size // 2])
    else:
        path.unlink()
    with pytest.raises(SeglogError, match=re.escape(str(path))):
        commit([task], 1, opts)
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.high_watermarks()[("out", 0)] == 200  # batch 0 only
    # Spark runs micro-batch 1 again: new tasks, new staging files.
    rerun = stage_rows(opts, cols, [rows(1)], SINK, 1, 0, 0)
    assert commit([rerun], 1, opts).records == 200
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.high_watermarks()[("out", 0)] == 400
        log = mgr.get_log("out", 0)
        assert log.log_end_offset == 400


def test_a_power_cut_after_the_commit_point_with_the_indexes_unsynced_replays_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publish no longer fsyncs the active segment's indexes. A power cut between the
    commit point and the pause leaves them as the previous pause fsynced them (and no
    marker: the resume's unlink was fsynced), so the next open recovers the segment and
    rebuilds them; the sink's replay, which reads headers at the ledger's offsets through
    them, finds the batch published and adds nothing; the next batch goes on."""
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.streaming import log_writers, sink_commit

    d, cut = tmp_path / "d", tmp_path / "cut"
    opts = SinkOptions.parse({"path": str(d), "topic": "out", "numPartitions": "1"})
    cols = SinkColumns.resolve(rows(0).schema, default_topic="out")
    for batch in range(3):
        commit([stage_rows(opts, cols, [rows(batch)], SINK, batch, 0, 0)], batch, opts)
    part = d / "out-0"
    synced = {p.name: p.read_bytes() for p in part.glob("*index")}  # the last pause's
    real_pause = log_writers.pause

    def power_cut_then_pause(log_dirs: tuple[str, ...], mgr: LogManager) -> None:
        shutil.copytree(d, cut, ignore=shutil.ignore_patterns(".lock"))
        real_pause(log_dirs, mgr)

    monkeypatch.setattr(sink_commit.log_writers, "pause", power_cut_then_pause)
    commit([stage_rows(opts, cols, [rows(3)], SINK, 3, 0, 0)], 3, opts)
    monkeypatch.undo()
    assert not (cut / ".kafka_cleanshutdown").exists()
    for name, old in synced.items():
        (cut / "out-0" / name).write_bytes(old)
    # Spark runs micro-batch 3 again on the machine that lost power, then goes on.
    at_cut = SinkOptions.parse({"path": str(cut), "topic": "out", "numPartitions": "1"})
    again = commit([stage_rows(at_cut, cols, [rows(3)], SINK, 3, 0, 0)], 3, at_cut)
    assert again.published == () and again.skipped == (("out", 0),)
    assert commit([stage_rows(at_cut, cols, [rows(4)], SINK, 4, 0, 0)], 4, at_cut).records == 200
    log_writers.close_all()
    with LogManager([cut]) as mgr:
        assert mgr.check(deep=True) == []
        assert mgr.high_watermarks()[("out", 0)] == 1000
        log = mgr.get_log("out", 0)
        values = [
            v
            for chunk in log.read_chunks(0, 1000)
            for v in decode_batches(bytes(chunk)).column("value").to_pylist()
        ]
    assert values == [f"b{b}-{i}".encode() for b in range(5) for i in range(200)]


_CHILD = """
import os, sys
from pathlib import Path
import pyarrow as pa
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
n = 200
data = pa.record_batch({"key": pa.array([None] * n, pa.string()),
                        "value": pa.array([b"v%d" % i for i in range(n)], pa.binary())})
opts = SinkOptions.parse({"path": sys.argv[1], "topic": "out", "numPartitions": "1"})
cols = SinkColumns.resolve(data.schema, default_topic="out")
for b in range(4):
    if b == 3:
        os.write(2, b"MARK-BEGIN")
    commit([stage_rows(opts, cols, [data], "s", b, 0, 0)], b, opts)
os.write(2, b"MARK-END")
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_the_syscalls_of_a_steady_micro_batch(tmp_path: Path) -> None:
    """Counted by strace in a child process (every thread): the fsyncs above, 5 renames
    (intent, ledger, high watermark, producer snapshot, clean-shutdown marker), and no
    msync: on Linux the index files' fsync writes back their mapped pages. The pause's
    new producer snapshot replaces the previous one: one unlink, no fsync."""
    log = tmp_path / "strace.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run(
        [
            "strace",
            "-f",
            "-o",
            str(log),
            "-e",
            "trace=fsync,fdatasync,msync,rename,renameat,renameat2,unlink,unlinkat,write",
            sys.executable,
            "-c",
            _CHILD,
            str(tmp_path / "d"),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    lines = log.read_text().splitlines()
    begin = next(i for i, line in enumerate(lines) if "MARK-BEGIN" in line)
    end = next(i for i, line in enumerate(lines) if "MARK-END" in line)
    calls = collections.Counter(
        m.group(1)
        for line in lines[begin:end]
        if (m := re.search(r"\b(fsync|fdatasync|msync|rename\w*)\(", line))
    )
    assert calls == collections.Counter({"fsync": 12, "rename": 5}), calls
    snapshot_unlinks = [
        line for line in lines[begin:end] if re.search(r"\bunlink(at)?\(.*\.snapshot\"", line)
    ]
    assert len(snapshot_unlinks) == 1, snapshot_unlinks
