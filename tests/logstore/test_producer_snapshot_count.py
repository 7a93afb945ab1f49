"""How many producer ``.snapshot`` files a partition keeps: one per segment base (the
roll's) plus the newest, however often a writer pauses (the local sink pauses after every
micro-batch) and whatever strays a crash left (the loader deletes them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.log.producer_state import list_snapshot_offsets, snapshot_file
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import (
    ControlType,
    encode_batches,
    encode_control_batch,
)
from seglog.logstore.util.clock import MockClock

BASE_TS = 1_700_000_000_000

BIG = LogConfig.from_properties({})
SMALL = LogConfig.from_properties({"segment.bytes": "600"})


def data(pid: int, values: list[str], *, seq: int = 0) -> bytearray:
    """A batch of producer ``pid``'s transaction (``pid`` -1: a plain batch)."""
    return encode_batches(
        pa.array(values, pa.string()),
        now_ms=BASE_TS,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        is_transactional=pid >= 0,
    )


def marker(pid: int, commit: bool) -> bytearray:
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    return encode_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp_ms=BASE_TS)


def open_log(
    d: Path, config: LogConfig = BIG, *, had_clean_shutdown: bool = True, recovery_point: int = 0
) -> Log:
    return Log.open(
        d,
        config,
        clock=MockClock(BASE_TS),
        had_clean_shutdown=had_clean_shutdown,
        recovery_point=recovery_point,
    )


def pause_rounds(log: Log, rounds: int, start: int = 0) -> dict[int, bytes]:
    """``rounds`` appends of producer 1's open transaction, each followed by a pause and a
    resume (as the sink's micro-batches); returns every snapshot a pause left, by offset."""
    taken: dict[int, bytes] = {}
    for i in range(start, start + rounds):
        log.append(data(1, [f"v{i}"], seq=i))
        log.pause()
        taken[log.log_end_offset] = snapshot_file(log.dir, log.log_end_offset).read_bytes()
        log.resume()
    return taken


