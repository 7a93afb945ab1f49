"""The sink's paused writer: the next commit of the process resumes it (no partition
directory listed, whatever the topic's history), and opens afresh when anything else
wrote the log dirs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.dir_lock import DirLock
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_CHECKPOINT
from seglog.logstore.util.clock import SYSTEM_CLOCK
from seglog.streaming import log_writers
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

# Directory listings made while `_listings` is a list (an audit hook cannot be removed,
# so it is installed once and switched by this flag).
_listings: list[str] | None = None


def _count_listings(event: str, args: tuple) -> None:
    if _listings is not None and event in ("os.listdir", "os.scandir"):
        _listings.append(str(args[0]))


sys.addaudithook(_count_listings)

ROWS = pa.record_batch({"key": pa.array([b"k%d" % i for i in range(200)]),
                        "value": pa.array([b"v" * 100] * 200)})


def options(d: Path) -> SinkOptions:
    return SinkOptions.parse({"path": str(d), "topic": "t", "numPartitions": "2",
                              "topic.segment.bytes": "4096"})


def publish(opts: SinkOptions, batch_id: int) -> None:
    cols = SinkColumns.resolve(ROWS.schema, default_topic="t")
    staged = [stage_rows(opts, cols, [ROWS], "sink", batch_id, t, 0) for t in range(2)]
    commit(staged, batch_id, opts)


def count_opens(monkeypatch) -> list[bool]:
    opened: list[bool] = []
    real_init = LogManager.__init__

    def counting_init(self, *args, **kwargs):
        opened.append(True)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(LogManager, "__init__", counting_init)
    return opened


def published(d: Path) -> int:
    with LogDirsReader([d]) as reader:
        return sum(reader.high_watermarks().values())


def test_commits_of_a_process_reuse_one_writer(tmp_path: Path, monkeypatch) -> None:
    opened = count_opens(monkeypatch)
    opts = options(tmp_path)
    for batch in range(4):
        publish(opts, batch)
        # Between commits the dir is as a clean close leaves it: marker, no lock held.
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        with DirLock(tmp_path):
            pass
        assert published(tmp_path) == 400 * (batch + 1)
    assert opened == [True]


def test_a_commit_lists_no_partition_directory(tmp_path: Path) -> None:
    global _listings
    opts = options(tmp_path)
    for batch in range(3):
        publish(opts, batch)
    segments = list(tmp_path.glob("t-*/*.log"))
    assert len(segments) > 10
    _listings = []
    try:
        publish(opts, 3)
        listed = _listings
    finally:
        _listings = None
    assert not [p for p in listed if Path(p).name.startswith("t-")], listed
    assert published(tmp_path) == 1600


def test_another_writer_in_between_makes_the_next_commit_open_afresh(
        tmp_path: Path, monkeypatch) -> None:
    opened = count_opens(monkeypatch)
    opts = options(tmp_path)
    publish(opts, 0)
    with LogManager([tmp_path]) as other:
        other.append("t", 0, encode_batches(pa.array([b"other"] * 7)))
        other.create_topic("u", 1)
    publish(opts, 1)
    assert len(opened) == 3  # the sink's, the other writer's, the sink's again
    assert published(tmp_path) == 807
    with LogManager([tmp_path]) as mgr:
        assert mgr.check(deep=True) == []  # no offset given twice, indexes right


def test_a_checkpoint_edited_by_hand_makes_the_next_commit_open_afresh(
        tmp_path: Path, monkeypatch) -> None:
    opened = count_opens(monkeypatch)
    opts = options(tmp_path)
    publish(opts, 0)
    hw = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT)
    hw.write(hw.read())  # same values, a new file: no writer, but not the paused state
    publish(opts, 1)
    assert len(opened) == 2
    assert published(tmp_path) == 800


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_writer(tmp_path: Path) -> None:
    opts = options(tmp_path)
    publish(opts, 0)
    key = tuple(opts.log_dirs)
    paused = log_writers._paused[key]
    pid = os.fork()
    if pid == 0:  # pragma: no cover (child)
        code = 1
        try:
            mgr = log_writers.open_writer(key, SYSTEM_CLOCK)
            code = 0 if mgr is not paused and not mgr.paused else 2
            mgr.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    publish(opts, 1)  # the parent's paused writer: the child's close changed the marker
    assert published(tmp_path) == 800
