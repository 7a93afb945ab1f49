"""Producer state rebuilt from the batches recovery validates (``recovered_batches``):
an unclean open reads each byte of the log once, and ends in the state the writer had."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.log import log_loader, transactions
from seglog.logstore.log.log import Log
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.log.producer_state import ProducerEntry, ProducerStateManager
from seglog.logstore.log.recovered_batches import RecoveredBatches, drop_overwritten
from seglog.logstore.records.control_records import ControlRecord
from seglog.logstore.records.record_codec import ControlType, encode_batches, encode_control_batch
from seglog.logstore.records.record_format import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_LAST_OFFSET,
    H_MAGIC,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    HEADER_COLUMNS,
    TRANSACTIONAL_MASK,
    iter_batch_headers,
)
from seglog.logstore.util.clock import MockClock

BASE_TS = 1_700_000_000_000
CFG = LogConfig.from_properties({"segment.bytes": "1200"})


def _data(pid: int, i: int, *, txn: bool) -> bytearray:
    return encode_batches(
        pa.array([f"v{i}", f"w{i}"], pa.string()),
        now_ms=BASE_TS,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=2 * i if pid >= 0 else -1,
        is_transactional=txn and pid >= 0,
    )


def _marker(pid: int, commit: bool) -> bytearray:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp_ms=BASE_TS)


def _write_crashed(d: Path) -> tuple[dict, list, list[str]]:
    """A log of several segments with an idempotent producer (7), aborted and committed
    transactions (8, 9) and one left open (11); the writer is dropped without closing.
    Returns its producers, ongoing transactions and .txnindex files."""
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    for i in range(30):
        log.append(_data(7, i, txn=False))
        if i % 5 == 1:
            log.append(_data(8, i, txn=True))
            log.append(_data(-1, i, txn=False))
        if i % 5 == 3:
            log.append(_marker(8, commit=i % 10 == 3))
        if i == 12:
            log.append(_data(9, i, txn=True))
        if i == 20:
            log.append(_marker(9, commit=False))
        if i == 25:
            log.append(_data(11, i, txn=True))
    state = log._producers.state
    assert log.num_segments >= 4 and state.ongoing_txns()
    expected = (state.producers, state.ongoing_txns(), _txn_files(d))
    for seg in log.segments:
        seg.close_handlers()
    return expected


def _txn_files(d: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in d.glob("*.txnindex"))


@pytest.fixture
def reads(monkeypatch) -> dict[str, list[int]]:
    """Base offsets of the segments walked by recovery (``recover``) and by the producer
    state scan (``producer_batches``, which reads the file), in call order."""
    calls: dict[str, list[int]] = {"recover": [], "scan": []}
    recover, scan = LogSegment.recover, transactions.producer_batches

    def counted_recover(self, *args, **kwargs):
        calls["recover"].append(self.base_offset)
        return recover(self, *args, **kwargs)

    def counted_scan(seg, *args, **kwargs):
        calls["scan"].append(seg.base_offset)
        return scan(seg, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", counted_recover)
    monkeypatch.setattr(transactions, "producer_batches", counted_scan)
    return calls


def _check_state(log: Log, d: Path, expected: tuple[dict, list, list]) -> None:
    producers, ongoing, txn_files = expected
    state = log._producers.state
    assert state.producers == producers
    assert state.ongoing_txns() == ongoing
    assert _txn_files(d) == txn_files
    assert log.last_stable_offset == ongoing[0][0]


def _bases(d: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in d.glob("*.log"))


def test_unclean_open_reads_each_segment_once(tmp_path, reads):
    d = tmp_path / "t-0"
    expected = _write_crashed(d)
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), recovery_point=0, had_clean_shutdown=False)
    # recovery walked every segment once (the active one too, whose untrimmed index
    # fails its check); producer state came from those walks, not from reading again
    assert reads == {"recover": _bases(d), "scan": []}
    _check_state(log, d, expected)
    log.close()


def test_segments_below_the_recovery_point_are_read_for_producer_state(tmp_path, reads):
    """Without producer snapshots, the segments recovery skips are read (once) to rebuild
    the state at the recovery point; the recovered ones are not read again."""
    d = tmp_path / "t-0"
    expected = _write_crashed(d)
    for snap in d.glob("*.snapshot"):
        snap.unlink()
    bases = _bases(d)
    log = Log.open(
        d, CFG, clock=MockClock(BASE_TS), recovery_point=bases[2], had_clean_shutdown=False
    )
    assert reads == {"recover": bases[2:], "scan": bases[:2]}
    _check_state(log, d, expected)
    log.close()


def test_a_collector_over_its_bound_leaves_the_segment_to_be_read_again(
    tmp_path, reads, monkeypatch
):
    d = tmp_path / "t-0"
    expected = _write_crashed(d)
    monkeypatch.setattr(log_loader, "MAX_ROWS", 2)
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), recovery_point=0, had_clean_shutdown=False)
    assert reads == {"recover": _bases(d), "scan": _bases(d)}
    _check_state(log, d, expected)
    log.close()


def test_a_damaged_marker_is_an_error_naming_the_file(tmp_path):
    """A control batch whose record does not parse (its CRC recomputed, so recovery keeps
    it) stops the open with an error naming the segment and the batch's position."""
    from seglog.logstore.records.record_format import CRC_START, crc32c

    d = tmp_path / "t-0"
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    log.append(_data(8, 0, txn=True))
    at = log.append(_marker(8, commit=False)).first_offset
    for seg in log.segments:
        seg.close_handlers()
    path = d / "00000000000000000000.log"
    raw = bytearray(path.read_bytes())
    h = next(h for h in iter_batch_headers(raw) if h.base_offset == at)
    raw[h.position + 57 : h.position + 61] = bytes(4)  # records count: no marker record
    raw[h.position + 17 : h.position + 21] = crc32c(
        memoryview(raw)[h.position + CRC_START : h.end_position]
    ).to_bytes(4, "big")
    path.write_bytes(raw)
    with pytest.raises(CorruptRecordError) as e:
        Log.open(d, CFG, clock=MockClock(BASE_TS), recovery_point=0, had_clean_shutdown=False)
    assert path.name in str(e.value) and f"position {h.position}" in str(e.value)
    # the failed open hands over no log to close, so it leaves no file of it open
    held = [
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in os.listdir("/proc/self/fd")
        if os.path.islink(f"/proc/self/fd/{fd}")
    ]
    assert [f for f in held if f.startswith(f"{d}/")] == []


