"""The broker-data corpus: log dirs laid out as Kafka brokers of each era leave them
(``kafka_dirs``), read by ``seglog check``, ``seglog dump-log``, the library reader and
Spark, every record compared with what the builder wrote (its own model, not seglog's
decoder), and no file changed by any of it."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging
from pathlib import Path

import pytest
from kafka_dirs import BrokerDir, Rec, build_corpus

from seglog.cli import main
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[BrokerDir]:
    return build_corpus(tmp_path_factory.mktemp("broker-dirs"))


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def _digest(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _expected(recs: list[Rec]) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type,
             [(k, v) for k, v in r.headers] or None) for r in recs]


def test_check_accepts_every_broker_dir_with_notes_only(corpus):
    for bd in corpus:
        before = _digest(bd.path)
        code, text = _run("check", str(bd.path))
        assert code == 0, text
        lines = text.splitlines()
        assert all(ln.endswith("OK") or ": note: " in ln or ln.endswith("note(s))")
                   for ln in lines), text
        assert _digest(bd.path) == before
    # Kafka 2.7's empty active segment: a .timeindex, no .index: a note, not a problem.
    code, text = _run("check", str(corpus[1].path / "events-0"))
    assert code == 0 and "note: no offset index" in text and "OK (1 note(s))" in text


def test_old_brokers_indexes_are_what_kafkas_dump_tool_calls_mismatches(corpus):
    """The corpus does hold the index shapes the issue is about: Kafka's strict tool
    reports them, seglog's lookup rule accepts them."""
    old = sorted((corpus[1].path / "events-1").glob("*.index"))
    texts = [_run("dump-log", str(p)) for p in old]
    assert all(code == 0 for code, _ in texts)
    assert any("Mismatches in :" in t for _, t in texts)
    times = [_run("dump-log", str(p)) for p in sorted(
        (corpus[1].path / "events-1").glob("*.timeindex"))]
    assert any("found log offset" in t for _, t in times)
    new = [_run("dump-log", str(p))[1]
           for p in sorted((corpus[2].path / "events-0").glob("*index"))]
    assert not any("kafka-dump-log would report" in t for t in new)


def test_dump_log_reads_every_file_kind(corpus):
    seen: set[str] = set()
    for bd in corpus:
        for path in sorted(p for p in bd.path.rglob("*") if p.is_file()):
            for flags in ((), ("--print-data-log",)):
                code, text = _run("dump-log", *flags, str(path))
                assert code == 0, (path, text)
                assert "Index problem" not in text and "invalid" not in text.lower()
            seen.add(path.suffix or path.name)
            if path.suffix == ".log" and path.parent.name != "__cluster_metadata-0":
                tp = path.parent.name.rpartition("-")
                recs = bd.partitions[(tp[0], int(tp[2]))].records
                base = int(path.stem)
                data_lines = [ln for ln in text.splitlines() if ln.startswith("| offset:")
                              and "endTxnMarker" not in ln]
                want = [r.offset for r in recs if base <= r.offset]
                got = [int(ln.split()[2]) for ln in data_lines]
                assert got == want[:len(got)] and (got or not path.stat().st_size), path
    assert {".log", ".index", ".timeindex", ".snapshot", ".txnindex", ".checkpoint",
            ".properties", ".metadata", "leader-epoch-checkpoint", "quorum-state",
            ".kafka_cleanshutdown"} <= seen
    zk27, kraft = corpus[1].path, corpus[2].path
    _code, text = _run("dump-log", "--print-data-log", *map(str, sorted(
        (zk27 / "txn-0").glob("*.log"))))
    assert "endTxnMarker: COMMIT coordinatorEpoch: 7" in text
    assert "endTxnMarker: ABORT coordinatorEpoch: 7" in text
    _code, text = _run("dump-log", *map(str, sorted((zk27 / "txn-0").glob("*.txnindex"))))
    assert "version: 0 producerId: 4000 firstOffset: " in text
    _code, text = _run("dump-log", str(sorted((zk27 / "txn-0").glob("*.snapshot"))[-1]))
    assert "producerId: 4000 producerEpoch: 1 coordinatorEpoch: 0" in text
    assert "producerId: 4001 producerEpoch: 0" in text and "lastSequence: 3 " in text
    _code, text = _run("dump-log", "--print-data-log", str(kraft / "bootstrap.checkpoint"),
                       str(kraft / "__cluster_metadata-0" /
                           "00000000000000000005-0000000001.checkpoint"),
                       str(kraft / "__cluster_metadata-0" / "00000000000000000000.log"))
    assert "KRaft bootstrap snapshot" in text and "Snapshot end offset: 5, epoch: 1" in text
    assert "controlType: SNAPSHOT_HEADER(3)" in text and "controlType: LEADER_CHANGE(2)" in text
    _code, text = _run("dump-log", str(kraft / "meta.properties"))
    assert "Ignoring unknown file" in text


