"""Replay of a sink micro-batch decided from the data, not from the ledger alone; and the
commit never truncating what it cannot prove is its own unpublished attempt.

The crash states are real: the commit runs in a forked child that SIGKILLs itself at a
named step (``SEGLOG_CRASH_AT``), so whatever it wrote is on disk as it left it."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from power_cut import lose_unflushed_tail

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.checkpoint_file import OFFSETS, CheckpointFile
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_commit import CRASH_ENV, CRASH_STEPS, SinkLedger, commit
from seglog.streaming.sink_ledger import LedgerState
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import producer_id_of

TOPIC = "out"
SINK = "7d2e-replay-query"
PARTITIONS = 4
DAMAGES = ("intact", "garbled", "truncated", "emptied", "deleted")
HW_FILE = "replication-offset-checkpoint"


def options(dirs: list[Path]) -> SinkOptions:
    return SinkOptions.parse({"logDirs": ",".join(map(str, dirs)), "topic": TOPIC,
                              "numPartitions": str(PARTITIONS), "compression.type": "lz4",
                              "maxBatchBytes": "2048"})


def rows(batch: int, parts: tuple[int, ...], n: int = 60) -> pa.RecordBatch:
    """Micro-batch ``batch``: ``n`` rows spread over the partitions ``parts``."""
    return pa.record_batch({
        "value": pa.array([f"b{batch}-r{i}-{'x' * (i % 50)}".encode() for i in range(n)]),
        "partition": pa.array([parts[i % len(parts)] for i in range(n)], pa.int32()),
    })


def stage(opts: SinkOptions, batch: int, parts: tuple[int, ...], *, tasks: int = 2,
          attempt: int = 0):
    data = rows(batch, parts)
    cols = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    step = -(-data.num_rows // tasks)
    return [stage_rows(opts, cols, [data.slice(t * step, step)], SINK, batch, t, attempt)
            for t in range(tasks)]


def expected(*batches: tuple[int, tuple[int, ...]]) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for b, parts in batches:
        data = rows(b, parts)
        out.update(zip(data.column("partition").to_pylist(), data.column("value").to_pylist(),
                       strict=True))
    return out


def visible(dirs: list[Path]) -> collections.Counter:
    """Every (partition, value) a reader in another process can see."""
    out: collections.Counter = collections.Counter()
    with LogManager(dirs, read_only=True) as mgr:
        if TOPIC not in mgr.topics():
            return out
        hws = mgr.high_watermarks()
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            for chunk in log.read_chunks(log.log_start_offset, hws[(TOPIC, p)]):
                out.update((p, v) for v in decode_batches(chunk).column("value").to_pylist())
    return out


def crash_commit(staged, batch: int, opts: SinkOptions, step: str) -> None:
    """Run the commit in a forked child that SIGKILLs itself at ``step``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.environ[CRASH_ENV] = f"{step}@{batch}"
            commit(staged, batch, opts)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def damage_ledger(log_dir: Path, how: str) -> None:
    path = SinkLedger(log_dir, SINK).path
    if how == "intact" or not path.exists():
        return
    raw = path.read_bytes()
    if how == "garbled":
        path.write_bytes(raw.replace(b"[", b"{", 2))
    elif how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "deleted":
        path.unlink()


def segment_bytes(dirs: list[Path]) -> dict[Path, bytes]:
    return {p: p.read_bytes() for d in dirs for p in sorted(d.glob(f"{TOPIC}-*/*.log"))}


# ---------------------------------------------------------------------------- replay
@pytest.mark.parametrize("step", CRASH_STEPS)
@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(damage=st.sampled_from(DAMAGES),
       first=st.sets(st.integers(0, PARTITIONS - 1), min_size=1).map(lambda s: tuple(sorted(s))),
       replayed=st.sets(st.integers(0, PARTITIONS - 1), min_size=1).map(
           lambda s: tuple(sorted(s))),
       two_dirs=st.booleans(), power_cut=st.sampled_from((None, 0.0, 0.5)))
