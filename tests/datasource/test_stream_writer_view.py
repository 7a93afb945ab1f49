"""The stream writer PySpark's planner pickles to the tasks carries the driver's view of
the bucket's topics (``streaming.sink_view``), and a task staging through the unpickled
writer makes its PUTs and no other request. Without a SparkSession: what the planner and
a task do with the writer (end to end in Spark: ``test_bucket_stream.py``)."""

from __future__ import annotations

import pickle

import pyarrow as pa
from s3_proxy import sequential_round_trips

from seglog.datasource.stream_writer import SeglogStreamWriter
from seglog.logstore.manager.log_manager import LogManager
from seglog.streaming import sink_view


def _planned(options: dict[str, str]) -> SeglogStreamWriter:
    """What PySpark's write planner does for each micro-batch: build, then pickle; what a
    task gets: the unpickled writer."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    writer = SeglogStreamWriter(options, schema)
    shipped = pickle.loads(pickle.dumps(writer))
    assert isinstance(shipped, SeglogStreamWriter)
    return shipped


def test_the_shipped_writer_carries_the_view_and_its_task_only_puts(bucket_server, proxy):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    with LogManager(uri) as mgr:
        mgr.create_topic("out", 2)
    options = {"path": uri, "topic": "out"}
    # The planner's first micro-batch: no reader open in its process yet (opened in the
    # background): nothing shipped, the tasks look for themselves.
    assert _planned(options).view is None
    sink_view.wait_refreshes()
    task_side = _planned(options)
    sink_view.wait_refreshes()
    assert task_side.view is not None and task_side.view.get("out") == (2, {})
    rows = pa.record_batch(
        {
            "key": pa.array([f"k{i}" for i in range(20)], pa.string()),
            "value": pa.array([b"v%d" % i for i in range(20)], pa.binary()),
        }
    )
    since = proxy.clock()
    staged = task_side.backend().stage(task_side.columns, [rows], "query", 0, 0, 0)
    made = proxy.requests(since)
    assert {r.kind for r in made} == {"PUT"}, made
    assert sequential_round_trips(made) == 1
    assert dict(staged.topic_partitions) == {"out": 2}
