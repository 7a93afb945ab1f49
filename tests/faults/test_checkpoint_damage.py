"""Damaged checkpoint and state files never cost committed data.

For each damage kind of each checkpoint file of a log dir holding a sink's committed
micro-batches: readers see exactly the committed records or get a clear error naming the
file; a writer (and so the sink) refuses to open instead of truncating a "tail";
``check`` reports the file; ``check --fix`` repairs it; afterwards readers see every
committed record and the sink goes on.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.cli import main
from seglog.logstore.errors import CorruptCheckpointError
from seglog.logstore.manager.log_manager import LogManager, check_log_dirs
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    MAINTENANCE_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPIC_CONFIG_FILE,
)
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

TOPIC = "out"
SINK = "7d2e-query"


def _rows(batch: int, n: int = 60) -> pa.RecordBatch:
    return pa.record_batch({
        "key": pa.array([f"k{i % 7}" for i in range(n)], pa.string()),
        "value": pa.array([f"b{batch}-{i}".encode() for i in range(n)], pa.binary()),
    })


def sink_commit(log_dir: Path, batch: int) -> None:
    """Stage and commit micro-batch ``batch`` through the real sink protocol."""
    opts = SinkOptions.parse({"path": str(log_dir), "topic": TOPIC, "numPartitions": "3"})
    data = _rows(batch)
    cols = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    staged = [stage_rows(opts, cols, [data], SINK, batch, 0, 0)]
    commit(staged, batch, opts)


def visible(log_dir: Path) -> collections.Counter:
    """Every (partition, offset, value) a reader in another process sees."""
    out: collections.Counter = collections.Counter()
    with LogManager([log_dir], read_only=True) as mgr:
        hws = mgr.high_watermarks()
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            for chunk in log.read_chunks(log.log_start_offset, hws[(TOPIC, p)]):
                rows = decode_batches(chunk)
                for o, v in zip(rows.column("offset").to_pylist(),
                                rows.column("value").to_pylist(), strict=True):
                    out[(p, o, v)] += 1
    return out


def committed_values(batches) -> collections.Counter:
    return collections.Counter(f"b{b}-{i}".encode() for b in batches for i in range(60))


def segment_digest(log_dir: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(log_dir.glob("*/*.log")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "logs"
    for b in (0, 1):
        sink_commit(d, b)
    with LogManager([d]) as mgr:  # one partition with an advanced log start offset
        mgr.create_topic("trimmed")
        for _ in range(3):
            mgr.append("trimmed", 0, encode_batches(pa.array([b"x"] * 10, pa.binary())))
        mgr.get_log("trimmed", 0).maybe_increment_log_start_offset(12)
        mgr.checkpoint_log_start_offsets()
    return d


@pytest.fixture
def log_dir(pristine, tmp_path):
    import shutil

    d = tmp_path / "logs"
    shutil.copytree(pristine, d, symlinks=True)
    return d


def damage(path: Path, kind: str) -> None:
    if kind == "unreadable" and path.is_dir():
        return  # still in place: nothing could write the file back
    text = path.read_text()
    if kind == "version-bit-flip":
        path.write_bytes(bytes([text.encode()[0] ^ 0x04]) + text.encode()[1:])
    elif kind == "digit":
        # One digit of the last number raised (Kafka's "300 -> 900"), or of the count.
        lines = text.split("\n")[:-1]
        head, _, num = lines[-1].rpartition(" ")
        lines[-1] = (head + " " if head else "") + ("9" + num[1:] if num[0] != "9" else
                                                   "9" + num)
        path.write_text("\n".join(lines) + "\n")
    elif kind == "truncated-mid-line":
        path.write_text(text[:len(text) - 2])  # "t 0 1234\n" -> "t 0 12"
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "unreadable":
        path.unlink()
        path.mkdir()  # root reads anything: a directory in its place fails every read
    elif kind == "deleted":
        path.unlink()
    else:
        raise AssertionError(kind)


KINDS = ["version-bit-flip", "digit", "truncated-mid-line", "empty", "unreadable", "deleted"]
# Damage that fails to parse (a changed digit still parses; "deleted" is normal for the
# cleaner's and the scheduler's files, which appear only after their first write).
GARBLED = ["version-bit-flip", "truncated-mid-line", "empty", "unreadable"]
# Kafka's offset checkpoints read an empty file as no entries (a broker creates them
# empty): not damage there (test_an_empty_offset_checkpoint_reads_as_kafka_does).
OFFSET_KINDS = [k for k in KINDS if k != "empty"]
OFFSET_GARBLED = [k for k in GARBLED if k != "empty"]
PUBLISHING = [HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT]


def _cli(*argv: str) -> tuple[int, str]:
    import io

    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


# A missing log-start-offset-checkpoint is read as Kafka reads it (its own test below).
@pytest.mark.parametrize(("name", "kind"), [
    (n, k) for n in PUBLISHING for k in OFFSET_KINDS
    if not (n == LOG_START_OFFSET_CHECKPOINT and k == "deleted")])
def test_damaged_published_offsets_refuse_then_fix_restores_everything(log_dir, name, kind,
                                                                      caplog):
    before = visible(log_dir)
    assert collections.Counter(v for _, _, v in before) == committed_values((0, 1))
    with LogManager([log_dir], read_only=True) as mgr:
        lso_trimmed = mgr.log_start_offsets()[("trimmed", 0)]
        hws = mgr.high_watermarks()
    assert lso_trimmed == 12
    digest = segment_digest(log_dir)
    path = log_dir / name
    damage(path, kind)
    beyond = kind == "digit"  # still parses, but points past the log end
    if beyond:
        # item 8: readers clamp to what exists and warn, naming the file
        with caplog.at_level(logging.WARNING):
            assert visible(log_dir) == before
            with LogManager([log_dir], read_only=True) as mgr:
                assert mgr.high_watermarks() == hws
                assert mgr.log_start_offsets()[("trimmed", 0)] in (0, 12)
        assert f"{path} says " in caplog.text and "beyond its log end" in caplog.text
    else:
        for read_only in (True, False):
            with pytest.raises(CorruptCheckpointError) as err:
                LogManager([log_dir], read_only=read_only)
            assert str(path) in str(err.value) and f"seglog check --fix {log_dir}" in str(err.value)
        with pytest.raises(CorruptCheckpointError, match=name):
            sink_commit(log_dir, 2)  # the sink's writer refuses: it truncates nothing
        assert segment_digest(log_dir) == digest
    found = [p for p in check_log_dirs([log_dir]) if not p.note]
    assert found and all(p.path == path and not p.fixed for p in found), found
    code, text = _cli("check", str(log_dir))
    assert code == 1 and str(path) in text
    code, text = _cli("check", "--fix", str(log_dir))
    assert code == 0 and "fixed: " in text and str(path) in text, text
    assert segment_digest(log_dir) == digest
    assert check_log_dirs([log_dir]) == []
    assert visible(log_dir) == before
    with LogManager([log_dir], read_only=True) as mgr:
        assert mgr.high_watermarks() == hws
        # A lost log start offset is rebuilt from the first segment: the DeleteRecords
        # advance (12, inside the first segment) is the one thing that comes back.
        expect = 0 if name == LOG_START_OFFSET_CHECKPOINT else 12
        assert mgr.log_start_offsets()[("trimmed", 0)] == expect
    sink_commit(log_dir, 2)
    after = visible(log_dir)
    assert collections.Counter(v for _, _, v in after) == committed_values((0, 1, 2))
    assert all(after[k] == 1 for k in before)  # nothing committed moved


def test_a_missing_log_start_checkpoint_reads_as_kafka_does(log_dir):
    """Brokers write log-start-offset-checkpoint once a minute and list only partitions
    whose start is above their first segment: a Kafka dir may lack it. Missing, the start
    offsets are the first segments' bases; nothing committed is hidden or lost."""
    before = visible(log_dir)
    digest = segment_digest(log_dir)
    (log_dir / LOG_START_OFFSET_CHECKPOINT).unlink()
    after = visible(log_dir)
    assert after == before
    with LogManager([log_dir], read_only=True) as mgr:
        # the DeleteRecords advance inside the first segment is what comes back
        assert mgr.log_start_offsets()[("trimmed", 0)] == 0
    assert [p for p in check_log_dirs([log_dir]) if not p.note] == []
    sink_commit(log_dir, 2)
    assert segment_digest(log_dir) != digest  # the commit appended
    assert (log_dir / LOG_START_OFFSET_CHECKPOINT).exists()  # the writer wrote it back
    final = visible(log_dir)
    assert all(final[k] == 1 for k in after)


