"""A source task's requests on a bucket, counted through the delaying proxy
(``tests/s3_proxy.py``): a range planned by the driver (``with_read_plans``) is read in
one round trip, the GETs of its segments' ``.log`` objects made at once; the same range
without a plan costs the task's look at the log first (two round trips at least).

The task runs where Spark runs it: in a Python worker of its own, reused from task to
task (a process started here, fed pickled ranges), so nothing of the driver's reader is
shared with it."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
import pytest
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.log_readers import close_all, reader
from seglog.streaming.read_planning import ReadRange, plan_ranges, with_read_plans

# Requests sent side by side must reach the proxy within one delay of each other to
# count as one round trip (tests/streaming/test_sink_round_trips.py: 10 ms was too short
# on a loaded machine).
DELAY_S = 0.05

WORKER = textwrap.dedent("""
    import json, pickle, sys
    from seglog.datasource.schema import arrow_schema
    from seglog.streaming.source_read import read_range

    schema = arrow_schema(False)
    for line in sys.stdin:
        r = pickle.loads(bytes.fromhex(line))
        got = [o for b in read_range(r, schema) for o in b.column("offset").to_pylist()]
        print(json.dumps(got), flush=True)
""")


@pytest.fixture
def proxy(bucket_server, monkeypatch) -> Iterator[S3Proxy]:
    with S3Proxy(bucket_server.endpoint, delay_s=DELAY_S, log_requests=True) as p:
        for name, value in {**bucket_server.env, "AWS_ENDPOINT_URL": p.endpoint}.items():
            monkeypatch.setenv(name, value)
        yield p
    close_all()


@pytest.fixture
def worker(proxy) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as p:
        yield p
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=60)


def task_read(
    proxy: S3Proxy, worker: subprocess.Popen[str], r: ReadRange
) -> tuple[list[int], list[RequestRecord]]:
    """The worker's read of ``r``: its offsets and the requests it made."""
    assert worker.stdin is not None and worker.stdout is not None
    since = proxy.clock()
    worker.stdin.write(pickle.dumps(r).hex() + "\n")
    worker.stdin.flush()
    got = json.loads(worker.stdout.readline())
    return got, proxy.requests(since)


def driver_plan(uri: str, start: int) -> ReadRange:
    """The driver's trigger (its look at the bucket) and its planning of the batch."""
    with reader((uri,)) as mgr:
        end = mgr.high_watermarks()[("t", 0)]
        ids = mgr.topic_ids(["t"])
    (r,) = with_read_plans(
        plan_ranges({("t", 0): start}, {("t", 0): end}, log_dirs=(uri,), topic_ids=ids)
    )
    return r


def test_a_planned_task_read_is_one_round_trip_of_segment_gets(bucket_server, proxy, worker):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    producer = LogManager(uri)
    producer.create_topic("t", 1)
    start = 0
    for batch in range(4):
        for i in range(3):  # a producer's appends between triggers: 3 small segments
            producer.append_many({("t", 0): encode_batches(pa.array([b"b%d-%d" % (batch, i)]))})
        r = driver_plan(uri, start)
        assert r.plan is not None and len(r.plan.segments) == 3
        got, made = task_read(proxy, worker, r)
        assert got == list(range(start, r.end))
        if batch:  # the first: the worker's own start (its store client, its kernels)
            assert [x.kind for x in made] == ["RANGED_GET"] * 3, made
            assert all(x.target.split("?")[0].endswith(".log") for x in made), made
            assert sequential_round_trips(made) == 1
        start = r.end
    # The same look-free range read without its plan: the worker's look at the log first.
    for i in range(3):
        producer.append_many({("t", 0): encode_batches(pa.array([b"late-%d" % i]))})
    r = driver_plan(uri, start)
    got, made = task_read(proxy, worker, replace(r, plan=None))
    assert got == list(range(start, r.end))
    assert sequential_round_trips(made) >= 2, made
    producer.close()
