from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_batches import BASE_TS, batch

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.util.clock import MockClock
from seglog.logstore.util.delayed_deletion import DelayedDeleter

ONE = len(batch(3))
CFG_PROPS = {
    "segment.bytes": str(3 * ONE),
    "index.interval.bytes": "1",
    "message.timestamp.after.max.ms": str(2**62),
}
CFG = LogConfig.from_properties(CFG_PROPS)


def _write(dir_: Path, n_batches: int, cfg: LogConfig = CFG) -> Log:
    log = Log.open(dir_, cfg, clock=MockClock(BASE_TS))
    for i in range(n_batches):
        log.append(batch(3, ts=BASE_TS + i, tag=i))
    return log


def _offsets(log: Log) -> list[int]:
    out = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        for h in iter_batch_headers(chunk):
            out.extend(range(h.base_offset, h.last_offset + 1))
    return out


def _crash(log: Log, deleter: DelayedDeleter | None = None) -> None:
    """Drop a writer without closing it: files stay untrimmed, nothing more is written.
    A dead process's descriptors are gone too: those of the segments it had waiting for
    deletion in ``deleter``, when the log was opened with one."""
    for seg in log.segments:
        seg.close_handlers()
    if deleter is not None:
        deleter.release_handles(log.dir)


def test_clean_open_reads_no_segment_data(tmp_path):
    d = tmp_path / "t-0"
    _write(d, 9).close()
    # Junk in the middle of an old segment: a clean open must not notice it.
    with open(d / "00000000000000000000.log", "r+b") as f:
        f.seek(ONE + 70)
        f.write(b"\xff\xff")
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    assert (log.log_end_offset, log.num_segments, log.recovery_point) == (27, 3, 27)
    log.close()


def test_unclean_open_recovers_from_the_recovery_point(tmp_path):
    d = tmp_path / "t-0"
    log = _write(d, 9)
    log.flush(9)  # segments [0,9) fsynced
    _crash(log)
    with open(d / "00000000000000000009.log", "r+b") as f:  # second segment, 2nd batch
        f.seek(ONE + 70)
        f.write(b"\xff")
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), recovery_point=9, had_clean_shutdown=False)
    assert log.log_end_offset == 12
    assert _offsets(log) == list(range(12))
    assert [s.base_offset for s in log.segments] == [0, 9]
    assert sorted(os.listdir(d)) == sorted(
        [f"{b:020d}{ext}" for b in (0, 9) for ext in (".index", ".log", ".timeindex")]
        + [f"{18:020d}{ext}.deleted" for ext in (".index", ".log", ".timeindex")]
        # the producer snapshot written when segment 9 was rolled; 18's is past the end
        + [f"{9:020d}.snapshot"]
    )
    assert log.append(batch(1)).first_offset == 12
    log.close()


def test_recovery_cuts_a_partial_tail_and_rebuilds_untrimmed_indexes(tmp_path):
    d = tmp_path / "t-0"
    log = _write(d, 4)
    entries = [s.offset_index.all_entries() for s in log.segments]
    _crash(log)
    with open(d / "00000000000000000009.log", "ab") as f:
        f.write(batch(3)[:40])
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), had_clean_shutdown=False)
    assert log.log_end_offset == 12
    assert [s.offset_index.all_entries() for s in log.segments] == entries
    log.close()
    assert os.path.getsize(d / "00000000000000000009.log") == ONE


def test_missing_indexes_and_orphans(tmp_path):
    d = tmp_path / "t-0"
    log = _write(d, 7)
    before = [s.offset_index.all_entries() for s in log.segments]
    log.close()
    os.unlink(d / "00000000000000000000.index")
    os.unlink(d / "00000000000000000009.timeindex")
    (d / "00000000000000000100.index").write_bytes(b"\0" * 8)  # orphan
    (d / "00000000000000000200.timeindex").write_bytes(b"")
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    assert [s.offset_index.all_entries() for s in log.segments] == before
    assert (d / "00000000000000000009.timeindex").exists()
    assert not (d / "00000000000000000100.index").exists()
    assert not (d / "00000000000000000200.timeindex").exists()
    assert _offsets(log) == list(range(21))
    log.close()


def test_temporary_files_are_dropped(tmp_path):
    d = tmp_path / "t-0"
    _write(d, 3).close()
    for name in (
        "00000000000000000003.log.deleted",
        "00000000000000000000.log.cleaned",
        "00000000000000000000.index.cleaned",
    ):
        (d / name).write_bytes(b"junk")
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    assert not any(n.endswith((".deleted", ".cleaned")) for n in os.listdir(d))
    assert _offsets(log) == list(range(9))
    log.close()


