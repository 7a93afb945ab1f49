"""``seglog produce`` / ``seglog consume`` round trips on real log dirs."""

from __future__ import annotations

import base64
import signal
import subprocess
import uuid

import pyarrow as pa
from _cli import SEGLOG, one_line_error, run, run_process

from seglog import cli_produce
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import verify_all
from seglog.streaming.partitioner import partitions_for_keys

T0 = 1_700_000_000_000


def test_keys_headers_nulls_and_placement_round_trip(tmp_path, capsys):
    d = tmp_path / "logs"
    assert run(capsys, "create", "t", "--path", d, "--partitions", "3").code == 0
    lines = [b"k%d|v%d" % (i, i) for i in range(30)] + [b"gone|NULL", b"NULL|keyless"]
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(lines) + b"\r\n")
    r = run(
        capsys,
        "produce",
        "t",
        "--path",
        d,
        "--file",
        src,
        "--key-separator",
        "|",
        "--property",
        "null.marker=NULL",
        "--json",
    )
    assert r.code == 0, r
    assert r.json()["records"] == 32
    got = run(capsys, "consume", "t", "--path", d, "--from-beginning", "--format", "json")
    assert got.code == 0 and "Processed a total of 32 messages" in got.err
    rows = got.json_lines()
    by_key = {row["key"]: row for row in rows}
    # keyed rows sit where Kafka's murmur2 partitioner puts them
    keys = [f"k{i}".encode() for i in range(30)] + [b"gone"]
    want = partitions_for_keys(pa.array(keys, pa.binary()), 3).tolist()
    assert [by_key[k.decode()]["partition"] for k in keys] == want
    assert by_key["k7"]["value"] == "v7" and by_key["k7"]["valueEncoding"] == "utf8"
    assert by_key["gone"]["value"] is None and by_key["gone"]["valueEncoding"] is None
    assert by_key[None]["value"] == "keyless" and by_key[None]["keyEncoding"] is None
    assert by_key["k29"]["value"] == "v29"  # the trailing \r\n is not part of the value
    for p in range(3):  # offsets per partition are dense, from 0
        assert sorted(x["offset"] for x in rows if x["partition"] == p) == list(
            range(sum(1 for x in rows if x["partition"] == p))
        )

    headers_in = b"h1:a,h2:\xff\tk\tv\n\tk2\tNULL\n"
    r = run_process(
        "produce",
        "t",
        "--path",
        d,
        "--partition",
        "2",
        "--parse-headers",
        "--property",
        "parse.key=true",
        "--property",
        "null.marker=NULL",
        stdin=headers_in,
    )
    assert r.code == 0 and "Produced 2 record(s) to t: partition 2 offsets" in r.out, r
    tail = run(
        capsys,
        "consume",
        "t",
        "--path",
        d,
        "--partition",
        "2",
        "--offset",
        str(by_key_count(rows, 2)),
        "--format",
        "json",
    ).json_lines()
    assert [(x["key"], x["value"]) for x in tail] == [("k", "v"), ("k2", None)]
    assert tail[0]["headers"] == [
        {"key": "h1", "value": "a", "valueEncoding": "utf8"},
        {"key": "h2", "value": base64.b64encode(b"\xff").decode(), "valueEncoding": "base64"},
    ]
    assert tail[1]["headers"] == []

    text = run(
        capsys,
        "consume",
        "t",
        "--path",
        d,
        "--partition",
        "2",
        "--offset",
        str(by_key_count(rows, 2)),
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.timestamp=true",
    )
    first, second = text.out.splitlines()
    assert first.startswith("CreateTime:") and first.endswith(
        f"\tPartition:2\tOffset:{by_key_count(rows, 2)}\th1:a,h2:\\xff\tk\tv"
    )
    assert second.endswith("\tNO_HEADERS\tk2\tnull")


def by_key_count(rows, partition):
    return sum(1 for x in rows if x["partition"] == partition)


