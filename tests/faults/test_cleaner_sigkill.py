"""A process appending to a compacted log and cleaning it is killed with SIGKILL at
random moments. After each kill the log is reopened (the loader drops `.cleaned` files
and completes `.swap` files) and checked: offsets increase strictly, every record is the
one written at its offset, and every key's latest record is there. A swap group half
applied would duplicate offsets (old and new segment both present) or lose latest values
(neither present): both are caught.

Every record is a pure function of its offset, so the checker needs no log of what the
child wrote."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.storage.file_names import CLEANED_SUFFIX, SWAP_SUFFIX
from seglog.logstore.util.clock import SystemClock

KEYS = 40
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 3000, "index.interval.bytes": 200,
          "delete.retention.ms": 86_400_000, "min.cleanable.dirty.ratio": 0.01}

CHILD = r"""
import random, sys
import pyarrow as pa
from seglog.logstore.cleaner.cleaner import LogCleaner
from seglog.logstore.config.config import LogConfig, ManagerConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import encode_batches

KEYS = {keys}
def key(o): return b"k%d" % ((o * 7919 + 13) % KEYS)
def value(o): return None if o % 11 == 3 else b"value-%d" % o

log = Log.open(sys.argv[1], LogConfig.from_properties({config!r}), had_clean_shutdown=False)
cleaner = LogCleaner(ManagerConfig.from_properties({{"log.cleaner.dedupe.buffer.size": 1024}}))
rnd = random.Random(int(sys.argv[2]))
rounds = 0
while True:
    for _ in range(rnd.randint(1, 4)):
        leo = log.log_end_offset
        n = rnd.randint(1, 25)
        offs = range(leo, leo + n)
        buf = encode_batches(pa.array([value(o) for o in offs], pa.binary()),
                             pa.array([key(o) for o in offs], pa.binary()),
                             compression=rnd.choice(["none", "lz4", "zstd", "gzip"]))
        log.append(buf)
    cleaner.clean_log(log)
    rounds += 1
    if rounds == 1:  # the kernels are compiled (or loaded from numba's cache) by now
        print("ready", flush=True)
"""


def key(o: int) -> bytes:
    return b"k%d" % ((o * 7919 + 13) % KEYS)


def value(o: int) -> bytes | None:
    return None if o % 11 == 3 else b"value-%d" % o


def check(dir_: Path) -> tuple[int, int]:
    """Reopen (recover) and check the log; returns (records, log end offset)."""
    log = Log.open(dir_, LogConfig.from_properties(CONFIG), clock=SystemClock(),
                   had_clean_shutdown=False)
    try:
        leo = log.log_end_offset
        offsets, keys, values = [], [], []
        for chunk in log.read_chunks(log.log_start_offset, leo):
            t = decode_batches(chunk)
            offsets += t.column("offset").to_pylist()
            keys += t.column("key").to_pylist()
            values += t.column("value").to_pylist()
        assert offsets == sorted(set(offsets)), "an offset is duplicated or out of order"
        for o, k, v in zip(offsets, keys, values, strict=True):
            assert (k, v) == (key(o), value(o)), f"record at offset {o} is not the one written"
        latest: dict[bytes, int] = {}
        for o in range(leo):
            latest[key(o)] = o
        present = set(offsets)
        lost = sorted(o for o in latest.values() if o not in present)
        assert not lost, f"latest records lost at offsets {lost[:10]}"
        leftovers = [p.name for p in dir_.iterdir()
                     if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
        assert not leftovers, leftovers
        return len(offsets), leo
    finally:
        log.close()


@pytest.mark.slow
def test_cleaner_killed_at_random_moments_never_mixes_a_swap_group(tmp_path):
    dir_ = tmp_path / "compacted-0"
    script = CHILD.format(keys=KEYS, config=CONFIG)
    rnd = random.Random(20261123)
    kills = 0
    temp_files_seen = 0
    leo = 0
    env = dict(os.environ)
    for i in range(22):
        proc = subprocess.Popen([sys.executable, "-c", script, str(dir_), str(i)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            line = proc.stdout.readline()
            assert line.strip() == b"ready", proc.stderr.read().decode()[-2000:]
            time.sleep(rnd.uniform(0.05, 0.6))
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        temp_files_seen += any(p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))
                               for p in dir_.iterdir())
        records, new_leo = check(dir_)
        assert new_leo >= leo
        leo = new_leo
        # compaction keeps the log near one record per key (plus the uncleaned tail)
        assert records <= leo
    assert kills >= 20
    assert leo > 0
    print(f"{kills} kills, {temp_files_seen} with .cleaned/.swap files left, log end {leo}")