def test_an_empty_offset_checkpoint_reads_as_kafka_does(log_dir):
    """Empty (zero-byte) offset checkpoints hold no entries, as Kafka reads them: no
    refusal, and nothing lost. An empty high-watermark checkpoint publishes nothing
    (every partition unlisted: readers see none of it, check notes each), and the sink,
    finding its published micro-batches above a high watermark that went back, refuses
    to commit instead of truncating them; written back, everything is there again."""
    before = visible(log_dir)
    digest = segment_digest(log_dir)
    hw_path = log_dir / HIGH_WATERMARK_CHECKPOINT
    saved = hw_path.read_bytes()
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                 CLEANER_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
        (log_dir / name).write_bytes(b"")  # as a broker creates them
    assert visible(log_dir) == collections.Counter()  # nothing published, no error
    with LogManager([log_dir], read_only=True) as mgr:
        assert mgr.log_start_offsets()[("trimmed", 0)] == 0  # as when it is missing
    found = check_log_dirs([log_dir])
    assert found and all(p.note and p.kind == "unpublished-records" for p in found), found
    code, text = _cli("check", str(log_dir))
    assert code == 0 and "problem" not in text, text
    with pytest.raises(SinkCommitError):
        sink_commit(log_dir, 2)
    assert segment_digest(log_dir) == digest  # nothing truncated
    hw_path.write_bytes(saved)
    assert visible(log_dir) == before


