"""``seglog lag``: a streaming query's committed offsets against the topics' ends, on
hand-made checkpoints; on a real query's checkpoint in
``tests/datasource/test_progress.py`` (whose query it shares)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from _cli import one_line_error, run

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'


def _logs(d, counts):
    with LogManager([d]) as mgr:
        mgr.create_topic("ev", len(counts))
        for p, n in enumerate(counts):
            if n:
                mgr.append("ev", p, encode_batches(pa.array([b"v"] * n)))
        mgr.checkpoint_high_watermarks()


def _checkpoint(chk, offsets, commits):
    (chk / "offsets").mkdir(parents=True)
    (chk / "commits").mkdir()
    for batch, sources in offsets.items():
        lines = ["v1", META] + [s if isinstance(s, str) else json.dumps(s) for s in sources]
        (chk / "offsets" / str(batch)).write_text("\n".join(lines))
        (chk / "offsets" / f".{batch}.crc").write_bytes(b"junk")  # Hadoop's checksum files
    for batch in commits:
        (chk / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_committed_pending_and_totals_from_hand_made_files(tmp_path, capsys):
    d, chk = tmp_path / "logs", tmp_path / "chk"
    _logs(d, [10, 7, 0])
    _checkpoint(
        chk,
        {
            0: [{"ev": {"0": 4, "1": 2}}],
            1: [{"ev": {"0": 8, "1": 7}, "$lastTriggerMs": 1700000000000}, "-"],
            2: [{"ev": {"0": 10, "1": 7, "2": 0}}, {"logOffset": 3}],
        },
        commits=[0, 1],
    )
    r = run(capsys, "lag", "--checkpoint", chk, "--path", d, "--json")
    assert r.code == 0, r
    doc = r.json()
    assert (doc["committedBatch"], doc["pendingBatch"]) == (1, 2)
    assert doc["partitions"] == [
        {
            "source": 0,
            "topic": "ev",
            "partition": 0,
            "committed": 8,
            "pending": 10,
            "end": 10,
            "lag": 2,
        },
        {
            "source": 0,
            "topic": "ev",
            "partition": 1,
            "committed": 7,
            "pending": 7,
            "end": 7,
            "lag": 0,
        },
        # a partition the committed batch did not know yet counts from its start
        {
            "source": 0,
            "topic": "ev",
            "partition": 2,
            "committed": None,
            "pending": 0,
            "end": 0,
            "lag": 0,
        },
    ]
    assert doc["totalLag"] == 2
    text = run(capsys, "lag", "--checkpoint", chk, "--path", d).out.splitlines()
    assert text[0].endswith("committed batch 1, pending batch 2")
    assert text[1].split() == ["TOPIC", "PARTITION", "COMMITTED", "PENDING", "END", "LAG"]
    assert text[2].split() == ["ev", "0", "8", "10", "10", "2"]
    assert text[-1] == "Total lag: 2"


def test_nothing_committed_yet_counts_from_the_log_start(tmp_path, capsys):
    d, chk = tmp_path / "logs", tmp_path / "chk"
    _logs(d, [5])
    _checkpoint(chk, {0: [{"ev": {"0": 5}}]}, commits=[])
    doc = run(capsys, "lag", "--checkpoint", chk, "--path", d, "--json").json()
    assert (doc["committedBatch"], doc["pendingBatch"], doc["totalLag"]) == (None, 0, 5)


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda f: f.write_text("v1\n" + META + '\n{"ev": {"0": 8'), ["offsets/1", "line 3"]),
        (lambda f: f.write_text("v9\n" + META), ["offsets/1", "'v9'"]),
        (lambda f: f.write_text("v1\n"), ["offsets/1", "truncated"]),
        (lambda f: f.write_bytes(b"\xff\xfe"), ["offsets/1", "UTF-8"]),
        (lambda f: f.unlink(), ["offsets/1", "missing"]),
    ],
)
def test_a_damaged_checkpoint_file_is_an_error_naming_it(tmp_path, capsys, damage, words):
    d, chk = tmp_path / "logs", tmp_path / "chk"
    _logs(d, [10])
    _checkpoint(chk, {0: [{"ev": {"0": 4}}], 1: [{"ev": {"0": 8}}]}, commits=[0, 1])
    damage(chk / "offsets" / "1")
    one_line_error(run(capsys, "lag", "--checkpoint", chk, "--path", d), *words)


def test_not_a_checkpoint(tmp_path, capsys):
    _logs(tmp_path / "logs", [1])
    one_line_error(
        run(capsys, "lag", "--checkpoint", tmp_path / "nope", "--path", tmp_path / "logs"),
        "--checkpoint",
        "nope",
    )
    (tmp_path / "empty").mkdir()
    one_line_error(
        run(capsys, "lag", "--checkpoint", tmp_path / "empty", "--path", tmp_path / "logs"),
        "offsets/",
    )


def test_topics_missing_from_the_path_are_an_error_not_zero_lag(tmp_path, capsys):
    d, other, chk = tmp_path / "logs", tmp_path / "other", tmp_path / "chk"
    _logs(d, [10])
    with LogManager([other]) as mgr:
        mgr.create_topic("unrelated", 1)
    _checkpoint(chk, {0: [{"ev": {"0": 4}}], 1: [{"ev": {"0": 8}, "gone": {"0": 1}}]}, commits=[0])
    one_line_error(
        run(capsys, "lag", "--checkpoint", chk, "--path", other), "ev, gone", str(other), "--path"
    )
    one_line_error(run(capsys, "lag", "--checkpoint", chk, "--path", d, "--json"), "gone", str(d))
    _checkpoint(tmp_path / "chk2", {0: [{"ev": {"0": 4}}]}, commits=[0])
    r = run(capsys, "lag", "--checkpoint", tmp_path / "chk2", "--path", d)
    assert r.code == 0 and r.out.splitlines()[-1] == "Total lag: 6"