# ---------------------------------------------------------------------------- the reduction

ROW = st.tuples(st.integers(1, 3), st.sampled_from(["plain", "txn", "commit", "abort"]))


def _rows(ops: list[tuple[int, str]]) -> RecoveredBatches:
    rows = np.zeros((len(ops), HEADER_COLUMNS), np.int64)
    markers = {}
    for i, (pid, kind) in enumerate(ops):
        attrs = {"plain": 0, "txn": TRANSACTIONAL_MASK}.get(kind, TRANSACTIONAL_MASK | CONTROL_MASK)
        rows[
            i,
            [
                H_BASE_OFFSET,
                H_LAST_OFFSET,
                H_MAGIC,
                H_ATTRIBUTES,
                H_MAX_TIMESTAMP,
                H_PRODUCER_ID,
                H_PRODUCER_EPOCH,
                H_BASE_SEQUENCE,
            ],
        ] = (100 + 2 * i, 101 + 2 * i, 2, attrs, BASE_TS + i, pid, i % 3, i)
        if kind in ("commit", "abort"):
            rows[i, H_LAST_OFFSET] = 100 + 2 * i
            kind_code = CONTROL_COMMIT if kind == "commit" else CONTROL_ABORT
            markers[100 + 2 * i] = ControlRecord(100 + 2 * i, BASE_TS, kind_code, b"", b"", i)
    return RecoveredBatches(Path("x.log"), rows, markers, 100 + 2 * len(ops))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(ROW, max_size=30), ongoing=st.sets(st.integers(1, 3)))