def test_crash_then_damaged_ledger_then_replay_is_exactly_once(
        step: str, damage: str, first: tuple[int, ...], replayed: tuple[int, ...],
        two_dirs: bool, power_cut: float | None) -> None:
    """Every crash step x a few (ledger damage, partitions touched, log dirs, power cut)
    drawn each: batch 0 goes to ``first``; the commit of batch 1 (to ``replayed``) is
    killed at ``step``: batch 1 is then published fully, in one dir of two, or not at all;
    a power cut may take what lies above the high watermarks (``power_cut``: where between
    the high watermark and the log end the cut falls; junk follows); the ledger is damaged;
    Spark replays batch 1 (another task split). Readers see every row of batches 0, 1 and
    2 exactly once, and the ledger is whole again."""
    root = Path(tempfile.mkdtemp(prefix="seglog-replay-"))
    try:
        dirs = [root / "a", root / "b"] if two_dirs else [root / "a"]
        opts = options(dirs)
        commit(stage(opts, 0, first), 0, opts)
        crash_commit(stage(opts, 1, replayed), 1, opts, step)
        if power_cut is not None:
            for d in dirs:
                hws = dict(CheckpointFile(d / HW_FILE, OFFSETS).read())
                for (_, p), hw in hws.items():
                    lose_unflushed_tail(d / f"{TOPIC}-{p}", hw, power_cut, junk=b"\x07" * 9)
        for d in dirs:
            damage_ledger(d, damage)
        commit(stage(opts, 1, replayed, tasks=3, attempt=1), 1, opts)
        assert visible(dirs) == expected((0, first), (1, replayed))
        commit(stage(opts, 2, replayed), 2, opts)
        assert visible(dirs) == expected((0, first), (1, replayed), (2, replayed))
        entries = {}
        for d in dirs:  # rebuilt by the next commit publishing to the dir
            ledger = SinkLedger(d, SINK).read()
            if any((d / f"{TOPIC}-{p}").is_dir() for p in replayed):
                assert ledger.state is LedgerState.VALID
            entries.update(ledger.entries)
        assert {tp: e.batch_id for tp, e in entries.items() if e.batch_id == 2} == {
            (TOPIC, p): 2 for p in replayed}
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize("damage", DAMAGES[1:])
def test_damaged_ledger_before_replaying_a_published_batch(tmp_path: Path, damage: str,
                                                           caplog) -> None:
    """The issue's case: batch 1 was published, Spark did not record it, the ledger is
    damaged: the replay must not publish batch 1 again."""
    opts = options([tmp_path])
    commit(stage(opts, 0, (0, 1, 2, 3)), 0, opts)
    commit(stage(opts, 1, (0, 1, 2, 3)), 1, opts)
    damage_ledger(tmp_path, damage)
    replay = commit(stage(opts, 1, (0, 1, 2, 3), tasks=3, attempt=1), 1, opts)
    assert replay.published == () and len(replay.skipped) == 4
    assert visible([tmp_path]) == expected((0, (0, 1, 2, 3)), (1, (0, 1, 2, 3)))
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(SinkLedger(tmp_path, SINK).path) in warned
    assert SinkLedger(tmp_path, SINK).read().valid  # rebuilt from the data


def test_a_replay_routed_elsewhere_is_skipped_by_its_dir(tmp_path: Path) -> None:
    """A replay whose rows land in other partitions than the first attempt's (a
    non-deterministic query): the dir already holds the micro-batch, so none of it is
    published again."""
    opts = options([tmp_path])
    commit(stage(opts, 0, (0, 3)), 0, opts)
    commit(stage(opts, 1, (0,)), 1, opts)
    replay = commit(stage(opts, 1, (1, 2), attempt=1), 1, opts)
    assert replay.published == () and replay.skipped == ((TOPIC, 1), (TOPIC, 2))
    # with the ledger lost, a partition the replay publishes to is the witness
    SinkLedger(tmp_path, SINK).path.unlink()
    replay = commit(stage(opts, 1, (0, 2), attempt=2), 1, opts)
    assert replay.published == ()
    assert visible([tmp_path]) == expected((0, (0, 3)), (1, (0,)))


def test_the_ledger_bounds_the_scan(tmp_path: Path) -> None:
    """Another producer's batches, then the sink's: with the ledger, the decision reads
    the headers at the ledger's offset; without it, the segment's headers up to there."""
    from seglog.streaming.sink_replay import newest_sink_batch

    opts = SinkOptions.parse({"path": str(tmp_path), "topic": TOPIC, "numPartitions": "1"})
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic(TOPIC, 1)
        for i in range(300):
            mgr.append(TOPIC, 0, encode_batches(pa.array([f"other-{i}".encode() * 20])))
    commit(stage(opts, 0, (0,)), 0, opts)
    pid = producer_id_of(SINK)
    hint = SinkLedger(tmp_path, SINK).read().entries[(TOPIC, 0)]
    with LogManager([tmp_path], read_only=True) as mgr:
        mgr.high_watermarks()
        log = mgr.get_log(TOPIC, 0)
        with_hint = newest_sink_batch(log, pid, hint)
        without = newest_sink_batch(log, pid, None)
        never = newest_sink_batch(log, pid + 1, None)  # a sink that never wrote here
    assert (with_hint.batch_id, with_hint.source) == (0, "ledger")
    assert (without.batch_id, without.source) == (0, "scan")
    assert with_hint.end == without.end == log.high_watermark == 360
    assert with_hint.batches_read <= 2 and without.batches_read >= 300
    assert never.batch_id is None and never.batches_read >= 300


