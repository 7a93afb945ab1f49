"""``seglog alter`` (add partitions), ``get-offsets`` and ``delete-records``, on local log
dirs and on a bucket (a moto S3 server)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from _cli import one_line_error, run

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

T0 = 1_700_000_000_000


def _topic(path, partitions=2):
    """Topic t: partition 0 holds 10 records, one batch each, timestamps T0 + i*1000."""
    mgr = LogManager([path]) if not str(path).startswith("s3://") else LogManager(str(path))
    mgr.create_topic("t", partitions)
    for i in range(10):
        mgr.append(
            "t",
            0,
            encode_batches(
                pa.array([b"v%d" % i]), timestamps=pa.array([T0 + i * 1000], pa.int64())
            ),
        )
    mgr.checkpoint_high_watermarks()
    mgr.close()


@pytest.fixture(params=["local", "bucket"])
def log_dir(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "logs")
    return request.getfixturevalue("s3_uri")


def test_alter_adds_partitions(log_dir, capsys):
    _topic(log_dir)
    r = run(capsys, "alter", "--topic", "t", "--partitions", "5", "--path", log_dir, "--json")
    assert r.code == 0, r
    assert r.json() == {"topic": "t", "partitions": 5, "previousPartitions": 2}
    assert "keyed records now go to other partitions" in r.err
    doc = run(capsys, "describe", "t", "--path", log_dir, "--json").json()
    assert [p["partition"] for p in doc["topics"][0]["partitions"]] == [0, 1, 2, 3, 4]
    one_line_error(
        run(capsys, "alter", "t", "--partitions", "3", "--path", log_dir),
        "'t'",
        "5 partitions",
        "higher",
    )
    one_line_error(run(capsys, "alter", "nope", "--partitions", "9", "--path", log_dir), "nope")
    one_line_error(run(capsys, "alter", "t", "--path", log_dir), "--partitions")


def test_get_offsets_latest_earliest_and_for_a_time(log_dir, capsys):
    _topic(log_dir)

    def offsets(*extra):
        r = run(capsys, "get-offsets", "t", "--path", log_dir, *extra)
        assert r.code == 0, r
        return r.out.splitlines()

    assert offsets() == ["t:0:10", "t:1:0"]
    assert offsets("--time", "-1") == offsets("--time", "latest") == ["t:0:10", "t:1:0"]
    assert offsets("--time", "-2") == ["t:0:0", "t:1:0"]
    # the first offset whose timestamp is at or after T: the time index's lookup
    assert offsets("--time", str(T0 + 4500), "--partitions", "0") == ["t:0:5"]
    assert offsets("--time", str(T0 + 4000)) == ["t:0:4", "t:1:"]  # no record in t-1
    assert offsets("--time", str(T0 + 99_000)) == ["t:0:", "t:1:"]
    doc = run(
        capsys, "get-offsets", "--topic", "t", "--time", str(T0), "--path", log_dir, "--json"
    ).json()
    assert doc == {
        "topic": "t",
        "time": T0,
        "offsets": [{"partition": 0, "offset": 0}, {"partition": 1, "offset": None}],
    }
    one_line_error(
        run(capsys, "get-offsets", "t", "--time", "soon", "--path", log_dir), "--time", "soon"
    )
    one_line_error(run(capsys, "get-offsets", "t", "--time", "-3", "--path", log_dir), "--time -3")
    one_line_error(
        run(capsys, "get-offsets", "t", "--partitions", "0,7", "--path", log_dir), "partition 7"
    )


def test_delete_records_simple_form_and_kafka_json_file(log_dir, tmp_path, capsys):
    _topic(log_dir)
    r = run(capsys, "delete-records", "t", "--partition", "0", "--offset", "4", "--path", log_dir)
    assert r.code == 0, r
    assert r.out.splitlines() == [
        "Records delete operation completed:",
        "partition: t-0\tlow_watermark: 4",
    ]
    got = run(capsys, "consume", "t", "--from-beginning", "--path", log_dir)
    assert got.out.splitlines() == [f"v{i}" for i in range(4, 10)]
    assert run(capsys, "get-offsets", "t", "--time", "-2", "--path", log_dir).out.splitlines() == [
        "t:0:4",
        "t:1:0",
    ]
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "t", "partition": 0, "offset": -1},
                    {"topic": "t", "partition": 1, "offset": 0},
                ],
                "version": 1,
            }
        )
    )
    r = run(capsys, "delete-records", "--offset-json-file", spec, "--path", log_dir, "--json")
    assert r.code == 0, r
    assert r.json() == {
        "partitions": [
            {"partition": "t-0", "lowWatermark": 10},
            {"partition": "t-1", "lowWatermark": 0},
        ]
    }
    assert run(capsys, "consume", "t", "--from-beginning", "--path", log_dir).out == ""
    with LogManager(log_dir if log_dir.startswith("s3://") else [log_dir], read_only=True) as mgr:
        assert mgr.log_start_offsets()[("t", 0)] == 10


def test_delete_records_refusals_name_the_problem(tmp_path, capsys):
    d = str(tmp_path / "logs")
    _topic(d)
    one_line_error(
        run(capsys, "delete-records", "t", "--partition", "0", "--offset", "11", "--path", d),
        "offset 11",
        "t-0",
        "0..10",
    )
    one_line_error(
        run(capsys, "delete-records", "t", "--partition", "3", "--offset", "1", "--path", d), "t-3"
    )
    one_line_error(run(capsys, "delete-records", "--path", d), "--offset-json-file")
    bad = tmp_path / "bad.json"
    for text, words in [
        ("{", ["not JSON"]),
        ('{"partitions": 3}', ['"partitions"']),
        ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}', ["partitions[0]"]),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
            ' {"topic": "t", "partition": 0, "offset": 2}]}',
            ["twice"],
        ),
    ]:
        bad.write_text(text)
        one_line_error(
            run(capsys, "delete-records", "--offset-json-file", bad, "--path", d), str(bad), *words
        )
    # nothing changed by any refusal, nor by a file whose second entry is wrong
    bad.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "t", "partition": 0, "offset": 3},
                    {"topic": "t", "partition": 0 + 9, "offset": 1},
                ]
            }
        )
    )
    one_line_error(run(capsys, "delete-records", "--offset-json-file", bad, "--path", d), "t-9")
    assert run(capsys, "get-offsets", "t", "--time", "-2", "--path", d).out.startswith("t:0:0")
