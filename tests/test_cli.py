from __future__ import annotations

import io
import subprocess
import sys

import pyarrow as pa

from seglog.cli import main
from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.util.clock import MockClock

BASE_TS = 1_700_000_000_000


def _log(tmp_path, n=20):
    cfg = LogConfig.from_properties({"index.interval.bytes": "100",
                                     "message.timestamp.after.max.ms": str(2**62)})
    log = Log.open(tmp_path / "t-0", cfg, clock=MockClock(BASE_TS))
    for i in range(n):
        log.append(encode_batches(pa.array([b"value-%d" % i, None]),
                                  keys=pa.array([b"key", b"k2"]),
                                  timestamps=pa.array([BASE_TS + i, BASE_TS + i], pa.int64())))
    log.close()
    return tmp_path / "t-0"


def _run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


def test_dump_log_prints_batches_and_records(tmp_path):
    d = _log(tmp_path)
    code, text = _run("dump-log", str(d / "00000000000000000000.log"))
    assert code == 0
    lines = [ln for ln in text.splitlines() if ln.startswith("baseOffset")]
    assert len(lines) == 20
    assert lines[1].startswith("baseOffset: 2 lastOffset: 3 count: 2 ")
    assert "CreateTime: 1700000000001" in lines[1] and "isvalid: true" in lines[1]
    assert "compresscodec: none" in lines[1]
    code, text = _run("dump-log", "--print-data-log", str(d / "00000000000000000000.log"))
    assert "| offset: 2 CreateTime: 1700000000001 keySize: 3 valueSize: 7" in text
    assert "key: key payload: value-1" in text
    assert "key: k2 payload: null" in text


def test_dump_index_checks_entries_against_the_log(tmp_path):
    d = _log(tmp_path)
    code, text = _run("dump-log", str(d / "00000000000000000000.index"),
                      str(d / "00000000000000000000.timeindex"))
    assert code == 0, text
    assert "offset: " in text and "position: " in text and "timestamp: " in text
    assert "mismatch" not in text
    idx = d / "00000000000000000000.index"
    raw = bytearray(idx.read_bytes())
    good = bytes(raw)
    raw[3] += 1  # names a later offset than its batch's: Kafka's tool objects, lookups do not
    idx.write_bytes(bytes(raw))
    code, text = _run("dump-log", str(idx))
    assert code == 0 and "Index problem" not in text
    assert "kafka-dump-log would report" in text and "Index offset: " in text
    raw = bytearray(good)
    raw[3] -= 2  # now at or below the last offset of the batch before its position
    idx.write_bytes(bytes(raw))
    code, text = _run("dump-log", str(idx))
    assert code == 1 and "Index problem" in text and "would start past their batch" in text


def test_dump_log_reports_a_bad_crc_and_junk(tmp_path):
    d = _log(tmp_path, n=3)
    path = d / "00000000000000000000.log"
    raw = bytearray(path.read_bytes())
    raw[70] ^= 0xFF
    path.write_bytes(bytes(raw) + b"\x00\x01junk")
    code, text = _run("dump-log", str(path))
    assert code == 1
    assert "isvalid: false" in text and "Found invalid data" in text


def test_console_script_entry_point(tmp_path):
    d = _log(tmp_path, n=1)
    proc = subprocess.run([sys.executable, "-m", "seglog.cli", "dump-log",
                           str(d / "00000000000000000000.log")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "baseOffset: 0 lastOffset: 1" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "seglog.cli", "dump-log", str(tmp_path / "x.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1


def test_check_reports_ok_then_each_problem(tmp_path):
    d = _log(tmp_path)
    code, text = _run("check", str(tmp_path))  # a log dir: finds t-0 inside
    assert code == 0 and text.strip().endswith("log end offset 40: OK")
    log = d / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[-5] ^= 0xFF
    log.write_bytes(bytes(raw))
    (d / "00000000000000000000.timeindex").unlink()
    code, text = _run("check", str(d))
    assert code == 1
    assert "bad CRC" in text and "00000000000000000000.timeindex: note: no time index" in text
    assert "1 problem(s) (1 note(s))" in text