def test_swap_files_are_completed(tmp_path):
    d = tmp_path / "t-0"
    _write(d, 9).close()  # segments 0, 9, 18
    # A compaction of [0, 18) into one segment crashed after the .swap rename.
    swap = LogSegment.open(d, 0, file_suffix=".swap", max_index_size=4096)
    swap.append(batch(1, base_offset=4))
    swap.append(batch(1, base_offset=16))
    swap.close()
    # read as a compacted log: a non-compacted one may not have the swap's gaps
    compacted = LogConfig.from_properties({**CFG_PROPS, "cleanup.policy": "compact"})
    log = Log.open(d, compacted, clock=MockClock(BASE_TS), had_clean_shutdown=False)
    assert [s.base_offset for s in log.segments] == [0, 18]
    assert _offsets(log) == [4, 16, *range(18, 27)]
    assert not any(n.endswith(".swap") for n in os.listdir(d))
    log.close()


def test_swap_group_with_leftover_cleaned_files_is_discarded(tmp_path):
    d = tmp_path / "t-0"
    _write(d, 9).close()
    for suffix in (".cleaned", ".swap"):
        seg = LogSegment.open(
            d, 9 if suffix == ".swap" else 0, file_suffix=suffix, max_index_size=4096
        )
        seg.append(batch(1, base_offset=seg.base_offset))
        seg.close()
    log = Log.open(d, CFG, clock=MockClock(BASE_TS), had_clean_shutdown=False)
    assert _offsets(log) == list(range(27))  # the unfinished compaction left no trace
    log.close()


# -- a property: Log against a list model, crashes lose only the unflushed tail --------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("crash"), st.integers(0, 200)),
    ),
    max_size=25,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=_ops)
def test_log_matches_a_list_model(tmp_path_factory, ops):
    d = tmp_path_factory.mktemp("model") / "t-0"
    cfg = LogConfig.from_properties(
        {
            "segment.bytes": str(2 * ONE),
            "index.interval.bytes": "50",
            "message.timestamp.after.max.ms": str(2**62),
        }
    )
    clock = MockClock(BASE_TS)
    deleter = DelayedDeleter(clock)
    log = Log.open(d, cfg, clock=clock, deleter=deleter)
    model: list[int] = []  # batch sizes (records) in order; offsets follow
    synced_len: dict[str, int] = {}  # file -> bytes known durable (at the last fsync)
    real_fsync = os.fsync

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".log"):
            synced_len[os.path.basename(path)] = os.fstat(fd).st_size
        real_fsync(fd)

    os.fsync = fsync
    try:
        for op, arg in ops:
            if op == "append":
                log.append(batch(arg, ts=clock.milliseconds()))
                model.append(arg)
            elif op == "flush":
                log.flush()
            elif op == "roll":
                log.roll()
            elif op == "truncate":
                ends = [sum(model[: i + 1]) for i in range(len(model))]
                keep = [i for i, e in enumerate(ends) if e <= arg]
                log.truncate_to(arg)
                model = model[: len(keep)]
            elif op == "reopen":
                log.close()
                log = Log.open(d, cfg, clock=clock, deleter=deleter)
            elif op == "crash":
                rp = log.recovery_point
                flushed_records = rp
                _crash(log, deleter)
                # The OS loses what was never fsynced: cut each .log to its synced length
                # (a file never fsynced keeps an arbitrary prefix: here arg bytes of it).
                for name in os.listdir(d):
                    if name.endswith(".log"):
                        keep = synced_len.get(name, 0)
                        size = os.path.getsize(d / name)
                        os.truncate(d / name, min(size, max(keep, arg if keep == 0 else keep)))
                log = Log.open(
                    d,
                    cfg,
                    clock=clock,
                    recovery_point=rp,
                    had_clean_shutdown=False,
                    deleter=deleter,
                )
                assert log.log_end_offset >= flushed_records
                kept, total = [], 0
                for n in model:
                    if total + n > log.log_end_offset:
                        break
                    kept.append(n)
                    total += n
                model = kept
            assert log.log_end_offset == sum(model)
            assert _offsets(log) == list(range(sum(model)))
    finally:
        os.fsync = real_fsync
        log.close()


