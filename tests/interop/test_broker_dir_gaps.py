"""Offset gaps inside the segments of a Kafka broker's dir. A broker's dir carries no
topic configs (they live in the cluster's metadata), so seglog cannot know a topic's
cleanup policy there, and compaction leaves gaps between batches and between segments.
Kafka's reader accepts them; so do seglog's readers, a writer's recovery and ``check``
(a note, exit 0). Where seglog knows the policy (a seglog topic config saying delete) a
gap is still corruption."""

from __future__ import annotations

import io
import logging
import random
from pathlib import Path

import pytest
from kafka_dirs import T0, BrokerDir, PartitionWriter, _rows, v2_batch

from seglog.cli import main
from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches

TOPIC = "compacted"


def compacted_like_dir(root: Path) -> BrokerDir:
    """A 3.x broker's dir whose topic was compacted: offsets skipped between batches
    (inside segments) and between segments, no cleaner checkpoint entry (a copy made
    before the broker wrote one), no seglog topic config."""
    rng = random.Random(11)
    d = root / "kraft-compacted"
    d.mkdir(parents=True)
    w = PartitionWriter(d, TOPIC, 0, era="3.x", segment_bytes=3000)
    for k in range(40):
        w.append([v2_batch(_rows(rng, rng.randint(1, 6), T0 + 1_000 * k), codec=k % 3)])
        if k < 39:  # the cleaner never touches the active segment's end
            w.next_offset += rng.choice((0, 0, 3, 6))  # records the cleaner removed
    w.close()
    bd = BrokerDir(d, {(TOPIC, 0): w})
    bd.finish()
    assert (d / "cleaner-offset-checkpoint").read_bytes() == b""
    return bd


def _offsets(mgr: LogManager, end: int) -> list[int]:
    return [
        o
        for chunk in mgr.get_log(TOPIC, 0).read_chunks(0, end)
        for o in decode_batches(chunk).column("offset").to_pylist()
    ]


def _check(path: Path) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main(["check", str(path)], out)
    return code, out.getvalue().splitlines()


@pytest.fixture
def gaps(tmp_path) -> BrokerDir:
    bd = compacted_like_dir(tmp_path)
    offsets = [r.offset for r in bd.partitions[(TOPIC, 0)].records]
    assert any(b > a + 1 for a, b in zip(offsets, offsets[1:], strict=False))
    return bd


def test_gaps_of_an_unknown_policy_are_read_and_noted(gaps, caplog):
    w = gaps.partitions[(TOPIC, 0)]
    want = [r.offset for r in w.records]
    with caplog.at_level(logging.WARNING):
        with LogManager([gaps.path], read_only=True) as reader:
            assert _offsets(reader, w.next_offset) == want
        code, lines = _check(gaps.path)
    assert code == 0, lines
    assert not [ln for ln in lines if "problem" in ln], lines
    [note] = [ln for ln in lines if "offset gap(s)" in ln]
    assert "cleanup.policy is unknown" in note and ": note: " in note
    assert lines[-1].endswith("OK (1 note(s))"), lines
    assert not caplog.records, caplog.text


def test_a_writer_recovers_reads_and_checks_the_gaps(gaps):
    w = gaps.partitions[(TOPIC, 0)]
    want = [r.offset for r in w.records]
    (gaps.path / ".kafka_cleanshutdown").unlink()  # recovery of every segment
    with LogManager([gaps.path]) as writer:
        assert _offsets(writer, w.next_offset) == want
        found = writer.check(deep=True)
        assert [p.kind for p in found if not p.note] == [], found
        assert [p.kind for p in found if p.note] == ["offset-gaps"], found
    with LogManager([gaps.path], read_only=True) as reader:
        assert _offsets(reader, w.next_offset) == want


def test_gaps_in_a_topic_seglog_knows_is_delete_are_corruption(gaps):
    w = gaps.partitions[(TOPIC, 0)]
    (gaps.path / f"{TOPIC}-0" / "seglog-topic.properties").write_text("cleanup.policy=delete\n")
    with (
        LogManager([gaps.path], read_only=True) as reader,
        pytest.raises(CorruptRecordError, match="contiguous"),
    ):
        _offsets(reader, w.next_offset)
    code, lines = _check(gaps.path)
    assert code == 1 and any("contiguous" in ln for ln in lines), lines