@pytest.mark.parametrize("kind", OFFSET_KINDS)
def test_damaged_recovery_point_recovers_and_fix_rewrites(log_dir, kind):
    before = visible(log_dir)
    path = log_dir / RECOVERY_POINT_CHECKPOINT
    damage(path, kind)
    assert visible(log_dir) == before  # readers do not need it
    found = check_log_dirs([log_dir])
    assert [p.path for p in found] == [path] and not found[0].fixed
    code, text = _cli("check", "--fix", str(log_dir))
    assert code == 0 and "fixed: " in text and str(path) in text, text
    assert OffsetCheckpointFile(path).read()[(TOPIC, 0)] > 0
    assert check_log_dirs([log_dir]) == []
    sink_commit(log_dir, 2)  # a writer recovers from offset 0 (here: after the fix)
    after = visible(log_dir)
    assert collections.Counter(v for _, _, v in after) == committed_values((0, 1, 2))
    assert all(after[k] == 1 for k in before)


def test_a_writer_recovers_past_a_damaged_recovery_point_without_a_fix(log_dir):
    before = visible(log_dir)
    damage(log_dir / RECOVERY_POINT_CHECKPOINT, "version-bit-flip")
    sink_commit(log_dir, 2)
    after = visible(log_dir)
    assert collections.Counter(v for _, _, v in after) == committed_values((0, 1, 2))
    assert all(after[k] == 1 for k in before)


def test_an_unlisted_partition_has_published_nothing_for_every_reader(log_dir):
    """Item 3: one rule whatever the order of calls: high watermark = log start offset."""
    hw_file = OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT)
    entries = hw_file.read()
    assert entries.pop((TOPIC, 1)) > 0 and entries.pop(("trimmed", 0)) == 30
    hw_file.write(entries)
    for first in ("get_log", "high_watermarks"):
        with LogManager([log_dir], read_only=True) as mgr:
            if first == "get_log":
                assert mgr.get_log(TOPIC, 1).high_watermark == 0
                assert mgr.get_log("trimmed", 0).high_watermark == 12
            hws = mgr.high_watermarks()
            assert hws[(TOPIC, 1)] == 0 and hws[("trimmed", 0)] == 12
            assert mgr.get_log(TOPIC, 1).high_watermark == 0
    with LogManager([log_dir]) as mgr:
        assert mgr.high_watermarks()[(TOPIC, 1)] == 0  # unloaded
        assert mgr.get_log(TOPIC, 1).high_watermark == 0  # loaded
        assert mgr.get_log("trimmed", 0).high_watermark == 12
        notes = mgr.check()
    assert sorted(p.kind for p in notes) == ["unpublished-records"] * 2
    assert all(p.note for p in notes) and "[0, " in notes[0].message
    code, text = _cli("check", str(log_dir))
    assert code == 0 and text.count("note: ") == 2


def test_a_high_watermark_beyond_the_end_is_clamped_by_the_writer_too(log_dir, caplog):
    hw_file = OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT)
    entries = hw_file.read()
    true_hw = entries[(TOPIC, 0)]
    entries[(TOPIC, 0)] = true_hw + 600
    hw_file.write(entries)
    with caplog.at_level(logging.WARNING), LogManager([log_dir]) as mgr:
        assert mgr.high_watermarks()[(TOPIC, 0)] == true_hw  # unloaded: probed
        assert mgr.get_log(TOPIC, 0).high_watermark == true_hw
        assert f"high watermark {true_hw + 600} for {TOPIC}-0" in caplog.text
        mgr.checkpoint_high_watermarks()
    assert hw_file.read()[(TOPIC, 0)] == true_hw


