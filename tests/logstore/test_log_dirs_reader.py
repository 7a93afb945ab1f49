"""The reader of log dirs (``LogDirsReader``) apart from the writer ``LogManager``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from seglog.logstore.errors import ConfigError, CorruptCheckpointError, ReadOnlyError
from seglog.logstore.log.log_reader import LogReader
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.file_names import HIGH_WATERMARK_CHECKPOINT

# Directory listings made while `_listings` is a list (an audit hook cannot be removed,
# so it is installed once and switched by this flag).
_listings: list[str] | None = None


def _count_listings(event: str, args: tuple) -> None:
    if _listings is not None and event in ("os.listdir", "os.scandir"):
        _listings.append(str(args[0]))


sys.addaudithook(_count_listings)


def _values(n: int) -> list[bytes]:
    return [b"v%d" % i for i in range(n)]


def _age(root: Path) -> None:
    """Move every mtime back past the racy window, as for a dir written a while ago."""
    old = time.time() - 60
    for p in [root, *root.rglob("*")]:
        os.utime(p, (old, old))


def test_read_only_manager_is_a_log_dirs_reader(tmp_path: Path) -> None:
    import pyarrow as pa

    with LogManager([tmp_path]) as mgr:
        assert type(mgr) is LogManager and not mgr.read_only
        mgr.create_topic("t", 2)
        mgr.append("t", 0, encode_batches(pa.array(_values(5))))
    with LogManager([tmp_path], read_only=True) as reader:
        assert type(reader) is LogDirsReader and reader.read_only
        assert reader.high_watermarks() == {("t", 0): 5, ("t", 1): 0}
        assert isinstance(reader.get_log("t", 0), LogReader)
    with pytest.raises(ConfigError, match="repair=True"):
        LogManager([tmp_path], read_only=True, repair=True)


def test_writer_methods_refuse_and_name_the_dir(tmp_path: Path) -> None:
    LogManager([tmp_path]).close()
    reader = LogDirsReader(tmp_path)
    for call in (lambda: reader.create_topic("u"), lambda: reader.append("u", 0, b""),
                 lambda: reader.delete_topic("u"), reader.checkpoint_high_watermarks,
                 lambda: reader.check(fix=True), reader.run_maintenance):
        with pytest.raises(ReadOnlyError, match=str(tmp_path)):
            call()


def test_a_reader_takes_no_lock_and_sees_what_the_writer_publishes_later(tmp_path: Path):
    import pyarrow as pa

    LogManager([tmp_path]).close()
    with LogDirsReader([tmp_path]) as reader:
        assert reader.topics() == []
        # a reader holds no .lock: a writer opens next to it
        with LogManager([tmp_path]) as mgr:
            mgr.create_topic("t", 1)
            mgr.append("t", 0, encode_batches(pa.array(_values(3))))
            mgr.checkpoint_high_watermarks()
            assert reader.topics() == ["t"]
            assert reader.high_watermarks() == {("t", 0): 3}
            mgr.delete_topic("t")
        assert reader.topics() == []
        assert reader.high_watermarks() == {}


def test_an_unchanged_dir_is_not_listed_again(tmp_path: Path) -> None:
    import pyarrow as pa

    global _listings
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3, config={"segment.bytes": 200})
        for p in range(3):
            for _ in range(4):  # one segment per append
                mgr.append("t", p, encode_batches(pa.array(_values(20))))
    _age(tmp_path)
    reader = LogDirsReader([tmp_path])
    first = (reader.high_watermarks(), reader.log_start_offsets(), reader.topics())
    _listings = []
    try:
        again = (reader.high_watermarks(), reader.log_start_offsets(), reader.topics())
        seen = list(_listings)
    finally:
        _listings = None
    assert again == first
    assert seen == []  # only stats and the two checkpoint files: nothing is listed


def test_damage_found_on_a_later_read_raises_rather_than_reusing_old_values(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
    reader = LogDirsReader([tmp_path])
    assert reader.high_watermarks() == {("t", 0): 0}
    (tmp_path / HIGH_WATERMARK_CHECKPOINT).write_text("0\n1\nt 0 x\n")
    with pytest.raises(CorruptCheckpointError, match="seglog check --fix"):
        reader.high_watermarks()


@pytest.mark.parametrize("read_only", [True, False], ids=["reader", "writer"])
@pytest.mark.parametrize("high_watermarks_first", [True, False], ids=["hws-first", "log-first"])
def test_a_high_watermark_beyond_the_log_end_is_clamped_whatever_is_asked_first(
        tmp_path: Path, read_only: bool, high_watermarks_first: bool) -> None:
    """Issue 22.12: one answer, the log end offset (Kafka's rule), and the README's read
    up to ``log.high_watermark`` works."""
    import pyarrow as pa

    from seglog.logstore.records.record_codec import decode_batches

    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        for i in range(3):
            mgr.append("t", 0, encode_batches(pa.array(_values(7 + i))))
    checkpoint = tmp_path / HIGH_WATERMARK_CHECKPOINT
    checkpoint.write_text(checkpoint.read_text().replace("t 0 24", "t 0 323"))
    with LogManager([tmp_path], read_only=read_only) as mgr:
        if high_watermarks_first:
            assert mgr.high_watermarks() == {("t", 0): 24}
        log = mgr.get_log("t", 0)
        assert log.high_watermark == 24
        assert mgr.high_watermarks() == {("t", 0): 24}
        assert log.high_watermark == 24
        rows = decode_batches(b"".join(log.read_chunks(0, log.high_watermark)))
        assert rows.column("offset").to_pylist() == list(range(24))


def test_segment_sizes_stat_each_log_when_asked_and_keep_sealed_ones(tmp_path: Path) -> None:
    """``SegmentSizes`` stats a ``.log`` when its size is first asked (a byte bound asks
    few of 11,000), keeps the sizes of sealed segments, and asks the last one (the active
    segment, which grows) again in each ``renewed`` copy."""
    from seglog.logstore.manager.partition_table import SegmentSizes

    first, active = tmp_path / f"{0:020d}.log", tmp_path / f"{40:020d}.log"
    first.write_bytes(b"x" * 300)
    active.write_bytes(b"x" * 200)
    sizes = SegmentSizes(str(tmp_path), (0, 40))
    first.write_bytes(b"x" * 310)  # after the listing, before anyone asked
    assert sizes[0] == 310
    first.write_bytes(b"x" * 320)  # a sealed size, once known, is kept
    assert sizes[0] == 310 and sizes[-1] == 200
    active.write_bytes(b"x" * 250)
    assert sizes[1] == 200  # one trigger's copy answers alike throughout
    renewed = sizes.renewed()
    assert renewed == (310, 250) and renewed[0:1] == (310,) and len(renewed) == 2
    with pytest.raises(IndexError):
        renewed[2]
    gone = SegmentSizes(str(tmp_path), (0, 40, 80))  # 80 deleted since it was listed
    assert list(gone) == [320, 250, 0]
