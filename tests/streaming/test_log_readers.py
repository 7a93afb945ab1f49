"""The process's shared read-only readers: reuse, refresh, invalidation, layouts."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from seglog.datasource.schema import source_schema
from seglog.datasource.stream_reader import SeglogStreamReader
from seglog.datasource.stream_writer import validate_sink
from seglog.logstore.errors import CorruptCheckpointError
from seglog.logstore.manager import log_dirs_reader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming import log_readers
from seglog.streaming.log_readers import reader, segment_files
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.source_offsets import snapshot_log_dirs

ONE = encode_batches(pa.array([b"v"] * 5, pa.binary()))


def write(d, topic="t", partitions=1, batches=1):
    with LogManager([str(d)]) as mgr:
        if topic not in mgr.topics():
            mgr.create_topic(topic, partitions)
        for p in range(partitions):
            for _ in range(batches):
                mgr.append(topic, p, ONE)


def test_one_manager_per_process_sees_what_the_writer_publishes(tmp_path):
    write(tmp_path, batches=2)
    with reader([str(tmp_path)]) as first:
        assert first.high_watermarks() == {("t", 0): 10}
    write(tmp_path, batches=1)
    write(tmp_path, topic="u", partitions=2)
    with reader([str(tmp_path)]) as again:
        assert again is first
        assert again.high_watermarks() == {("t", 0): 15, ("u", 0): 5, ("u", 1): 5}


def test_triggers_reuse_the_shared_manager(tmp_path, monkeypatch):
    write(tmp_path, partitions=3, batches=2)
    opened = count_reader_opens(monkeypatch)
    options = {"path": str(tmp_path), "subscribe": "t", "startingOffsets": "earliest",
               "maxBytesPerTrigger": "100", "kafka.isolation.level": "read_committed"}
    r = SeglogStreamReader(options, source_schema(options))
    start = r.initialOffset()
    for _ in range(3):
        end = r.latestOffset(start, r.getDefaultReadLimit())
        r.partitions(start, end)
        r.reportLatestOffset()
        start = end
    assert opened == [True]


def count_reader_opens(monkeypatch) -> list[bool]:
    opened: list[bool] = []
    real_init = log_dirs_reader.LogDirsReader.__init__

    def counting_init(self, *args, **kwargs):
        opened.append(True)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(log_dirs_reader.LogDirsReader, "__init__", counting_init)
    return opened


def test_sink_tasks_and_the_writer_check_reuse_the_shared_manager(tmp_path, monkeypatch):
    write(tmp_path, partitions=3)
    opened = count_reader_opens(monkeypatch)
    options = {"path": str(tmp_path), "topic": "t", "numPartitions": "3",
               "createTopics": "false"}
    rows = pa.record_batch({"key": pa.array([b"k%d" % i for i in range(30)]),
                            "value": pa.array([b"v"] * 30)})
    opts, _ = validate_sink(options, StructType([StructField("key", BinaryType()),
                                                 StructField("value", BinaryType())]))
    columns = SinkColumns.resolve(rows.schema, default_topic="t")
    for batch in range(3):
        for task in range(2):  # every task of every micro-batch describes the topic
            staged = stage_rows(opts, columns, [rows], "sink", batch, task, 0)
            assert sum(f.records for f in staged.fragments) == 30
    assert opened == [True]
    # A topic created since (by another process's commit) is seen: the dir's mtime moved.
    write(tmp_path, topic="u", partitions=2)
    stage_rows(SinkOptions.parse({**options, "topic": "u", "numPartitions": "2"}), columns,
               [rows], "sink", 3, 0, 0)
    assert opened == [True]


def test_a_failing_call_drops_the_shared_manager(tmp_path):
    write(tmp_path)
    with reader([str(tmp_path)]) as first:
        first.high_watermarks()
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\nt 0 not-a-number\n")
    with pytest.raises(CorruptCheckpointError):
        snapshot_log_dirs([str(tmp_path)])
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\nt 0 3\n")
    with reader([str(tmp_path)]) as fresh:
        assert fresh is not first
        assert fresh.high_watermarks() == {("t", 0): 3}


def test_a_forked_child_opens_its_own(tmp_path):
    write(tmp_path)
    with reader([str(tmp_path)]) as parent:
        pass
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        with reader([str(tmp_path)]) as child:
            os.write(w, b"1" if child is not parent else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"


def test_segment_files_relist_only_a_changed_directory(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    for base, size in ((0, 300), (40, 200)):
        (d / f"{base:020d}.log").write_bytes(b"x" * size)
    hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(d, ns=(hour_ago, hour_ago))
    assert segment_files([str(tmp_path)], ("t", 0)) == ((0, 40), (300, 200))
    # Writing into files leaves the directory's mtime: the active segment is stat'ed
    # every time, inactive ones come from the listing (they do not grow).
    (d / f"{40:020d}.log").write_bytes(b"x" * 250)
    (d / f"{0:020d}.log").write_bytes(b"x" * 310)
    assert segment_files([str(tmp_path)], ("t", 0)) == ((0, 40), (300, 250))
    # A roll creates a file: the directory changed, so it is listed again.
    (d / f"{80:020d}.log").write_bytes(b"x" * 7)
    assert segment_files([str(tmp_path)], ("t", 0)) == ((0, 40, 80), (310, 250, 7))
    assert segment_files([str(tmp_path)], ("t", 1)) is None


def test_close_all_releases_every_reader(tmp_path):
    write(tmp_path)
    with reader([str(tmp_path)]) as first:
        pass
    log_readers.close_all()
    with reader([str(tmp_path)]) as second:
        assert second is not first


def _listings(monkeypatch) -> list[str]:
    """The directory names listed through the storage seam from now on."""
    from seglog.logstore.storage.storage import LOCAL

    listed: list[str] = []
    real = LOCAL.list_names

    def counting(path):
        listed.append(os.path.basename(str(path)))
        return real(path)

    monkeypatch.setattr(LOCAL, "list_names", counting)
    return listed


def _age_partition_dirs(d, topic="t") -> int:
    """Set every partition directory's mtime an hour back (younger ones are listed again
    whatever happened: their mtime may not have moved yet); returns that mtime."""
    hour_ago = time.time_ns() - 3600 * 10**9
    for p in d.iterdir():
        if p.name.startswith(f"{topic}-"):
            os.utime(p, ns=(hour_ago, hour_ago))
    return hour_ago


def test_a_new_querys_first_trigger_lists_each_partition_once(tmp_path, monkeypatch):
    write(tmp_path, partitions=3, batches=4)
    _age_partition_dirs(tmp_path)
    log_readers.close_all()
    listed = _listings(monkeypatch)
    options = {"path": str(tmp_path), "subscribe": "t", "startingOffsets": "earliest",
               "maxBytesPerTrigger": "100"}
    r = SeglogStreamReader(options, source_schema(options))
    start = r.initialOffset()
    assert {"t-0", "t-1", "t-2"} <= set(listed)  # the log start offsets, among others
    listed.clear()
    end = r.latestOffset(start, r.getDefaultReadLimit())
    # the byte estimate of the first trigger reuses initialOffset's listings
    assert [n for n in listed if n.startswith("t-")] == []
    # ... and admits what a fresh listing of every directory gives
    from seglog.logstore.manager.partition_table import list_segment_layout
    from seglog.streaming.admission import AdmissionLimits, SegmentLayout, admit

    latest = {("t", p): 20 for p in range(3)}
    fresh = admit({tp: 0 for tp in latest}, latest, AdmissionLimits(max_bytes=100), now_ms=0,
                  layouts=lambda tp: SegmentLayout(
                      *list_segment_layout(str(tmp_path / f"t-{tp[1]}")), latest[tp]))
    assert {("t", int(p)): v for p, v in end["t"].items()} == fresh.end
    assert fresh.end != latest  # the bound cut the batch


def test_a_byte_bound_stats_only_the_segments_it_may_admit(tmp_path, monkeypatch):
    """A new query's first trigger under maxBytesPerTrigger sizes the segments its byte
    budget may reach, not every segment of every partition (11,000 stats were most of
    that trigger over 1,000 partitions)."""
    from seglog.logstore.storage.storage import LOCAL

    with LogManager([str(tmp_path)]) as mgr:
        mgr.create_topic("t", 3)
        for p in range(3):
            for _ in range(6):  # 6 segments of one batch (5 records) each
                mgr.append("t", p, ONE)
                mgr.get_log("t", p).roll()
    _age_partition_dirs(tmp_path)
    log_readers.close_all()
    options = {"path": str(tmp_path), "subscribe": "t", "startingOffsets": "earliest",
               "maxBytesPerTrigger": "100"}
    r = SeglogStreamReader(options, source_schema(options))
    start = r.initialOffset()
    sized: list[str] = []
    real = LOCAL.size

    def counting(path):
        sized.append(str(path))
        return real(path)

    monkeypatch.setattr(LOCAL, "size", counting)
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert all(0 < v < 30 for v in end["t"].values())  # the bound cut the batch
    logs = [s for s in sized if s.endswith(".log")]
    assert len(logs) == 3  # each partition's first segment: its budget ends there
    assert all(s.endswith(f"{0:020d}.log") for s in logs)


def test_segment_files_reuse_the_readers_listing_until_the_directory_changes(
        tmp_path, monkeypatch):
    write(tmp_path, batches=2)
    d = tmp_path / "t-0"
    hour_ago = _age_partition_dirs(tmp_path)
    log_readers.close_all()
    with reader([str(tmp_path)]) as mgr:
        assert mgr.log_start_offsets() == {("t", 0): 0}  # lists t-0
    size = (d / f"{0:020d}.log").stat().st_size
    listed = _listings(monkeypatch)
    assert segment_files([str(tmp_path)], ("t", 0)) == ((0,), (size,))
    assert "t-0" not in listed
    # A roll creates a file and moves the directory's mtime: listed again.
    (d / f"{10:020d}.log").write_bytes(b"x" * 7)
    os.utime(d, ns=(hour_ago + 10**9, hour_ago + 10**9))
    log_readers._layouts.clear()  # as a new process would: only the reader's listing is left
    assert segment_files([str(tmp_path)], ("t", 0)) == ((0, 10), (size, 7))
    assert listed.count("t-0") == 1