# ---------------------------------------------------------------------------- truncation
def _lower_high_watermark(log_dir: Path, tp: tuple[str, int], value: int) -> int:
    f = CheckpointFile(log_dir / HW_FILE, OFFSETS)
    hws = dict(f.read())
    old = hws[tp]
    hws[tp] = value
    f.write(hws.items())
    return old


@pytest.mark.parametrize(("lowered", "found"), [
    (40, "offsets 30..59 hold a batch that straddles the high watermark"),  # 240 -> 40
    (120, "offsets 120..149 hold this sink's micro-batch 2, older than 4"),
])
def test_a_lowered_high_watermark_stops_the_commit_and_loses_nothing(
        tmp_path: Path, lowered: int, found: str) -> None:
    """A digit dropped from the high-watermark checkpoint (240 -> 40), or a value that
    went back to an older batch's start, puts published data above it: the commit must
    refuse, name what it found, and change nothing."""
    opts = options([tmp_path])
    batches = [(b, (0,)) for b in range(4)]  # 60 rows each: batch b at [60b, 60b + 60)
    for b, parts in batches:
        commit(stage(opts, b, parts), b, opts)
    tp = (TOPIC, 0)
    with LogManager([tmp_path], read_only=True) as mgr:
        true_hw = mgr.high_watermarks()[tp]
    assert true_hw == 240
    _lower_high_watermark(tmp_path, tp, lowered)
    before = segment_bytes([tmp_path])
    staged = stage(opts, 4, (0, 1))
    with pytest.raises(SinkCommitError) as err:
        commit(staged, 4, opts)
    msg = str(err.value)
    for part in (f"log dir {tmp_path}, partition {TOPIC}-0", f"offsets {lowered}..239 lie "
                 f"above the high watermark {lowered}", found, "changed nothing"):
        assert part in msg, msg
    assert segment_bytes([tmp_path]) == before  # nothing truncated, nothing appended
    # with the checkpoint restored, the same staged batch goes through exactly once
    _lower_high_watermark(tmp_path, tp, true_hw)
    commit(staged, 4, opts)
    assert visible([tmp_path]) == expected(*batches, (4, (0, 1)))


def test_another_writers_tail_is_refused(tmp_path: Path) -> None:
    """Offsets above the high watermark written by another producer (an append whose
    process died before publishing): not the sink's to remove."""
    opts = options([tmp_path])
    commit(stage(opts, 0, (0,)), 0, opts)
    tp = (TOPIC, 0)
    with LogManager([tmp_path]) as mgr:
        hw = mgr.get_log(*tp).high_watermark
        mgr.append(TOPIC, 0, encode_batches(pa.array([b"someone else"]), producer_id=42,
                                            producer_epoch=0, base_sequence=0))
    _lower_high_watermark(tmp_path, tp, hw)  # as if it died before its checkpoint
    before = segment_bytes([tmp_path])
    with pytest.raises(SinkCommitError, match=f"{TOPIC}-0: .* producerId 42, not this sink's"):
        commit(stage(opts, 1, (0,)), 1, opts)
    assert segment_bytes([tmp_path]) == before


def test_the_sinks_own_crashed_attempt_is_still_truncated(tmp_path: Path, caplog) -> None:
    opts = options([tmp_path])
    commit(stage(opts, 0, (0, 1)), 0, opts)
    crash_commit(stage(opts, 1, (0, 1)), 1, opts, "after-ledger")
    with LogManager([tmp_path]) as mgr:
        log = mgr.get_log(TOPIC, 0)
        assert log.log_end_offset > log.high_watermark  # the attempt's tail is there
    commit(stage(opts, 1, (0, 1), attempt=1), 1, opts)
    assert visible([tmp_path]) == expected((0, (0, 1)), (1, (0, 1)))
    assert any("unpublished attempt at batch 1" in r.getMessage() for r in caplog.records)
