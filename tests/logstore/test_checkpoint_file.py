from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.logstore.errors import CorruptCheckpointError, KafkaStorageError
from seglog.logstore.storage.checkpoint_file import (
    CheckpointFile,
    CheckpointFormat,
    OffsetCheckpointFile,
    write_atomically,
)


def test_round_trip_in_kafkas_text_format(tmp_path):
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    f.write({("b.t", 1): 7, ("a-t", 0): 42, ("a-t", 10): 0})
    assert f.path.read_text() == "0\n3\na-t 0 42\na-t 10 0\nb.t 1 7\n"
    assert f.read() == {("a-t", 0): 42, ("a-t", 10): 0, ("b.t", 1): 7}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_missing_file_reads_empty_and_empty_checkpoint_round_trips(tmp_path):
    f = OffsetCheckpointFile(tmp_path / "x-checkpoint")
    assert f.read() == {}
    f.write({})
    assert f.path.read_text() == "0\n0\n"
    assert f.read() == {}


def test_reads_a_file_written_by_kafka(tmp_path):
    # Kafka writes exactly this (CheckpointFile.write: version, size, entries, each + "\n").
    p = tmp_path / "replication-offset-checkpoint"
    p.write_text("0\n2\n__consumer_offsets 3 0\nmy_topic 0 123456789012\n")
    assert OffsetCheckpointFile(p).read() == {("__consumer_offsets", 3): 0,
                                              ("my_topic", 0): 123456789012}


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("\n", "line 1: unrecognized version ''"),
        ("1\n0\n", "line 1: unrecognized version '1'"),
        ("0\n", "line 2"),
        ("0\nx\n", "line 2: malformed entry count"),
        ("0\n-1\n", "line 2: negative"),
        ("0\n2\nt 0 1\n", "expected 2 entries but found 1"),
        ("0\n1\nt 0 1\nt 1 2\n", "expected 1 entries but found 2"),
        ("0\n2\nt 0 1\nt 0 x\n", "line 4: malformed entry 't 0 x'"),
        ("0\n1\nt 0\n", "line 3"),
        ("0\n1\nt -1 5\n", "line 3"),
        ("0\n1\nt 0 -5\n", "line 3"),
        ("0\n1\n 0 5\n", "line 3"),
        ("0\n2\nt 0 1\nt 0 2\n", "listed twice"),
        (b"0\n1\nt\xff 0 1\n", "not UTF-8"),
    ],
)
def test_corruption_is_reported_with_file_and_line(tmp_path, content, fragment):
    p = tmp_path / "log-start-offset-checkpoint"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(CorruptCheckpointError) as e:
        OffsetCheckpointFile(p).read()
    assert str(p) in str(e.value)
    assert fragment in str(e.value)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(
    st.tuples(st.text("abcXYZ019._-", min_size=1, max_size=20), st.integers(0, 10_000)),
    st.integers(0, 2**63 - 1), max_size=30))
def test_property_round_trip(tmp_path_factory, offsets):
    f = OffsetCheckpointFile(tmp_path_factory.mktemp("cp") / "c")
    f.write(offsets)
    assert f.read() == offsets


def test_pluggable_line_format(tmp_path):
    # leader-epoch-checkpoint style: "epoch startOffset"
    fmt = CheckpointFormat(lambda e: f"{e[0]} {e[1]}",
                           lambda line: tuple(int(x) for x in line.split(" ", 1)))
    f = CheckpointFile(tmp_path / "leader-epoch-checkpoint", fmt)
    f.write([(0, 0), (3, 100)])
    assert f.read() == [(0, 0), (3, 100)]
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n3 x\n")
    with pytest.raises(CorruptCheckpointError, match="line 3"):
        f.read()


def test_an_empty_file_is_no_entries_only_in_kafkas_offset_checkpoints(tmp_path):
    """Kafka creates its checkpoint files empty and reads them as no entries; seglog's
    own formats (the maintenance checkpoint) are never written empty: damage there."""
    p = tmp_path / "c"
    p.write_bytes(b"")
    assert OffsetCheckpointFile(p).read() == {}
    fmt = CheckpointFormat(str, str)
    with pytest.raises(CorruptCheckpointError, match="line 1: empty file"):
        CheckpointFile(p, fmt).read()


def test_write_fsyncs_file_and_directory_before_and_after_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(a, b):
        events.append(("replace", os.path.basename(a), os.path.basename(b)))
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    OffsetCheckpointFile(tmp_path / "c").write({("t", 0): 1})
    assert events == [("fsync", "c.tmp"), ("replace", "c.tmp", "c"),
                      ("fsync", tmp_path.name)]


def test_a_failed_write_keeps_the_old_content(tmp_path, monkeypatch):
    f = OffsetCheckpointFile(tmp_path / "c")
    f.write({("t", 0): 1})

    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(KafkaStorageError, match=str(tmp_path / "c")):
        f.write({("t", 0): 2})
    monkeypatch.undo()
    assert f.read() == {("t", 0): 1}


def test_write_atomically_overwrites_a_stale_tmp(tmp_path):
    (tmp_path / "x.tmp").write_text("garbage from a crash")
    write_atomically(tmp_path / "x", b"new")
    assert (tmp_path / "x").read_bytes() == b"new"
    assert not (tmp_path / "x.tmp").exists()
