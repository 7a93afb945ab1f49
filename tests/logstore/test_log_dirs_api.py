"""One interface over the three backends (``log_dirs_api``), opened by one factory
(``log_manager.open_log_dirs``): the same script runs on a local dir, a bucket in memory
and a bucket on an S3 server, and every capability the backends differ in is a member
(``is_remote``, ``delete_records``, ``truncate_unpublished``, ``sync``...), not a type
test in the caller."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import memory_uri

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import ConfigError, OffsetOutOfRangeError, ReadOnlyError
from seglog.logstore.log_dirs_api import LogDirs, LogDirsView, PartitionLogView
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager, open_log_dirs
from seglog.logstore.records.record_codec import decode_batches, encode_batches


def batch(*values: bytes) -> bytearray:
    return encode_batches(pa.array(list(values), pa.binary()))


@pytest.fixture(params=("local", "memory", "s3"))
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "logs")
    if request.param == "memory":
        return memory_uri()
    return str(request.getfixturevalue("s3_uri"))


def values_of(log: PartitionLogView, start: int, end: int) -> list[bytes]:
    out: list[bytes] = []
    for chunk in log.read_chunks(start, end):
        out += decode_batches(chunk, start_offset=start, end_offset=end).column("value").to_pylist()
    return out


def test_the_same_script_runs_on_every_backend_through_the_factory(location: str):
    remote = "://" in location
    with open_log_dirs(location) as writer:
        assert writer.is_remote is remote and not writer.read_only
        assert location in writer.location or writer.location in location
        writer.create_topic("events", 2, {"retention.ms": -1})
        assert writer.exists  # a bucket's since its first commit
        infos = writer.append_many(
            {("events", 0): batch(b"a", b"b", b"c"), ("events", 1): batch(b"x")}
        )
        assert infos[("events", 0)].last_offset == 2
        writer.flush()
        assert writer.delete_records("events", 0, 1) == 1
        with pytest.raises(OffsetOutOfRangeError):
            writer.delete_records("events", 0, 4)  # beyond the high watermark 3
        writer.checkpoint_high_watermarks()
        assert writer.topics() == ["events"] and writer.partitions("events") == [0, 1]
        assert writer.topic_overrides("events") == {"retention.ms": "-1"}

    with open_log_dirs(location, read_only=True) as reader:
        assert reader.is_remote is remote and reader.read_only
        with reader.one_refresh():
            hws = reader.high_watermarks()
            starts = reader.log_start_offsets()
        assert hws == {("events", 0): 3, ("events", 1): 1}
        assert starts == {("events", 0): 1, ("events", 1): 0}
        assert reader.high_watermarks_beyond_log_end() == {}
        log = reader.get_log("events", 0)
        log.sync()
        log.refresh()
        assert log.log_start_offset == 1 and log.high_watermark == 3
        assert values_of(log, 1, 3) == [b"b", b"c"]
        assert log.current_topic_id() == reader.topic_id_of("events", 0) is not None
        with pytest.raises(ReadOnlyError):
            reader.check_writable()


def test_a_failed_produce_is_taken_back_locally_and_stays_committed_on_a_bucket(location: str):
    with open_log_dirs(location) as writer:
        writer.create_topic("t", 1)
        writer.append("t", 0, batch(b"kept"))
        writer.checkpoint_high_watermarks()
        writer.append("t", 0, batch(b"unpublished"), publish=False)
        taken_back = writer.truncate_unpublished("t", 0, 1)
        assert taken_back is not writer.is_remote
        assert writer.get_log("t", 0).log_end_offset == (2 if writer.is_remote else 1)


def test_maintenance_says_when_it_is_due_and_what_waits_for_deletion(location: str):
    with open_log_dirs(location, config={"log.retention.check.interval.ms": 60_000}) as writer:
        writer.create_topic("t", 1)
        runs = writer.run_maintenance(force=True)
        assert runs and all(r.ok for r in runs)
        assert writer.files_awaiting_deletion(runs) == 0
        # Retention was just run: it is due again within its interval at the latest.
        wait = writer.next_maintenance_ms()
        assert 0 <= wait <= 60_000
        if writer.is_remote:  # no schedule between processes: every pass runs every task
            assert wait == 60_000


def test_a_bucket_prefix_without_a_commit_does_not_exist_and_says_where():
    uri = memory_uri()
    with open_log_dirs(uri, read_only=True) as reader:
        assert not reader.exists and reader.location == uri


def test_a_local_log_reads_its_topic_id_again_after_a_re_create(tmp_path: Path):
    with LogManager([tmp_path]) as writer:
        writer.create_topic("t", 1)
        writer.append("t", 0, batch(b"a"))
    reader = LogDirsReader([tmp_path])
    log = reader.get_log("t", 0)
    first = log.current_topic_id()
    assert first is not None and log.sync() is False
    with LogManager([tmp_path]) as writer:
        writer.delete_topic("t")
        writer.create_topic("t", 1)
    assert log.current_topic_id() not in (None, first)
    reader.close()


def test_the_factory_refuses_what_no_backend_takes(tmp_path: Path):
    with pytest.raises(ConfigError, match="storage_options .*endpoint.* not the local"):
        open_log_dirs([tmp_path], storage_options={"endpoint": "http://x"})
    with pytest.raises(ConfigError, match="repair=True is for local log dirs"):
        open_log_dirs(memory_uri(), repair=True)
    with pytest.raises(ConfigError, match="repair=True needs a writer"):
        open_log_dirs([tmp_path], read_only=True, repair=True)


def test_log_manager_returns_what_the_factory_returns(tmp_path: Path):
    uri = memory_uri()
    with LogManager(uri) as bucket, LogManager([tmp_path]) as local:
        assert isinstance(bucket, BucketLogManager) and not bucket.read_only
        assert type(local) is LogManager
    with LogManager([tmp_path], read_only=True) as reader:
        assert isinstance(reader, LogDirsReader)


def test_every_backend_has_every_member_of_the_interface(tmp_path: Path):
    # mypy checks the signatures (log_dirs_api._backends_conform); this checks that the
    # running objects have the members, including those mypy takes from class bodies.
    members = {
        n
        for proto in (LogDirs, LogDirsView)
        for n in vars(proto)
        if not n.startswith("_") or n in ("__enter__", "__exit__")
    }
    with LogManager([tmp_path]) as local:
        local.create_topic("t", 1)
        backends = [local, LogDirsReader([tmp_path]), BucketLogManager(memory_uri())]
        for backend in backends:
            missing = sorted(n for n in members if not hasattr(backend, n))
            assert missing == [], (type(backend).__name__, missing)
        log_members = {n for n in vars(PartitionLogView) if not n.startswith("_")}
        missing = sorted(n for n in log_members if not hasattr(local.get_log("t", 0), n))
        assert missing == []


def test_every_backend_gives_the_same_segment_layout(location: str) -> None:
    """``segment_layout`` (what the source's planning sizes a trigger by): the same bases and
    sizes on each backend, for the writer and for a reader of the same dirs."""
    with open_log_dirs(location, default_topic_config={"segment.bytes": "1024"}) as mgr:
        mgr.create_topic("t", 1)
        for i in range(6):
            mgr.append("t", 0, batch(bytes([i]) * 300))
        layout = mgr.segment_layout("t", 0)
        assert mgr.segment_layout("t", 1) is None and mgr.segment_layout("u", 0) is None
    assert layout is not None
    bases, sizes = layout
    assert len(bases) == len(sizes) >= 2 and list(bases) == sorted(bases) and bases[0] == 0
    assert sum(sizes) == sum(len(batch(bytes([i]) * 300)) for i in range(6))
    with open_log_dirs(location, read_only=True) as reader:
        reader.topics()  # a bucket reader answers from the state it refreshed
        assert reader.segment_layout("t", 0) == layout
