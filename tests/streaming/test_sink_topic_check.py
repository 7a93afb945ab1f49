"""The driver's topic check of a bucket sink (``stream_writer.validate_sink``): Spark
builds a writer for every micro-batch's commit, so a topic the process's shared reader
already holds with the expected partition count passes without a request; any other
answer is given on the bucket's current state."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType
from test_sink_bucket import memory_uri

from seglog.datasource.stream_writer import validate_sink
from seglog.logstore.errors import ConfigError, SeglogError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.streaming.log_readers import close_all

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


@pytest.fixture
def requests(monkeypatch) -> list[str]:
    """Every request any ``ObjectStorage`` of this process sends, by operation."""
    sent: list[str] = []
    real = ObjectStorage._call

    def counting(self, op, key, fn, *args, **kwargs):
        sent.append(op)
        return real(self, op, key, fn, *args, **kwargs)

    monkeypatch.setattr(ObjectStorage, "_call", counting)
    yield sent
    close_all()


def check(uri: str, partitions: int) -> None:
    validate_sink({"path": uri, "topic": "t", "numPartitions": str(partitions)}, SCHEMA)


def test_a_known_topic_passes_with_no_request_and_a_mismatch_is_judged_fresh(requests):
    uri = memory_uri()
    with LogManager(uri) as mgr:
        mgr.create_topic("t", 3)
    check(uri, 3)  # opens the process's shared reader
    requests.clear()
    for _ in range(3):  # one writer per micro-batch's commit
        check(uri, 3)
    assert requests == []

    # Another process recreates the topic with 2 partitions: the cached 3 no longer
    # matches what is asked, so the bucket is asked before anything is refused.
    with LogManager(uri) as mgr:
        mgr.delete_topic("t")
        mgr.create_topic("t", 2)
    check(uri, 2)
    assert "LIST" in requests
    with pytest.raises((ConfigError, SeglogError), match="2 partition"):
        check(uri, 3)
