"""``seglog maintain URI`` SIGKILLed at each named step of a merge, a retention pass, a
compaction pass and a collection (``bucket_maintenance.MAINTENANCE_CRASH_STEPS``) over a
moto S3 server, then the bucket reopened from this process: nothing acknowledged is lost,
nothing uncommitted is visible, and the next collection leaves only referenced objects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import log_records

from seglog.logstore.bucket.bucket_commit_log import CRASH_ENV
from seglog.logstore.bucket.bucket_maintenance import MAINTENANCE_CRASH_STEPS
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.records.record_codec import encode_batches

SEGLOG = Path(sys.executable).parent / "seglog"
TOPIC = {"retention.ms": -1, "file.delete.delay.ms": 0}
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
           "file.delete.delay.ms": 0}


def fill(uri: str) -> None:
    with BucketLogManager(uri) as mgr:
        mgr.create_topic("t", 1, TOPIC)
        mgr.create_topic("c", 1, COMPACT)
        for i in range(8):  # small segments to merge; the first goes by retention
            mgr.append("t", 0, encode_batches(pa.array([f"t{i}-{j}".encode()
                                                        for j in range(4)])))
        mgr.delete_records("t", 0, 4)
        for r in range(4):
            mgr.append("c", 0, encode_batches(pa.array([f"{k}@{r}".encode() for k in "abc"]),
                                              keys=pa.array([k.encode() for k in "abc"])))


@pytest.mark.parametrize("step", MAINTENANCE_CRASH_STEPS)
def test_maintain_killed_at_each_step_loses_nothing_and_leaves_nothing(s3_uri: str,
                                                                        step: str):
    uri = s3_uri
    fill(uri)
    env = {**os.environ, CRASH_ENV: step}
    proc = subprocess.run([str(SEGLOG), "maintain", uri], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == -9, proc.stderr[-3000:]

    mgr = BucketLogManager(uri, orphan_grace_ms=0)  # another process: this one
    assert [(o, v) for o, _k, v in log_records(mgr.get_log("t", 0))] == \
        [(4 * i + j, f"t{i}-{j}".encode()) for i in range(1, 8) for j in range(4)]
    latest = {k: v for _o, k, v in log_records(mgr.get_log("c", 0))}
    assert latest == {k.encode(): f"{k}@3".encode() for k in "abc"}
    mgr.collect()  # the dead maintainer's uploads (no grace now) and removed objects
    referenced = {key for ps in mgr.state.partitions.values() for s in ps.segments
                  for key in object_keys(s)}
    stored = {f"{d}/{e.name}" for d in ("t-0", "c-0") for e in mgr.storage.list_dir(d)}
    assert stored == referenced
    assert not mgr.storage.list_dir("_seglog/staging")
    # And a full pass afterwards completes what the dead one started.
    maintainer = BucketLogManager(uri)
    runs = maintainer.run_maintenance()
    assert all(r.ok for r in runs), [r.error for r in runs]
    assert len(maintainer.state.partition("t", 0).segments) == 1
    assert maintainer.state.partition("c", 0).cleaner_offset == 12