def test_pauses_keep_one_snapshot_in_the_active_segment(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    pause_rounds(log, 30)
    assert log.num_segments == 1
    assert list_snapshot_offsets(d) == [30]  # the newest only: base 0 was never rolled
    assert log.last_stable_offset == 0  # producer 1's transaction from offset 0
    log.close()
    with open_log(d) as again:
        assert again.last_stable_offset == 0
        again.append(marker(1, commit=True))
        assert again.last_stable_offset == 31


def test_a_roll_keeps_the_snapshot_at_each_segment_base(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, SMALL)
    pause_rounds(log, 30)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    # The rolls' snapshots (every base but the first, never rolled) and the newest.
    assert list_snapshot_offsets(d) == bases[1:] + [log.log_end_offset]
    log.append(marker(1, commit=False))
    log.close()
    with Log.open(d, SMALL, clock=MockClock(BASE_TS), read_only=True) as reader:
        assert reader.last_stable_offset == reader.high_watermark == 31


def test_a_manager_pause_per_commit_keeps_the_count(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, {})
    for i in range(20):
        mgr.append("t", 0, data(-1, [f"v{i}"]))
        mgr.pause()
        assert mgr.resume() is True
    mgr.close()
    assert list_snapshot_offsets(tmp_path / "t-0") == [20]


def test_the_loader_deletes_the_strays_a_crash_left(tmp_path: Path) -> None:
    """A crash between a pause's new snapshot and the unlink of the previous one (or a
    power cut that lost the unlink) leaves the older snapshots: every one is put back,
    inside the inactive segments and the active one. A clean open and an unclean one keep
    the segment bases' and the newest, and load the same state."""
    d = tmp_path / "t-0"
    log = open_log(d, SMALL)
    taken = pause_rounds(log, 30)
    bases = [s.base_offset for s in log.segments]
    kept = bases[1:] + [30]
    log.close()
    for offset, raw in taken.items():
        snapshot_file(d, offset).write_bytes(raw)
    assert len(list_snapshot_offsets(d)) == 30
    with open_log(d, SMALL) as again:
        assert list_snapshot_offsets(d) == kept
        assert again.last_stable_offset == 0
        # An unclean open after appends past the newest snapshot, the strays back again.
        again.append(data(1, ["w"], seq=30))
    for offset, raw in taken.items():
        snapshot_file(d, offset).write_bytes(raw)
    # The close's, as if killed while writing it: its .tmp only.
    snapshot_file(d, 31).rename(d / f"{snapshot_file(d, 31).name}.tmp")
    with open_log(d, SMALL, had_clean_shutdown=False, recovery_point=bases[-1]) as again:
        assert list_snapshot_offsets(d) == kept
        assert not list(d.glob("*.tmp"))
        assert again.log_end_offset == 31 and again.last_stable_offset == 0
        again.append(marker(1, commit=True))
        assert again.last_stable_offset == 32


def test_a_damaged_newest_snapshot_with_strays_loses_no_transaction_state(
    tmp_path: Path,
) -> None:
    """The newest snapshot flipped or cut short, the strays of a crash beside it: the
    loader passes over the newest for an older one and deletes the strays; every open
    after that (the damaged newest still there) rebuilds the same state from the segment
    bases by replay, and a later pause writes a good newest."""
    for damage in ("flip", "truncate"):
        d = tmp_path / damage / "t-0"
        log = open_log(d, SMALL)
        taken = pause_rounds(log, 30)
        bases = [s.base_offset for s in log.segments]
        log.close()
        for offset, raw in taken.items():
            snapshot_file(d, offset).write_bytes(raw)
        newest = snapshot_file(d, 30)
        raw = bytearray(newest.read_bytes())
        if damage == "flip":
            raw[len(raw) // 2] ^= 0x40
        else:
            del raw[len(raw) // 2 :]
        newest.write_bytes(bytes(raw))
        for _ in range(2):
            with open_log(d, SMALL) as again:
                assert list_snapshot_offsets(d) == bases[1:] + [30], damage
                assert again.log_end_offset == 30 and again.last_stable_offset == 0, damage
        with open_log(d, SMALL) as again:
            again.append(data(1, ["w"], seq=30))
            again.append(marker(1, commit=True))
            assert again.last_stable_offset == 32, damage
        with open_log(d, SMALL) as again:
            assert again.last_stable_offset == again.high_watermark == 32, damage


def test_truncation_below_the_newest_snapshot_replays_from_the_segment_base(
    tmp_path: Path,
) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, SMALL)
    pause_rounds(log, 20)
    log.append(marker(1, commit=True))  # offset 20
    log.pause()
    log.resume()
    assert log.last_stable_offset == 21
    newest = list_snapshot_offsets(d)[-1]
    assert newest == 21
    log.truncate_to(20)  # the marker goes: the transaction is open again
    assert log.last_stable_offset == 0
    assert newest not in list_snapshot_offsets(d)
    pause_rounds(log, 5, start=20)
    assert log.last_stable_offset == 0
    bases = [s.base_offset for s in log.segments]
    assert list_snapshot_offsets(d) == bases[1:] + [log.log_end_offset]
    log.close()
    with open_log(d, SMALL) as again:
        assert again.last_stable_offset == 0


_PAUSING_WRITER = """
import sys
from pathlib import Path
import pyarrow as pa
from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import encode_batches

log = Log.open(Path(sys.argv[1]), LogConfig.from_properties({"segment.bytes": "600"}))
i = 0
while True:
    log.append(encode_batches(pa.array([f"v{i}"]), producer_id=1, producer_epoch=0,
                              base_sequence=i, is_transactional=True))
    log.pause()
    print(i, flush=True)
    log.resume()
    i += 1
"""


def test_a_writer_killed_while_pausing_leaves_what_the_loader_needs(tmp_path: Path) -> None:
    """SIGKILLed somewhere in a loop of appends and pauses (most of its time is the pause's
    snapshot, fsyncs and unlink): the next open, unclean, keeps only the segment bases'
    snapshots and the newest, and finds producer 1's transaction open from offset 0."""
    d = tmp_path / "t-0"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", _PAUSING_WRITER, str(d)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if int(line) >= 20:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with open_log(d, SMALL, had_clean_shutdown=False) as log:
        bases = [s.base_offset for s in log.segments]
        assert log.log_end_offset >= 21 and len(bases) > 2
        snaps = list_snapshot_offsets(d)
        assert [s for s in snaps[:-1] if s not in bases] == []
        assert set(bases[1:]) <= set(snaps) and snaps[-1] <= log.log_end_offset
        assert log.last_stable_offset == 0
        log.append(marker(1, commit=True))
        end = log.log_end_offset
    with open_log(d, SMALL) as log:
        assert log.last_stable_offset == end
