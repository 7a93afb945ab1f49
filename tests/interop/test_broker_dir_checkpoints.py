"""Kafka's checkpoint files as a broker leaves them are not damage: Kafka's
``CheckpointFile`` creates a checkpoint empty and reads an empty file as no entries, so
``seglog check`` passes such a dir (exit 0, no problem, no warning) and readers open it."""

from __future__ import annotations

import io
import logging

import pytest
from kafka_dirs import BrokerDir, kraft_39_dir, zk_legacy_dir

from seglog.cli import main
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile


def _check(path) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main(["check", str(path)], out)
    return code, out.getvalue().splitlines()


def _offsets(reader, topic: str, p: int, end: int) -> list[int]:
    return [
        o
        for chunk in reader.get_log(topic, p).read_chunks(0, end)
        for o in decode_batches(chunk).column("offset").to_pylist()
    ]


def test_an_empty_checkpoint_file_reads_as_no_entries(tmp_path):
    p = tmp_path / "cleaner-offset-checkpoint"
    p.write_bytes(b"")
    assert OffsetCheckpointFile(p).read() == {}


@pytest.mark.parametrize("build", [zk_legacy_dir, kraft_39_dir])
def test_an_empty_cleaner_checkpoint_passes_check_and_reads(tmp_path, caplog, build):
    bd: BrokerDir = build(tmp_path)
    (bd.path / "cleaner-offset-checkpoint").write_bytes(b"")  # as Kafka creates it
    with caplog.at_level(logging.WARNING):
        code, lines = _check(bd.path)
        assert code == 0, lines
        assert all(
            ln.endswith("OK") or ": note: " in ln or ln.endswith("note(s))") for ln in lines
        ), lines
        with LogManager([bd.path], read_only=True) as reader:
            for (topic, p), w in bd.partitions.items():
                got = _offsets(reader, topic, p, w.next_offset)
                assert got == [r.offset for r in w.records], (topic, p)
    assert not caplog.records, caplog.text
    assert (bd.path / "cleaner-offset-checkpoint").read_bytes() == b""  # nothing changed


def test_an_empty_replication_checkpoint_opens_as_nothing_published(tmp_path, caplog):
    """A broker writes the file before its first high watermark as an empty file: no
    partition has published anything yet. Readers open the dir (it used to refuse it as
    corrupt); what they see is the rule for an unlisted partition (docs/checkpoints.md)."""
    bd = kraft_39_dir(tmp_path)
    (bd.path / "replication-offset-checkpoint").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        code, lines = _check(bd.path)
        assert code == 0, lines
        assert not [ln for ln in lines if "problem" in ln or "corrupt" in ln], lines
        unlisted = [ln for ln in lines if "does not list" in ln]
        assert len(unlisted) == len(bd.partitions), lines
        with LogManager([bd.path], read_only=True) as reader:
            assert reader.topics() == bd.topics
            for topic, p in bd.partitions:
                assert reader.get_log(topic, p).high_watermark == 0
    assert not caplog.records, caplog.text
