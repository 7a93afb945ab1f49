"""A real Kafka broker's log dir, read by seglog: the apache/kafka image in a container
(testcontainers), records produced with kafka-python, the broker stopped cleanly and its
log dir copied out, then read by ``LogManager(read_only=True)`` and ``seglog check``.

Runs where a Docker engine answers; skipped with the reason otherwise (no hang: the
engine is asked once with a 5 s timeout, the broker's start, the producer and the stop
are bounded). Not the only test of reading brokers' dirs: ``test_broker_dirs.py`` reads
a corpus of broker layouts of each Kafka era on every run, and ``test_codec_interop.py``
checks the bytes against kafka-python's own builders.
"""

from __future__ import annotations

import io
import socket
import tarfile
from pathlib import Path

import pytest
from docker_engine import docker_unavailable

from seglog.cli import main
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches

KAFKA_IMAGE = "apache/kafka:3.9.1"  # a KRaft broker (broker and controller in one)
LOG_DIR = "/var/lib/kafka/data"
TOPIC = "events"
PARTITIONS = 2
RECORDS = 3000
T0 = 1_700_000_000_000

_UNAVAILABLE = docker_unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _record(i: int) -> tuple[int, bytes, bytes, int, list[tuple[str, bytes]]]:
    return (i % PARTITIONS, b"key-%d" % i, b"value-%06d-" % i + b"x" * (i % 300), T0 + i,
            [("n", b"%d" % i)] if i % 7 == 0 else [])


def _broker(port: int):  # noqa: ANN202 (a testcontainers DockerContainer)
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9093",
        # The host reaches the broker through the bound port on the same number.
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_LOG_DIRS": LOG_DIR,
    }
    container = DockerContainer(KAFKA_IMAGE).with_bind_ports(9092, port)
    for name, value in env.items():
        container = container.with_env(name, value)
    return container.waiting_for(
        LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(180))


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory) -> Path:
    """The broker's log dir after a clean shutdown, copied to a tmp dir."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    port = _free_port()
    out = tmp_path_factory.mktemp("kafka-broker")
    with _broker(port) as container:
        bootstrap = f"localhost:{port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
        try:  # small segments, so the dir has several per partition
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1,
                                          topic_configs={"segment.bytes": "65536"})])
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                 compression_type="gzip", max_block_ms=30_000,
                                 request_timeout_ms=30_000)
        try:
            for i in range(RECORDS):
                p, key, value, ts, headers = _record(i)
                producer.send(TOPIC, value=value, key=key, partition=p, timestamp_ms=ts,
                              headers=headers)
            producer.flush(timeout=60)
        finally:
            producer.close(timeout=30)
        wrapped = container.get_wrapped_container()
        wrapped.stop(timeout=60)  # SIGTERM: a clean shutdown writes the checkpoints
        stream, _ = wrapped.get_archive(LOG_DIR)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extractall(out, filter="data")
    return out / Path(LOG_DIR).name


def test_seglog_reads_every_record_a_kafka_broker_wrote(broker_dir: Path):
    assert (broker_dir / ".kafka_cleanshutdown").exists()
    assert len(list((broker_dir / f"{TOPIC}-0").glob("*.log"))) > 1
    expected: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for i in range(RECORDS):
        p, key, value, ts, headers = _record(i)
        expected[p].append((key, value, ts, headers or None))
    with LogManager(broker_dir, read_only=True) as mgr:
        hws = mgr.high_watermarks()
        for p in range(PARTITIONS):
            assert hws[(TOPIC, p)] == len(expected[p])
            log = mgr.get_log(TOPIC, p)
            table = [decode_batches(bytes(c), start_offset=0)
                     for c in log.read_chunks(0, log.high_watermark)]
            got = [(r["key"], r["value"], r["timestamp"],
                    [(h["key"], h["value"]) for h in r["headers"]] or None)
                   for t in table for r in t.to_pylist()]
            offsets = [o for t in table for o in t.column("offset").to_pylist()]
            assert offsets == list(range(len(expected[p])))
            assert got == expected[p]


def test_seglog_check_accepts_the_broker_dir(broker_dir: Path):
    out = io.StringIO()
    code = main(["check", str(broker_dir)], out)
    assert code == 0, out.getvalue()
    assert f"{TOPIC}-0" in out.getvalue() and f"{TOPIC}-1" in out.getvalue()