def test_library_reader_reads_every_record_and_lookup(corpus, caplog):
    for bd in corpus:
        before = _digest(bd.path)
        with caplog.at_level(logging.WARNING), LogManager([bd.path], read_only=True) as reader:
            assert reader.topics() == bd.topics  # never __cluster_metadata
            for (topic, p), w in bd.partitions.items():
                log = reader.get_log(topic, p)
                got = []
                for chunk in log.read_chunks(0, w.next_offset):
                    batch = decode_batches(chunk)
                    got += [(r["offset"], r["key"], r["value"], r["timestamp"],
                             r["timestampType"],
                             [(h["key"], h["value"]) for h in r["headers"]]
                             if r["headers"] else None)
                            for r in batch.to_pylist()]
                assert got == _expected(w.records), (bd.path, topic, p)
                _check_lookups(log, w.records, w.control_stamps, w.next_offset)
        assert not caplog.records, caplog.text  # Kafka's files raise no warning
        assert _digest(bd.path) == before


def _check_lookups(log, recs: list[Rec], markers: list[tuple[int, int]], end: int) -> None:
    """Offset and timestamp lookups through the broker's indexes give the model's
    answers (the first record at or after an offset / with timestamp >= T; by timestamp,
    control records count, as in Kafka's ListOffsets)."""
    offsets = [r.offset for r in recs]
    for target in range(0, end, 3):
        data = log.read(target, max_bytes=1)
        first = decode_batches(data.records, start_offset=target).column("offset").to_pylist()
        want = next((o for o in offsets if o >= target), None)
        # A control batch holds no record: the read must then start at or past it.
        assert (first[0] if first else None) == (want if first else None)
        assert target < data.next_offset
    timed = sorted([(r.offset, r.timestamp) for r in recs if r.timestamp is not None]
                   + markers)
    stamps = sorted({t for _, t in timed})
    for ts in stamps[::5] + [s + 1 for s in stamps[::7]]:
        want = next((o for o, t in timed if t >= ts), None)
        assert log.offset_for_timestamp(ts) == want, ts


@pytest.mark.spark
def test_spark_reads_every_record(spark, corpus):
    for bd in corpus:
        reader = (spark.read.format("seglog").option("path", str(bd.path))
                  .option("includeHeaders", "true"))
        if bd.path.name == "zk-2.7":  # a pattern leaves out Kafka's internal topics
            df = reader.option("subscribePattern", ".*").load()
            topics = [t for t in bd.topics if not t.startswith("__")]
        else:
            df = reader.option("subscribe", ",".join(bd.topics)).load()
            topics = bd.topics
        rows = df.orderBy("topic", "partition", "offset").collect()
        got = [(r.topic, r.partition, r.offset, r.key, r.value,
                None if r.timestamp is None else _millis(r.timestamp), r.timestampType,
                [(h.key, h.value) for h in r.headers] if r.headers else None) for r in rows]
        want = [(t, p, *rec) for (t, p), w in sorted(bd.partitions.items()) if t in topics
                for rec in _expected(w.records)]
        assert got == want, bd.path


def _millis(ts: dt.datetime) -> int:
    return round(ts.replace(tzinfo=ts.tzinfo or dt.timezone.utc).timestamp() * 1000)
