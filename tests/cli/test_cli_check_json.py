"""``seglog check --json``: one document with the same findings text mode prints, parsed
from real dirs and compared with what the library reads."""

from __future__ import annotations

import json

import pyarrow as pa
from _cli import run

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.util.clock import MockClock

BASE_TS = 1_700_000_000_000


def _log(log_dir, n=20):
    cfg = LogConfig.from_properties({"index.interval.bytes": "100", "segment.bytes": "1200",
                                     "message.timestamp.after.max.ms": str(2**62)})
    log = Log.open(log_dir / "t-0", cfg, clock=MockClock(BASE_TS))
    for i in range(n):
        log.append(encode_batches(pa.array([b"value-%d" % i, None]),
                                  timestamps=pa.array([BASE_TS + i] * 2, pa.int64())))
    log.close()
    return log_dir / "t-0", cfg


def test_healthy_dir_matches_the_library(tmp_path, capsys):
    d, cfg = _log(tmp_path)
    r = run(capsys, "check", "--json", tmp_path)
    assert r.code == 0 and r.err == ""
    doc = r.json()
    assert doc["ok"] is True and doc["exitCode"] == 0
    [entry] = doc["dirs"]
    assert entry["path"] == str(tmp_path)
    assert entry["problems"] == [] and entry["stateFiles"] == [] and entry["sink"] == []
    [part] = entry["partitions"]
    log = Log.open(d, cfg, read_only=True)
    try:
        assert part["logEndOffset"] == log.log_end_offset == 40
        assert part["segments"] == len(log.segments) > 1
    finally:
        log.close()
    assert part == {"dir": str(d), "segments": part["segments"], "batches": 20,
                    "logEndOffset": 40, "ok": True, "problems": [], "notes": []}
    # the text mode reports the same figures
    text = run(capsys, "check", tmp_path).out
    assert text == (f"{d}: {part['segments']} segment(s), 20 batch(es), log end offset 40: "
                    "OK\n")


def test_damaged_dir_names_each_file(tmp_path, capsys):
    d, _cfg = _log(tmp_path)
    log = d / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[-5] ^= 0xFF  # the CRC of the first segment's last batch
    log.write_bytes(bytes(raw))
    (d / "00000000000000000000.timeindex").unlink()
    r = run(capsys, "check", "--json", d)
    assert r.code == 1
    doc = r.json()
    assert doc["ok"] is False and doc["exitCode"] == 1
    [part] = doc["dirs"][0]["partitions"]
    assert part["ok"] is False
    [problem] = part["problems"]
    assert problem["file"] == str(log) and "bad CRC" in problem["message"]
    assert part["notes"] == [{"file": str(d / "00000000000000000000.timeindex"),
                              "message": "no time index; loading rebuilds it, as Kafka's "
                                         "loader does (lookups meanwhile scan the segment)"}]
    # same findings, same count, as the text mode
    text = run(capsys, "check", d)
    assert text.code == 1 and "1 problem(s) (1 note(s))" in text.out


def test_state_files_carry_status_file_and_line(tmp_path, capsys):
    _log(tmp_path)
    hw = tmp_path / "replication-offset-checkpoint"
    hw.write_text("0\n1\nt 0 forty\n")
    r = run(capsys, "check", "--json", tmp_path)
    assert r.code == 1
    [finding] = [f for f in r.json()["dirs"][0]["stateFiles"] if f["file"] == str(hw)]
    assert finding["status"] == "problem" and finding["kind"] == "corrupt-checkpoint"
    assert finding["line"] == 3 and "forty" in finding["message"]
    text = run(capsys, "check", tmp_path).out
    assert f"problem: {finding['message']}\n" in text

    fixed = run(capsys, "check", "--fix", "--json", tmp_path)
    assert fixed.code == 0, fixed.out
    doc = fixed.json()
    assert doc["ok"] is True
    statuses = {(f["file"], f["status"]) for f in doc["dirs"][0]["stateFiles"]}
    assert (str(hw), "fixed") in statuses
    assert hw.read_text() == "0\n1\nt 0 40\n"


def test_bad_arguments_are_dir_problems(tmp_path, capsys):
    d, _cfg = _log(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(capsys, "check", "--json", tmp_path / "nope", empty)
    assert r.code == 1
    missing, nothing = r.json()["dirs"]
    assert missing["problems"] == [{"file": str(tmp_path / "nope"),
                                    "message": "no such directory"}]
    assert nothing["problems"] == [] and nothing["notes"] == [
        {"file": str(empty), "message": "no segments here or in its subdirectories"}]
    r = run(capsys, "check", "--fix", "--json", d)
    assert r.code == 1 and r.json()["dirs"][0]["problems"][0]["message"] == (
        "--fix needs the log dir holding this partition")
    assert json.loads(r.out)["dirs"][0]["partitions"] == []
