"""Command lines as a Kafka user types them (``kafka-topics.sh``,
``kafka-console-producer.sh``/``-consumer.sh``, ``kafka-dump-log.sh`` spellings)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _cli import one_line_error, run, run_process

from seglog import __version__
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import ControlType, encode_batches, encode_control_batch

BOOT = ("--bootstrap-server", "localhost:9092")


def test_topics_producer_and_consumer_flags(tmp_path, capsys):
    d = tmp_path / "logs"
    r = run(
        capsys,
        "create",
        "--topic",
        "ev",
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        *BOOT,
        "--path",
        d,
    )
    assert r.code == 0 and "Created topic ev with 2 partition(s)" in r.out, r
    assert "--bootstrap-server localhost:9092 ignored" in r.err
    lines = tmp_path / "in.txt"
    lines.write_bytes(b"k1:v1\nk2:v2\nk3:v3\n")
    r = run(
        capsys,
        "produce",
        "--topic",
        "ev",
        *BOOT,
        "--path",
        d,
        "--file",
        lines,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
    )
    assert r.code == 0 and "Produced 3 record(s)" in r.out, r
    r = run(
        capsys,
        "consume",
        "--topic",
        "ev",
        *BOOT,
        "--from-beginning",
        "--max-messages",
        "2",
        "--group",
        "g1",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=:",
        "--path",
        d,
    )
    assert r.code == 0, r
    assert len(r.out.splitlines()) == 2
    assert set(r.out.splitlines()) <= {"k1:v1", "k2:v2", "k3:v3"}
    assert "--group g1 ignored" in r.err and "Processed a total of 2 messages" in r.err
    # Kafka 4's names of --property
    r = run(
        capsys,
        "consume",
        "ev",
        "--from-beginning",
        "--formatter-property",
        "print.partition=true",
        "--path",
        d,
    )
    assert r.code == 0 and all(x.startswith("Partition:") for x in r.out.splitlines()), r
    r = run(
        capsys,
        "produce",
        "ev",
        "--reader-property",
        "parse.key=true",
        "--path",
        d,
        "--file",
        lines,
        "--reader-property",
        "key.separator=:",
        "--partition",
        "1",
    )
    assert r.code == 0 and "Produced 3 record(s) to ev: partition 1" in r.out, r
    doc = run(capsys, "describe", "--topic", "ev", "--path", d, "--json").json()
    assert [t["topic"] for t in doc["topics"]] == ["ev"]
    r = run(
        capsys, "alter-config", "--topic", "ev", "--add-config", "retention.ms=1000", "--path", d
    )
    assert r.code == 0, r
    assert run(capsys, "delete", "--topic", "ev", *BOOT, "--path", d).code == 0
    assert run(capsys, "topics", *BOOT, "--path", d).out == ""


def test_replication_factor_other_than_one_is_refused(tmp_path, capsys):
    d = tmp_path / "logs"
    one_line_error(
        run(capsys, "create", "--topic", "ev", "--replication-factor", "3", "--path", d),
        "--replication-factor 3",
        "only 1",
    )
    assert run(capsys, "topics", "--path", d).out == ""


def test_consume_read_committed_skips_aborted_transactions(tmp_path, capsys):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1)
        log = mgr.get_log("t", 0)

        def txn(values, pid):
            return encode_batches(
                pa.array(values),
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )

        log.append(txn([b"aborted"], 7))
        log.append(
            encode_control_batch(
                ControlType.ABORT, producer_id=7, producer_epoch=0, timestamp_ms=1_700_000_000_000
            )
        )
        log.append(encode_batches(pa.array([b"plain"])))
        log.append(txn([b"open"], 8))  # still open: above the last stable offset
        mgr.checkpoint_high_watermarks()
    committed = run(
        capsys,
        "consume",
        "t",
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--path",
        d,
    )
    assert committed.code == 0 and committed.out.splitlines() == ["plain"], committed
    everything = run(capsys, "consume", "t", "--from-beginning", "--path", d)
    assert everything.out.splitlines() == ["aborted", "plain", "open"]


def test_dump_log_files_and_deep_iteration(tmp_path, capsys):
    d = tmp_path / "logs"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 2)
        for p in (0, 1):
            mgr.append(
                "t", p, encode_batches(pa.array([b"secret-%d" % p]), keys=pa.array([b"key"]))
            )
        mgr.checkpoint_high_watermarks()
    files = [d / f"t-{p}" / "00000000000000000000.log" for p in (0, 1)]
    deep = run(capsys, "dump-log", "--files", f"{files[0]},{files[1]}", "--deep-iteration")
    assert deep.code == 0, deep
    records = [line for line in deep.out.splitlines() if line.startswith("| offset:")]
    assert len(records) == 2
    assert all("keySize: 3 valueSize: 8 headerKeys: []" in line for line in records)
    assert "secret" not in deep.out  # deep iteration alone shows no data
    data = run(capsys, "dump-log", "--files", str(files[0]), "--deep-iteration", "--print-data-log")
    assert "payload: secret-0" in data.out
    assert (
        run(capsys, "dump-log", str(files[0])).out
        == run(capsys, "dump-log", "--files", str(files[0])).out
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["consume", "t", "--bogus"], ["usage: seglog consume", "unrecognized arguments: --bogus"]),
        (["create", "--partitions", "x", "t"], ["usage: seglog create", "--partitions"]),
        (["consume"], ["usage: seglog consume", "TOPIC or --topic"]),
        (["produce", "a", "--topic", "b"], ["usage: seglog produce", "given twice"]),
        (["dump-log"], ["usage: seglog dump-log", "--files"]),
    ],
)
def test_a_usage_error_prints_the_subcommand_usage(tmp_path, argv, words):
    r = run_process(*argv, "--path", tmp_path) if argv[0] != "dump-log" else run_process(*argv)
    assert r.code == 2, r
    assert "{dump-log,check" not in r.err  # not the top-level usage
    for w in words:
        assert w in r.err, (w, r.err)


def test_version():
    r = run_process("--version")
    assert r.code == 0 and r.out.strip() == f"seglog {__version__}"
