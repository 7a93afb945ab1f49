"""The bucket benchmark's peers: Python data sources that move the same rows through the
same bucket with none of seglog's work, so ``bench_spark_bucket`` can say what part of a
gap is the store's (moto on the same cores) and what part is seglog's.

- ``put_arrow``: a sink whose tasks PUT their rows as one Arrow IPC stream each.
- ``get_arrow``: a source whose tasks GET Arrow IPC objects holding the same rows as the
  seglog log they are compared with (written once by ``put_get_peer_objects``, untimed)
  and yield them: no Kafka decoding, no indexes, no commits to read.

Both talk to the bucket through obstore with the ``AWS_*`` environment the benchmark's
server exports, as seglog's own object storage does.
"""

from __future__ import annotations

import pyarrow as pa

GET_PEER_PREFIX = "get-peer"
PARTITIONS = 2


def _store(bucket: str):
    from obstore.store import from_url

    return from_url(f"s3://{bucket}", client_options={"allow_http": True})


def get_peer_key(partition: int, first: int) -> str:
    return f"{GET_PEER_PREFIX}/p{partition}/{first:020d}.arrows"


def put_get_peer_objects(bucket: str, log_dir: str, topic: str, rows_per_partition: int,
                         object_rows: int) -> int:
    """Writes the rows of ``log_dir``'s ``topic`` (partitions 0 and 1, decoded by seglog's
    own read path into the source's Arrow schema) into ``bucket`` as Arrow IPC objects of
    ``object_rows`` rows each; returns the objects written."""
    import obstore

    from seglog.datasource.schema import arrow_schema
    from seglog.streaming.read_planning import ReadRange
    from seglog.streaming.source_read import read_range

    store = _store(bucket)
    schema = arrow_schema(False)
    written = 0
    for p in range(PARTITIONS):
        for first in range(0, rows_per_partition, object_rows):
            end = min(first + object_rows, rows_per_partition)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, schema) as w:
                for rb in read_range(ReadRange((log_dir,), topic, p, first, end), schema):
                    w.write_batch(rb)
            obstore.put(store, get_peer_key(p, first), sink.getvalue().to_pybytes(),
                        use_multipart=False)
            written += 1
    return written


def get_arrow_source():
    """A peer source: ``rows`` rows in two partitions (``rows // 2`` each) stored as Arrow
    IPC objects of ``objectRows`` rows under ``get-peer/`` of ``bucket``; each micro-batch
    admits ``perTrigger`` rows (half per partition) and each task GETs the objects its
    range overlaps, whole, and yields the rows of its range."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    from seglog.datasource.schema import source_schema

    class GetReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options) -> None:
            self.bucket = options["bucket"]
            self.per_partition = int(options["rows"]) // PARTITIONS
            self.per_trigger = int(options["perTrigger"])
            self.object_rows = int(options["objectRows"])

        def prepareForTriggerAvailableNow(self):  # noqa: N802
            pass  # the target is simply every row

        def initialOffset(self):  # noqa: N802
            return {"offset": 0}

        def getDefaultReadLimit(self):  # noqa: N802
            from pyspark.sql.streaming.datasource import ReadMaxRows

            return ReadMaxRows(self.per_trigger)

        def latestOffset(self, start, limit):  # noqa: N802
            step = (getattr(limit, "max_rows", None) or self.per_trigger) // PARTITIONS
            return {"offset": min(self.per_partition, start["offset"] + step)}

        def partitions(self, start, end):
            return [InputPartition((p, start["offset"], end["offset"]))
                    for p in range(PARTITIONS)]

        def read(self, partition):
            import obstore

            p, lo, hi = partition.value
            store = _store(self.bucket)
            first = lo - lo % self.object_rows
            for base in range(first, hi, self.object_rows):
                body = obstore.get(store, get_peer_key(p, base)).bytes()
                at = base  # the offset of each IPC batch's first row
                for rb in pa.ipc.open_stream(pa.py_buffer(body)):
                    a, b = max(lo - at, 0), min(hi - at, rb.num_rows)
                    if a < b:
                        yield rb.slice(a, b - a)
                    at += rb.num_rows

        def commit(self, end):
            pass

    class GetArrow(DataSource):
        @classmethod
        def name(cls):
            return "get_arrow"

        def schema(self):
            return source_schema(False)

        def streamReader(self, schema):  # noqa: N802
            return GetReader(self.options)

    return GetArrow


def put_arrow_source():
    """A peer sink: each write task serializes its rows as one Arrow IPC stream and PUTs it
    into the same bucket with obstore (one object per task, no multipart), then commits
    nothing. It moves the same rows into the same store as the seglog sink, with none of
    seglog's work (no Kafka encoding, no validation, no indexes, no commit)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )

    class Put(WriterCommitMessage):
        def __init__(self, n: int) -> None:
            self.n = n

    class PutWriter(DataSourceStreamArrowWriter):
        def __init__(self, bucket: str) -> None:
            self.bucket = bucket

        def write(self, iterator):
            import uuid

            import obstore

            sink = pa.BufferOutputStream()
            rows = 0
            writer = None
            for batch in iterator:
                if writer is None:
                    writer = pa.ipc.new_stream(sink, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
                obstore.put(_store(self.bucket), f"put-peer/{uuid.uuid4().hex}.arrows",
                            sink.getvalue().to_pybytes(), use_multipart=False)
            return Put(rows)

        def commit(self, messages, batchId):  # noqa: N803
            pass

        def abort(self, messages, batchId):  # noqa: N803
            pass

    class PutArrow(DataSource):
        @classmethod
        def name(cls):
            return "put_arrow"

        def streamWriter(self, schema, overwrite):  # noqa: N802
            return PutWriter(self.options["bucket"])

    return PutArrow
