"""Transactional test data made by Kafka's own record code (kafka-clients 3.9, from the
``shigawire-apache-flink-libraries`` wheel), driven through py4j in a JVM of its own.

``KafkaRecords`` builds ``MemoryRecords`` the way a transactional producer and the
transaction coordinator do (data batches with the transactional bit, then COMMIT/ABORT
control batches from ``MemoryRecords.withEndTransactionMarker``). ``write_partition``
appends them one batch per append, as a broker's produce and WriteTxnMarkers requests do,
into a partition dir laid out as a broker's (segments, indexes, producer snapshots at each
roll, ``.txnindex`` where transactions aborted, checkpoints).
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from seglog.logstore.manager.log_manager import LogManager

BASE_TS = 1_700_000_000_000


def kafka_classpath() -> str | None:
    """kafka-clients and what it needs (lz4, snappy, zstd, slf4j), or None."""
    for site in sys.path:
        lib = Path(site) / "pyflink" / "lib"
        if (lib / "kafka-clients.jar").exists():
            jars = [lib / f"{n}.jar" for n in ("kafka-clients", "lz4-java", "snappy-java",
                                                "zstd-jni", "slf4j-api")]
            return os.pathsep.join(str(j) for j in jars if j.exists())
    return None


@dataclass
class Txn:
    """One transaction in the expected outcome (offsets assigned on write)."""

    producer_id: int
    values: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    outcome: str = "open"  # open, commit, abort
    marker_offset: int | None = None


class KafkaRecords:
    """A JVM with kafka-clients, building batches; a context manager."""

    def __init__(self) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

        cp = kafka_classpath()
        if cp is None or not glob.glob(cp.split(os.pathsep)[0]):
            pytest.skip("kafka-clients.jar is not installed (test extra)")
        port = launch_gateway(classpath=cp, die_on_exit=True,
                              javaopts=["-Xmx256m", "-XX:TieredStopAtLevel=1"])
        self.gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port,
                                                                        auto_convert=True))
        jvm = self.gateway.jvm
        self._rec = jvm.org.apache.kafka.common.record
        self._compression = jvm.org.apache.kafka.common.compress.Compression
        self._utils = jvm.org.apache.kafka.common.utils.Utils
        self.version = jvm.org.apache.kafka.common.utils.AppInfoParser.getVersion()

    def _bytes(self, memory_records) -> bytes:
        return bytes(self._utils.toArray(memory_records.buffer()))

    def data(self, offset: int, producer_id: int, epoch: int, sequence: int,
             values: list[str], *, gzip: bool = False) -> bytes:
        rec = self._rec
        arr = self.gateway.new_array(rec.SimpleRecord, len(values))
        for i, v in enumerate(values):
            arr[i] = rec.SimpleRecord(BASE_TS + offset + i, f"k{v}".encode(), v.encode())
        comp = self._compression.gzip().build() if gzip else self._compression.NONE
        return self._bytes(rec.MemoryRecords.withTransactionalRecords(
            offset, comp, producer_id, epoch, sequence, 0, arr))

    def marker(self, offset: int, producer_id: int, epoch: int, commit: bool) -> bytes:
        rec = self._rec
        kind = rec.ControlRecordType.COMMIT if commit else rec.ControlRecordType.ABORT
        return self._bytes(rec.MemoryRecords.withEndTransactionMarker(
            offset, BASE_TS + offset, 0, producer_id, epoch,
            rec.EndTransactionMarker(kind, 7)))

    def read_batches(self, data: bytes) -> list[tuple[int, int, bool, bool, int]]:
        """Kafka's reader over ``data``: (base, last, transactional, control, producer id)
        of each batch, after ``ensureValid`` (size and CRC)."""
        bb = self.gateway.jvm.java.nio.ByteBuffer.wrap(data)
        out = []
        it = self._rec.MemoryRecords.readableRecords(bb).batches().iterator()
        while it.hasNext():
            batch = it.next()
            batch.ensureValid()
            out.append((batch.baseOffset(), batch.lastOffset(), batch.isTransactional(),
                        batch.isControlBatch(), batch.producerId()))
        return out

    def close(self) -> None:
        self.gateway.shutdown()

    def __enter__(self) -> KafkaRecords:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


SCRIPT = [
    # (producer, action, values): four producers interleaved, gzip for producer 12
    (10, "data", ["a0", "a1"]), (11, "data", ["b0"]), (12, "data", ["c0", "c1", "c2"]),
    (10, "data", ["a2"]), (11, "abort", None), (12, "data", ["c3"]), (10, "commit", None),
    (13, "data", ["d0"]), (12, "abort", None), (13, "data", ["d1", "d2"]),
    (10, "data", ["a3"]), (13, "commit", None), (11, "data", ["b1"]), (10, "abort", None),
    (11, "commit", None), (12, "data", ["c4"]), (12, "commit", None),
    (13, "data", ["d3"]),  # left open
]


def write_partition(kafka: KafkaRecords, log_dir: Path, topic: str, script=SCRIPT, *,
                    segment_bytes: int = 400) -> list[Txn]:
    """Write ``script`` into ``log_dir/<topic>-0``; returns the transactions, in order."""
    txns: list[Txn] = []
    current: dict[int, Txn] = {}
    seqs: dict[int, int] = {}
    with LogManager([log_dir], default_topic_config={"segment.bytes": str(segment_bytes)}) \
            as mgr:
        mgr.create_topic(topic, 1)
        log = mgr.get_log(topic, 0)
        for pid, action, values in script:
            offset = log.log_end_offset
            if action == "data":
                txn = current.get(pid)
                if txn is None:
                    txn = current[pid] = Txn(pid)
                    txns.append(txn)
                seq = seqs.get(pid, 0)
                buf = kafka.data(offset, pid, 0, seq, values, gzip=pid == 12)
                seqs[pid] = seq + len(values)
                txn.values += values
                txn.offsets += range(offset, offset + len(values))
            else:
                buf = kafka.marker(offset, pid, 0, commit=action == "commit")
                txn = current.pop(pid)
                txn.outcome, txn.marker_offset = action, offset
            log.append(buf, assign_offsets=False)
        mgr.checkpoint_high_watermarks()
    return txns


def expected_aborted(txns: list[Txn]) -> list[tuple[int, int, int, int]]:
    """The ``.txnindex`` entries a broker writes for ``txns`` (Kafka's rule: the LSO when
    the abort marker is appended is the first offset of the earliest other ongoing
    transaction, else the marker's offset + 1)."""
    out = []
    for t in sorted((t for t in txns if t.outcome == "abort"), key=lambda t: t.marker_offset):
        m = t.marker_offset
        others = [o.offsets[0] for o in txns if o is not t and o.offsets[0] < m
                  and (o.marker_offset is None or o.marker_offset > m)]
        out.append((t.producer_id, t.offsets[0], m, min(others, default=m + 1)))
    return out


def committed_values(txns: list[Txn], lso: int) -> list[str]:
    pairs = [(o, v) for t in txns if t.outcome == "commit"
             for o, v in zip(t.offsets, t.values, strict=True) if o < lso]
    return [v for _o, v in sorted(pairs)]


def all_values(txns: list[Txn]) -> list[str]:
    return [v for _o, v in sorted((o, v) for t in txns
                                  for o, v in zip(t.offsets, t.values, strict=True))]
