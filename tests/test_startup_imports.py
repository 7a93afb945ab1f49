"""The import structure that keeps a Spark application's first action fast.

Spark 4.3 runs each step of a Python data source in a fresh Python process (see
docs/internals.md, "Start-up"): the planner calls ``schema()``, ``reader()`` and
``partitions()``, or ``writer()``; another process runs the job's ``commit()``. Only the
tasks decode or encode records. Loading numba costs those other processes ~0.3 s each
(its import, then its one-time set-up on the first compiled call), so they must not load
it. Each case runs the real
calls in a fresh interpreter and looks at ``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.datasource.batch_writer import SeglogBatchWriter
from seglog.datasource.stream_writer import SeglogCommitMessage
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.sink_local_staging import stage_rows

HEAVY = ("numba", "llvmlite", "pyarrow", "pyarrow.compute")


def _loaded_after(code: str, **values: str) -> dict:
    """Run ``code`` in a fresh interpreter; the heavy modules loaded, and ``result``."""
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps({{"loaded": [m for m in {HEAVY!r} if m in sys.modules],
                          "result": result}}))
    """)
    out = subprocess.run([sys.executable, "-c", script, json.dumps(values)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    with LogManager([logs]) as mgr:
        mgr.create_topic("events", 2)
        mgr.append("events", 0, encode_batches(pa.array([b"a", b"b", b"c"])))
        mgr.checkpoint_high_watermarks()
    return logs


def test_lookup_and_schema_load_neither_numba_nor_arrow(log_dir):
    r = _loaded_after("""
        import json, sys
        import pyspark_seglog
        ds = pyspark_seglog.DefaultSource({"path": json.loads(sys.argv[1])["path"],
                                           "subscribe": "events"})
        result = ds.schema().fieldNames()
    """, path=str(log_dir))
    assert r["result"][:2] == ["key", "value"]
    assert r["loaded"] == []


def test_read_planning_loads_no_numba(log_dir):
    r = _loaded_after("""
        import json, sys
        from pyspark_seglog import DefaultSource
        ds = DefaultSource({"path": json.loads(sys.argv[1])["path"], "subscribe": "events"})
        parts = ds.reader(ds.schema()).partitions()
        result = [[p.value.partition, p.value.start, p.value.end] for p in parts]
    """, path=str(log_dir))
    assert r["result"] == [[0, 0, 3]]
    assert "numba" not in r["loaded"] and "llvmlite" not in r["loaded"]


def test_write_planning_loads_no_numba_nor_compute(log_dir):
    r = _loaded_after("""
        import json, sys
        from pyspark.sql.types import StringType, StructField, StructType
        from pyspark_seglog import DefaultSource
        ds = DefaultSource({"path": json.loads(sys.argv[1])["path"], "topic": "out"})
        writer = ds.writer(StructType([StructField("value", StringType())]), False)
        result = writer.options.topic
    """, path=str(log_dir))
    assert r["result"] == "out"
    assert [m for m in r["loaded"] if m != "pyarrow"] == []  # the schema check needs Arrow


def test_commit_loads_no_numba(log_dir, tmp_path):
    """The job commit unpickles the writer and the staged tasks, then publishes them."""
    from pyspark.sql.types import StringType, StructField, StructType

    writer = SeglogBatchWriter({"path": str(log_dir), "topic": "events"},
                               StructType([StructField("value", StringType())]))
    rows = pa.record_batch({"value": pa.array(["x", "y"])})
    staged = stage_rows(writer.options, writer.columns, [rows], writer.job_id, 0, 0, 0)
    (tmp_path / "commit.pkl").write_bytes(pickle.dumps((writer, [SeglogCommitMessage(staged)])))

    r = _loaded_after("""
        import json, pickle, sys
        from pathlib import Path
        args = json.loads(sys.argv[1])
        writer, messages = pickle.loads(Path(args["pickle"]).read_bytes())
        writer.commit(messages)
        from seglog.logstore.manager.log_manager import LogManager
        with LogManager([args["path"]], read_only=True) as mgr:
            result = {f"{t}-{p}": hw for (t, p), hw in mgr.high_watermarks().items()}
    """, path=str(log_dir), pickle=str(tmp_path / "commit.pkl"))
    assert r["result"]["events-0"] + r["result"]["events-1"] == 3 + 2
    assert "numba" not in r["loaded"] and "llvmlite" not in r["loaded"]


def test_appending_to_a_log_loads_no_numba(tmp_path):
    """A writer that only appends (the sink's commit, ``seglog produce``) leaves recovery's
    kernels unloaded; encoded bytes come from elsewhere."""
    data = bytes(encode_batches(pa.array([b"v1", b"v2"])))
    (tmp_path / "batch.bin").write_bytes(data)
    r = _loaded_after("""
        import json, sys
        from pathlib import Path
        from seglog.logstore.manager.log_manager import LogManager
        args = json.loads(sys.argv[1])
        with LogManager([args["logs"]]) as mgr:
            mgr.create_topic("t", 1)
            info = mgr.append("t", 0, Path(args["batch"]).read_bytes())
        with LogManager([args["logs"]]) as mgr:  # reopened after a clean shutdown
            info2 = mgr.append("t", 0, Path(args["batch"]).read_bytes())
        result = [info.first_offset, info2.last_offset]
    """, logs=str(tmp_path / "logs"), batch=str(tmp_path / "batch.bin"))
    assert r["result"] == [0, 3]
    assert r["loaded"] == []