def test_consume_starting_points_max_and_the_default_end(tmp_path, capsys):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append(
            "t",
            0,
            encode_batches(
                pa.array([b"v%d" % i for i in range(10)]),
                timestamps=pa.array([T0 + i * 1000 for i in range(10)], pa.int64()),
                max_batch_bytes=100,
            ),
        )
        mgr.checkpoint_high_watermarks()
        mgr.append("t", 0, encode_batches(pa.array([b"unpublished"])), publish=False)
        mgr.get_log("t", 0).flush()
        reader = run(capsys, "consume", "t", "--path", d, "--from-beginning")
        # the writer has not published offset 10: a reader stops at the high watermark
        assert reader.out.splitlines() == [f"v{i}" for i in range(10)]
    assert run(capsys, "consume", "t", "--path", d).out == ""  # Kafka's default: latest
    ts = run(capsys, "consume", "t", "--path", d, "--timestamp", str(T0 + 6500))
    assert ts.out.splitlines() == ["v7", "v8", "v9", "unpublished"]
    iso = run(capsys, "consume", "t", "--path", d, "--timestamp", "2023-11-14T22:13:27+00:00")
    assert iso.out.splitlines()[0] == "v7"
    few = run(
        capsys, "consume", "t", "--path", d, "--offset", "3", "--partition", "0", "--max", "2"
    )
    assert few.out.splitlines() == ["v3", "v4"] and "total of 2 messages" in few.err
    follow = run(capsys, "consume", "t", "--path", d, "--from-beginning", "--follow", "--max", "11")
    assert len(follow.out.splitlines()) == 11
    one_line_error(
        run(capsys, "consume", "t", "--path", d, "--offset", "99", "--partition", "0"),
        "--offset 99",
        "t-0",
        "0 to 11",
    )
    one_line_error(run(capsys, "consume", "t", "--path", d, "--offset", "1"), "--partition")
    one_line_error(
        run(capsys, "consume", "t", "--path", d, "--from-beginning", "--offset", "1"), "conflict"
    )
    one_line_error(run(capsys, "consume", "t", "--path", d, "--partition", "5"), "--partition 5")
    one_line_error(
        run(capsys, "consume", "t", "--path", d, "--timestamp", "yesterday"),
        "--timestamp",
        "yesterday",
    )
    one_line_error(
        run(capsys, "consume", "t", "--path", d, "--property", "print.keys=true"), "print.keys"
    )


def test_a_failed_produce_publishes_nothing_and_takes_its_appends_back(
    tmp_path, capsys, monkeypatch
):
    d = tmp_path / "logs"
    assert run(capsys, "create", "t", "--path", d, "--partitions", "2").code == 0
    assert run(capsys, "produce", "t", "--path", d, "--file", _lines(tmp_path, 4)).code == 0
    monkeypatch.setattr(cli_produce, "CHUNK_ROWS", 3)  # several chunks appended first
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"".join(b"k%d:v\n" % i for i in range(10)) + b"no separator\n")
    one_line_error(
        run(capsys, "produce", "t", "--path", d, "--file", bad, "--key-separator", ":"),
        "line 11",
        "key separator",
    )
    with LogManager([d]) as mgr:  # only the first run's 4 records, published and on disk
        ends = {("t", p): mgr.get_log("t", p).log_end_offset for p in (0, 1)}
        assert sum(ends.values()) == 4 and mgr.high_watermarks() == ends
    one_line_error(
        run(capsys, "produce", "t", "--path", d, "--partition", "7", "--file", bad), "--partition 7"
    )
    one_line_error(
        run(capsys, "produce", "nope", "--path", d, "--file", bad, "--no-create-topic"),
        "nope",
        "--no-create-topic",
    )
    with LogManager([d]) as mgr:
        assert mgr.topics() == ["t"]


def test_produce_creates_a_missing_topic_as_a_broker_and_the_sink_do(tmp_path, capsys):
    d = tmp_path / "logs"
    assert run(capsys, "create", "t", "--path", d).code == 0
    r = run(capsys, "produce", "fresh", "--path", d, "--file", _lines(tmp_path, 6))
    assert r.code == 0, r
    assert "created topic 'fresh' with 1 partition(s)" in r.err and "Produced 6" in r.out
    r = run(
        capsys,
        "produce",
        "wide",
        "--path",
        d,
        "--file",
        _lines(tmp_path, 6),
        "--num-partitions",
        "3",
        "--topic-config",
        "retention.ms=60000",
    )
    assert r.code == 0 and "with 3 partition(s)" in r.err, r
    with LogManager([d], read_only=True) as mgr:
        assert mgr.topics() == ["fresh", "t", "wide"]
        assert mgr.partitions("wide") == [0, 1, 2]
        assert mgr.topic_overrides("wide") == {"retention.ms": "60000"}
        assert mgr.high_watermarks()[("fresh", 0)] == 6
    # an existing topic is used as it is, without a word
    r = run(capsys, "produce", "fresh", "--path", d, "--file", _lines(tmp_path, 2))
    assert r.code == 0 and "created" not in r.err
    one_line_error(
        run(
            capsys,
            "produce",
            "bad",
            "--path",
            d,
            "--file",
            _lines(tmp_path, 1),
            "--topic-config",
            "retention.ms=abc",
        ),
        "retention.ms",
    )


