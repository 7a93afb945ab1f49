"""read_committed over transactional data written by Kafka's own record code.

A partition dir holding four interleaved transactional producers (committed, aborted,
one still open) is read with both isolation levels, with and without its ``.txnindex``
files, by a writer and by read-only readers."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from _kafka_txn import (
    KafkaRecords,
    all_values,
    committed_values,
    expected_aborted,
    write_partition,
)

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches

TOPIC = "txn"


@pytest.fixture(scope="module")
def kafka():
    with KafkaRecords() as k:
        yield k


@pytest.fixture(scope="module")
def made(kafka, tmp_path_factory):
    d = tmp_path_factory.mktemp("kafka-txn")
    txns = write_partition(kafka, d, TOPIC)
    return d, txns


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _values(mgr: LogManager, isolation: str) -> list[str]:
    log = mgr.get_log(TOPIC, 0)
    out: list[str] = []
    for chunk in log.read_chunks(0, 2**62, isolation_level=isolation):
        out += [v.decode() for v in decode_batches(chunk).column("value").to_pylist()]
    return out


def _txnindex(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((d / f"{TOPIC}-0").glob("*.txnindex"))}


def test_the_data_is_kafkas_and_kafka_reads_seglogs_segments(kafka, made):
    d, txns = made
    seen = []
    for seg in sorted((d / f"{TOPIC}-0").glob("*.log")):
        seen += kafka.read_batches(seg.read_bytes())
    assert kafka.version.startswith("3.")
    assert sum(1 for b in seen if b[3]) == sum(1 for t in txns if t.outcome != "open")
    assert all(b[2] for b in seen)  # every batch transactional, markers included
    assert len({p for *_x, p in seen}) == 4


def test_txnindex_entries_are_kafkas(made):
    d, txns = made
    files = _txnindex(d)
    assert files, "the aborts must have written .txnindex files"
    entries = []
    for raw in files.values():
        entries += [struct.unpack_from(">hqqqq", raw, i)[1:] for i in range(0, len(raw), 34)]
    assert entries == expected_aborted(txns)
    assert len((d / f"{TOPIC}-0").glob("*.snapshot").__next__().read_bytes()) >= 10


@pytest.mark.parametrize("without_txnindex", [False, True])
def test_both_isolation_levels(made, tmp_path, without_txnindex):
    src, txns = made
    d = _copy(src, tmp_path / "logs")
    expected_files = _txnindex(d)
    if without_txnindex:
        for name in expected_files:
            (d / f"{TOPIC}-0" / name).unlink()
    open_first = next(t for t in txns if t.outcome == "open").offsets[0]
    with LogManager([d], read_only=True) as reader:
        assert reader.get_log(TOPIC, 0).last_stable_offset == open_first
        assert _values(reader, "read_uncommitted") == all_values(txns)
        assert _values(reader, "read_committed") == committed_values(txns, open_first)
    assert (_txnindex(d) == {}) == without_txnindex  # a reader writes nothing
    with LogManager([d]) as writer:
        assert _values(writer, "read_committed") == committed_values(txns, open_first)
    assert _txnindex(d) == expected_files  # the writer rebuilt what was missing


def test_read_committed_moves_on_when_the_open_transaction_commits(kafka, made, tmp_path):
    src, txns = made
    d = _copy(src, tmp_path / "logs")
    open_txn = next(t for t in txns if t.outcome == "open")
    with LogManager([d]) as writer:
        log = writer.get_log(TOPIC, 0)
        stuck = log.last_stable_offset
        assert stuck == open_txn.offsets[0] < log.high_watermark
        log.append(kafka.marker(log.log_end_offset, open_txn.producer_id, 0, commit=True),
                   assign_offsets=False)
        writer.checkpoint_high_watermarks()
        assert log.last_stable_offset == log.high_watermark
    open_txn.outcome = "commit"
    try:
        with LogManager([d], read_only=True) as reader:
            lso = reader.get_log(TOPIC, 0).last_stable_offset
            assert lso == reader.high_watermarks()[(TOPIC, 0)]
            assert _values(reader, "read_committed") == committed_values(txns, lso)
    finally:
        open_txn.outcome = "open"


def test_damaged_txnindex_is_reported_by_check_and_rebuilt_by_recovery(made, tmp_path):
    from seglog.cli import main

    src, _txns = made
    d = _copy(src, tmp_path / "logs")
    expected = _txnindex(d)
    name = next(iter(expected))
    path = d / f"{TOPIC}-0" / name
    path.write_bytes(expected[name][:20])
    import io

    out = io.StringIO()
    assert main(["check", str(d)], out) == 1
    assert name in out.getvalue() and "not a multiple" in out.getvalue()
    (d / ".kafka_cleanshutdown").unlink()
    with LogManager([d]):
        pass
    assert _txnindex(d) == expected
    out = io.StringIO()
    assert main(["check", str(d)], out) == 0, out.getvalue()
