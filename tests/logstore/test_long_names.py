"""Topic names up to Kafka's 249 characters: every name seglog makes fits in 255 bytes,
and a deletion that fails keeps the topic."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.cli import main as seglog_main
from seglog.logstore.config.topics import MAX_NAME_LENGTH
from seglog.logstore.errors import InvalidTopicError, KafkaStorageError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage import file_names as fn
from seglog.logstore.util.clock import MockClock

LONGEST = ("a.b_c-" * 50)[:MAX_NAME_LENGTH]


def batch(n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(n):
        b.append(i, 1_700_000_000_000 + i, None, b"v%d" % i, [])
    return bytes(b.build())


def all_names(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*")]


def test_names_derived_from_the_longest_topic_fit_a_file_name():
    assert len(fn.partition_dir_name(LONGEST, 99999)) == 255
    with pytest.raises(InvalidTopicError, match=r"partition 100000 .* 256 bytes"):
        fn.partition_dir_name(LONGEST, 100000)
    for partition in (0, 99999):
        name = fn.delete_dir_name(LONGEST, partition)
        assert len(name) <= 255 and fn.is_delete_dir_name(name)
        assert name.endswith(f"-{partition}." + name.split(".")[-1])
    long_stage = fn.fitted_name(f"{LONGEST}-99999", ".t12345.a3.0123456789ab.stage")
    other = fn.fitted_name(f"{LONGEST[:-1]}z-99999", ".t12345.a3.0123456789ab.stage")
    assert len(long_stage) == 255 and long_stage != other
    assert fn.fitted_name("t-0", ".stage") == "t-0.stage"


def test_the_longest_topic_is_created_written_read_deleted(tmp_path):
    clock = MockClock(1_700_000_000_000)
    with LogManager([tmp_path], clock=clock) as mgr:
        mgr.create_topic(LONGEST, 3, {"file.delete.delay.ms": 0, "segment.bytes": 200})
        for p in range(3):
            for _ in range(3):  # rolls: .deleted/.cleaned names would follow the same rule
                mgr.append(LONGEST, p, batch(5))
        mgr.get_log(LONGEST, 0).delete_old_segments()
        mgr.checkpoint_high_watermarks()
        assert max(len(n.encode()) for n in all_names(tmp_path)) <= 255
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.high_watermarks() == {(LONGEST, p): 15 for p in range(3)}
    with LogManager([tmp_path], clock=clock) as mgr:
        mgr.get_log(LONGEST, 1)  # one partition loaded, the others not
        mgr.delete_topic(LONGEST)
        assert mgr.topics() == []
        assert max(len(n.encode()) for n in all_names(tmp_path)) <= 255
        mgr.scheduler.run_all()
    assert not [n for n in all_names(tmp_path) if n.startswith("a.b_c")]


@pytest.mark.parametrize("loaded", [True, False])
def test_a_deletion_that_cannot_rename_keeps_the_topic(tmp_path, loaded):
    """``chattr +i`` on the log dir: a rename inside it fails even for root."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, batch(4))
        mgr.checkpoint_high_watermarks()
    with LogManager([tmp_path]) as mgr:
        if loaded:
            mgr.get_log("t", 0)
        proc = subprocess.run(["chattr", "+i", str(tmp_path)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"chattr +i refused here: {proc.stderr.strip()}")
        try:
            with pytest.raises(KafkaStorageError, match=r"t-0 .*for deletion.*unchanged"):
                mgr.delete_topic("t")
        finally:
            subprocess.run(["chattr", "-i", str(tmp_path)], check=True)
        assert mgr.topics() == ["t"]
        assert mgr.get_log("t", 0).log_end_offset == 4
        mgr.append("t", 0, batch(1))
    out = io.StringIO()
    assert seglog_main(["check", str(tmp_path)], out) == 0
    assert "log end offset 5: OK" in out.getvalue()
    with LogManager([tmp_path]) as mgr:
        mgr.delete_topic("t")  # works once the directory can change again
        assert mgr.topics() == []
