"""``seglog probe-store URI``: each check reported, a verdict, exit 0 on a store that
keeps its conditional writes (the suite's servers), 1 on one that ignores them (moto told
to, as some S3-compatible stores do), 2 when it cannot run; the scratch prefix is gone
afterwards either way."""

from __future__ import annotations

import pytest
from _cli import one_line_error, run, run_process
from s3_server import MotoServer

from seglog.logstore.storage.object_storage import ObjectStorage


def _nothing_left(uri: str) -> None:
    assert ObjectStorage(uri).list_tree("_seglog") == []


@pytest.mark.parametrize("server", ["bucket_server", "seaweed_server"])
def test_a_store_that_keeps_its_conditional_writes_is_safe(server, request, monkeypatch, capsys):
    s3 = request.getfixturevalue(server)
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3.create_bucket()}/logs"
    # One round: the repeated races on both servers are
    # tests/objectstore/test_conditional_writes_under_load.py's (a SeaweedFS round costs
    # seconds: its losers are answered late).
    r = run(capsys, "probe-store", uri, "--rounds", "1")
    assert r.code == 0, r
    assert r.out.count("  ok    ") == 4 and "FAIL" not in r.out
    assert "Verdict: SAFE" in r.out and "Removed everything" in r.out
    _nothing_left(uri)


@pytest.fixture(scope="module")
def ignoring_server():
    with MotoServer(ignore_conditions=True) as server:
        yield server


def test_a_store_that_ignores_conditional_writes_is_unsafe(ignoring_server, monkeypatch, capsys):
    for name, value in ignoring_server.env.items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{ignoring_server.create_bucket()}/logs"
    r = run(capsys, "probe-store", uri, "--rounds", "2", "--json")
    assert r.code == 1, r
    doc = r.json()
    assert doc["safe"] is False and doc["cleaned_up"] is True and doc["leftover"] == []
    checks = {c["name"]: c for c in doc["checks"]}
    assert not checks["create on an existing key"]["passed"]
    assert "If-None-Match: * ignored" in checks["create on an existing key"]["detail"]
    assert not checks["8 concurrent creates of one key"]["passed"]
    assert not checks["if-match put with a stale ETag"]["passed"]
    assert doc["prefix"].startswith("_seglog/probe-")
    _nothing_left(uri)
    text = run(capsys, "probe-store", uri, "--rounds", "1")
    assert text.code == 1 and "Verdict: UNSAFE" in text.out and "FAIL" in text.out


def test_the_console_script_and_its_usage_errors(bucket_server, tmp_path, capsys):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    r = run_process("probe-store", uri, "--rounds", "1", env=bucket_server.env)
    assert r.code == 0 and "Verdict: SAFE" in r.out, r
    one_line_error(
        run(capsys, "probe-store", str(tmp_path)), "probe-store", str(tmp_path), "object store"
    )
    one_line_error(run(capsys, "probe-store", "memory://x", "--writers", "1"), "--writers")


@pytest.mark.usefixtures("no_aws_env")
def test_a_malformed_endpoint_is_exit_2_naming_it(capsys):
    r = run(
        capsys,
        "probe-store",
        "s3://some-bucket/logs",
        "--storage-option",
        "aws_endpoint=127.0.0.1:9000",
    )
    one_line_error(r, "aws_endpoint", "127.0.0.1:9000")
