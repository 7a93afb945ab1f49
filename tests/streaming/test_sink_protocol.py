"""One sink commit protocol over a backend interface (``sink_protocol``): the path picks
the backend in one place (``sink_destination``), the Spark adapters never branch on it,
the bucket backend borrows nothing private from the local one, both backends publish the
same input to the same offsets, and each refuses the other's fragments by name."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming import sink_protocol
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_bucket_commit import BucketSinkBackend
from seglog.streaming.sink_commit import LocalSinkBackend
from seglog.streaming.sink_destination import (
    BucketDestination,
    LocalDestination,
    sink_destination,
)
from seglog.streaming.sink_options import SinkColumns, SinkOptions

SRC = Path(__file__).resolve().parents[2] / "src" / "seglog"
TOPIC = "out"
SINK = "5b1e-protocol-query"


def rows(n: int = 240) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([None if i % 5 == 0 else f"k{i % 17}" for i in range(n)], pa.string()),
            "value": pa.array([f"row{i}".encode() for i in range(n)], pa.binary()),
        }
    )


def options(path: str) -> SinkOptions:
    return SinkOptions.parse(
        {"path": path, "topic": TOPIC, "numPartitions": "3", "compression.type": "lz4"}
    )


def test_the_path_picks_the_backend_in_one_place(tmp_path: Path) -> None:
    local = sink_destination(options(str(tmp_path / "logs")))
    bucket = sink_destination(options(f"memory://protocol-{uuid.uuid4().hex}"))
    assert isinstance(local, LocalDestination)
    assert isinstance(local.backend(), LocalSinkBackend)
    assert isinstance(bucket, BucketDestination)
    assert isinstance(bucket.backend(), BucketSinkBackend)


def _branches_on_backend(path: Path) -> list[str]:
    """``if``/``elif``/conditional expressions of ``path`` that test for a bucket."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            test = ast.unparse(node.test)
            if "bucket_uri" in test or "is_object_uri" in test:
                found.append(f"{path.name}:{node.lineno}: {test}")
    return found


def test_the_spark_adapters_never_branch_on_the_backend() -> None:
    writers = [SRC / "datasource" / "stream_writer.py", SRC / "datasource" / "batch_writer.py"]
    assert [b for w in writers for b in _branches_on_backend(w)] == []


def test_no_sink_module_imports_a_private_name_of_another() -> None:
    """The bucket's specifics sit behind the interface, not on the local one's privates."""
    borrowed = []
    for path in sorted((SRC / "streaming").glob("sink_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and "sink_" in node.module:
                borrowed += [
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert borrowed == []


def _publish(
    backend: sink_protocol.SinkBackend, batch: pa.RecordBatch, batch_id: int
) -> sink_protocol.CommitResult:
    columns = SinkColumns.resolve(batch.schema, default_topic=TOPIC)
    tasks = [
        backend.stage(columns, [batch.slice(t * 80, 80)], SINK, batch_id, t, 0) for t in range(3)
    ]
    return sink_protocol.commit(backend, tasks, batch_id)


def _records(path: str) -> list[tuple[int, int, bytes]]:
    out = []
    with LogManager(path, read_only=True) as mgr:
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            for chunk in log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20):
                t = decode_batches(chunk)
                out += [
                    (p, o, v)
                    for o, v in zip(
                        t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True
                    )
                ]
    return sorted(out)


def test_both_backends_publish_the_same_input_to_the_same_offsets(tmp_path: Path) -> None:
    results = {}
    for path in (str(tmp_path / "logs"), f"memory://protocol-{uuid.uuid4().hex}"):
        backend = sink_destination(options(path)).backend()
        first = _publish(backend, rows(), 0)
        replay = _publish(backend, rows(), 0)  # the same micro-batch again: a replay
        assert replay.published == () and set(replay.skipped) == {(TOPIC, p) for p in range(3)}
        results[path] = (first.published, _records(path))
    local, bucket = results.values()
    assert local == bucket
    assert sum(p.records for p in local[0]) == 240


@pytest.mark.parametrize("staged_on", ["local", "bucket"])
def test_a_fragment_of_the_other_backend_is_refused_by_name(tmp_path: Path, staged_on: str) -> None:
    logs, uri = str(tmp_path / "logs"), f"memory://protocol-{uuid.uuid4().hex}"
    stage_path, commit_path = (logs, uri) if staged_on == "local" else (uri, logs)
    batch = rows()
    columns = SinkColumns.resolve(batch.schema, default_topic=TOPIC)
    staged = sink_destination(options(stage_path)).backend().stage(columns, [batch], SINK, 0, 0, 0)
    target = sink_destination(options(commit_path)).backend()
    where = (
        "in a local dir, but the sink writes to a bucket"
        if staged_on == "local"
        else "in a bucket, but the sink writes to local log dirs"
    )
    with pytest.raises(SinkCommitError, match=f"a task staged .* {where}"):
        sink_protocol.commit(target, [staged], 0)
