"""Issue 22.7: a last segment cut short after a clean close. The clean shutdown marker
vouches for what the writer left, not for the files since; evidence of a damaged tail (a
partial last batch, an index entry past the batches, a recovery point or high watermark
beyond the log end) sends the partition through recovery before any append, so the next
append lands right after the last whole batch and every reader and ``check`` agree."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.cli import main as seglog_main
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import iter_batch_headers

TS = 1_700_000_000_000
CONFIG = {"index.interval.bytes": "200", "message.timestamp.before.max.ms": str(2**62)}


def value(i: int) -> bytes:
    return b"value-%05d-" % i + b"x" * 60


def build(d: Path, batches: int = 30, per_batch: int = 4) -> None:
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1, config=CONFIG)
        for b in range(batches):
            first = b * per_batch
            mgr.append("t", 0, encode_batches(
                pa.array([value(i) for i in range(first, first + per_batch)]),
                timestamps=pa.array([TS + i for i in range(first, first + per_batch)],
                                    pa.int64())))


def read_all(d: Path, *, read_only: bool) -> list[tuple[int, bytes]]:
    with LogManager([d], read_only=read_only) as mgr:
        log = mgr.get_log("t", 0)
        rows = decode_batches(b"".join(log.read_chunks(0, log.high_watermark)))
        return list(zip(rows.column("offset").to_pylist(), rows.column("value").to_pylist(),
                        strict=True))


CUTS = {
    # (which batch, where in it): the file ends there
    "40-bytes-at-the-end": (-1, lambda size: size - 40),
    "mid-last-batch": (-1, lambda size: size // 2),
    "the-last-batch-whole": (-1, lambda size: 0),
    # below the last index entries: the offset index points past the cut too
    "mid-batch-below-the-index": (15, lambda size: size // 2),
    "at-a-batch-boundary-below-the-index": (15, lambda size: 0),
}


def cut(path: Path, how: str) -> int:
    """Cut the file as ``how`` says; returns the offset the whole batches left end at."""
    which, where = CUTS[how]
    h = list(iter_batch_headers(path.read_bytes()))[which]
    os.truncate(path, h.position + where(h.size))
    return h.base_offset


@pytest.mark.parametrize("how", sorted(CUTS))
def test_an_append_after_a_cut_last_segment_lands_after_the_last_whole_batch(tmp_path, how,
                                                                            caplog):
    d = tmp_path / "logs"
    build(d)
    log_file = d / "t-0" / "00000000000000000000.log"
    kept = cut(log_file, how)
    with caplog.at_level(logging.WARNING), LogManager([d]) as mgr:
        info = mgr.append("t", 0, encode_batches(pa.array([b"new-1", b"new-2"]),
                                                 timestamps=pa.array([TS, TS], pa.int64())))
        assert (info.first_offset, info.last_offset) == (kept, kept + 1)
    # recovered, by this rule or (an index entry past the end) by the index check
    assert f"recovery of {log_file}" in caplog.text or "rebuilding the indexes" in caplog.text
    want = [(o, value(o)) for o in range(kept)] + [(kept, b"new-1"), (kept + 1, b"new-2")]
    for read_only in (False, True):
        assert read_all(d, read_only=read_only) == want
    with LogManager([d], read_only=True) as mgr:
        assert mgr.check(deep=True) == []
    out = io.StringIO()
    assert seglog_main(["check", str(d)], out) == 0, out.getvalue()
    # a second writer finds nothing more to recover, and appends on
    caplog.clear()
    with caplog.at_level(logging.WARNING), LogManager([d]) as mgr:
        assert mgr.append("t", 0, encode_batches(pa.array([b"new-3"]))).first_offset == kept + 2
    assert "recovering" not in caplog.text
    assert read_all(d, read_only=True)[-1] == (kept + 2, b"new-3")


def test_a_clean_tail_is_not_recovered(tmp_path, caplog):
    d = tmp_path / "logs"
    build(d, batches=5)
    with caplog.at_level(logging.INFO), LogManager([d]) as mgr:
        assert mgr.get_log("t", 0).log_end_offset == 20
    assert "recover" not in caplog.text


@pytest.mark.parametrize("clean", [True, False], ids=["after-a-clean-close", "after-a-crash"])
def test_garbage_after_the_last_batch_is_named_for_what_it_is(tmp_path, clean, caplog):
    """Issue 22.18: 70 bytes of garbage appended to a .log are no "message at position 0
    of 16843021 bytes": the texts name the file, the real position, and what the length
    field claims against what follows. Recovery cuts exactly the garbage."""
    d = tmp_path / "logs"
    build(d, batches=5)
    log_file = d / "t-0" / "00000000000000000000.log"
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(b"\x01" * 70)
    out = io.StringIO()
    assert seglog_main(["check", str(d)], out) == 1
    assert (f"{log_file}: 70 trailing bytes at position {size} are no whole batch: their "
            f"length field says 16843021 bytes") in out.getvalue(), out.getvalue()
    if not clean:
        (d / ".kafka_cleanshutdown").unlink()
    with caplog.at_level(logging.WARNING), LogManager([d]) as mgr:
        assert mgr.get_log("t", 0).log_end_offset == 20
    assert (f"recovery of {log_file}: cutting its last 70 bytes, from position {size} "
            f"(offset 20): the 70 bytes at position {size} are not a record batch: their "
            f"length field says 16843021 bytes, more than follow them") in caplog.text
    assert "position 0" not in caplog.text
    assert log_file.stat().st_size == size
    assert read_all(d, read_only=True) == [(o, value(o)) for o in range(20)]
