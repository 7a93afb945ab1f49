"""Helpers of the bucket engine's tests: a ``Storage`` wrapper that counts requests,
unique memory:// stores, and the records a log holds."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.storage import Storage


def memory_uri() -> str:
    return f"memory://bucket-test-{uuid.uuid4().hex}"


def log_records(log: Any) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of ``log`` from its log start offset to its
    high watermark; a bucket partition's log is refreshed first (the newest commits)."""
    if hasattr(log, "sync"):  # a bucket log
        log.refresh()
    out = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        t = decode_batches(bytes(chunk), start_offset=log.log_start_offset)
        out += list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                        t.column("value").to_pylist(), strict=True))
    return out


def log_values(mgr: Any, topic: str = "t", partition: int = 0
               ) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of a partition (``log_records``)."""
    return [(o, v) for o, _k, v in log_records(mgr.get_log(topic, partition))]


class CountingStorage:
    """Forwards to ``inner``; ``counts`` holds the requests made, by operation (a
    ranged reader's ``pread`` counts as ``read_range``)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self.fail_creates = 0  # the next n creates answer False (another writer won)
        self.swallow_creates = 0  # the next n creates happen, yet answer False (a retry)

    @property
    def uri(self) -> str:
        return self.inner.uri

    def reset(self) -> None:
        self.counts.clear()

    def total(self) -> int:
        return sum(self.counts.values())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            if name == "create" and self.fail_creates:
                self.fail_creates -= 1
                return False
            result = attr(*args, **kwargs)
            if name == "create" and self.swallow_creates:
                self.swallow_creates -= 1
                return False
            if name == "open_range_reader":
                return _CountingReader(result, self.counts)
            return result

        return counted


class _CountingReader:
    def __init__(self, inner: Any, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    @property
    def size(self) -> int:
        return self._inner.size

    def pread(self, position: int, length: int) -> bytes:
        self._counts["read_range"] += 1
        return self._inner.pread(position, length)

    def close(self) -> None:
        self._inner.close()


def counting_memory_storage() -> CountingStorage:
    return CountingStorage(ObjectStorage(memory_uri()))



class StoreClockStorage:
    """Forwards to ``inner``, but the store's clock follows ``clock``: an object written
    after ``clock`` advanced by ``d`` is listed ``d`` later than the store stamped it
    (the collector judges ages by the store's clock, which a test cannot otherwise
    move)."""

    def __init__(self, inner: Storage, clock: Any) -> None:
        self.inner = inner
        self.clock = clock
        self._start = clock.milliseconds()
        self._shifts: dict[str, int] = {}  # key -> how far the clock had moved at its write

    @property
    def uri(self) -> str:
        return self.inner.uri

    def _shift(self, path: Any, entries: list) -> list:
        from dataclasses import replace
        prefix = f"{path}/" if str(path) else ""
        return [e if e.is_dir else replace(
            e, mtime_ms=e.mtime_ms + self._shifts.get(f"{prefix}{e.name}", 0))
            for e in entries]

    def write_atomic(self, path: Any, data: Any) -> None:
        self.inner.write_atomic(path, data)
        self._shifts[str(path)] = self.clock.milliseconds() - self._start

    def create(self, path: Any, data: Any) -> bool:
        made = self.inner.create(path, data)
        if made:
            self._shifts[str(path)] = self.clock.milliseconds() - self._start
        return made

    def list_dir(self, path: Any) -> list:
        return self._shift(path, self.inner.list_dir(path))

    def list_after(self, path: Any, start_after: str) -> list:
        return self._shift(path, self.inner.list_after(path, start_after))

    def list_tree(self, path: Any) -> list:
        return self._shift(path, self.inner.list_tree(path))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def store_moving_with(clock: Any, uri: str | None = None) -> StoreClockStorage:
    """A memory:// store whose clock advances with ``clock`` (see ``StoreClockStorage``)."""
    return StoreClockStorage(ObjectStorage(uri or memory_uri()), clock)
