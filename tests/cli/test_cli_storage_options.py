"""``--storage-option KEY=VALUE``: every command that takes a log dir reaches a bucket
whose endpoint and credentials are given only on the command line (no ``AWS_*`` in the
environment), and refuses the option for local dirs, naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _cli import run, run_process

from seglog.logstore.manager.log_manager import LogManager


@pytest.fixture
def bucket(bucket_server, no_aws_env) -> tuple[str, list[str]]:
    """A fresh bucket, no AWS_* variable, and the --storage-option arguments to reach it."""
    pairs = bucket_server.storage_options()
    pairs["AWS_REGION"] = pairs.pop("aws_region")  # keys are case-insensitive, as obstore's
    args = [a for k, v in pairs.items() for a in ("--storage-option", f"{k}={v}")]
    return f"s3://{bucket_server.create_bucket()}/logs", args


def test_every_command_reaches_the_bucket_through_storage_options(bucket, capsys,
                                                                  tmp_path: Path):
    uri, opts = bucket
    assert run(capsys, "create", "t", "--path", uri, *opts).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = run_process("produce", "t", "--path", uri, *opts, stdin=b"a\nb\nc\n", env=env)
    assert r.code == 0 and "offsets 0..2" in r.out, r
    assert run(capsys, "topics", "--path", uri, *opts).out == "t\n"
    got = run(capsys, "consume", "t", "--path", uri, *opts, "--from-beginning",
              "--format", "json")
    assert [x["value"] for x in got.json_lines()] == ["a", "b", "c"]
    (described,) = run(capsys, "describe", "t", "--path", uri, *opts,
                       "--json").json()["topics"]
    assert described["partitions"][0]["endOffset"] == 3
    assert run(capsys, "alter-config", "t", "--path", uri, *opts,
               "--add-config", "retention.ms=60000").code == 0
    assert run(capsys, "maintain", uri, *opts).code == 0
    options = {k.lower(): v for k, v in (a.split("=", 1) for a in opts[1::2])}
    with LogManager(uri, read_only=True, storage_options=options) as mgr:
        (seg,) = mgr.state.partition("t", 0).segments
    r = run(capsys, "dump-log", f"{uri}/{seg.key}.log", "--print-data-log", *opts)
    assert r.code == 0 and "payload: c" in r.out, r
    r = run(capsys, "check", uri, *opts)
    assert r.code == 0 and "log end offset 3: OK" in r.out, r
    r = run(capsys, "export", uri, str(tmp_path / "out"), *opts)
    assert r.code == 0, r
    (segment,) = (tmp_path / "out" / "t-0").glob("*.log")
    assert run(capsys, "check", str(tmp_path / "out")).code == 0
    assert run(capsys, "delete", "t", "--path", uri, *opts).code == 0
    assert run(capsys, "topics", "--path", uri, *opts).out == ""


@pytest.mark.parametrize("argv", [
    ["topics", "--path", "{dir}"],
    ["create", "t", "--path", "{dir}"],
    ["maintain", "{dir}"],
    ["check", "{dir}"],
    ["dump-log", "{dir}/x.log"],
])
def test_storage_options_for_a_local_dir_are_refused_by_name(argv, capsys, tmp_path: Path):
    r = run(capsys, *[a.format(dir=tmp_path) for a in argv],
            "--storage-option", "aws_secret_access_key=not-a-real-secret")
    assert r.code != 0, r  # 2 for the operations commands, 1 for check and dump-log
    assert "aws_secret_access_key" in r.err and str(tmp_path) in r.err
    assert "not-a-real-secret" not in r.err + r.out
    assert list(tmp_path.iterdir()) == []  # nothing created, locked or written


def test_a_malformed_storage_option_is_a_usage_error(capsys, bucket):
    uri, _ = bucket
    r = run(capsys, "topics", "--path", uri, "--storage-option", "aws_region")
    assert r.code == 2 and "--storage-option expects key=value" in r.err
