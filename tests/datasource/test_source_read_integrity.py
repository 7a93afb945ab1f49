"""The seglog source over damaged log dirs (batch and stream), and what it refuses.

Corruption (a bit flip in a base offset, which the CRC does not cover) fails the read
whatever ``failOnDataLoss`` says, naming the file; missing data (a deleted segment, a
segment cut short) follows ``failOnDataLoss``: the data-loss error naming the range, or
the rows that exist and a warning. Never shifted, duplicated or silently skipped rows.
Stream queries cost ~13 s each here, so only three run.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from segment_damage import flip_base_offset, segment_files

from seglog.datasource.schema import arrow_schema, source_schema
from seglog.datasource.stream_reader import SeglogStreamReader
from seglog.logstore.errors import CorruptRecordError, DataLossError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.streaming.source_read import read_range

TOPIC = "ev"
ROWS = 300


def build(d: Path, config: dict | None = None) -> None:
    with LogManager([str(d)]) as mgr:
        mgr.create_topic(
            TOPIC, 1, {"segment.bytes": "4096", "index.interval.bytes": "256", **(config or {})}
        )
        for lo in range(0, ROWS, 10):
            mgr.append(
                TOPIC,
                0,
                encode_batches(
                    pa.array([b"v%d" % o for o in range(lo, lo + 10)], pa.binary()),
                    max_batch_bytes=64,
                ),
            )
        mgr.checkpoint_high_watermarks()
        assert mgr.get_log(TOPIC, 0).num_segments >= 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pristine") / "logs"
    build(d)
    return d


def segments(d: Path) -> list[Path]:
    return segment_files(d, TOPIC)


def delete_segment(path: Path) -> tuple[int, int]:
    """Delete a middle segment; returns the missing range."""
    nxt = segments(path.parent.parent)[segments(path.parent.parent).index(path) + 1]
    for f in path.parent.glob(path.stem + ".*"):
        f.unlink()
    return int(path.stem), int(nxt.stem)


def damaged(pristine: Path, tmp_path: Path, fault: str) -> tuple[Path, tuple[int, int] | None]:
    d = tmp_path / fault
    shutil.copytree(pristine, d)
    gap = None
    if fault == "flip-middle":
        flip_base_offset(segments(d)[1], 2, 3)
    elif fault == "flip-last":
        flip_base_offset(segments(d)[-1], -1, 40)
    elif fault == "deleted-segment":
        gap = delete_segment(segments(d)[1])
    elif fault == "truncated-active":
        last = segments(d)[-1]
        h = list(iter_batch_headers(last.read_bytes()))[3]
        os.truncate(last, h.position)
        gap = (h.base_offset, ROWS)
    return d, gap


def batch_read(spark, d: Path, **options):
    reader = (
        spark.read.format("seglog")
        .option("path", str(d))
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted((r.offset, bytes(r.value)) for r in reader.load().collect())


def expect_rows(rows, gap=None) -> None:
    want = [o for o in range(ROWS) if gap is None or not gap[0] <= o < gap[1]]
    assert [o for o, _ in rows] == want
    assert all(v == b"v%d" % o for o, v in rows)


@pytest.mark.spark
@pytest.mark.parametrize("fault", ["flip-middle", "flip-last"])
@pytest.mark.parametrize("fail", ["true", "false"])
def test_batch_read_of_a_corrupt_log_fails_naming_the_file(spark, pristine, tmp_path, fault, fail):
    d, _ = damaged(pristine, tmp_path, fault)
    with pytest.raises(Exception) as info:
        batch_read(spark, d, failOnDataLoss=fail)
    text = str(info.value)
    assert "CorruptRecordError" in text and f"{TOPIC}-0" in text and ".log" in text, text


@pytest.mark.spark
@pytest.mark.parametrize(
    "fault",
    [
        "deleted-segment",
        # A high watermark above the log end is reported as data loss at planning (a damaged
        # checkpoint digit looks the same: docs/checkpoints.md), never read short in silence.
        "truncated-active",
    ],
)
def test_batch_read_of_missing_data_follows_fail_on_data_loss(spark, pristine, tmp_path, fault):
    d, gap = damaged(pristine, tmp_path, fault)
    with pytest.raises(Exception) as info:
        batch_read(spark, d)
    text = str(info.value)
    assert "DataLossError" in text and f"[{gap[0]}, {gap[1]})" in text, text
    expect_rows(batch_read(spark, d, failOnDataLoss="false"), gap)


@pytest.mark.spark
def test_batch_read_with_a_garbled_active_index_reads_every_row(spark, tmp_path):
    d = tmp_path / "logs"
    build(d, {"index.interval.bytes": "64"})
    idx = segments(d)[-1].with_suffix(".index")
    data = bytearray(idx.read_bytes())
    assert len(data) >= 24
    data[4:8], data[12:16] = data[12:16], data[20:24]  # entries point at later batches
    idx.write_bytes(bytes(data))
    expect_rows(batch_read(spark, d))
    # Starting just past the first entry's offset: a lookup trusting it would skip rows.
    after_entry = int(segments(d)[-1].stem) + struct.unpack_from(">i", data, 0)[0] + 1
    rows = batch_read(spark, d, startingOffsets=f'{{"{TOPIC}": {{"0": {after_entry}}}}}')
    assert [o for o, _ in rows] == list(range(after_entry, ROWS))


@pytest.mark.spark
def test_offsets_that_name_nothing_fail_on_the_driver(spark, pristine):
    with pytest.raises(Exception, match=r"endingOffsets.*ev-0 \(400 > latest offset 300\)"):
        batch_read(spark, pristine, endingOffsets='{"ev": {"0": 400}}')
    with pytest.raises(Exception, match=r"assign.*\[ev-3\]"):
        (
            spark.read.format("seglog")
            .option("path", str(pristine))
            .option("assign", '{"ev": [0, 3]}')
            .load()
            .collect()
        )


def run_stream(spark, d: Path, chk: Path, fail: str):
    got: list[tuple[int, bytes]] = []

    def collect(df, _batch_id):
        got.extend((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())

    q = (
        spark.readStream.format("seglog")
        .option("path", str(d))
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination()
    finally:
        q.stop()
    return sorted(got)


@pytest.mark.spark
def test_stream_corruption_fails_even_without_fail_on_data_loss(spark, pristine, tmp_path):
    d, _ = damaged(pristine, tmp_path, "flip-middle")
    with pytest.raises(Exception) as info:
        run_stream(spark, d, tmp_path / "chk", "false")
    assert "CorruptRecordError" in str(info.value) and ".log" in str(info.value)


@pytest.mark.spark
def test_stream_missing_segment_skips_or_fails(spark, pristine, tmp_path):
    d, gap = damaged(pristine, tmp_path, "deleted-segment")
    expect_rows(run_stream(spark, d, tmp_path / "chk-skip", "false"), gap)
    with pytest.raises(Exception) as info:
        run_stream(spark, d, tmp_path / "chk-fail", "true")
    assert "DataLossError" in str(info.value) and f"[{gap[0]}, {gap[1]})" in str(info.value)


# -- retention under a running read (the reader's own calls, no JVM) ----------------------


@pytest.mark.parametrize("fail", [True, False])
def test_retention_under_a_running_read_is_data_loss_named_or_skipped(tmp_path, caplog, fail):
    d = tmp_path / "logs"
    build(d, {"retention.bytes": "1", "file.delete.delay.ms": "0"})
    options = {
        "path": str(d),
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail).lower(),
    }
    reader = SeglogStreamReader(options, source_schema(options))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    (planned,) = reader.partitions(start, end)
    batches = read_range(planned.value, arrow_schema(False), chunk_bytes=128)
    first = next(batches).column("offset").to_pylist()  # the task holds its first segment
    with LogManager([str(d)]) as mgr:
        assert mgr.delete_old_segments() > 0
        mgr.checkpoint_log_start_offsets()
        lso = mgr.get_log(TOPIC, 0).log_start_offset
    assert first[-1] + 1 < lso
    with caplog.at_level(logging.WARNING):
        if fail:
            with pytest.raises(DataLossError, match=rf"offsets \[\d+, {lso}\)") as info:
                list(batches)
            assert "the log holds" not in str(info.value)  # never an inverted range
            return
        got = first + [o for b in batches for o in b.column("offset").to_pylist()]
    assert got == sorted(set(got)) and got[-(ROWS - lso) :] == list(range(lso, ROWS))
    assert f", {lso}) cannot be read" in caplog.text and "failOnDataLoss=false" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        reader.partitions(start, end)  # planned again: the driver warns before any task
    assert f"topic '{TOPIC}' partition 0: offsets [0, {lso}) were removed" in caplog.text


def test_a_corrupt_record_in_a_task_names_the_partition_and_the_segment(pristine, tmp_path):
    """A CRC-covered byte flipped in a middle segment: the task's error names the
    topic-partition and the segment file, not only a position inside a chunk."""
    d = tmp_path / "logs"
    shutil.copytree(pristine, d)
    middle = segments(d)[len(segments(d)) // 2]
    h = list(iter_batch_headers(middle.read_bytes()))[1]
    data = bytearray(middle.read_bytes())
    data[h.position + 70] ^= 0x40  # inside the records, which the CRC covers
    middle.write_bytes(bytes(data))
    options = {"path": str(d), "subscribe": TOPIC, "startingOffsets": "earliest"}
    reader = SeglogStreamReader(options, source_schema(options))
    start = reader.initialOffset()
    (planned,) = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    with pytest.raises(CorruptRecordError) as info:
        for _ in read_range(planned.value, arrow_schema(False)):
            pass
    text = str(info.value)
    assert f"topic '{TOPIC}' partition 0" in text and str(middle) in text, text