def test_read_only_reader_in_another_process(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig.from_properties(
        {
            "segment.bytes": str(4 * ONE),
            "retention.bytes": str(12 * ONE),
            "file.delete.delay.ms": "0",
            "index.interval.bytes": "1",
            "message.timestamp.after.max.ms": str(2**62),
        }
    )
    writer = Log.open(d, cfg, clock=MockClock(BASE_TS))
    writer.append(batch(3))
    writer.flush()
    script = textwrap.dedent(f"""
        import sys, time
        from seglog.logstore.records.record_format import iter_batch_headers, verify_crc
        from seglog.logstore.util.clock import MockClock
        from seglog.logstore.config.config import LogConfig
        from seglog.logstore.errors import OffsetOutOfRangeError
        from seglog.logstore.log.log import Log
        cfg = LogConfig.from_properties({{"segment.bytes": "{4 * ONE}"}})
        log = Log.open({str(d)!r}, cfg, clock=MockClock(), read_only=True)
        seen, nxt = 0, 0
        for line in sys.stdin:
            hw = int(line)
            if hw < 0:
                break
            log.update_high_watermark(hw)
            while nxt < hw:
                try:
                    data = log.read(nxt, max_bytes=1 << 20)
                except OffsetOutOfRangeError:
                    nxt = log.log_start_offset  # retention overtook us
                    continue
                expect = nxt
                for h in iter_batch_headers(data.records):
                    assert h.base_offset == expect, (h.base_offset, expect)
                    verify_crc(data.records, h)
                    expect = h.last_offset + 1
                    seen += h.last_offset - h.base_offset + 1
                assert expect == data.next_offset
                nxt = data.next_offset
            print(nxt, flush=True)
        print("done", seen, flush=True)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        for _round in range(30):
            for _ in range(3):
                writer.append(batch(3))
            writer.delete_old_segments()
            writer.flush()
            proc.stdin.write(f"{writer.high_watermark}\n")
            proc.stdin.flush()
            got = int(proc.stdout.readline())
            assert got == writer.high_watermark
        proc.stdin.write("-1\n")
        proc.stdin.flush()
        last = proc.stdout.readline().split()
        assert last[0] == "done" and int(last[1]) > 0
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        writer.close()
    assert writer.num_segments < 10  # retention did run under the reader


def test_loaded_segments_open_their_indexes_lazily(tmp_path):
    d = tmp_path / "t-0"
    _write(d, 9).close()
    log = Log.open(d, CFG, clock=MockClock(BASE_TS))
    fds = {
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    }
    old_indexes = {str(d / f"{b:020d}{ext}") for b in (0, 9) for ext in (".index", ".timeindex")}
    assert not fds & old_indexes  # only the active segment's indexes are open
    assert log.read(4).first_offset == 3  # a lookup opens them on demand
    log.close()


def test_recovery_keeps_legacy_messages_shorter_than_a_v2_header(tmp_path):
    """A magic-1 message of 37 bytes at the end of a segment is whole, not a partial v2
    batch: recovery must keep all of them."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    part = tmp_path / "t-0"
    part.mkdir()
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(4):
        b.append(i, timestamp=BASE_TS + i, key=None, value=b"v%d" % i)
    data = bytes(b.build())
    sizes = [h.size for h in iter_batch_headers(data)]
    assert len(sizes) == 4 and max(sizes) < 61  # the case under test
    (part / "00000000000000000000.log").write_bytes(data)
    log = Log.open(part, LogConfig.from_properties(), clock=MockClock(), had_clean_shutdown=False)
    try:
        assert log.log_end_offset == 4
        assert (part / "00000000000000000000.log").stat().st_size == len(data)
    finally:
        log.close()


def test_read_only_reader_without_index_files_reads_everything(tmp_path):
    """A reader may not rebuild indexes: missing ones read as empty (scan from the start)."""
    part = tmp_path / "t-0"
    part.mkdir()
    data = batch(5, base_offset=0) + batch(5, base_offset=5)
    (part / "00000000000000000000.log").write_bytes(data)
    reader = Log.open(part, LogConfig.from_properties(), clock=MockClock(), read_only=True)
    try:
        reader.update_high_watermark(10)
        chunks = b"".join(bytes(c) for c in reader.read_chunks(5, 10))
        assert [h.base_offset for h in iter_batch_headers(chunks)] == [5]
        assert reader.offset_for_timestamp(0) == 0
        assert not (part / "00000000000000000000.index").exists()  # nothing written
    finally:
        reader.close()
