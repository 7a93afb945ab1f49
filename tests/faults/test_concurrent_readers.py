"""Readers in other processes (read-only LogManagers) keep reading correctly while the
writer appends, rolls, publishes high watermarks and runs retention."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _log_checks import make_batch

from seglog.logstore.manager.log_manager import LogManager

TOPIC = "shared"
READER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {checks_dir!r})
    from _log_checks import check_records, fetch_bytes
    from seglog.logstore.records.record_format import read_batch_header
    from seglog.logstore.errors import KafkaStorageError, OffsetOutOfRangeError
    from seglog.logstore.manager.log_manager import LogManager

    stop = {stop!r}
    tp = ({topic!r}, 0)
    records = reads = skips = races = 0
    pos = 0
    with LogManager([{log_dir!r}], read_only=True) as mgr:
        print("ready", flush=True)
        while True:
            stopping = os.path.exists(stop)
            hw = mgr.high_watermarks().get(tp, 0)
            while pos < hw:
                start = mgr.log_start_offsets().get(tp, 0)
                if pos < start:
                    skips += start - pos  # removed by retention meanwhile
                    pos = start
                    continue
                try:
                    data = mgr.get_log(*tp).read(pos, max_offset=hw, max_bytes=64 * 1024)
                except OffsetOutOfRangeError:
                    start = mgr.log_start_offsets().get(tp, 0)
                    assert start > pos, f"out of range at {{pos}} but start is {{start}}"
                    continue
                except KafkaStorageError as e:
                    # Log.read re-lists and retries: counted so the test can fail on it
                    if not isinstance(e.__cause__, FileNotFoundError):
                        raise
                    races += 1
                    continue
                buf = fetch_bytes(data)
                first = read_batch_header(buf, 0)
                assert first is not None, f"nothing read at {{pos}} below hw {{hw}}"
                assert first.base_offset <= pos <= first.last_offset, (first, pos)
                nxt = check_records(buf, first.base_offset)
                records += nxt - pos
                reads += 1
                pos = nxt
            if stopping:
                break
            time.sleep(0.002)
    print("done", records, reads, skips, pos, races, flush=True)
""")


@pytest.mark.slow
def test_readers_in_other_processes_follow_a_busy_writer(tmp_path):
    log_dir, stop = tmp_path / "logs", tmp_path / "stop"
    config = {"segment.bytes": 32 * 1024, "retention.bytes": 256 * 1024,
              "file.delete.delay.ms": 300, "index.interval.bytes": 1024}
    with LogManager([log_dir], config={"log.retention.check.interval.ms": 50,
                                       "replica.high.watermark.checkpoint.interval.ms": 20}
                    ) as mgr:
        mgr.create_topic(TOPIC, 1, config)
        log = mgr.get_log(TOPIC, 0)
        code = READER.format(checks_dir=str(Path(__file__).parent), stop=str(stop),
                             topic=TOPIC, log_dir=str(log_dir))
        readers = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT,
                                    text=True) for _ in range(2)]
        for r in readers:
            assert r.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 6
        deleted_segments = 0
        n = 0
        while time.monotonic() < deadline:
            mgr.append(TOPIC, 0, make_batch(log.log_end_offset, 1 + n % 25))
            n += 1
            if n % 20 == 0:
                for run in mgr.run_maintenance():
                    assert run.ok, run.error
                    if run.name == "log-retention":
                        deleted_segments += run.result or 0
            if n % 3 == 0:
                time.sleep(0.002)  # a steady producer, not a flood
        mgr.checkpoint_high_watermarks()
        end = log.log_end_offset
        stop.touch()
        results = []
        for r in readers:
            out, _ = r.communicate(timeout=120)
            assert r.returncode == 0, f"reader failed:\n{out}"
            results.append(out.split())
    assert deleted_segments > 0, "retention never ran: the test proved nothing"
    for done, records, reads, skips, pos, _races in results:
        assert done == "done" and int(pos) == end
        assert int(records) + int(skips) == end
        assert int(records) > 0 and int(reads) > 0, results
    assert all(int(r[5]) == 0 for r in results), (
        "a reader saw a raw storage error instead of a re-list or OffsetOutOfRangeError")
