"""Transactions in the log layer: ``.txnindex`` files, producer snapshots, the last
stable offset and read_committed reads, against a plain Python model of transactions."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import ConfigError, CorruptIndexError
from seglog.logstore.index.txn_index import AbortedTxn, TransactionIndex
from seglog.logstore.log.log import Log
from seglog.logstore.log.producer_state import (
    CorruptSnapshotError,
    ProducerEntry,
    ProducerStateManager,
    read_snapshot,
    snapshot_file,
)
from seglog.logstore.records.record_codec import (
    ControlType,
    decode_batches,
    encode_batches,
    encode_control_batch,
)
from seglog.logstore.util.clock import MockClock

BASE_TS = 1_700_000_000_000
CFG = LogConfig.from_properties({"segment.bytes": "600"})


def data(pid: int, values: list[str], *, txn: bool = True, seq: int = 0) -> bytearray:
    return encode_batches(
        pa.array(values, pa.string()),
        now_ms=BASE_TS,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        is_transactional=txn and pid >= 0,
    )


def marker(pid: int, commit: bool) -> bytearray:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp_ms=BASE_TS)


def values(log: Log, isolation: str, start: int = 0) -> list[str]:
    out: list[str] = []
    for chunk in log.read_chunks(start, 2**62, isolation_level=isolation):
        out += [
            v.decode()
            for v in decode_batches(chunk, start_offset=start).column("value").to_pylist()
        ]
    return out


def open_log(d: Path, **kw) -> Log:
    return Log.open(d, CFG, clock=MockClock(BASE_TS), **kw)


# ---------------------------------------------------------------------------- the file


def test_entries_have_kafkas_34_byte_layout(tmp_path):
    idx = TransactionIndex(tmp_path / "00000000000000000010.txnindex", 10)
    assert not idx.has_file()  # created by the first entry, as Kafka's
    idx.append(AbortedTxn(7, 3, 12, 5))
    idx.append(AbortedTxn(8, 11, 20, 21))
    raw = idx.path.read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 7, 3, 12, 5) + struct.pack(">hqqqq", 0, 8, 11, 20, 21)
    assert idx.entries() == [AbortedTxn(7, 3, 12, 5), AbortedTxn(8, 11, 20, 21)]
    with pytest.raises(CorruptIndexError, match="ends at 20"):
        idx.append(AbortedTxn(9, 19, 20, 21))
    idx.truncate_to(20)
    assert idx.entries() == [AbortedTxn(7, 3, 12, 5)]
    idx.close()


@pytest.mark.parametrize(
    "junk, why",
    [
        (struct.pack(">hqqqq", 0, 7, 3, 12, 5) + b"\x00", "not a multiple"),
        (struct.pack(">hqqqq", 1, 7, 3, 12, 5), "version 1"),
        (struct.pack(">hqqqq", 0, 7, 3, 12, 5) * 2, "not after"),
        (struct.pack(">hqqqq", 0, 7, 3, 4, 5), "impossible"),  # marker below the segment
        (struct.pack(">hqqqq", 0, 7, 13, 12, 5), "impossible"),  # first after last
    ],
)
def test_a_damaged_file_is_an_error_naming_it(tmp_path, junk, why):
    path = tmp_path / "00000000000000000010.txnindex"
    path.write_bytes(junk)
    with pytest.raises(CorruptIndexError, match=why) as e:
        TransactionIndex(path, 10).entries()
    assert str(path) in str(e.value)


def test_snapshot_round_trip_and_damage(tmp_path):
    state = ProducerStateManager(
        42,
        [
            ProducerEntry(5, 1, 9, 40, 2, BASE_TS, 3, 38),
            ProducerEntry(6, 0, 4, 30, 4, BASE_TS, -1, -1),
        ],
    )
    path = state.take_snapshot(tmp_path)
    assert path == snapshot_file(tmp_path, 42)
    raw = path.read_bytes()
    assert len(raw) == 10 + 2 * 46 and struct.unpack(">h", raw[:2]) == (1,)
    back = read_snapshot(path, 42)
    assert back.producers == state.producers and back.first_unstable_offset() == 38
    path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        read_snapshot(path, 42)


# ---------------------------------------------------------------------------- the log


def _interleaved(log: Log) -> None:
    """Offsets: 0 a1(p1) | 1 b1(p2) | 2 plain | 3 a2(p1) | 4 ABORT p1 | 5 b2(p2) |
    6 COMMIT p2 | 7 c1(p3, left open) | 8 plain2"""
    for buf in (
        data(1, ["a1"]),
        data(2, ["b1"]),
        data(-1, ["plain"]),
        data(1, ["a2"], seq=1),
        marker(1, commit=False),
        data(2, ["b2"], seq=1),
        marker(2, commit=True),
        data(3, ["c1"]),
        data(-1, ["plain2"]),
    ):
        log.append(buf)


def test_abort_entries_lso_and_both_isolation_levels(tmp_path):
    log = open_log(tmp_path / "t-0")
    _interleaved(log)
    txn_files = sorted(tmp_path.glob("t-0/*.txnindex"))
    entries = [e for f in txn_files for e in TransactionIndex(f, 0).entries()]
    # p1 aborted [0, 4]; p2 still open then, so the LSO stored is p2's first offset 1
    assert entries == [AbortedTxn(1, 0, 4, 1)]
    assert log.last_stable_offset == 7  # p3's transaction is open
    assert values(log, "read_uncommitted") == ["a1", "b1", "plain", "a2", "b2", "c1", "plain2"]
    assert values(log, "read_committed") == ["b1", "plain", "b2"]
    fetched = log.read(0, isolation_level="read_committed")
    assert fetched.aborted_transactions == (AbortedTxn(1, 0, 4, 1),)
    assert fetched.next_offset == 7 and fetched.last_stable_offset == 7
    log.append(marker(3, commit=True))
    assert log.last_stable_offset == log.high_watermark == 10
    assert values(log, "read_committed") == ["b1", "plain", "b2", "c1", "plain2"]
    with pytest.raises(ConfigError, match="read_commited"):
        log.read(0, isolation_level="read_commited")
    log.close()


def test_a_reader_in_another_process_sees_the_same(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    _interleaved(log)
    reader = open_log(d, read_only=True, high_watermark=log.high_watermark)
    assert reader.last_stable_offset == 7
    assert values(reader, "read_committed") == ["b1", "plain", "b2"]
    log.append(marker(3, commit=False))
    reader.update_high_watermark(log.high_watermark)
    assert reader.last_stable_offset == 10
    assert values(reader, "read_committed") == ["b1", "plain", "b2", "plain2"]
    reader.close()
    log.close()


def _txn_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.txnindex"))}


def test_missing_txnindex_computed_by_readers_rebuilt_by_the_writer(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    _interleaved(log)
    log.append(marker(3, commit=False))
    for i in range(8):  # more segments after the aborts
        log.append(data(4, [f"x{i}"], seq=i))
        log.append(marker(4, commit=i % 2 == 0))
    log.close()
    expected = _txn_files(d)
    assert len(expected) >= 2 and log.num_segments >= 4
    with open_log(d, read_only=True) as reader:
        committed = values(reader, "read_committed")
    for name in expected:
        os.unlink(d / name)
    reader = open_log(d, read_only=True)
    assert values(reader, "read_committed") == committed
    assert _txn_files(d) == {}  # a reader writes nothing
    reader.close()
    writer = open_log(d)
    assert values(writer, "read_committed") == committed
    assert _txn_files(d) == expected  # rebuilt, byte for byte
    writer.close()


def test_damaged_txnindex_is_rebuilt_by_recovery(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    _interleaved(log)
    log.append(marker(3, commit=False))
    log.close()
    expected = _txn_files(d)
    name = next(iter(expected))
    (d / name).write_bytes(expected[name][:-3])
    reader = open_log(d, read_only=True)
    assert values(reader, "read_committed") == ["b1", "plain", "b2", "plain2"]  # not trusted
    reader.close()
    log = open_log(d, had_clean_shutdown=False)
    assert _txn_files(d) == expected
    assert values(log, "read_committed") == ["b1", "plain", "b2", "plain2"]
    log.close()


def test_truncation_reloads_producer_state(tmp_path):
    log = open_log(tmp_path / "t-0")
    _interleaved(log)  # p3 open from 7
    log.append(marker(3, commit=True))
    assert log.last_stable_offset == 10
    log.truncate_to(9)  # the commit marker is gone: p3 is open again
    assert log.last_stable_offset == 7
    log.truncate_to(4)  # the abort marker and its entry are gone too
    assert [e for s in log.segments for e in s.txn_index.entries()] == []
    assert log.last_stable_offset == 0  # p1's transaction from offset 0 is open
    log.close()


# ---------------------------------------------------------------------------- the model

OPS = st.lists(
    st.tuples(st.sampled_from(["data", "data", "commit", "abort", "plain"]), st.integers(1, 4)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, reopen=st.booleans())
def test_read_committed_matches_a_model(tmp_path_factory, ops, reopen):
    d = tmp_path_factory.mktemp("m") / "t-0"
    log = open_log(d)
    records: list[tuple[str, int | None]] = []  # value, transaction id (None: plain)
    open_txn: dict[int, int] = {}  # pid -> transaction id
    outcome: dict[int, bool] = {}  # transaction id -> committed
    first_offset: dict[int, int] = {}
    for i, (op, pid) in enumerate(ops):
        if op == "plain":
            log.append(data(-1, [f"v{i}"]))
            records.append((f"v{i}", None))
        elif op == "data":
            txn = open_txn.setdefault(pid, i)
            off = log.append(data(pid, [f"v{i}", f"w{i}"], seq=i)).first_offset
            first_offset.setdefault(txn, off)
            records += [(f"v{i}", txn), (f"w{i}", txn)]
        elif pid in open_txn:
            log.append(marker(pid, commit=op == "commit"))
            outcome[open_txn.pop(pid)] = op == "commit"
        else:
            log.append(marker(pid, commit=op == "commit"))  # a marker without data
    if reopen:
        log.close()
        log = open_log(d, had_clean_shutdown=False)
    lso = min((first_offset[t] for t in open_txn.values()), default=log.high_watermark)
    assert log.last_stable_offset == lso
    committed = []
    for chunk in log.read_chunks(0, 2**62, isolation_level="read_committed"):
        table = decode_batches(chunk)
        committed += list(
            zip(table.column("value").to_pylist(), table.column("offset").to_pylist(), strict=True)
        )
    assert all(off < lso for _v, off in committed)
    visible = {v for v, _o in committed}
    for (value, txn), off in zip(records, _data_offsets(log), strict=True):
        expected = off < lso and (txn is None or outcome.get(txn, False))
        assert (value.encode() in visible) == expected, (value, txn, off)
    reader = open_log(d, read_only=True, high_watermark=log.high_watermark)
    assert reader.last_stable_offset == lso
    reader.close()
    log.close()


def _data_offsets(log: Log) -> list[int]:
    out: list[int] = []
    for chunk in log.read_chunks(0, 2**62):
        out += decode_batches(chunk).column("offset").to_pylist()
    return out
