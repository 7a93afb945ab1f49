"""Compaction against a plain dict model: last value per key, tombstones and their
delete horizon, multi-pass cleaning in a small map, codecs, offsets and indexes."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.logstore.cleaner.cleaner import LogCleaner, SegmentSizes, group_segments
from seglog.logstore.config.config import LogConfig, ManagerConfig
from seglog.logstore.errors import CorruptRecordError, InvalidRecordError
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import DELETE_HORIZON_MASK, iter_batch_headers
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.util.clock import MockClock

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def open_log(path: Path, clock: MockClock, **overrides) -> Log:
    props = {"cleanup.policy": "compact", "segment.bytes": 2048,
             "delete.retention.ms": 1000, "index.interval.bytes": 256, **overrides}
    return Log.open(path, LogConfig.from_properties(props), clock=clock)


def cleaner(clock: MockClock, budget: int = 1 << 20) -> LogCleaner:
    return LogCleaner(ManagerConfig.from_properties(
        {"log.cleaner.dedupe.buffer.size": budget}), clock)


def append(log: Log, clock: MockClock, records: list[tuple[bytes, bytes | None]],
           codec: str = "none", headers=None) -> int:
    keys = pa.array([k for k, _ in records], pa.binary())
    values = pa.array([v for _, v in records], pa.binary())
    ts = pa.array([clock.milliseconds() - len(records) + i for i in range(len(records))],
                  pa.int64())
    buf = encode_batches(values, keys, ts, headers, compression=codec,
                         now_ms=clock.milliseconds())
    return log.append(buf).first_offset


def read_all(log: Log, start: int | None = None) -> pa.Table:
    start = log.log_start_offset if start is None else start
    parts = [decode_batches(c, start_offset=start)
             for c in log.read_chunks(start, log.log_end_offset)]
    if not parts:
        return pa.Table.from_batches([], schema=decode_batches(b"").schema)
    return pa.Table.from_batches(parts)


def triples(table: pa.Table) -> list[tuple[int, bytes, bytes | None]]:
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), strict=True))


def expected_after(orig: dict[int, tuple[bytes, bytes | None]], bound: int,
                   drop_tombstones: bool) -> list[int]:
    """Offsets that survive cleaning everything below ``bound``."""
    latest: dict[bytes, int] = {}
    for o in sorted(orig):
        if o < bound:
            latest[orig[o][0]] = o
    kept = {o for o in latest.values() if not (drop_tombstones and orig[o][1] is None)}
    return sorted(kept | {o for o in orig if o >= bound})


def check_indexes(log: Log) -> None:
    """Each offset-index entry names the last offset of the batch at its position, and
    the time index never points past the segment."""
    for seg in log.segments:
        data = seg.pread(0, seg.size)
        by_pos = {h.position: h for h in iter_batch_headers(data)}
        for e in seg.offset_index.all_entries():
            assert e.position in by_pos, (seg, e)
            assert by_pos[e.position].last_offset == e.offset
        lasts = [h.last_offset for h in by_pos.values()]
        for e in seg.time_index.all_entries():
            assert not lasts or e.offset <= max(lasts)


def fill(log: Log, clock: MockClock, rnd: random.Random, n_batches: int, n_keys: int,
         tombstone_rate: float = 0.1, codecs=CODECS) -> dict[int, tuple[bytes, bytes | None]]:
    orig: dict[int, tuple[bytes, bytes | None]] = {}
    for i in range(n_batches):
        n = rnd.randint(1, 20)
        recs = [(b"key-%d" % rnd.randrange(n_keys),
                 None if rnd.random() < tombstone_rate else b"value-%d-%d" % (i, j))
                for j in range(n)]
        first = append(log, clock, recs, rnd.choice(codecs))
        for j, r in enumerate(recs):
            orig[first + j] = r
        clock.advance(1)
    return orig


def check_against_model(log: Log, orig, bound: int, drop_tombstones: bool) -> None:
    got = triples(read_all(log))
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets must increase strictly"
    for o, k, v in got:
        assert orig[o] == (k, v), f"record at offset {o} changed"
    assert offsets == expected_after(orig, bound, drop_tombstones)


def test_last_value_per_key_with_tombstones_and_their_horizon(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    orig = fill(log, clock, random.Random(1), 80, 40)
    assert log.num_segments > 5
    c = cleaner(clock)
    stats = c.clean_log(log)
    assert not stats.more_dirty and stats.end_offset == log.active_segment.base_offset
    assert stats.records_retained < stats.records_read
    check_against_model(log, orig, stats.end_offset, drop_tombstones=False)
    check_indexes(log)
    # the kept tombstones carry a delete horizon of now + delete.retention.ms
    horizons = {h.base_timestamp for seg in log.segments[:-1]
                for h in iter_batch_headers(seg.pread(0, seg.size))
                if h.attributes & DELETE_HORIZON_MASK}
    assert horizons == {clock.milliseconds() + 1000}
    assert stats.pending_delete_horizon == clock.milliseconds() + 1000
    # before the horizon nothing changes; the cleaner does not even pick the log
    clock.advance(999)
    assert c.clean_dirtiest([log]) is None
    clock.advance(1)
    stats2 = c.clean_dirtiest([log])
    assert stats2 is not None and stats2.tombstones_removed > 0
    check_against_model(log, orig, stats.end_offset, drop_tombstones=True)
    check_indexes(log)
    assert c.clean_dirtiest([log]) is None
    # a reopened log (the swap renames completed) reads the same
    before = triples(read_all(log))
    log.close()
    log = open_log(tmp_path / "t-0", clock)
    assert triples(read_all(log)) == before
    log.close()


@pytest.mark.parametrize("budget", [1024, 2048])
def test_multi_pass_cleaning_in_a_small_map(tmp_path, budget):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    orig = fill(log, clock, random.Random(budget), 80, 300, tombstone_rate=0.0)
    budget_entries = budget // 24
    c = cleaner(clock, budget)
    passes = 0
    first_dirty = 0
    while True:
        stats = c.clean_log(log)
        passes += 1
        assert stats.first_dirty_offset == first_dirty
        assert stats.map_entries <= stats.map_capacity < budget_entries + 1
        first_dirty = stats.end_offset
        if not stats.more_dirty:
            break
        assert passes < 500
    assert passes > 1
    check_against_model(log, orig, stats.end_offset, drop_tombstones=False)
    check_indexes(log)
    cp = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
    assert cp == {("t", 0): stats.end_offset}
    assert (tmp_path / "cleaner-offset-checkpoint").read_text().startswith("0\n1\nt 0 ")
    log.close()


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(st.integers(0, 80), st.booleans()), min_size=1,
                         max_size=15), min_size=1, max_size=40),
       st.integers(1024, 2400), st.sampled_from(CODECS))
def test_random_workloads_match_a_dict(tmp_path_factory, batches, budget, codec):
    clock = MockClock()
    path = tmp_path_factory.mktemp("log") / "t-0"
    log = open_log(path, clock, **{"segment.bytes": 600})
    orig = {}
    c = cleaner(clock, budget)
    for i, batch in enumerate(batches):
        recs = [(b"k%d" % k, None if tomb else b"v%d" % i) for k, tomb in batch]
        first = append(log, clock, recs, codec)
        orig.update({first + j: r for j, r in enumerate(recs)})
        if i % 7 == 6:  # clean while the log grows
            c.clean_log(log)
    while c.clean_log(log).more_dirty:
        pass
    bound = log.active_segment.base_offset
    check_against_model(log, orig, bound, drop_tombstones=False)
    # every key's latest value (or tombstone) is readable: the dict model
    model = {}
    for o in sorted(orig):
        model[orig[o][0]] = orig[o][1]
    got = {}
    for _o, k, v in triples(read_all(log)):
        got[k] = v
    assert got == model
    log.close()


def test_codecs_timestamps_and_headers_survive_a_rewrite(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 100_000})
    hdr_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    for codec in CODECS:
        c = codec.encode()
        recs = [(b"a" + c, b"1"), (b"b" + c, b"2"), (b"a" + c, None), (b"c" + c, b"3")]
        headers = pa.array([[{"key": "h", "value": b"x"}], None, [], None], hdr_type)
        append(log, clock, recs, codec, headers)
        clock.advance(10)
    append(log, clock, [(b"z", b"keep the rest dirty")])
    log.roll()
    before = read_all(log)
    cleaner(clock).clean_log(log)
    after = read_all(log)
    codecs_after = [h.compression for seg in log.segments[:-1]
                    for h in iter_batch_headers(seg.pread(0, seg.size))]
    assert codecs_after == [0, 1, 2, 3, 4, 0]  # one batch per codec, in order
    by_offset = {r["offset"]: r for r in before.to_pylist()}
    rows = after.to_pylist()
    assert 0 < len(rows) < len(by_offset)
    for r in rows:
        assert r == by_offset[r["offset"]]  # key, value, timestamp, headers unchanged
    # each batch loses its first "a" (its tombstone supersedes it) and keeps the rest
    expected = []
    for codec in CODECS:
        c = codec.encode()
        expected += [(b"b" + c, b"2"), (b"a" + c, None), (b"c" + c, b"3")]
    assert [(r["key"], r["value"]) for r in rows] == expected + [(b"z", b"keep the rest dirty")]
    log.close()


def test_reads_from_a_compacted_offset_start_at_the_next_record(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    for i in range(30):
        append(log, clock, [(b"same", b"v%d" % i), (b"other-%d" % (i % 3), b"w%d" % i)])
    log.roll()
    cleaner(clock).clean_log(log)
    offsets = read_all(log).column("offset").to_pylist()
    assert offsets == [55, 57, 58, 59]  # the last of each key; gaps everywhere before
    for start in range(0, 60):
        first = read_all(log, start).column("offset").to_pylist()[0]
        assert first == min(o for o in offsets if o >= start)
        # Log.read stays in one segment: a consumer moves on by next_offset (a segment's
        # tail may hold no records after compaction, e.g. an empty batch)
        at = start
        while True:
            fetched = log.read(at)
            table = decode_batches(fetched.records, start_offset=start)
            if table.num_rows:
                break
            assert fetched.next_offset > at
            at = fetched.next_offset
        assert table.column("offset")[0].as_py() == first
    # batches keep their offset range: the log end and segment bases do not move
    assert log.log_end_offset == 60
    log.close()


def test_null_keys_are_rejected_on_a_compacted_topic(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    buf = encode_batches(pa.array([b"v", b"w"]), pa.array([b"k", None], pa.binary()),
                         now_ms=clock.milliseconds())
    with pytest.raises(InvalidRecordError, match="null key"):
        log.append(buf)
    assert log.log_end_offset == 0
    log.close()


def test_active_segment_and_min_compaction_lag(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"min.compaction.lag.ms": 10_000})
    orig = {}
    for phase in (b"old", b"new"):
        for i in range(40):
            recs = [(b"k", b"%s-%d-%d" % (phase, i, j)) for j in range(5)]
            first = append(log, clock, recs)
            orig.update({first + j: r for j, r in enumerate(recs)})
        clock.advance(20_000 if phase == b"old" else 0)
    c = cleaner(clock)
    r = c.cleanable_range(log)
    young = [s for s in log.segments if s.largest_timestamp > clock.milliseconds() - 10_000]
    assert 0 < r.first_uncleanable_offset == young[0].base_offset < log.log_end_offset
    stats = c.clean_log(log)
    assert stats.end_offset == young[0].base_offset
    check_against_model(log, orig, stats.end_offset, drop_tombstones=False)
    # the active segment is never cleaned
    log2 = open_log(tmp_path / "u-0", clock)
    for _ in range(5):
        append(log2, clock, [(b"k", b"x")] * 3)
    assert log2.num_segments == 1
    stats2 = c.clean_log(log2)
    assert stats2.segments_cleaned == 0 and read_all(log2).num_rows == 15
    log.close()
    log2.close()


def test_dirty_ratio_selection_and_max_compaction_lag(tmp_path):
    clock = MockClock()
    c = cleaner(clock)
    logs = []
    for name, n in (("a-0", 10), ("b-0", 40)):
        log = open_log(tmp_path / name, clock, **{"min.cleanable.dirty.ratio": 0.9})
        for _ in range(n):
            append(log, clock, [(b"k", b"x" * 50)] * 4)
        logs.append(log)
    ra, rb = (c.cleanable_range(x) for x in logs)
    assert ra.dirty_ratio == rb.dirty_ratio == 1.0  # never cleaned: all dirty
    log, _ = c.grab_filthiest(logs)
    assert log is not None
    for _ in range(2):
        assert c.clean_dirtiest(logs) is not None
    assert c.clean_dirtiest(logs) is None  # both clean now: ratio 0
    # a little more data: below the ratio, not cleaned ...
    append(logs[1], clock, [(b"k", b"y" * 50)] * 4)
    logs[1].roll()
    r = c.cleanable_range(logs[1])
    assert 0 < r.dirty_ratio < 0.9
    assert c.clean_dirtiest(logs) is None
    # ... unless max.compaction.lag.ms passed for its first dirty record
    logs[1].close()
    lagged = open_log(tmp_path / "b-0", clock, **{"max.compaction.lag.ms": 1000,
                                                  "min.cleanable.dirty.ratio": 0.9})
    logs[1] = lagged
    clock.advance(2000)
    assert c.cleanable_range(lagged).needs_compaction_now
    stats = c.clean_dirtiest(logs)
    assert stats is not None and stats.topic == "b"
    for x in logs:
        x.close()


def test_crash_leftovers_are_repaired_on_open(tmp_path):
    """A pass that died after writing `.cleaned` files, or after renaming them `.swap`,
    is undone or completed by the loader: the log reads the same either way."""
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    orig = fill(log, clock, random.Random(5), 40, 10, tombstone_rate=0.0)
    before = triples(read_all(log))
    bound = log.active_segment.base_offset
    c = cleaner(clock)

    class Crash(Exception):
        pass

    # stop inside replace_segments, after the .swap rename: the loader completes it
    real = log.replace_segments

    def swap_then_crash(new, old):
        for seg in new:
            seg.flush()
            seg.on_become_inactive()
            seg.change_file_suffixes(".cleaned", ".swap")
        raise Crash

    log.replace_segments = swap_then_crash
    with pytest.raises(Crash):
        c.clean_log(log)
    assert any(p.name.endswith(".swap") for p in (tmp_path / "t-0").iterdir())
    log.replace_segments = real
    log.close()
    log = open_log(tmp_path / "t-0", clock)
    after = triples(read_all(log))
    first_group_end = log.segments[1].base_offset
    assert [t for t in after if t[0] >= first_group_end] == \
        [t for t in before if t[0] >= first_group_end]
    assert {k: v for _, k, v in after} == {k: v for _, k, v in before}
    # a .cleaned file alone is dropped
    (tmp_path / "t-0" / "00000000000000000000.log.cleaned").write_bytes(b"junk")
    log.close()
    log = open_log(tmp_path / "t-0", clock)
    assert triples(read_all(log)) == after
    stats = c.clean_log(log)
    check_against_model(log, orig, stats.end_offset, drop_tombstones=False)
    assert stats.end_offset == bound
    log.close()


def test_group_segments_respects_size_index_and_offset_limits():
    def info(base, nxt, size, idx=0):
        return SegmentSizes(base, nxt, size, idx, idx)

    segs = [info(0, 10, 40), info(10, 20, 40), info(20, 30, 40), info(30, 40, 10)]
    assert group_segments(segs, 100, 1000) == [[0, 1], [2, 3]]
    assert group_segments(segs, 10, 1000) == [[0], [1], [2], [3]]
    assert group_segments([info(0, 1, 1, 60), info(1, 2, 1, 60)], 100, 100) == [[0], [1]]
    big = [info(0, 2**31, 1), info(2**31, 2**31 + 1, 1)]
    assert group_segments(big, 100, 100) == [[0], [1]]
    assert group_segments([info(0, 1, 1), info(1, 2**31 + 5, 0)], 100, 100) == [[0, 1]]
    assert group_segments([], 100, 100) == []


def test_compact_delete_policy_also_applies_retention(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": "compact,delete",
                                               "retention.ms": 5000})
    for i in range(30):
        append(log, clock, [(b"k%d" % (i % 4), b"v%d" % i)] * 3)
    clock.advance(10_000)
    append(log, clock, [(b"fresh", b"v")])
    cleaner(clock).clean_log(log)
    assert log.delete_old_segments() > 0
    keys = read_all(log).column("key").to_pylist()
    assert b"fresh" in keys and log.log_start_offset > 0
    log.close()


def test_a_log_without_compact_is_refused(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": "delete"})
    c = cleaner(clock)
    with pytest.raises(Exception, match="cleanup.policy=delete"):
        c.clean_log(log)
    assert c.clean_dirtiest([log]) is None
    log.close()


def test_log_append_time_and_control_batches_survive(tmp_path):
    from seglog.logstore.records.record_codec import ControlType, encode_control_batch

    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"message.timestamp.type": "LogAppendTime"})
    for i in range(12):
        append(log, clock, [(b"a", b"%d" % i), (b"b%d" % i, b"x"), (b"a", b"%d" % (i + 1))],
               codec="none" if i % 2 else "lz4")
        if i == 5:
            log.append(encode_control_batch(ControlType.COMMIT, producer_id=7,
                                            producer_epoch=0, timestamp_ms=clock.milliseconds()))
        clock.advance(100)
    log.roll()
    before = {r["offset"]: r for r in read_all(log).to_pylist()}
    control_before = [h for seg in log.segments[:-1]
                      for h in iter_batch_headers(seg.pread(0, seg.size)) if h.is_control]
    assert len(control_before) == 1
    cleaner(clock).clean_log(log)
    rows = read_all(log).to_pylist()
    assert [(r["key"], r["value"]) for r in rows] == \
        [(b"b%d" % i, b"x") for i in range(12)] + [(b"a", b"12")]
    for r in rows:
        assert r == before[r["offset"]]  # LogAppendTime timestamps unchanged
        assert r["timestampType"] == 1
    control_after = [h for seg in log.segments[:-1]
                     for h in iter_batch_headers(seg.pread(0, seg.size)) if h.is_control]
    assert [(h.base_offset, h.crc) for h in control_after] == \
        [(h.base_offset, h.crc) for h in control_before]
    check_indexes(log)
    log.close()


def test_kafka_python_reads_cleaned_segments(tmp_path):
    """Rewritten batches (gaps, delete horizons, empty batches) are valid Kafka batches
    for another Kafka library: CRCs check and the records are the ones seglog reads."""
    from kafka.record.memory_records import MemoryRecords

    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 800})
    fill(log, clock, random.Random(3), 40, 8, tombstone_rate=0.2)
    log.roll()
    cleaner(clock).clean_log(log)
    theirs, horizons = [], 0
    for seg in log.segments:
        records = MemoryRecords(seg.pread(0, seg.size))
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            horizons += bool(batch.attributes & DELETE_HORIZON_MASK)
            theirs += [(r.offset, r.key, r.value) for r in batch]
    assert horizons > 0
    assert theirs == triples(read_all(log))
    log.close()


def test_the_log_manager_maintenance_runs_the_cleaner(tmp_path):
    from seglog.logstore.manager.log_manager import CLEANER_TASK, LogManager

    clock = MockClock()
    with LogManager([tmp_path / "logs"], clock=clock,
                    config={"log.cleaner.dedupe.buffer.size": 1 << 20}) as mgr:
        mgr.create_topic("compacted", 1, config={"cleanup.policy": "compact",
                                                 "segment.bytes": "1024"})
        mgr.create_topic("plain", 1, config={"segment.bytes": "1024"})
        for t in ("compacted", "plain"):
            for i in range(30):
                mgr.append(t, 0, encode_batches(pa.array([b"v%d" % i] * 3),
                                                pa.array([b"k%d" % (i % 4)] * 3),
                                                now_ms=clock.milliseconds()))
        mgr.checkpoint_high_watermarks()  # the cleaner stays below the high watermark
        runs = {r.name: r for r in mgr.run_maintenance()}
        assert runs[CLEANER_TASK].ok, runs[CLEANER_TASK].error
        stats = runs[CLEANER_TASK].result
        assert stats.topic == "compacted" and stats.records_retained < stats.records_read
        clock.advance(mgr.config.log_cleaner_backoff_ms)
        again = {r.name: r for r in mgr.run_maintenance()}
        assert again[CLEANER_TASK].result is None  # nothing dirty any more
        assert read_all(mgr.get_log("plain", 0)).num_rows == 90
        keys = read_all(mgr.get_log("compacted", 0)).column("key").to_pylist()
        assert len(keys) < 90 and set(keys) == {b"k0", b"k1", b"k2", b"k3"}
        cp = OffsetCheckpointFile(tmp_path / "logs" / "cleaner-offset-checkpoint").read()
        assert cp == {("compacted", 0): stats.end_offset}
        mgr.delete_topic("compacted")  # its cleaner progress goes with it
        assert OffsetCheckpointFile(tmp_path / "logs" / "cleaner-offset-checkpoint").read() == {}


def test_a_reader_in_another_process_after_a_merging_swap(tmp_path):
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 300})
    for i in range(30):
        append(log, clock, [(b"x%d" % i, b"v"), (b"same", b"v%d" % i)])
    log.roll()
    log.close()
    big = {"segment.bytes": 100_000}
    log = open_log(tmp_path / "t-0", clock, **big)
    reader = Log.open(tmp_path / "t-0", log.config, clock=clock, read_only=True)
    reader.update_high_watermark(log.log_end_offset)
    assert read_all(reader).num_rows == 60  # the reader has every segment open
    stats = cleaner(clock).clean_log(log)
    assert stats.groups == 1 and stats.segments_cleaned > 1  # one merged group
    try:
        for start in (0, 10, 30):
            assert triples(read_all(reader, start)) == triples(read_all(log, start))
    finally:
        reader.close()
        log.close()


def test_legacy_messages_are_kept_and_v2_batches_after_them_still_compacted(tmp_path):
    """A Kafka data dir may start with magic 0/1 message sets: the cleaner copies them
    unchanged (and takes their keys into the map) and compacts the v2 batches around."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    clock = MockClock()
    part = tmp_path / "t-0"
    part.mkdir()
    legacy = bytearray()
    for i in range(4):
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        # (a legacy message under 61 bytes at the end of a file is cut by recovery:
        # the v2 header scan asks for 61 bytes first; reported, so the values are long)
        builder.append(i, timestamp=clock.milliseconds(), key=b"k%d" % (i % 2),
                       value=b"legacy-%d-" % i + b"." * 64)
        legacy += builder.build()  # one message set per offset, offsets 0..3
    (part / "00000000000000000000.log").write_bytes(bytes(legacy))
    log = Log.open(part, LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": 100_000}), clock=clock,
        had_clean_shutdown=False)
    assert log.log_end_offset == 4
    for i in range(6):
        append(log, clock, [(b"k%d" % (i % 3), b"new-%d" % i), (b"x", b"%d" % i)],
               codec="gzip" if i % 2 else "none")
    log.roll()
    before = {r["offset"]: (r["key"], r["value"]) for r in read_all(log).to_pylist()}
    stats = cleaner(clock).clean_log(log)
    got = {r["offset"]: (r["key"], r["value"]) for r in read_all(log).to_pylist()}
    legacy_kept = {o: kv for o, kv in got.items() if o < 4}
    assert legacy_kept == {o: before[o] for o in range(4)}  # copied, not compacted
    v2 = {o: kv for o, kv in got.items() if o >= 4}
    assert v2 == {10: (b"k0", b"new-3"), 12: (b"k1", b"new-4"), 14: (b"k2", b"new-5"),
                  15: (b"x", b"5")}
    assert stats.records_retained == len(got)
    check_indexes(log)
    log.close()


