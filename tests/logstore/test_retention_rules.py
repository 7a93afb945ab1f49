"""Kafka's retention rules (``logstore.retention``), one implementation for both engines:
the same scenarios run through a local log dir and a bucket on the session's S3 server
(moto), and the same segments go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.retention import SegmentDescriptor, deletable_segments
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000
RECORDS = 4  # per batch: segment i holds offsets [4i, 4i + 4)


def batch(i: int, ts: int) -> bytes:
    return bytes(
        encode_batches(
            pa.array([f"v{i}-{j}".encode() for j in range(RECORDS)]),
            keys=pa.array([f"k{j}".encode() for j in range(RECORDS)]),
            timestamps=pa.array([ts] * RECORDS, pa.int64()),
        )
    )


SIZE = len(batch(0, TS))  # every batch (and so every one-batch segment) has this size


@dataclass(frozen=True)
class Scenario:
    timestamps: list[int]  # one one-batch segment each
    config: dict[str, Any]
    now: int = TS + 10_000
    delete_records: int | None = None
    remaining: list[int] = field(default_factory=list)  # base offsets left
    log_start_offset: int = 0


SCENARIOS = {
    "time": Scenario(
        [TS, TS + 1_000, TS + 8_000], {"retention.ms": 5_000}, remaining=[8], log_start_offset=8
    ),
    # Every segment expired: the log is empty at its old end (the local one rolled).
    "time-all": Scenario(
        [TS, TS + 1_000],
        {"retention.ms": 5_000},
        now=TS + 100_000,
        remaining=[],
        log_start_offset=8,
    ),
    "size": Scenario(
        [TS] * 5,
        {"retention.bytes": 2 * SIZE, "retention.ms": -1},
        remaining=[12, 16],
        log_start_offset=12,
    ),
    # Never below the limit: the third segment would take the log under it.
    "size-not-below": Scenario(
        [TS] * 5,
        {"retention.bytes": 2 * SIZE + 1, "retention.ms": -1},
        remaining=[8, 12, 16],
        log_start_offset=8,
    ),
    "size-under-limit": Scenario(
        [TS] * 3,
        {"retention.bytes": 3 * SIZE + 1, "retention.ms": -1},
        remaining=[0, 4, 8],
        log_start_offset=0,
    ),
    # No delete policy: neither time nor size applies; the log start offset still does.
    "log-start-compact": Scenario(
        [TS] * 4,
        {"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 1},
        delete_records=9,
        remaining=[8, 12],
        log_start_offset=9,
    ),
    # Kafka's order: log start offset, then size (counted after it), then time.
    "breach-order": Scenario(
        [TS, TS, TS, TS + 9_000, TS + 9_000],
        {"retention.bytes": 3 * SIZE, "retention.ms": 5_000},
        delete_records=5,
        remaining=[12, 16],
        log_start_offset=12,
    ),
}


def _local(
    tmp_path: Path, clock: MockClock, scenario: Scenario, request: pytest.FixtureRequest
) -> tuple[Callable[[], int], Callable[[], list[int]], Callable[[], int]]:
    mgr = LogManager([tmp_path / "logs"], clock=clock)
    mgr.create_topic("t", 1, scenario.config)
    log = mgr.get_log("t", 0)
    for i, ts in enumerate(scenario.timestamps):
        if i:
            log.roll()  # one batch per segment, as a bucket's appends leave them
        mgr.append("t", 0, batch(i, ts))
    if scenario.delete_records is not None:
        log.maybe_increment_log_start_offset(scenario.delete_records)
    request.addfinalizer(mgr.close)
    return (
        mgr.delete_old_segments,
        lambda: [s.base_offset for s in log.segments if s.size],
        lambda: mgr.log_start_offsets()[("t", 0)],
    )


def _bucket(
    uri: str, clock: MockClock, scenario: Scenario
) -> tuple[Callable[[], int], Callable[[], list[int]], Callable[[], int]]:
    mgr = LogManager(uri, clock=clock)
    mgr.create_topic("t", 1, scenario.config)
    for i, ts in enumerate(scenario.timestamps):
        mgr.append("t", 0, batch(i, ts))
    if scenario.delete_records is not None:
        mgr.delete_records("t", 0, scenario.delete_records)

    def remaining() -> list[int]:
        mgr.refresh()
        return [s.base_offset for s in mgr.state.partition("t", 0).segments]

    return (mgr.delete_old_segments, remaining, lambda: mgr.log_start_offsets()[("t", 0)])


@pytest.mark.parametrize("engine", ["local", "bucket"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_retention_removes_the_same_segments_on_both_engines(
    name: str, engine: str, tmp_path: Path, request: pytest.FixtureRequest
):
    scenario = SCENARIOS[name]
    clock = MockClock(TS)
    if engine == "local":
        delete, remaining, log_start = _local(tmp_path, clock, scenario, request)
    else:
        delete, remaining, log_start = _bucket(request.getfixturevalue("s3_uri"), clock, scenario)
    before = len(scenario.timestamps)
    assert len(remaining()) == before
    clock.advance(scenario.now - TS)
    assert delete() == before - len(scenario.remaining)
    assert remaining() == scenario.remaining
    assert log_start() == scenario.log_start_offset
    assert delete() == 0  # nothing more to do at the same time


def test_the_rule_never_takes_an_empty_active_segment_or_one_above_the_high_watermark():
    config = LogConfig.from_properties({"retention.bytes": "0", "retention.ms": "-1"})
    segs = [
        SegmentDescriptor(0, 4, SIZE, TS),
        SegmentDescriptor(4, 8, SIZE, TS),
        SegmentDescriptor(8, 8, 0, TS, is_active=True),
    ]
    # Above the high watermark (6): the second segment is not yet visible, so stays.
    d = deletable_segments(segs, config, log_start_offset=0, high_watermark=6, now_ms=TS)
    assert (d.count, d.log_start_offset) == (1, 4)
    d = deletable_segments(segs, config, log_start_offset=0, high_watermark=8, now_ms=TS)
    assert (d.count, d.log_start_offset, d.breaches) == (2, 8, (("retention.bytes=0", 2),))
    # A non-empty active segment goes by size (the local log rolls), never by log start.
    active = [SegmentDescriptor(0, 4, SIZE, TS, is_active=True)]
    keep = LogConfig.from_properties({"retention.ms": "-1"})
    d = deletable_segments(active, keep, log_start_offset=4, high_watermark=4, now_ms=TS)
    assert d.count == 0
    d = deletable_segments(active, config, log_start_offset=4, high_watermark=4, now_ms=TS)
    assert (d.count, d.log_start_offset) == (1, 4)