def test_a_log_start_offset_beyond_the_end_hides_nothing_and_deletes_nothing(log_dir):
    lso_file = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT)
    assert lso_file.read() == {("trimmed", 0): 12}
    lso_file.write({("trimmed", 0): 92})
    with LogManager([log_dir], read_only=True) as mgr:
        assert mgr.log_start_offsets()[("trimmed", 0)] == 0
        assert mgr.get_log("trimmed", 0).log_start_offset == 0
    with LogManager([log_dir]) as mgr:
        assert mgr.log_start_offsets()[("trimmed", 0)] == 0
        assert mgr.delete_old_segments() == 0
        assert mgr.get_log("trimmed", 0).log_start_offset == 0
        assert mgr.get_log("trimmed", 0).log_end_offset == 30


@pytest.mark.parametrize("kind", OFFSET_GARBLED)
def test_a_garbled_cleaner_checkpoint_restarts_cleaning_and_fix_rewrites_it(tmp_path, kind,
                                                                           caplog):
    d = tmp_path / "logs"
    cfg = {"cleanup.policy": "compact", "segment.bytes": "2048",
           "min.cleanable.dirty.ratio": "0.01"}
    with LogManager([d]) as mgr:
        mgr.create_topic("c", config=cfg)
        for i in range(40):
            mgr.append("c", 0, encode_batches(pa.array([b"v%d" % i] * 4, pa.binary()),
                                              keys=pa.array([b"k%d" % (i % 3)] * 4)))
        assert mgr.clean() is not None
        mgr.create_topic("other")  # delete_topic rewrites the cleaner checkpoint too
    path = d / CLEANER_OFFSET_CHECKPOINT
    damage(path, kind)
    with caplog.at_level(logging.WARNING), LogManager([d]) as mgr:
        stats = mgr.clean()  # never raises; cleans from the log start again
        if kind == "unreadable":  # a directory in its place: cannot write it back either
            assert stats is None
        else:
            assert stats is not None and stats.first_dirty_offset == 0
        assert str(path) in caplog.text
        mgr.delete_topic("other")
    damage(path, kind)
    found = check_log_dirs([d])
    assert [(p.kind, p.path) for p in found] == [("corrupt-checkpoint", path)]
    assert check_log_dirs([d], fix=True)[0].fixed
    assert check_log_dirs([d]) == []
    assert OffsetCheckpointFile(path).read() == {}


@pytest.mark.parametrize("kind", GARBLED)
def test_a_garbled_maintenance_checkpoint_is_reported_and_rewritten(log_dir, kind):
    with LogManager([log_dir]) as mgr:
        mgr.run_maintenance()
    path = log_dir / MAINTENANCE_CHECKPOINT
    damage(path, kind)
    with LogManager([log_dir]) as mgr:  # every task is due: harmless
        mgr.run_maintenance()
    damage(path, kind)
    assert [p.path for p in check_log_dirs([log_dir])] == [path]
    code, text = _cli("check", "--fix", str(log_dir))
    assert code == 0 and "fixed: " in text and str(path) in text, text
    assert check_log_dirs([log_dir]) == []


def test_a_garbled_topic_config_names_its_line_and_is_never_replaced_by_defaults(log_dir):
    bad = log_dir / f"{TOPIC}-1" / TOPIC_CONFIG_FILE
    bad.write_text("cleanup.policy compact\n")
    found = check_log_dirs([log_dir])
    assert len(found) == 1 and str(bad) in found[0].message and "line 1" in found[0].message
    assert check_log_dirs([log_dir], fix=True)[0].fixed  # copied from out-0
    assert check_log_dirs([log_dir]) == []
    only = log_dir / "trimmed-0" / TOPIC_CONFIG_FILE
    only.write_text("retention.ms\n")
    fixed = check_log_dirs([log_dir], fix=True)
    assert len(fixed) == 1 and not fixed[0].fixed and "restore it" in fixed[0].message
    assert only.read_text() == "retention.ms\n"


def test_fix_keeps_a_directory_found_in_place_of_a_checkpoint(log_dir):
    path = log_dir / HIGH_WATERMARK_CHECKPOINT
    damage(path, "unreadable")
    (path / "evidence").write_text("x")
    assert all(p.fixed for p in check_log_dirs([log_dir], fix=True))
    kept = [p for p in log_dir.iterdir() if p.name.startswith(path.name + ".damaged.")]
    assert len(kept) == 1 and (kept[0] / "evidence").read_text() == "x"
    assert os.path.isfile(path)