def test_a_fresh_cleaner_knows_no_delete_horizon_until_a_pass(tmp_path):
    """As Kafka's latestDeleteHorizon: a restarted cleaner does not scan logs for passed
    horizons; the next pass (forced here, or triggered by the ratio) drops the tombstones."""
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock)
    orig = fill(log, clock, random.Random(11), 40, 10, tombstone_rate=0.3)
    first = append(log, clock, [(b"key-1", None), (b"key-2", None)])
    orig.update({first: (b"key-1", None), first + 1: (b"key-2", None)})
    log.roll()
    stats = cleaner(clock).clean_log(log)
    assert stats.pending_delete_horizon is not None
    bound = stats.end_offset
    clock.advance(5000)  # past delete.retention.ms
    fresh = cleaner(clock)
    assert fresh.clean_dirtiest([log]) is None
    check_against_model(log, orig, bound, drop_tombstones=False)
    stats = fresh.clean_log(log)
    assert stats.tombstones_removed > 0
    check_against_model(log, orig, bound, drop_tombstones=True)
    log.close()


def _flip_byte_of(path: Path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at + len(needle) - 1] ^= 0x01
    path.write_bytes(bytes(data))


def _files(dir_: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir_.iterdir())}


@pytest.mark.parametrize("codec", ["none", "lz4"])
@pytest.mark.parametrize("fate", ["rewritten", "copied"])
def test_a_corrupt_batch_stops_the_pass_and_changes_nothing(tmp_path, codec, fate):
    """A bit flip in a record value must not be given a fresh CRC by a rewrite, nor be
    copied into a cleaned segment: the pass fails naming the file, and the log's files
    are as they were (no .cleaned left, checkpoint not moved)."""
    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1 << 20})
    append(log, clock, [(b"k%d" % i, b"first-value-%d" % i) for i in range(5)], "none")
    append(log, clock, [(b"k0", b"second-value-0")], "none")  # batch 1 is rewritten
    append(log, clock, [(b"u%d" % i, b"only-value-%d" % i) for i in range(5)], codec)
    log.roll()
    log.flush()
    log.close()
    seg_log = tmp_path / "t-0" / "00000000000000000000.log"
    # (a literal in the lz4 frame too: its first occurrence cannot be a back-reference)
    _flip_byte_of(seg_log, b"first-value-3" if fate == "rewritten" else b"only-value")
    before = _files(tmp_path / "t-0")
    log = open_log(tmp_path / "t-0", clock)
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as err:
        cleaner(clock).clean_log(log)
    assert "00000000000000000000" in str(err.value)
    log.close()
    assert _files(tmp_path / "t-0") == before


