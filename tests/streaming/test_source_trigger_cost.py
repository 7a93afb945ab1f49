"""What a steady trigger of the streaming source costs on a local log dir, while a writer
publishes: one listing of the log dir per snapshot, a log-end probe that parses only the
batches appended since the last one, no look at all for ``reportLatestOffset``; and the
same answers as a fresh reader's with the writer in another process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from seglog.datasource.schema import source_schema
from seglog.datasource.stream_reader import SeglogStreamReader
from seglog.logstore.errors import DataLossError
from seglog.logstore.log import segment_reads
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.storage import LOCAL

ONE = encode_batches(pa.array([b"v"], pa.binary()))  # one record, ~70 bytes


class Calls:
    """Counts of the calls made through the storage seam and the batch-header parser."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log_dir: Path) -> None:
        self.log_dir = str(log_dir)
        self.listings = 0  # of the log dir itself
        self.touches = 0  # any file or directory operation
        self.headers = 0
        for name in (
            "scan_dir",
            "list_names",
            "read",
            "stat",
            "open_file",
            "open_range_reader",
            "exists",
        ):
            monkeypatch.setattr(
                LOCAL, name, self._counting(getattr(LOCAL, name), name == "scan_dir")
            )
        parse = segment_reads.read_batch_header

        def counting_parse(*args: Any, **kwargs: Any) -> Any:
            self.headers += 1
            return parse(*args, **kwargs)

        monkeypatch.setattr(segment_reads, "read_batch_header", counting_parse)

    def _counting(self, real: Callable[..., Any], is_listing: bool) -> Callable[..., Any]:
        def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
            self.touches += 1
            if is_listing and os.path.samefile(str(path), self.log_dir):
                self.listings += 1
            return real(path, *args, **kwargs)

        return counting

    def reset(self) -> None:
        self.listings = self.touches = self.headers = 0


def stream_reader(log_dir: Path, **options: str) -> SeglogStreamReader:
    opts = {"path": str(log_dir), "subscribe": "t", "startingOffsets": "earliest", **options}
    return SeglogStreamReader(opts, source_schema(opts))


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[LogManager]:
    mgr = LogManager([str(tmp_path)])
    mgr.create_topic("t", 1)
    yield mgr
    mgr.close()


def test_a_steady_trigger_lists_the_log_dir_once(tmp_path, writer, monkeypatch):
    """Every publish renames the high-watermark checkpoint into the log dir, so its
    mtime always moved since the last trigger: each call of the snapshot listed it again
    (4 listings a trigger before)."""
    r = stream_reader(tmp_path)
    start = r.initialOffset()
    calls = Calls(monkeypatch, tmp_path)
    for n in range(1, 4):
        writer.append_many({("t", 0): ONE})
        calls.reset()
        end = r.latestOffset(start, ReadAllAvailable())
        assert end["t"] == {"0": n}
        assert calls.listings == 1
        start = end


def test_report_latest_offset_is_the_triggers_own_look(tmp_path, writer, monkeypatch):
    """Spark asks right after latestOffset: its snapshot answers, limits not applied."""
    for _ in range(5):
        writer.append_many({("t", 0): ONE})
    r = stream_reader(tmp_path, maxOffsetsPerTrigger="2")
    start = r.initialOffset()
    calls = Calls(monkeypatch, tmp_path)
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end["t"] == {"0": 2}
    calls.reset()
    assert r.reportLatestOffset() == {"t": {"0": 5}}
    assert calls.touches == 0
    writer.append_many({("t", 0): ONE})
    r.latestOffset(end, r.getDefaultReadLimit())
    assert r.reportLatestOffset() == {"t": {"0": 6}}


def test_report_latest_offset_before_any_trigger_looks_itself(tmp_path, writer):
    writer.append_many({("t", 0): ONE})
    r = stream_reader(tmp_path)
    assert r.reportLatestOffset() == {"t": {"0": 1}}


def test_the_log_end_probe_parses_only_the_new_batches(tmp_path, writer, monkeypatch):
    """The published high watermark is checked against the log end every time it moved;
    40 small batches past the last index entry were all parsed again (twice) per
    trigger: now the one appended since, and the one the last probe ended at."""
    for _ in range(40):
        writer.append_many({("t", 0): ONE})
    r = stream_reader(tmp_path)
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    calls = Calls(monkeypatch, tmp_path)
    writer.append_many({("t", 0): ONE})
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["t"] == {"0": 41}
    assert calls.headers == 2


