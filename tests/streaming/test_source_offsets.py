"""Source offsets: Kafka's JSON form, resolution, data loss, new partitions."""

from __future__ import annotations

import json
import logging

import pytest

from seglog.logstore.errors import (
    ConfigError,
    DataLossError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from seglog.streaming.source_offsets import (
    TRIGGER_KEY,
    LogSnapshot,
    ending_offsets,
    initial_offsets,
    last_trigger_ms,
    offsets_from_json,
    offsets_to_json,
    reconcile_start,
    skip_removed,
)
from seglog.streaming.source_options import SourceOptions


def snap(**kw):
    # t: partitions 0..2, u: partition 0; offsets 10..100 visible; timestamps = offset*1000
    parts = kw.pop("parts", {"t": (0, 1, 2), "u": (0,)})
    tps = [(t, p) for t, ps in parts.items() for p in ps]
    lso = kw.pop("lso", dict.fromkeys(tps, 10))
    hw = kw.pop("hw", dict.fromkeys(tps, 100))

    def lookup(tp, ts):
        off = -(-ts // 1000)
        return max(off, lso[tp]) if off < hw[tp] else None

    return LogSnapshot(parts, lso, hw, lookup)


def opts(streaming=True, **extra):
    return SourceOptions.parse({"path": "/x", "subscribe": "t", **extra}, streaming=streaming)


def test_json_is_kafkas_and_deterministic():
    offs = {("b", 10): 5, ("a", 1): 2, ("b", 2): 7, ("a", 0): 1}
    js = offsets_to_json(offs)
    assert json.dumps(js) == '{"a": {"0": 1, "1": 2}, "b": {"2": 7, "10": 5}}'
    assert json.dumps(offsets_to_json(dict(reversed(list(offs.items()))))) == json.dumps(js)
    assert offsets_from_json(json.loads(json.dumps(js))) == offs
    stamped = offsets_to_json(offs, last_trigger_ms=123)
    assert list(stamped)[-1] == TRIGGER_KEY and last_trigger_ms(stamped) == 123
    assert offsets_from_json(stamped) == offs and last_trigger_ms(js) is None


def test_earliest_latest_and_json_with_sentinels():
    s = snap()
    assert initial_offsets(opts(startingOffsets="earliest"), s) == {
        ("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
    assert set(initial_offsets(opts(), s).values()) == {100}
    o = opts(startingOffsets='{"t": {"0": -2, "1": -1, "2": 42}}')
    assert initial_offsets(o, s) == {("t", 0): 10, ("t", 1): 100, ("t", 2): 42}


def test_json_offsets_must_name_every_subscribed_partition():
    with pytest.raises(ConfigError, match=r"startingOffsets.*missing \[t-2\]"):
        initial_offsets(opts(startingOffsets='{"t": {"0": 1, "1": 1}}'), snap())


def test_timestamps_resolve_through_the_lookup_and_strategy():
    s = snap()
    assert initial_offsets(opts(startingTimestamp="50500"), s) == dict.fromkeys(
        [("t", 0), ("t", 1), ("t", 2)], 51)
    by_ts = '{"t": {"0": 0, "1": 20000, "2": 99000}}'
    assert initial_offsets(opts(startingOffsetsByTimestamp=by_ts), s) == {
        ("t", 0): 10, ("t", 1): 20, ("t", 2): 99}
    with pytest.raises(OffsetOutOfRangeError, match="partition 0"):
        initial_offsets(opts(startingTimestamp="999999999"), s)
    late = opts(startingTimestamp="999999999", startingOffsetsByTimestampStrategy="latest")
    assert set(initial_offsets(late, s).values()) == {100}
    batch = opts(streaming=False, endingTimestamp="999999999")
    assert set(ending_offsets(batch, s).values()) == {100}  # no match → latest


def test_new_partitions_and_topics_start_at_earliest():
    s = snap(parts={"t": (0, 1, 2), "t2": (0,)}, lso={("t", 0): 0, ("t", 1): 0, ("t", 2): 7,
             ("t2", 0): 3}, hw={("t", 0): 9, ("t", 1): 9, ("t", 2): 9, ("t2", 0): 9})
    start = {("t", 0): 5, ("t", 1): 6}
    assert reconcile_start(start, opts(), s) == {("t", 0): 5, ("t", 1): 6, ("t", 2): 7}
    o = SourceOptions.parse({"path": "/x", "subscribePattern": "t.*"}, streaming=True)
    assert reconcile_start(start, o, s)[("t2", 0)] == 3


def test_data_loss_fails_naming_topic_partition_and_offsets():
    s = snap(lso={("t", 0): 50, ("t", 1): 10, ("t", 2): 10, ("u", 0): 10})
    start = {("t", 0): 20, ("t", 1): 30, ("t", 2): 30}
    with pytest.raises(DataLossError, match=r"'t' partition 0: offsets \[20, 50\)"):
        reconcile_start(start, opts(), s)
    with pytest.raises(DataLossError, match=r"partition 1: .*200.*high watermark 100"):
        reconcile_start({**start, ("t", 0): 50, ("t", 1): 200}, opts(), s)
    gone = {**start, ("t", 0): 50, ("t", 9): 4}
    with pytest.raises(DataLossError, match=r"'t' partition 9 disappeared.*4"):
        reconcile_start(gone, opts(), s)


def test_data_loss_without_fail_warns_and_continues(caplog):
    s = snap(lso={("t", 0): 50, ("t", 1): 10, ("t", 2): 10, ("u", 0): 10})
    start = {("t", 0): 20, ("t", 1): 30, ("t", 2): 30, ("t", 9): 4}
    with caplog.at_level(logging.WARNING):
        out = reconcile_start(start, opts(failOnDataLoss="false"), s)
    assert out == {("t", 0): 50, ("t", 1): 30, ("t", 2): 30}
    text = caplog.text
    assert "[20, 50)" in text and "partition 9 disappeared" in text


def test_ending_offsets_past_the_high_watermark_are_refused():
    o = opts(streaming=False, endingOffsets='{"t": {"0": 100, "1": 101, "2": -1}}')
    with pytest.raises(OffsetOutOfRangeError,
                       match=r"'endingOffsets'.*t-1 \(101 > latest offset 100\)"):
        ending_offsets(o, snap())
    fine = opts(streaming=False, endingOffsets='{"t": {"0": 100, "1": 50, "2": -1}}')
    assert ending_offsets(fine, snap()) == {("t", 0): 100, ("t", 1): 50, ("t", 2): 100}


def test_assign_of_a_partition_that_does_not_exist_is_refused():
    for streaming in (True, False):
        o = SourceOptions.parse({"path": "/x", "assign": '{"t": [0, 7], "v": [0]}'},
                                streaming=streaming)
        with pytest.raises(UnknownTopicOrPartitionError, match=r"'assign'.*\[t-7, v-0\]"):
            initial_offsets(o, snap())
    o = SourceOptions.parse({"path": "/x", "assign": '{"t": [0, 2]}'}, streaming=True)
    assert set(initial_offsets(o, snap())) == {("t", 0), ("t", 2)}


def test_skip_removed_warns_with_the_range_or_raises(caplog):
    s = snap(lso={("t", 0): 40, ("t", 1): 10, ("t", 2): 10, ("u", 0): 10})
    start = {("t", 0): 25, ("t", 1): 30}
    end = {("t", 0): 60, ("t", 1): 60}
    with caplog.at_level(logging.WARNING):
        assert skip_removed(start, end, s, False) == {("t", 0): 40, ("t", 1): 30}
    assert "topic 't' partition 0: offsets [25, 40) were removed" in caplog.text
    with pytest.raises(DataLossError, match=r"partition 0: offsets \[25, 40\)"):
        skip_removed(start, end, s, True)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_high_watermark_above_the_log_end_is_data_loss_not_a_short_read(
        tmp_path, caplog, fail_on_data_loss):
    import pyarrow as pa

    from seglog.logstore.errors import DataLossError
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches
    from seglog.streaming.source_offsets import snapshot_log_dirs

    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
        for p in (0, 1):
            mgr.append("t", p, encode_batches(pa.array([b"x"] * 30)))
    hw_file = tmp_path / "replication-offset-checkpoint"
    hw_file.write_text(hw_file.read_text().replace("t 0 30", "t 0 90"))  # one digit
    opts = SourceOptions.parse({"path": str(tmp_path), "subscribe": "t",
                                "failOnDataLoss": str(fail_on_data_loss).lower()},
                               streaming=True)
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"partition 0: offsets \[30, 90\) are "
                                                 r"published in .*replication-offset-check"):
            snapshot_log_dirs([str(tmp_path)], options=opts)
    else:
        with caplog.at_level(logging.WARNING):
            snap_ = snapshot_log_dirs([str(tmp_path)], options=opts)
        assert snap_.latest(("t", 0)) == 30 and snap_.latest(("t", 1)) == 30
        assert "offsets [30, 90) are published" in caplog.text
    # a query subscribed elsewhere is not stopped by it
    other = SourceOptions.parse({"path": str(tmp_path), "assign": '{"t": [1]}'},
                                streaming=True)
    assert snapshot_log_dirs([str(tmp_path)], options=other).latest(("t", 1)) == 30