def test_a_batch_whose_record_count_lies_is_refused_with_its_offsets(tmp_path):
    """A CRC-valid batch declaring one record more than its bytes hold: the map pass
    stops with an error naming the segment and the batch's offsets."""
    import struct

    from seglog.logstore.records.record_format import crc32c

    clock = MockClock()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1 << 20})
    append(log, clock, [(b"k%d" % i, b"v%d" % i) for i in range(3)])
    append(log, clock, [(b"k%d" % i, b"w%d" % i) for i in range(3)])
    log.roll()
    log.close()
    seg_log = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg_log.read_bytes())
    struct.pack_into(">i", data, 57, 4)  # the first batch's records count: 3 -> 4
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:struct.unpack_from(
        ">i", data, 8)[0] + 12]))
    seg_log.write_bytes(bytes(data))
    log = open_log(tmp_path / "t-0", clock)
    with pytest.raises(CorruptRecordError, match=r"offsets 0\.\.2 .*record count") as err:
        cleaner(clock).clean_log(log)
    assert str(seg_log) in str(err.value)
    log.close()


def test_records_too_short_for_a_headers_count_are_refused_not_overrun(tmp_path):
    """2,000 six-byte records (no headers count): more than a batch of well-formed
    records that size could hold, so more than the cleaner's scratch rows. The pass must
    refuse the batch as malformed, never write past its scratch."""
    import struct

    from seglog.logstore.records.record_format import crc32c

    clock = MockClock()
    n = 2000
    # length 5, attributes, timestamp delta 0, offset delta 0, null key, null value
    records = bytes([0x0A, 0, 0, 0, 0x01, 0x01]) * n
    ts = clock.milliseconds()
    body = struct.pack(">hiqqqhii", 0, n - 1, ts, ts, -1, -1, -1, n) + records
    batch = (struct.pack(">qiib", 0, 9 + len(body), 0, 2) + struct.pack(">I", crc32c(body))
             + body)
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": "delete",
                                                "segment.bytes": 1 << 20})
    log.append(bytearray(batch))  # a delete-policy topic does not look inside records
    log.roll()
    log.close()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1 << 20})
    with pytest.raises(CorruptRecordError, match=r"offsets 0\.\.1999 .*malformed"):
        cleaner(clock).clean_log(log)
    log.close()


