"""``seglog repair URI`` and the evidence of deleted commits (issue 22.3, 22.4), on a
bucket of the session's S3 server: a damaged commit (bad JSON, a segment that does not
start at the log end, a truncated object) is named by a dry run that changes nothing;
``--execute`` ends the log before it, keeping copies; then every topic reads up to the
cut and appends go on. A deleted newest commit is reported by ``seglog check`` and
refused by writers where a hint, a snapshot or a segment beyond the log end shows it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from _cli import run

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_repair import diagnose, repair
from seglog.logstore.bucket.bucket_state import HINT_KEY, commit_key, snapshot_key
from seglog.logstore.errors import CorruptMetadataError
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def values(mgr: BucketLogManager, topic: str, partition: int) -> list[str]:
    log = mgr.get_log(topic, partition)
    out: list[str] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        out += [v.decode() for v in decode_batches(bytes(chunk)).column("value").to_pylist()]
    return out


def batch(text: str) -> bytearray:
    return encode_batches(pa.array([f"{text}-{j}".encode() for j in range(3)]))


PARTITIONS = [("a", 0), ("b", 0), ("b", 1)]


def make_log(uri: str, appends: int) -> dict[tuple[str, int], list[str]]:
    """Topics a (1 partition) and b (2): versions 0 and 1; then ``appends`` appends
    (versions 2, 3, ...) round robin. Returns per partition the values of versions <= 10
    (the snapshot a writer of version 10 leaves). All in the catalog log (a bucket
    written before per-topic logs: ``topic_logs=False``), so one log holds them all."""
    upto: dict[tuple[str, int], list[str]] = {tp: [] for tp in PARTITIONS}
    with BucketLogManager(uri, topic_logs=False) as mgr:
        mgr.create_topic("a", 1)
        mgr.create_topic("b", 2)
        for i in range(appends):
            tp = PARTITIONS[i % 3]
            mgr.append(*tp, batch(f"v{i + 2}"))
            if i + 2 <= 10:
                upto[tp] += [f"v{i + 2}-{j}" for j in range(3)]
    return upto


def everything(storage: ObjectStorage) -> dict[str, bytes]:
    return {e.name: storage.read(e.name) for e in storage.list_tree("")}


def damage(storage: ObjectStorage, version: int, how: str) -> None:
    key = commit_key(version)
    data = storage.read(key)
    if how == "bad-json":
        data = b'{"format": 1, "version": ' + data[:40]
    elif how == "truncated":
        data = data[: len(data) // 2]
    else:  # its segment placed 100 offsets past the log end
        doc = json.loads(data)
        (change,) = doc["partitions"].values()
        (entry,) = change["add"]
        prefix, _, stem = entry["key"].rpartition("/")
        entry["base_offset"] += 100
        entry["next_offset"] += 100
        entry["key"] = f"{prefix}/{entry['base_offset']:020d}-{stem.partition('-')[2]}"
        data = json.dumps(doc).encode()
    storage.write_atomic(key, data)


@pytest.mark.parametrize("how", ["bad-json", "not-at-log-end", "truncated"])
def test_repair_names_the_bad_commit_and_ends_the_log_before_it(s3_uri: str, capsys, how: str):
    upto = make_log(s3_uri, 12)  # versions 0..13, a snapshot and the hint at 10
    storage = ObjectStorage(s3_uri)
    damage(storage, 11, how)
    with pytest.raises(CorruptMetadataError, match="seglog repair"):
        BucketLogManager(s3_uri, read_only=True)  # every topic of the dir is stopped
    before = everything(storage)

    dry = run(capsys, "repair", s3_uri)
    assert dry.code == 1, dry
    assert "commit 11 does not follow its state" in dry.out
    assert "commit 12 (append): b-0 offsets [9, 12)" in dry.out
    assert "commit 13 (append): b-1 offsets [9, 12)" in dry.out
    assert "Dry run: nothing was changed" in dry.out
    report = run(capsys, "repair", s3_uri, "--json").json()
    assert (report["bad_version"], report["cut"]) == (11, 10)
    assert [c["version"] for c in report["lost_commits"]] == [11, 12, 13]
    assert everything(storage) == before  # the dry runs changed nothing

    done = run(capsys, "repair", s3_uri, "--execute")
    assert done.code == 0, done
    assert "the log now ends at version 10" in done.out
    with BucketLogManager(s3_uri) as mgr:
        assert mgr.state.version == 10
        for tp in PARTITIONS:  # every topic readable up to the cut
            assert values(mgr, *tp) == upto[tp]
        for tp in PARTITIONS:  # and writable after it
            mgr.append(*tp, batch("after"))
    with BucketLogManager(s3_uri, read_only=True) as reader:
        for tp in PARTITIONS:
            assert values(reader, *tp) == upto[tp] + [f"after-{j}" for j in range(3)]
    # What left the log was copied first: the three commits, the segments only they named.
    moved = [k for k in everything(storage) if k.startswith("_seglog/repaired/")]
    assert (
        sum(k.endswith(tuple(f"log/{commit_key(v)[-25:]}" for v in (11, 12, 13))) for k in moved)
        == 3
    )
    assert sum(k.endswith(".log") and "/b-" in k for k in moved) >= 2
    assert run(capsys, "check", s3_uri).code == 0


@pytest.mark.parametrize("snapshot_too", [True, False])
def test_a_deleted_newest_commit_with_a_hint_ahead_is_seen_and_refused(
    s3_uri: str, capsys, snapshot_too: bool
):
    upto = make_log(s3_uri, 9)  # versions 0..10: the snapshot and hint of 10
    storage = ObjectStorage(s3_uri)
    storage.delete(commit_key(10))  # the newest commit (and the snapshot standing for it)
    if snapshot_too:
        storage.delete(snapshot_key(10))
    assert json.loads(storage.read(HINT_KEY))["version"] == 10

    checked = run(capsys, "check", s3_uri)
    assert checked.code == 1
    if snapshot_too:
        assert "names version 10, beyond the newest commit 9" in checked.out
        mgr = BucketLogManager(s3_uri)
        with pytest.raises(
            CorruptMetadataError, match=r"commits after 9 were deleted.*seglog repair"
        ):
            mgr.append("a", 0, batch("x"))  # would re-use version 10
        mgr.close()
    else:  # the hint's snapshot stands for commit 10: every open refuses
        assert "commit 10, the newest this process knows, is gone" in checked.err
        assert "seglog repair" in checked.err
    dry = run(capsys, "repair", s3_uri)
    assert dry.code == 1 and "names version 10, beyond the newest commit 9" in dry.out
    assert run(capsys, "repair", s3_uri, "--execute").code == 0
    with BucketLogManager(s3_uri) as mgr:
        mgr.append("a", 0, batch("x"))
        assert mgr.state.version == 10
        upto[("a", 0)] = [v for v in upto[("a", 0)] if not v.startswith("v10-")]
        assert values(mgr, "a", 0)[:-3] == [v for v in upto[("a", 0)]]
    assert run(capsys, "check", s3_uri).code == 0


def test_segments_beyond_the_log_end_show_deleted_commits(s3_uri: str, capsys):
    make_log(s3_uri, 4)  # versions 0..5; a-0 appended at 2 and 5
    storage = ObjectStorage(s3_uri)
    storage.delete(commit_key(5))
    storage.delete(commit_key(4))
    storage.delete(commit_key(3))
    storage.delete(commit_key(2))  # a-0's log end is 0; commit 5's segment starts at 3
    checked = run(capsys, "check", s3_uri)
    assert checked.code == 1, checked
    assert "starting at offset 3, beyond the log end 0" in checked.out
    assert "seglog repair" in checked.out


def test_repair_of_a_healthy_log_changes_nothing(s3_uri: str, capsys):
    make_log(s3_uri, 2)
    storage = ObjectStorage(s3_uri)
    before = everything(storage)
    r = run(capsys, "repair", s3_uri, "--execute")
    assert r.code == 0 and "nothing to repair" in r.out
    assert everything(storage) == before
    empty = run(capsys, "repair", f"{s3_uri}-none")
    assert empty.code == 0 and "no commits here" in empty.out


def test_repair_refuses_a_local_dir(tmp_path, capsys):
    r = run(capsys, "repair", str(tmp_path))
    assert r.code == 2 and "repair works on a bucket log dir" in r.err


class CommitsDuringRepair:
    """An ``ObjectStorage`` whose first delete of a commit lets a stale writer (opened
    before the damage, so its state is past it) commit first."""

    def __init__(self, inner: ObjectStorage, stale: BucketLogManager) -> None:
        self.inner = inner
        self.stale = stale
        self.fired = False

    @property
    def uri(self) -> str:
        return self.inner.uri

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def delete(self, key: str) -> None:
        if key.startswith("_seglog/log/") and not self.fired:
            self.fired = True
            self.stale.append("a", 0, batch("stale"))  # version 14, on its state of 13
        self.inner.delete(key)


def test_a_writer_committing_during_the_repair_is_moved_aside_too(s3_uri: str):
    upto = make_log(s3_uri, 12)  # versions 0..13
    stale = BucketLogManager(s3_uri)  # holds version 13
    storage = ObjectStorage(s3_uri)
    damage(storage, 11, "bad-json")
    wrapped = CommitsDuringRepair(storage, stale)
    diagnosis = diagnose(storage)
    assert diagnosis.cut == 10
    run_prefix = repair(wrapped, diagnosis)
    assert wrapped.fired
    stale.close()
    moved = {f"{run_prefix}/{e.name}" for e in storage.list_tree(run_prefix)}
    assert {f"{run_prefix}/{commit_key(v)}" for v in (11, 12, 13, 14)} <= moved
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert reader.state.version == 10
        for tp in PARTITIONS:
            assert values(reader, *tp) == upto[tp]


def test_repair_ends_a_damaged_topic_log_and_leaves_the_other_logs(s3_uri: str, capsys):
    """Topics created now have their own commit logs: a damaged one is named by its own
    URI and ended at its own cut; the catalog and the other topic's log are untouched."""
    with BucketLogManager(s3_uri) as mgr:
        mgr.create_topic("a", 1)
        mgr.create_topic("b", 1)
        for i in range(4):
            mgr.append("a", 0, batch(f"a{i}"))
            mgr.append("b", 0, batch(f"b{i}"))
        log = mgr.commits.topic_log("b")
        assert log is not None
        layout = log.layout
    storage = ObjectStorage(s3_uri)
    storage.write_atomic(layout.commit_key(3), b'{"format": 1, "version": ')  # b's 3rd append
    with pytest.raises(CorruptMetadataError, match=layout.prefix):
        BucketLogManager(s3_uri, read_only=True)
    dry = run(capsys, "repair", s3_uri)
    assert dry.code == 1, dry
    assert f"{s3_uri}/{layout.prefix}: commit 3 does not follow its state" in dry.out
    assert "commit 4 (append): b-0 offsets [9, 12)" in dry.out
    assert f"{s3_uri}: commit" not in dry.out  # the catalog is not damaged
    done = run(capsys, "repair", s3_uri, "--execute")
    assert done.code == 0, done
    with BucketLogManager(s3_uri) as mgr:
        assert values(mgr, "a", 0) == [f"a{i}-{j}" for i in range(4) for j in range(3)]
        assert values(mgr, "b", 0) == [f"b{i}-{j}" for i in range(2) for j in range(3)]
        mgr.append("b", 0, batch("after"))
        assert values(mgr, "b", 0)[-3:] == [f"after-{j}" for j in range(3)]
    assert run(capsys, "repair", s3_uri).code == 0


def test_check_sees_a_deleted_newest_commit_of_a_topic_log(s3_uri: str, capsys):
    """The rollback evidence is judged per commit log: a topic log whose newest commit
    was deleted under its snapshot's hint is reported by seglog check, naming that log."""
    with BucketLogManager(s3_uri) as mgr:
        mgr.create_topic("t", 1)
        for i in range(10):
            mgr.append("t", 0, batch(f"t{i}"))  # versions 1..10: the snapshot and hint of 10
        log = mgr.commits.topic_log("t")
        assert log is not None
        layout = log.layout
    storage = ObjectStorage(s3_uri)
    storage.delete(layout.commit_key(10))
    storage.delete(layout.snapshot_key(10))
    checked = run(capsys, "check", s3_uri)
    assert checked.code == 1, checked
    assert f"{layout.hint_key} names version 10, beyond the newest commit 9" in checked.out
    assert run(capsys, "repair", s3_uri, "--execute").code == 0
    assert run(capsys, "check", s3_uri).code == 0
