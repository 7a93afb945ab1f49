"""Listing a log dir written by a Kafka broker: its own files are recognised quietly
and KRaft's metadata log is no topic."""

from __future__ import annotations

import logging

from seglog.logstore.manager.log_manager import LogManager


def test_kafka_files_are_known_and_the_metadata_log_is_no_topic(tmp_path, caplog):
    d = tmp_path / "kraft"
    for part in ("__cluster_metadata-0", "orders-0",
                 "orders-1.0123456789abcdef0123456789abcdef-future", "orders-2-stray"):
        (d / part).mkdir(parents=True)
        (d / part / "00000000000000000000.log").write_bytes(b"")
    (d / "meta.properties").write_text("version=1\nnode.id=1\n")
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                 "log-start-offset-checkpoint"):
        (d / name).write_text("0\n0\n")  # a broker writes them within seconds of start
    (d / "bootstrap.checkpoint").write_bytes(b"")
    (d / "__cluster_metadata-0" / "quorum-state").write_text("{}")
    with caplog.at_level(logging.INFO), LogManager([d], read_only=True) as reader:
        assert reader.topics() == ["orders"] and reader.partitions("orders") == [0]
    assert not [r for r in caplog.records if r.levelno >= logging.INFO], caplog.text
