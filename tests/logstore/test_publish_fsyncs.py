"""The fsyncs of a producer's acknowledged ``append_many`` on a local log dir, counted by
a wrapper of ``os.fsync``: the ``.log`` and the high-watermark checkpoint (file, then
directory) every time; never the active segment's indexes, which an unclean open
rebuilds and a clean close fsyncs; and an index the writer did not change since its last
fsync has nothing to make durable."""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

SMALL = encode_batches(pa.array([b"v"], pa.binary()))
LARGE = encode_batches(pa.array([b"x" * 5000], pa.binary()))  # past index.interval.bytes


@pytest.fixture
def fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The files fsynced from now on, relative to the log dir (offsets as ``N``)."""
    paths: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        rel = os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), tmp_path)
        paths.append(re.sub(r"\d{20}", "N", rel))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield paths


def taken(paths: list[str]) -> collections.Counter[str]:
    out = collections.Counter(paths)
    paths.clear()
    return out


def test_a_small_append_fsyncs_the_log_and_the_checkpoint_only(tmp_path, fsyncs):
    publish = collections.Counter({"t-0/N.log": 1, "replication-offset-checkpoint.tmp": 1, ".": 1})
    with LogManager([str(tmp_path)]) as mgr:
        mgr.create_topic("t", 1)
        fsyncs.clear()
        for _ in range(3):
            mgr.append_many({("t", 0): SMALL})
            assert taken(fsyncs) == publish
        # A batch past index.interval.bytes gives each index an entry (Kafka's rule: the
        # batch after the bytes); the active segment's indexes still wait: an unclean open
        # rebuilds them from the .log, a clean close fsyncs them before its marker.
        for batch in (LARGE, SMALL):
            mgr.append_many({("t", 0): batch})
            assert taken(fsyncs) == publish
    closing = taken(fsyncs)
    assert closing["t-0/N.index"] == 1 and closing["t-0/N.timeindex"] == 1
    with LogManager([str(tmp_path)], read_only=True) as reader:
        assert reader.high_watermarks() == {("t", 0): 5}


def test_every_change_of_an_index_is_fsynced_by_the_next_flush(tmp_path, fsyncs):
    """Entries, truncation and resizing each make the next flush fsync the file; a flush
    after nothing does not."""
    from seglog.logstore.index.offset_index import OffsetIndex

    index = OffsetIndex(tmp_path / f"{0:020d}.index", 0, max_index_size=1024)
    index.flush()
    assert taken(fsyncs) == {"N.index": 1}  # opened: whatever came before
    index.flush()
    assert taken(fsyncs) == {}
    for change in (
        lambda: index.append(5, 100),
        lambda: index.truncate_to_entries(0),
        lambda: index.resize(2048),
        index.trim_to_valid_size,
    ):
        change()
        index.flush()
        assert taken(fsyncs) == {"N.index": 1}
        index.flush()
        assert taken(fsyncs) == {}
    index.close()