def _cut_after(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_a_probe_that_resumes_still_sees_a_cut_tail(tmp_path, writer):
    """The batch the last probe ended at is gone (the segment was cut): the probe scans
    from the index again and the published offsets past the cut are data loss."""
    for _ in range(10):
        writer.append_many({("t", 0): ONE})
    r = stream_reader(tmp_path)
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    writer.append_many({("t", 0): ONE})
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    _cut_after(segment, segment.stat().st_size * 6 // 11)
    with pytest.raises(DataLossError, match=r"offsets \[\d+, 11\) are published"):
        r.latestOffset(start, ReadAllAvailable())


def test_a_probe_that_resumes_is_not_fooled_by_other_bytes_at_its_position(tmp_path, writer):
    """The segment was cut and rewritten with batches of other sizes: the batch the last
    probe ended at does not read the same there, so the probe scans from the index."""
    for _ in range(10):
        writer.append_many({("t", 0): ONE})
    r = stream_reader(tmp_path)
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    writer.close()
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    _cut_after(segment, 0)
    (tmp_path / "t-0" / f"{0:020d}.index").unlink()
    (tmp_path / "t-0" / f"{0:020d}.timeindex").unlink()
    with LogManager([str(tmp_path)]) as again:  # recovers the empty segment
        for _ in range(12):  # batches of 3 records: other boundaries, past the old end
            again.append_many({("t", 0): encode_batches(pa.array([b"abc"] * 3, pa.binary()))})
    assert segment.stat().st_size > 10 * len(ONE)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["t"] == {"0": 36}


_PRODUCER = """
import sys
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
mgr = LogManager([sys.argv[1]], default_topic_config={"index.interval.bytes": 256,
                                                       "segment.bytes": 4096})
mgr.create_topic("t", 1)
print(0, flush=True)
for line in sys.stdin:
    n = int(line)
    for _ in range(n):
        mgr.append_many({("t", 0): encode_batches(pa.array([b"x" * n] * n, pa.binary()))})
    print(mgr.high_watermarks()[("t", 0)], flush=True)
mgr.close()
"""


def test_a_producer_in_another_process_gives_the_answers_of_a_fresh_reader(tmp_path):
    """Steps of a producer in another process (batches of varied sizes, index entries,
    rolls): each trigger's end is what the producer acknowledged, as a reader opened
    afresh for it (no listing, probe or hint kept) says."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, str(tmp_path)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "0"
        r = stream_reader(tmp_path)
        start = r.initialOffset()
        for n in (1, 7, 2, 30, 1, 1, 12, 3):
            child.stdin.write(f"{n}\n")
            child.stdin.flush()
            acknowledged = int(child.stdout.readline())
            end = r.latestOffset(start, ReadAllAvailable())
            with LogManager([str(tmp_path)], read_only=True) as fresh:
                assert fresh.high_watermarks() == {("t", 0): acknowledged}
            assert end["t"] == {"0": acknowledged}
            assert r.reportLatestOffset() == {"t": {"0": acknowledged}}
            start = end
        assert len(list((tmp_path / "t-0").glob("*.log"))) > 1  # it rolled meanwhile
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0


def test_a_loaded_log_resumes_its_log_end_and_sees_a_cut_tail(tmp_path, writer, monkeypatch):
    """A read task's log (loaded, closed after each task: its segment files released)
    resumes its look at the log end too, and a cut below where it resumes is seen."""
    from seglog.logstore.log.log_reader import LogReader

    for _ in range(40):
        writer.append_many({("t", 0): ONE})
    log = LogReader.open(tmp_path / "t-0", writer.topic_config("t"))
    assert log.log_end_offset == 40
    log.close()
    calls = Calls(monkeypatch, tmp_path)
    writer.append_many({("t", 0): ONE})
    calls.reset()
    assert log.log_end_offset == 41
    assert calls.headers == 2
    log.close()
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    _cut_after(segment, len(ONE) * 30)
    assert log.log_end_offset == 30
    log.close()