@pytest.mark.parametrize("field", ["offset delta", "length"])
def test_an_overlong_varint_is_malformed_not_copied_past_the_buffer(tmp_path, field):
    """Kafka's record varints other than the timestamp delta take at most 5 bytes. A
    tombstone (its batch is stamped with a delete horizon, so rewritten) whose offset
    delta or length is a 6-byte encoding must fail the pass as malformed; read past 5
    bytes it once sent the rewrite copying the whole chunk past its output buffer."""
    import struct

    from seglog.logstore.records.record_format import crc32c

    clock = MockClock()
    overlong_zero = bytes([0x80] * 5 + [0x00])
    if field == "offset delta":
        record = bytes([0x18, 0, 0]) + overlong_zero + bytes([0x02, ord("k"), 0x01, 0])
    else:  # the length, 12, as 0x98 0x80 0x80 0x80 0x80 0x00, then 12 bytes
        record = bytes([0x98] + [0x80] * 4 + [0x00]) + bytes([0, 0, 0, 0x02, ord("k"),
                                                               0x01, 0]) + bytes(5)
    ts = clock.milliseconds()
    body = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1) + record
    batch = (struct.pack(">qiib", 0, 9 + len(body), 0, 2) + struct.pack(">I", crc32c(body))
             + body)
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": "delete",
                                                "segment.bytes": 1 << 20})
    log.append(bytearray(batch))
    log.roll()
    log.close()
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1 << 20})
    with pytest.raises(CorruptRecordError, match="malformed"):
        cleaner(clock).clean_log(log)
    log.close()


