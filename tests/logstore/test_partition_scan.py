"""The deep partition check is written once (``partition_scan``): the same damaged
partition gives the same findings through ``seglog check`` and through
``LogManager.check(deep=True)``, under the rules the module docstring decides."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import struct
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka_batches import batch as kafka_batch

from seglog.cli import main as seglog_main
from seglog.logstore.bucket.bucket_check import check_bucket
from seglog.logstore.log import partition_scan
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE

SCAN_KINDS = {
    partition_scan.BAD_BATCH,
    partition_scan.MISSING_DATA,
    partition_scan.PARTIAL_TAIL,
    partition_scan.BAD_INDEX_ENTRY,
    partition_scan.MISSING_INDEX,
    partition_scan.BAD_TXN_INDEX,
    partition_scan.OFFSET_GAPS,
}


def batch(n: int = 10) -> bytes:
    """``n`` keyless records of 300-byte values (kafka-python's bytes)."""
    return kafka_batch(n, value_size=300, key=None)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1, {"segment.bytes": 8 * 1024, "index.interval.bytes": 1000})
        for _ in range(12):
            mgr.append("t", 0, batch())
    return d


def segments(d: Path) -> list[Path]:
    return sorted((d / "t-0").glob("*.log"))


def append_partial(path: Path) -> None:
    """The first 40 bytes of a batch after the segment's last whole batch."""
    with open(path, "ab") as f:
        f.write(batch()[:40])


def flip_in_batch(path: Path, which: int) -> None:
    raw = bytearray(path.read_bytes())
    h = list(iter_batch_headers(raw))[which]
    raw[h.position + h.size - 10] ^= 0x01  # a record's bytes: the CRC covers them
    path.write_bytes(bytes(raw))


def unclean(d: Path) -> None:
    (d / CLEAN_SHUTDOWN_FILE).unlink()


def partial_tail_last_unclean(d: Path) -> None:
    append_partial(segments(d)[-1])
    unclean(d)


def partial_tail_last_clean(d: Path) -> None:
    append_partial(segments(d)[-1])


def partial_tail_not_last(d: Path) -> None:
    append_partial(segments(d)[1])
    unclean(d)


def cut_below_high_watermark(d: Path) -> None:
    last = segments(d)[-1]
    h = list(iter_batch_headers(last.read_bytes()))[-1]
    os.truncate(last, h.position + 30)
    unclean(d)


def two_bad_crcs(d: Path) -> None:
    flip_in_batch(segments(d)[0], 0)
    flip_in_batch(segments(d)[2], -1)


def torn_index(d: Path) -> None:
    with open(segments(d)[0].with_suffix(".index"), "ab") as f:
        f.write(b"\x01\x02\x03")


def bad_txn_index(d: Path) -> None:
    segments(d)[0].with_suffix(".txnindex").write_bytes(b"\x01" * 20)


# damage -> (kind, note) of each finding, in order
DAMAGE: dict[str, tuple[Callable[[Path], None], list[tuple[str, bool]]]] = {
    "partial-tail-last-unclean": (partial_tail_last_unclean, [("partial-tail", True)]),
    "partial-tail-last-clean": (partial_tail_last_clean, [("bad-batch", False)]),
    "partial-tail-not-last": (partial_tail_not_last, [("bad-batch", False)]),
    # the last offset index entry pointed into the batch cut
    "cut-below-high-watermark": (
        cut_below_high_watermark,
        [("bad-index-entry", False), ("bad-batch", False)],
    ),
    "two-bad-crcs": (two_bad_crcs, [("bad-batch", False), ("bad-batch", False)]),
    "torn-index": (torn_index, [("bad-index-entry", False)]),
    "bad-txnindex": (bad_txn_index, [("bad-txn-index", False)]),
}


