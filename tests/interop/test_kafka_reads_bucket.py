"""Kafka's own record code (kafka-clients 3.9, through py4j) reads what a bucket holds:
every published ``.log`` object as written by appends and by a merge, and every segment
of ``seglog export``. ``FileRecords`` opens the file as a broker opens a segment, each
batch passes ``ensureValid`` (size, magic, CRC) and the offsets are the ones seglog
acknowledged."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from _kafka_txn import kafka_classpath

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "logstore"))
from bucket_helpers import memory_uri  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def kafka_jvm():
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    cp = kafka_classpath()
    if cp is None:
        pytest.skip("kafka-clients.jar is not installed (test extra)")
    port = launch_gateway(classpath=cp, die_on_exit=True,
                          javaopts=["-Xmx256m", "-XX:TieredStopAtLevel=1"])
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    yield gateway.jvm
    gateway.shutdown()


def kafka_batches(jvm, path: Path) -> list[tuple[int, int, list[bytes]]]:
    """(base offset, last offset, values) of each batch, as Kafka's FileRecords reads
    the file; every batch must pass Kafka's own validation."""
    records = jvm.org.apache.kafka.common.record.FileRecords.open(jvm.java.io.File(str(path)))
    utils = jvm.org.apache.kafka.common.utils.Utils
    out = []
    try:
        batches = records.batches().iterator()
        while batches.hasNext():
            batch = batches.next()
            batch.ensureValid()
            values = []
            it = batch.iterator()
            while it.hasNext():
                values.append(bytes(utils.toArray(it.next().value())))
            out.append((batch.baseOffset(), batch.lastOffset(), values))
    finally:
        records.close()
    return out


def _write(mgr: LogManager) -> list[tuple[int, bytes]]:
    expected = []
    for i, codec in enumerate(CODECS * 2):
        values = [f"v{i}-{j}".encode() for j in range(5)]
        info = mgr.append("t", 0, encode_batches(pa.array(values), compression=codec))
        expected += [(info.first_offset + j, v) for j, v in enumerate(values)]
    return expected


def _flatten(batches: list[tuple[int, int, list[bytes]]]) -> list[tuple[int, bytes]]:
    out = []
    for base, last, values in batches:
        assert last - base + 1 == len(values)
        out += [(base + j, v) for j, v in enumerate(values)]
    return out


def test_kafka_reads_every_published_object_and_the_export(kafka_jvm, tmp_path: Path):
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, {"retention.ms": -1, "segment.bytes": 1 << 20})
    expected = _write(mgr)

    def objects() -> list[Path]:
        paths = []
        for seg in mgr.get_log("t", 0).segments:
            path = tmp_path / f"{len(paths)}-{os.path.basename(seg.entry.key)}.log"
            path.write_bytes(mgr.storage.read(seg.entry.key + ".log"))
            paths.append(path)
        return paths

    appended = objects()
    assert len(appended) == len(CODECS) * 2  # one object per append
    assert [o for p in appended for o in _flatten(kafka_batches(kafka_jvm, p))] == expected

    assert mgr.merge_segments() > 0
    merged = objects()
    assert len(merged) == 1
    assert _flatten(kafka_batches(kafka_jvm, merged[0])) == expected

    mgr.append("t", 0, encode_batches(pa.array([b"after"]), compression="lz4"))
    expected.append((len(expected), b"after"))
    mgr.export(tmp_path / "exported")
    logs = sorted((tmp_path / "exported" / "t-0").glob("*.log"))
    assert [int(p.stem) for p in logs] == [0, len(expected) - 1]  # Kafka's names
    assert [o for p in logs for o in _flatten(kafka_batches(kafka_jvm, p))] == expected
