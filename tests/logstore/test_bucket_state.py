"""Damaged commits and snapshots (logstore/bucket/bucket_state.py): each is refused with an error
naming the object and the field, never folded into a state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from seglog.logstore.bucket.bucket_state import (
    BucketState,
    Commit,
    PartitionChange,
    SegmentEntry,
    config_digest,
)
from seglog.logstore.errors import CorruptMetadataError

WHERE = "memory://b/_seglog/log/00000000000000000001.json"


def commit(version: int, **fields: Any) -> bytes:
    doc = {"format": 1, "version": version, "writer": "w", "timestamp_ms": 1,
           "operation": "append"}
    doc.update(fields)
    return json.dumps(doc).encode()


def seg(key: str, base: int, next_offset: int) -> dict[str, int | str]:
    return {"key": key, "base_offset": base, "next_offset": next_offset, "size": 10,
            "max_timestamp": 1, "index_bytes": 0, "timeindex_bytes": 0}


def name(base: int, tag: str = "a") -> str:
    return f"t-0/{base:020d}-{tag * 16}"


def base_state() -> BucketState:
    s = BucketState().apply(Commit.decode(commit(0, operation="create_topic",
                                                 topics={"t": {"partitions": 2}},
                                                 partitions={}), "c0", 0))
    return s.apply(Commit.decode(commit(1, topics={}, partitions={
        "t-0": {"add": [seg(name(0), 0, 5)]}}), "c1", 1))


@pytest.mark.parametrize("fields, message", [
    ({}, r"field 'topics' is missing"),
    ({"topics": {}}, r"field 'partitions' is missing"),
    ({"operation": "bogus", "topics": {}, "partitions": {}}, r"field 'operation' is 'bogus'"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg("u-9/x", 5, 9)]}}},
     r"partition t-0: segment key 'u-9/x' is not an object of partition t-0"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(5, "b"), 5, 9),
                                                   seg(name(5, "b"), 5, 9)]}}},
     r"adds segment t-0/0+5-b{16}, which it holds already"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(0), 0, 5)]}}},
     r"adds segment t-0/0{20}-a{16}, which it holds already"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(0, "b"), 5, 9)]}}},
     r"names base offset 0, its fields 'base_offset' 5 and 'offset_delta' 0 say 5"),
    ({"topics": {}, "partitions": {"t-0": {"add": [
        {**seg(name(9, "b"), 5, 9), "offset_delta": -4}]}}},
     r"names base offset 9, its fields 'base_offset' 5 and 'offset_delta' -4 say 5"),
    ({"topics": {}, "partitions": {"t-0": {"add": [
        {**seg(name(1, "b"), 5, 9), "offset_delta": 3}]}}},
     r"names base offset 1, its fields 'base_offset' 5 and 'offset_delta' 3 say 5 \(or 2,"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(100, "b"), 100, 105)]}}},
     r"starts at 100, not at the log end 5"),
    ({"topics": {}, "partitions": {"t-1": {"log_start_offset": 10**12}}},
     r"partition t-1: field 'log_start_offset' 1000000000000 is beyond the log end 0"),
    ({"operation": "merge", "topics": {}, "partitions": {"t-0": {
        "remove": [name(0)], "add": [seg(name(0, "c"), 0, 3)]}}},
     r"the log end would go back from 5 to 3"),
])
def test_a_damaged_commit_is_refused_naming_the_object_and_the_field(fields, message):
    state = base_state()
    with pytest.raises(CorruptMetadataError, match=message):
        state.apply(Commit.decode(commit(2, **fields), WHERE, 2), WHERE)


def test_a_gap_is_refused_unless_compaction_left_it():
    state = base_state().apply(Commit(2, "w", 1, "append", partitions={"t-0": PartitionChange(
        add=(SegmentEntry(name(5, "b"), 5, 10, 10, 1),))}))
    # compaction may replace [0, 5) by a segment holding fewer offsets: a gap [3, 5)
    compacted = SegmentEntry(name(0, "c"), 0, 3, 10, 1)
    change = {"t-0": PartitionChange(add=(compacted,), remove=(name(0),))}
    with pytest.raises(CorruptMetadataError, match=r"offsets \[3, 5\) would be held by no"):
        state.apply(Commit(3, "w", 1, "merge", partitions=change))
    state = state.apply(Commit(3, "w", 1, "compact", partitions=change))
    assert [(e.base_offset, e.next_offset) for e in state.partitions["t-0"].segments] == [
        (0, 3), (5, 10)]
    # a later merge may keep that gap inside one segment or leave it as it is
    merged = SegmentEntry(name(0, "d"), 0, 10, 20, 1)
    state = state.apply(Commit(4, "w", 1, "merge", partitions={"t-0": PartitionChange(
        add=(merged,), remove=(name(0, "c"), name(5, "b")))}))
    assert state.partitions["t-0"].segments == (merged,)


def test_retention_of_every_segment_keeps_the_log_end():
    state = base_state().apply(Commit(2, "w", 1, "retention", partitions={
        "t-0": PartitionChange(remove=(name(0),))}))
    assert state.partitions["t-0"].segments == ()
    assert state.partitions["t-0"].high_watermark == 5
    assert state.partitions["t-0"].log_start_offset == 5


@pytest.mark.parametrize("partitions, message", [
    ({"t-0": {"log_start_offset": -7, "segments": []}, "t-1": {"log_start_offset": 0,
                                                               "segments": []}},
     r"partition t-0: field 'log_start_offset' or 'segments' is invalid"),
    ({"t-0": {"log_start_offset": 0, "segments": []}},
     r"field 'partitions' does not match its topics: missing \['t-1'\]"),
    ({"t-0": {"log_start_offset": 0, "segments": []}, "t-1": {"log_start_offset": 0,
                                                              "segments": []},
      "zz-4": {"log_start_offset": 0, "segments": []}}, r"of no topic \['zz-4'\]"),
    ({"t-0": {"log_start_offset": 9, "segments": [seg(name(0), 0, 5)]},
      "t-1": {"log_start_offset": 0, "segments": []}},
     r"field 'log_start_offset' 9 is outside its segments \[0, 5\)"),
    ({"t-0": {"log_start_offset": 0, "segments": [seg("t-1/x", 0, 5)]},
      "t-1": {"log_start_offset": 0, "segments": []}},
     r"segment key 't-1/x' is not an object of partition t-0"),
])
def test_a_damaged_snapshot_is_refused_naming_the_object_and_the_field(partitions, message):
    where = "memory://b/_seglog/snapshots/00000000000000000005.json"
    doc = {"format": 1, "version": 5, "topics": {"t": {"partitions": 2}},
           "partitions": partitions}
    with pytest.raises(CorruptMetadataError, match=rf"{where}: .*{message}"):
        BucketState.decode(json.dumps(doc).encode(), where, 5)


def test_a_valid_snapshot_reads_back():
    state = base_state()
    assert BucketState.decode(state.encode(), "snap", 1) == state


def blind(version: int, *adds: dict[str, Any], config: dict[str, str] | None = None) -> bytes:
    """A blind append (format 3, ``at_end``) as a writer that lost a race creates it, its
    batches checked against ``config`` (topic t's, empty by default)."""
    return commit(version, format=3, topics={}, partitions={"t-0": {"add": list(adds),
                                                                    "at_end": True}},
                  configs={"t": config_digest(config or {})})


def test_a_blind_append_goes_at_the_log_end_its_writer_did_not_see():
    state = base_state()  # t-0 ends at 5
    # Another writer's append took [5, 8) ...
    state = state.apply(Commit.decode(commit(2, topics={}, partitions={
        "t-0": {"add": [seg(name(5, "c"), 5, 8)]}}), WHERE, 2))
    # ... while this one, stamped from the end 5 it saw, lost version 2 and created 3
    # blind: the fold moves it to 8, its name still carrying its stored base 5.
    state = state.apply(Commit.decode(blind(3, seg(name(5, "b"), 5, 7),
                                            seg(name(7, "b"), 7, 9)), WHERE, 3))
    segments = state.partitions["t-0"].segments
    assert [(e.key, e.base_offset, e.next_offset, e.offset_delta) for e in segments[-2:]] == [
        (name(5, "b"), 8, 10, 3), (name(7, "b"), 10, 12, 3)]
    assert state.version == 3 and state.partitions["t-0"].high_watermark == 12


@pytest.mark.parametrize("first, then, why", [
    # The client retried a create that had landed; the writer created the next version
    # blind as well: the same entries again, a commit of nothing.
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(5, "b"), 5, 7)]}}},
     blind(3, seg(name(5, "b"), 5, 7)), "a duplicate"),
    # The topic was deleted before the blind append landed (a legacy topic: its
    # partitions leave the state).
    ({"operation": "delete_topic", "topics": {"t": None}, "partitions": {}},
     blind(3, seg(name(5, "b"), 5, 7)), "its partition gone"),
    # Another process changed the topic's config: the batches were checked against the
    # old one (the writer checks them again and commits on the new state, or refuses).
    ({"operation": "alter_config", "topics": {"t": {"partitions": 2,
                                                    "config": {"max.message.bytes": "100"}}},
      "partitions": {}},
     blind(3, seg(name(5, "b"), 5, 7)), "a config it was not checked against"),
    # The log end went back below the stored base (the topic deleted and created again).
    ({"operation": "delete_topic", "topics": {"t": None}, "partitions": {}},
     None, "an end below its stored base"),
])
def test_a_blind_append_that_cannot_go_at_the_end_folds_as_nothing(first, then, why):
    state = base_state().apply(Commit.decode(commit(2, **first), WHERE, 2))
    if then is None:
        state = state.apply(Commit.decode(commit(3, operation="create_topic",
                                                 topics={"t": {"partitions": 2}},
                                                 partitions={}), WHERE, 3))
        then = blind(4, seg(name(5, "b"), 5, 7))
    version = state.version + 1
    after = state.apply(Commit.decode(then, WHERE, version), WHERE)
    assert after.version == version, why
    assert after.partitions == state.partitions and after.topics == state.topics, why