def test_dropping_overwritten_rows_changes_no_state(ops, ongoing):
    """Against applying every row: the same producers, transactions and aborts, whatever
    transactions were open before the segment."""
    full = _rows(ops)
    reduced = RecoveredBatches(
        full.log_path, drop_overwritten(full.rows), full.markers, full.next_offset
    )
    assert len(reduced.rows) <= len(full.rows)
    results = []
    for batches in (full, reduced):
        # transactions open before the segment (its offsets start at 100)
        state = ProducerStateManager(
            100, [ProducerEntry(pid, current_txn_first_offset=pid) for pid in sorted(ongoing)]
        )
        aborted = transactions.replay_recovered(state, batches)
        results.append((state.producers, state.ongoing_txns(), aborted))
    assert results[0] == results[1]
    if ops and all(kind == "plain" for _p, kind in ops):
        assert len(reduced.rows) == len({p for p, _k in ops})  # one row per producer


def test_the_bound_counts_rows_after_dropping_overwritten_ones():
    """An idempotent producer's batches reduce to one row: a chunk of more batches than
    the bound is kept, not left to be read again."""
    from seglog.logstore.log.recovered_batches import ProducerBatchCollector

    chunk = _rows([(7, "plain")] * 500)
    collector = ProducerBatchCollector(chunk.log_path, max_rows=100)
    collector.add(np.zeros(0, np.uint8), chunk.rows, chunk_pos=0)
    collector.finish(chunk.next_offset)
    kept = collector.result()
    assert kept is not None
    assert kept.rows.tolist() == chunk.rows[-1:].tolist()


def test_a_collector_over_its_bound_after_reduction_gives_up():
    from seglog.logstore.log.recovered_batches import ProducerBatchCollector

    chunk = _rows([(7, "txn")] * 500)  # transactional rows are all kept
    collector = ProducerBatchCollector(chunk.log_path, max_rows=100)
    collector.add(np.zeros(0, np.uint8), chunk.rows, chunk_pos=0)
    collector.finish(chunk.next_offset)
    assert collector.result() is None


def _scanned_state(d: Path) -> tuple[dict, list]:
    """The state a scan of every segment left in ``d`` computes (no recovery involved)."""
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), read_only=True)
    state = ProducerStateManager(0)
    for seg in log.segments:
        transactions.scan_segment(seg, state)
    log.close()
    return state.producers, state.ongoing_txns()


def test_a_truncation_in_recovery_drops_what_later_segments_would_have_kept(tmp_path, reads):
    """A CRC mismatch in the second segment cuts it and deletes the later ones: producer
    state is that of the batches left, none of the deleted segments' batches count."""
    d = tmp_path / "t-0"
    _write_crashed(d)
    bases = _bases(d)
    second = d / f"{bases[1]:020d}.log"
    raw = bytearray(second.read_bytes())
    raw[-30] ^= 0xFF  # inside the last batch: its CRC fails
    second.write_bytes(raw)
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), recovery_point=0, had_clean_shutdown=False)
    assert reads == {"recover": bases[:2], "scan": []}
    assert _bases(d) == bases[:2]
    producers, ongoing = log._producers.state.producers, log._producers.state.ongoing_txns()
    log.close()
    assert (producers, ongoing) == _scanned_state(d)


def test_legacy_messages_before_producer_batches(tmp_path, reads):
    """A segment upgraded from magic 1 to 2 (Kafka's message-format upgrade): the legacy
    messages carry no producer, the v2 batches after them are kept for producer state."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from seglog.logstore.records.record_format import set_base_offset

    d = tmp_path / "t-0"
    d.mkdir()
    raw = bytearray()
    for offset in range(3):
        b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        b.append(offset, timestamp=BASE_TS, key=b"k", value=b"v" * 50)
        raw += bytes(b.build())
    for i in range(4):
        one = _data(8, i, txn=i > 1)
        set_base_offset(one, 0, 3 + 2 * i)
        raw += one
    (d / "00000000000000000000.log").write_bytes(bytes(raw))
    log = Log.open(
        d, LogConfig.from_properties(), clock=MockClock(BASE_TS), had_clean_shutdown=False
    )
    assert reads == {"recover": [0], "scan": []}
    assert log.log_end_offset == 11
    state = log._producers.state
    assert state.ongoing_txns() == [(7, 8)]
    assert state.producers[8].last_offset == 10 and state.producers[8].last_sequence == 7
    log.close()