def _raw_v2_batch(base: int, records: bytes, count: int, last_delta: int, ts: int) -> bytes:
    import struct

    from seglog.logstore.records.record_format import crc32c

    body = struct.pack(">hiqqqhii", 0, last_delta, ts, ts, -1, -1, -1, count) + records
    return (struct.pack(">qiib", base, 9 + len(body), 0, 2) + struct.pack(">I", crc32c(body))
            + body)


def _compacted_log_with(tmp_path: Path, clock: MockClock, raw: bytes, prefix: bytes = b""):
    """A compacted log whose first segment holds ``prefix`` (written as a file) then the
    batch ``raw`` (appended through a delete-policy Log, which does not look inside)."""
    part = tmp_path / "t-0"
    part.mkdir()
    if prefix:
        (part / "00000000000000000000.log").write_bytes(prefix)
    log = open_log(part, clock, **{"cleanup.policy": "delete", "segment.bytes": 1 << 20})
    log.append(bytearray(raw))
    log.roll()
    log.close()
    return open_log(part, clock, **{"segment.bytes": 1 << 20})


def test_a_record_offset_outside_its_batch_is_refused_on_the_legacy_path(tmp_path):
    """After a legacy message the chunk is decoded in Python; a v2 record whose offset
    delta runs past its batch's last offset must be a CorruptRecordError, not a numpy
    IndexError."""
    import struct
    import zlib

    clock = MockClock()
    ts = clock.milliseconds()
    body = (bytes([1, 0]) + struct.pack(">q", ts) + struct.pack(">i", 1) + b"k"
            + struct.pack(">i", 70) + b"x" * 70)
    legacy = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    rec = bytes([0, 0, 10, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])  # offset delta 5
    log = _compacted_log_with(tmp_path, clock, _raw_v2_batch(
        1, bytes([2 * len(rec)]) + rec, 1, 0, ts), prefix=legacy)
    with pytest.raises(CorruptRecordError, match="outside the offsets of its batch"):
        cleaner(clock).clean_log(log)
    log.close()


