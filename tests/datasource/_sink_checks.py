"""Checks shared by the sink's Spark tests: read what the sink wrote with kafka-python
(an independent Kafka implementation) and check every index entry against the data."""

from __future__ import annotations

import collections
import struct
from pathlib import Path

from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record import MemoryRecords

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.file_names import parse_partition_dir_name, parse_segment_file_name


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner, as kafka-python computes it."""
    return (kafka_murmur2(key) & 0x7FFFFFFF) % partitions


def kafka_python_records(log_dir: Path, topic: str) -> list[tuple]:
    """(partition, offset, key, value, headers, producer_id) of every record in the topic's
    segment files, parsed by kafka-python, up to the high watermark readers see."""
    with LogManager([log_dir], read_only=True) as mgr:
        hws = mgr.high_watermarks()
    out = []
    for d in sorted(Path(log_dir).iterdir()):
        parsed = parse_partition_dir_name(d.name)
        if not d.is_dir() or parsed is None or parsed[0] != topic:
            continue
        hw = hws.get(parsed, 0)
        for seg in sorted(d.iterdir()):
            name = parse_segment_file_name(seg.name)
            if name is None or name[1:] != (".log", ""):
                continue
            records = MemoryRecords(seg.read_bytes())
            while records.has_next():
                batch = records.next_batch()
                assert batch.validate_crc(), f"{seg}: bad CRC"
                for r in batch:
                    if r.offset < hw:
                        out.append((parsed[1], r.offset, r.key, r.value,
                                    tuple((k, v) for k, v in r.headers), batch.producer_id))
    return out


def multiset(records, fields=(0, 2, 3)) -> collections.Counter:
    return collections.Counter(tuple(r[i] for i in fields) for r in records)


def check_indexes(log_dir: Path, topic: str) -> int:
    """Every offset/time index entry of the topic points at a batch with the right last
    offset / max timestamp; offsets are contiguous. Returns the number of batches."""
    batches = 0
    for d in sorted(Path(log_dir).iterdir()):
        parsed = parse_partition_dir_name(d.name)
        if not d.is_dir() or parsed is None or parsed[0] != topic:
            continue
        expected_next = None
        for seg in sorted(d.iterdir()):
            name = parse_segment_file_name(seg.name)
            if name is None or name[1:] != (".log", ""):
                continue
            base = name[0]
            buf = seg.read_bytes()
            headers = list(iter_batch_headers(buf))
            assert sum(h.size for h in headers) == len(buf), f"{seg}: trailing bytes"
            for h in headers:
                assert expected_next is None or h.base_offset == expected_next, f"{seg}: gap"
                expected_next = h.last_offset + 1
            batches += len(headers)
            by_pos = {h.position: h for h in headers}
            by_last = {h.last_offset: h for h in headers}
            raw = seg.with_suffix(".index").read_bytes()
            for i in range(0, len(raw) - len(raw) % 8, 8):
                rel, pos = struct.unpack_from(">ii", raw, i)
                if rel == 0 and pos == 0:
                    break
                assert pos in by_pos and by_pos[pos].last_offset == base + rel, \
                    f"{seg}: offset index entry {i // 8} is wrong"
            raw = seg.with_suffix(".timeindex").read_bytes()
            for i in range(0, len(raw) - len(raw) % 12, 12):
                ts, rel = struct.unpack_from(">qi", raw, i)
                if ts == 0 and rel == 0:
                    break
                h = by_last.get(base + rel)
                assert h is not None and h.max_timestamp == ts, \
                    f"{seg}: time index entry {i // 12} is wrong"
    return batches


def staging_files(log_dir: Path) -> list[Path]:
    root = Path(log_dir) / ".seglog-sink" / "staging"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
