"""The bucket's endpoint and credentials given only as ``storage.<name>`` options: no
``AWS_*`` variable in the driver or any Python worker, and a batch write, a streaming
seglog -> seglog query and batch reads all reach the bucket (a real S3 server, moto, on
127.0.0.1). The secret never lands in the bucket, the checkpoint or an error."""

from __future__ import annotations

import collections
import os
import uuid
from pathlib import Path

import pytest
from _bucket_checks import bucket_records, check_offsets

from seglog.logstore.storage.object_storage import ObjectStorage

pytestmark = pytest.mark.spark

N = 1200


# What could point a client at the bucket (a machine's AWS_CA_BUNDLE cannot).
REACHING = ("AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP")


def _worker_aws_names(spark) -> list[str]:
    return spark.sparkContext.parallelize([0], 1).map(
        lambda _: sorted(n for n in os.environ if n.startswith(REACHING))).collect()[0]


@pytest.fixture
def no_aws_anywhere(spark, monkeypatch):
    """AWS_* unset in this process and in what Spark gives its Python workers; restored
    after (the other bucket tests set their own)."""
    from seglog.datasource import SeglogDataSource

    env = spark.sparkContext.environment
    saved = {n: env.pop(n) for n in list(env) if n.startswith("AWS_")}
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    spark.dataSource.register(SeglogDataSource)  # ships the environment again
    yield
    env.update(saved)
    spark.dataSource.register(SeglogDataSource)


def test_a_pipeline_reaches_the_bucket_through_options_alone(spark, bucket_server,
                                                             no_aws_anywhere, tmp_path):
    assert _worker_aws_names(spark) == [], "the Python workers still see AWS_* variables"
    secret = f"opts-secret-{uuid.uuid4().hex}"
    key_id = f"opts-key-{uuid.uuid4().hex[:12]}"  # moto takes any credentials
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    storage = {"storage.aws_endpoint": bucket_server.endpoint, "storage.aws_region": "us-east-1",
               "storage.aws_access_key_id": key_id, "storage.aws_secret_access_key": secret,
               "storage.aws_allow_http": "true"}

    (spark.range(0, N, numPartitions=2)
     .selectExpr("cast(id % 5 AS string) AS key", "concat('e', id) AS value")
     .write.format("seglog").options(path=uri, topic="in", numPartitions="2", **storage)
     .mode("append").save())
    chk = tmp_path / "chk"
    q = (spark.readStream.format("seglog")
         .options(path=uri, subscribe="in", startingOffsets="earliest",
                  maxOffsetsPerTrigger="500", **storage).load()
         .selectExpr("key", "concat('out-', cast(value AS string)) AS value")
         .writeStream.format("seglog")
         .options(path=uri, topic="out", numPartitions="3", checkpointLocation=str(chk),
                  **storage)
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None

    out = spark.read.format("seglog").options(path=uri, subscribe="out", **storage).load()
    assert out.count() == N
    # checked outside Spark too, with the same options and still no environment
    options = {k.removeprefix("storage."): v for k, v in storage.items()}
    records = bucket_records(uri, "out", tmp_path / "export", options)
    assert collections.Counter(r[3] for r in records) == collections.Counter(
        f"out-e{i}".encode() for i in range(N))
    check_offsets(records)

    # the secret is nowhere it could be read back: not in the bucket, not the checkpoint
    st = ObjectStorage(uri, options)
    keys = _all_keys(st, "")
    assert keys and not [k for k in keys if secret.encode() in st.read(k)]
    assert not [p for p in chk.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    # nor in the error of a read that cannot reach the store
    dead = {**storage, "storage.aws_endpoint": "http://127.0.0.1:9", "storage.max_retries": "0"}
    with pytest.raises(Exception) as e:  # noqa: PT011 (Spark wraps the seglog error)
        spark.read.format("seglog").options(path=uri, subscribe="out", **dead).load().count()
    assert uri in str(e.value) and secret not in str(e.value) and key_id not in str(e.value)


def _all_keys(st: ObjectStorage, prefix: str) -> list[str]:
    keys = []
    for entry in st.list_dir(prefix):
        path = f"{prefix}/{entry.name}" if prefix else entry.name
        keys.extend(_all_keys(st, path) if entry.is_dir else [path])
    return keys


def test_local_path_with_storage_options_fails_before_any_task(spark, tmp_path: Path):
    with pytest.raises(Exception, match="storage.aws_region") as e:  # noqa: PT011
        (spark.range(3).selectExpr("cast(id AS string) AS value").write.format("seglog")
         .options(path=str(tmp_path / "logs"), topic="t", **{"storage.aws_region": "x"})
         .mode("append").save())
    assert "are for an object-store log dir" in str(e.value)
    assert not (tmp_path / "logs").exists()
