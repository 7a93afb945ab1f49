"""A simulated power cut for crash tests: what was not fsynced may be lost or garbled."""

from __future__ import annotations

from pathlib import Path

from seglog.logstore.records.record_format import iter_batch_headers


def lose_unflushed_tail(dir_: Path, durable_offset: int, cut_fraction: float,
                        junk: bytes = b"") -> bool:
    """Cut the segment holding ``durable_offset`` somewhere after its last durable batch
    (``cut_fraction`` of the way to its end), append ``junk`` there, and drop every later
    segment's files. Returns True if anything past the durable point was lost."""
    segments = sorted(Path(dir_).glob("*.log"))
    for i, seg in enumerate(segments):
        nxt = int(segments[i + 1].name[:20]) if i + 1 < len(segments) else None
        if nxt is not None and nxt <= durable_offset:
            continue
        buf = seg.read_bytes()
        keep = 0
        for h in iter_batch_headers(buf):
            if h.base_offset >= durable_offset:
                break
            keep = h.end_position
        if keep >= len(buf) and nxt is None:
            return False
        seg.write_bytes(buf[:keep + int((len(buf) - keep) * cut_fraction)] + junk)
        for later in segments[i + 1:]:
            for suffix in (".log", ".index", ".timeindex"):
                later.with_suffix(suffix).unlink(missing_ok=True)
        return True
    return False