def test_a_huge_declared_record_count_is_malformed_without_a_huge_allocation(tmp_path):
    """A CRC-valid batch declaring 2**31 - 1 records in the clean section (below the
    cleaner's checkpoint, so only the rewrite pass reads it): the output buffer is sized
    by what the batch's bytes can hold, not by its count (once 32 GiB)."""
    clock = MockClock()
    ts = clock.milliseconds()
    rec = bytes([14, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])
    log = _compacted_log_with(tmp_path, clock, _raw_v2_batch(0, rec, 2**31 - 1, 2**31 - 2, ts))
    dirty = log.log_end_offset
    append(log, clock, [(b"k", b"later")])
    log.roll()
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("t", 0): dirty})
    c = cleaner(clock)
    assert c.cleanable_range(log).first_dirty_offset == dirty
    with pytest.raises(CorruptRecordError, match="malformed"):
        c.clean_log(log)
    assert c._buffers().out.nbytes < 16 << 20  # the chunk's size, give or take
    log.close()


@pytest.mark.parametrize("record", [
    bytes([0, 0, 0, 0x03, 0x02, ord("v"), 0]),       # key length -2
    bytes([0, 0, 0, 0x02, ord("k"), 0x14, ord("v"), 0]),  # value length 10, 1 byte there
], ids=["key length -2", "value past the record"])
def test_records_decode_batches_would_refuse_are_refused_by_the_cleaner(tmp_path, record):
    clock = MockClock()
    log = _compacted_log_with(tmp_path, clock, _raw_v2_batch(
        0, bytes([2 * len(record)]) + record, 1, 0, clock.milliseconds()))
    with pytest.raises(CorruptRecordError, match="malformed"):
        cleaner(clock).clean_log(log)
    log.close()