def cli_findings(d: Path) -> tuple[int, list[tuple[str, str, bool]], str]:
    """(exit status, (file, line, note) per partition finding, the text output)."""
    out = io.StringIO()
    code = seglog_main(["check", "--json", str(d)], out)
    [part] = json.loads(out.getvalue())["dirs"][0]["partitions"]
    text = io.StringIO()
    assert seglog_main(["check", str(d)], text) == code
    found = [(p["file"], p["message"], False) for p in part["problems"]]
    found += [(n["file"], n["message"], True) for n in part["notes"]]
    return code, found, text.getvalue()


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_cli_and_library_report_the_same_findings(log_dir: Path, damage: str) -> None:
    make, expected = DAMAGE[damage]
    make(log_dir)
    with LogManager([log_dir], read_only=True) as reader:
        library = [p for p in reader.check(deep=True) if p.kind in SCAN_KINDS]
    assert [(p.kind, p.note) for p in library] == expected, library
    code, cli, text = cli_findings(log_dir)
    assert code == (0 if all(note for _, note in expected) else 1), text
    # the same files, the same messages (the library's names the file; the CLI's JSON
    # message may leave it to the "file" key), the same severity
    assert len(cli) == len(library), (cli, library)
    for p in library:
        assert any(
            file == str(p.path) and note == p.note and p.message in (message, f"{file}: {message}")
            for file, message, note in cli
        ), (p, cli)
    # each line of the text mode is one of them
    for p in library:
        line = p.message.replace(f"{p.path}: ", f"{p.path}: note: ", 1) if p.note else p.message
        assert line in text, (line, text)


def test_every_bad_batch_is_reported_and_fix_cuts_before_the_first(log_dir: Path) -> None:
    first = list(iter_batch_headers(segments(log_dir)[0].read_bytes()))[0]
    two_bad_crcs(log_dir)
    with LogManager([log_dir]) as mgr:
        found = [p for p in mgr.check(deep=True) if p.kind == "bad-batch"]
        assert [p.path for p in found] == [segments(log_dir)[0], segments(log_dir)[2]]
        assert all("bad CRC" in p.message for p in found)
        fixed = [p for p in mgr.check(fix=True, deep=True) if p.kind == "bad-batch"]
        assert len(fixed) == 2 and all(p.fixed for p in fixed)
        assert mgr.get_log("t", 0).log_end_offset == first.base_offset
        assert mgr.check(deep=True) == []


def test_a_misleading_offset_index_is_not_blamed_on_the_time_index(log_dir: Path) -> None:
    index = segments(log_dir)[0].with_suffix(".index")
    headers = list(iter_batch_headers(segments(log_dir)[0].read_bytes()))
    # One entry naming batch 0's last offset at batch 1's position: lookups for that
    # offset start past its batch. The time index is right; lookups through this entry
    # would miss batch 0's timestamps, but a reader refuses the entry and scans instead.
    index.write_bytes(
        struct.pack(">ii", headers[0].last_offset - headers[0].base_offset, headers[1].position)
    )
    with LogManager([log_dir], read_only=True) as reader:
        found = [p for p in reader.check(deep=True) if p.kind in SCAN_KINDS]
    assert [(p.kind, p.path) for p in found] == [("bad-index-entry", index)]
    assert "would start past their batch" in found[0].message
    code, cli, text = cli_findings(log_dir)
    assert code == 1 and [file for file, _, _ in cli] == [str(index)], text


def test_a_bucket_checks_offsets_from_its_log_start_by_the_same_rules() -> None:
    """``bucket_check`` applies ``ContinuityCheck`` from the log start: a segment wholly
    below it (DeleteRecords, before retention removes it) is read and CRC-checked but is
    no offset problem; a segment that repeats offsets already read is one."""
    import pyarrow as pa

    from seglog.logstore.bucket.bucket_state import PartitionState
    from seglog.logstore.records.record_codec import encode_batches

    uri = f"memory://partition-scan-{uuid.uuid4().hex}"
    with LogManager(uri) as mgr:
        mgr.create_topic("t", 1)
        for i in range(3):
            values = pa.array([b"v%d" % (10 * i + k) for k in range(10)])
            mgr.append("t", 0, encode_batches(values, max_batch_bytes=100))
        mgr.delete_records("t", 0, 15)
        findings, _ = mgr.check_objects()
        assert [f for f in findings if f.problem] == []
        # the state as a commit that listed segment [10, 20) twice would leave it
        ps = mgr.state.partition("t", 0)
        first, second, third = ps.segments
        twice = PartitionState((first, second, second, third), ps.log_start_offset)
        state = dataclasses.replace(mgr.state, partitions={"t-0": twice})
        found, _ = check_bucket(mgr.storage, state, {"t": mgr.topic_config("t")})
    problems = [f for f in found if f.problem]
    assert problems and all("/t-0/" in f.where for f in problems), problems
    assert any("not above the previous batch's last offset" in f.message for f in problems)