@pytest.mark.parametrize("doc, message", [
    ({"format": 3, "topics": {}, "partitions": {"t-0": {"add": [seg(name(5), 5, 7)]}},
      "configs": {"t": "x"}},
     r"a format-3 commit \(append\) must only append, each partition at_end"),
    ({"format": 3, "operation": "merge", "topics": {},
      "partitions": {"t-0": {"add": [seg(name(5), 5, 7)], "at_end": True}}},
     r"a format-3 commit \(merge\) must only append"),
    ({"topics": {}, "partitions": {"t-0": {"add": [seg(name(5), 5, 7)], "at_end": True}}},
     r"a format-1 commit \(append\) must not be at_end"),
    ({"format": 3, "topics": {}, "partitions": {"t-0": {
        "add": [seg(name(5), 5, 7)], "remove": [name(0)], "at_end": True}}},
     r"field 'at_end' True is not a boolean on a change that only adds segments"),
    ({"format": 3, "topics": {}, "partitions": {"t-0": {
        "add": [seg(name(5), 5, 7)], "at_end": 1}}},
     r"field 'at_end' 1 is not a boolean"),
    ({"format": 3, "topics": {}, "partitions": {"t-0": {
        "add": [seg(name(5), 5, 7)], "at_end": True}}},
     r"field 'configs' must name the config digest of each topic a format-3 commit appends "
     r"to \(\['t'\]\), not \{\}"),
])
def test_a_damaged_blind_append_is_refused(doc, message):
    with pytest.raises(CorruptMetadataError, match=message):
        Commit.decode(commit(2, **doc), WHERE, 2)
