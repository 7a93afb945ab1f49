from __future__ import annotations

import struct

import pytest
from kafka_batches import batch as kafka_batch

from seglog.logstore.errors import CorruptCheckpointError, ReadOnlyError
from seglog.logstore.manager.log_manager import LogManager, check_log_dirs
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPIC_CONFIG_FILE,
)


def batch(n: int = 10) -> bytes:
    """``n`` keyless records of 300-byte values (kafka-python's bytes)."""
    return kafka_batch(n, value_size=300, key=None)


@pytest.fixture
def log_dir(tmp_path):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 2, {"segment.bytes": 8 * 1024, "index.interval.bytes": 1000})
        for _ in range(12):
            mgr.append("t", 0, batch())
        mgr.append("t", 1, batch())
    return d


def kinds(problems):
    return sorted(p.kind for p in problems)


def test_a_healthy_dir_has_no_problems(log_dir):
    with LogManager([log_dir]) as mgr:
        assert mgr.check(deep=True) == []
    with LogManager([log_dir], read_only=True) as reader:
        assert reader.check(deep=True) == []
        with pytest.raises(ReadOnlyError):
            reader.check(fix=True)


def test_checkpoint_problems_are_reported_then_fixed(log_dir):
    OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).write(
        {("t", 0): 120, ("t", 1): 999, ("gone", 0): 5}
    )
    (log_dir / LOG_START_OFFSET_CHECKPOINT).write_text("0\n3\nt 0 1\n")
    (log_dir / "recovery-point-offset-checkpoint.tmp").write_text("half")
    with pytest.raises(CorruptCheckpointError, match="check --fix"):
        LogManager([log_dir], read_only=True)
    found = check_log_dirs([log_dir])
    assert kinds(found) == [
        "checkpoint-beyond-log-end",
        "corrupt-checkpoint",
        "leftover",
        "stale-checkpoint-entry",
    ]
    assert all(not p.fixed for p in found)
    assert any(str(log_dir / LOG_START_OFFSET_CHECKPOINT) in p.message for p in found)
    fixed = check_log_dirs([log_dir], fix=True)
    assert "corrupt-checkpoint" in kinds(fixed) and all(p.fixed for p in fixed)
    with LogManager([log_dir]) as mgr:
        assert mgr.check() == []
    assert OffsetCheckpointFile(log_dir / HIGH_WATERMARK_CHECKPOINT).read() == {
        ("t", 0): 120,
        ("t", 1): 10,
    }
    assert OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read() == {
        ("t", 0): 120,
        ("t", 1): 10,
    }


def test_topic_config_problems(log_dir):
    (log_dir / "t-1" / TOPIC_CONFIG_FILE).unlink()
    with LogManager([log_dir]) as mgr:
        found = mgr.check()
        assert kinds(found) == ["topic-config"] and "t-1" in found[0].message
        mgr.check(fix=True)
        assert mgr.check() == []
        assert mgr.get_log("t", 1).config.segment_bytes == 8 * 1024


def test_deep_check_finds_a_bad_batch_and_fix_truncates_before_it(log_dir):
    seg = sorted((log_dir / "t-0").glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    data[-100] ^= 0x01
    seg.write_bytes(bytes(data))
    with LogManager([log_dir]) as mgr:
        assert mgr.check() == []  # the cheap check does not read segments
        found = mgr.check(deep=True)
        assert kinds(found) == ["bad-batch"] and "CRC" in found[0].message
        assert found[0].path == seg
        mgr.check(fix=True, deep=True)
        log = mgr.get_log("t", 0)
        assert log.log_end_offset < 120 and log.log_end_offset % 10 == 0
        assert mgr.check(deep=True) == []


def test_deep_check_finds_a_bad_index_entry(log_dir):
    index = sorted((log_dir / "t-0").glob("*.index"))[0]
    raw = bytearray(index.read_bytes())
    assert len(raw) >= 8
    rel, pos = struct.unpack_from(">ii", raw, 0)
    struct.pack_into(">ii", raw, 0, rel, pos + 1)
    index.write_bytes(bytes(raw))
    with LogManager([log_dir], read_only=True) as reader:
        found = reader.check(deep=True)
    assert kinds(found) == ["bad-index-entry"] and str(index) in found[0].message


def test_deep_check_accepts_an_old_brokers_index(tmp_path):
    """Brokers before Kafka 3.x index an append of several batches at its first batch
    with its last offset, and the time index names the record with the max timestamp."""
    log_dir = tmp_path / "logs"
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("t", 1, {"index.interval.bytes": 1000})
        for _ in range(4):
            mgr.append("t", 0, batch())
    index = sorted((log_dir / "t-0").glob("*.index"))[0]
    log = index.with_suffix(".log")
    headers = list(iter_batch_headers(log.read_bytes()))
    assert len(headers) >= 3
    # One entry: the append of batches 1 and 2, at batch 1's position, offset of batch 2.
    index.write_bytes(
        struct.pack(">ii", headers[2].last_offset - headers[0].base_offset, headers[1].position)
    )
    # A time entry naming a record inside batch 1 (not its last offset).
    time_index = index.with_suffix(".timeindex")
    time_index.write_bytes(
        struct.pack(
            ">qi", headers[1].max_timestamp, headers[1].last_offset - 1 - headers[0].base_offset
        )
    )
    with LogManager([log_dir], read_only=True) as reader:
        found = reader.check(deep=True)
    assert found == [], found
    # The same entry one offset lower names batch 0's last offset, which lies before the
    # entry's position: lookups for it would start past its batch.
    index.write_bytes(
        struct.pack(">ii", headers[0].last_offset - headers[0].base_offset, headers[1].position)
    )
    with LogManager([log_dir], read_only=True) as reader:
        assert kinds(reader.check(deep=True)) == ["bad-index-entry"]


def test_check_fix_and_maintenance_remove_only_seglogs_own_files(log_dir):
    # A log dir is seglog's and Kafka's, but an operator may keep files in it: only the
    # leftovers of seglog's (or Kafka's) own writes are deleted, never another *.tmp.
    foreign = {
        "backup.tmp/q1.csv": "quarter,revenue\n",
        "notes.tmp": "an operator's notes",
        "reports/q1.csv": "quarter,revenue\n",
        "t-0/notes.txt": "about partition 0",
        "t-0/00000000000000000000.log.bak": "a copy",
    }
    for name, text in foreign.items():
        (log_dir / name).parent.mkdir(exist_ok=True)
        (log_dir / name).write_text(text)
    own = log_dir / f"{CLEANER_OFFSET_CHECKPOINT}.{'ab' * 16}.tmp"  # a dead create()'s
    own.write_text("half")

    found = check_log_dirs([log_dir])
    assert [p.path for p in found if p.kind == "leftover"] == [own]
    check_log_dirs([log_dir], fix=True)
    with LogManager([log_dir], default_topic_config={"file.delete.delay.ms": 0}) as mgr:
        mgr.create_topic("gone", 1)
        mgr.delete_topic("gone")  # a -delete directory, removed by maintenance
        mgr.get_log("t", 0).maybe_increment_log_start_offset(50)  # .deleted segments
        mgr.run_maintenance(force=True)
        mgr.run_maintenance(force=True)
        assert mgr.get_log("t", 0).log_start_offset >= 50
    with LogManager([log_dir]) as mgr:
        assert mgr.check() == []

    assert not own.exists()
    assert sorted(p.name for p in log_dir.iterdir() if p.name.startswith("gone")) == []
    assert not list((log_dir / "t-0").glob("*.deleted"))
    for name, text in foreign.items():
        assert (log_dir / name).read_text() == text, name