def _lines(tmp_path, n):
    path = tmp_path / f"{n}.txt"
    path.write_bytes(b"".join(b"value-%d\n" % i for i in range(n)))
    return path


def test_a_chunk_over_several_partitions_of_a_bucket_is_one_commit():
    """``produce`` appends each chunk with ``append_many``: on a bucket, every partition
    the chunk touches in one commit (one conditional PUT), not a commit per partition."""
    mgr = LogManager(f"memory://cli-produce-{uuid.uuid4().hex}")
    mgr.create_topic("t", 4)
    producer = cli_produce.Producer(mgr, "t", None, cli_produce.CompressionType.NONE)
    version = mgr.state.version
    producer.add([cli_produce.Row(b"k%d" % i, b"v%d" % i, None) for i in range(40)])
    assert mgr.state.version == version + 1
    assert producer.summary()["records"] == 40
    hws = mgr.high_watermarks()
    assert sum(hws.values()) == 40 and all(hws.values())


def _corrupt_partition(d, values, bad):
    """A one-partition topic with one batch per value; the CRC of batch ``bad`` broken."""
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1)
        for v in values:
            mgr.append("t", 0, encode_batches(pa.array([v])))
        mgr.checkpoint_high_watermarks()
    log = d / "t-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    headers = [c.header for c in verify_all(bytes(data))]
    h = headers[bad]
    data[h.end_position - 2] ^= 0xFF  # inside the last record: the CRC no longer matches
    log.write_bytes(data)
    return log, h.position


def test_consume_prints_the_records_before_a_corrupt_batch_then_names_it(tmp_path, capsys):
    d = tmp_path / "logs"
    log, position = _corrupt_partition(d, [b"v%d" % i for i in range(6)], bad=3)
    r = run(capsys, "consume", "t", "--path", d, "--from-beginning")
    assert r.code == 2
    assert r.out.splitlines() == ["v0", "v1", "v2"]
    err = r.err.strip().splitlines()
    assert err[0] == "Processed a total of 3 messages" and len(err) == 2, r.err
    for word in ("partition t-0", str(log), f"position {position}", "offsets 3..3", "CRC"):
        assert word in err[1], (word, err[1])
    assert "Traceback" not in r.err
    # from after the bad batch, the rest reads
    tail = run(capsys, "consume", "t", "--path", d, "--offset", "4", "--partition", "0")
    assert tail.code == 0 and tail.out.splitlines() == ["v4", "v5"]


def test_consume_follow_interrupted_says_how_many_it_processed(tmp_path):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, encode_batches(pa.array([b"a", b"b", b"c"])))
        mgr.checkpoint_high_watermarks()
    proc = subprocess.Popen(
        [
            str(SEGLOG),
            "consume",
            "t",
            "--path",
            str(d),
            "--from-beginning",
            "--follow",
            "--poll-ms",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        seen = [proc.stdout.readline() for _ in range(3)]  # all printed: now it polls
        assert seen == [b"a\n", b"b\n", b"c\n"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.decode().splitlines() == [
        "Processed a total of 3 messages",
        "seglog consume: interrupted",
    ]


def test_a_wrong_property_is_one_line_naming_it(tmp_path, capsys):
    """produce and consume check their ``--property`` values the same way: an unknown
    name lists the known ones, a flag must be true or false."""
    d = tmp_path / "logs"
    assert run(capsys, "create", "t", "--path", d).code == 0
    src = tmp_path / "in.txt"
    src.write_bytes(b"v\n")
    for command, known in (("produce", "parse.key"), ("consume", "print.key")):
        extra = ["--file", src] if command == "produce" else ["--from-beginning"]
        r = run(capsys, command, "t", "--path", d, *extra, "--property", "no.such=1")
        one_line_error(r, "unknown --property 'no.such'", known)
        r = run(capsys, command, "t", "--path", d, *extra, "--property", f"{known}=yes")
        one_line_error(r, f"--property {known} must be true or false, got 'yes'")
