"""Writers of one bucket in separate processes (a moto S3 server on 127.0.0.1): two
appending to the same partition at once lose nothing, duplicate nothing and keep each
append whole; a writer SIGKILLed at each named step of a commit
(``bucket_commit_log.CRASH_STEPS``) leaves what was acknowledged, shows nothing
uncommitted, and blocks no later writer."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from seglog.logstore.bucket.bucket_commit_log import CRASH_ENV, CRASH_STEPS
from seglog.logstore.bucket.bucket_state import SNAPSHOT_EVERY
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches

WRITER = r"""
import sys
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

uri, name, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with LogManager(uri) as mgr:
    for i in range(count):
        values = pa.array([f"{name}-{i}-{j}".encode() for j in range(size)])
        info = mgr.append("t", 0, encode_batches(values, max_batch_bytes=64))
        print(info.first_offset, info.last_offset, flush=True)
"""


def writer(uri: str, name: str, count: int, size: int, crash_at: str | None = None
           ) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.Popen([sys.executable, "-c", WRITER, uri, name, str(count), str(size)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def values(uri: str) -> list[tuple[int, str]]:
    reader = LogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    out = []
    for chunk in log.read_chunks(0, log.high_watermark):
        t = decode_batches(bytes(chunk))
        out += [(o, v.decode()) for o, v in zip(t.column("offset").to_pylist(),
                                                t.column("value").to_pylist(), strict=True)]
    reader.close()
    return out


def test_two_writer_processes_append_to_one_partition_at_once(s3_uri: str):
    uri = s3_uri
    LogManager(uri).create_topic("t", 1)
    count, size = 12, 5
    procs = [writer(uri, name, count, size) for name in ("a", "b")]
    acked = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        acked += [tuple(map(int, line.split())) for line in out.splitlines()]
    rows = values(uri)
    assert [o for o, _ in rows] == list(range(2 * count * size))  # contiguous, no gap
    assert sorted(v for _, v in rows) == sorted(f"{n}-{i}-{j}" for n in "ab"
                                                for i in range(count) for j in range(size))
    by_offset = dict(rows)
    for first, last in acked:  # every acknowledged append is whole, in order, where said
        texts = [by_offset[o] for o in range(first, last + 1)]
        name, i = texts[0].split("-")[:2]
        assert texts == [f"{name}-{i}-{j}" for j in range(size)]


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_writer_killed_at_each_step_leaves_the_bucket_consistent(s3_uri: str, step: str):
    uri = s3_uri
    with LogManager(uri) as mgr:
        mgr.create_topic("t", 1)  # version 0
        for i in range(SNAPSHOT_EVERY - 1):  # versions 1..9: the dying commit is 10
            mgr.append("t", 0, encode_batches(pa.array([f"acked-{i}".encode()])))
    proc = writer(uri, "dead", 1, 3, crash_at=step)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == -9, err[-3000:]
    committed = step != "after-upload"
    rows = values(uri)
    expected = [f"acked-{i}" for i in range(SNAPSHOT_EVERY - 1)]
    expected += [f"dead-0-{j}" for j in range(3)] if committed else []
    assert [v for _, v in rows] == expected
    assert [o for o, _ in rows] == list(range(len(expected)))
    later = writer(uri, "later", 2, 2)  # nothing blocks another writer
    out, err = later.communicate(timeout=300)
    assert later.returncode == 0, err[-3000:]
    assert [v for _, v in values(uri)][len(expected):] == [
        f"later-{i}-{j}" for i in range(2) for j in range(2)]
