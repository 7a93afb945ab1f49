"""Damage the tests do to a partition's segment files, written once for the fault tests
(``faults/``) and the source's integrity tests (``datasource/``)."""

from __future__ import annotations

from pathlib import Path

from seglog.logstore.records.record_format import iter_batch_headers


def segment_files(d: Path, topic: str, partition: int = 0) -> list[Path]:
    """The ``.log`` files of the partition ``<topic>-<partition>`` of the log dir ``d``,
    in offset order."""
    return sorted((d / f"{topic}-{partition}").glob("*.log"))


def flip_base_offset(path: Path, which: int, bit: int = 0) -> None:
    """Flip bit ``bit`` of the base offset of batch ``which`` of the segment ``path``:
    damage its CRC does not cover."""
    data = bytearray(path.read_bytes())
    h = list(iter_batch_headers(data))[which]
    data[h.position + 7 - bit // 8] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))
