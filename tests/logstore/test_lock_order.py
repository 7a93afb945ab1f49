"""The LogManager's lock order (log_manager's docstring): the manager's ``_lock``, then
the maintenance lock (``ManagerMaintenance.lock``), then a partition's ``lock``. A path
taking them the other way round can deadlock against one that follows it: ``append``
used to load an unloaded log under the partition lock, which took the manager lock,
while ``delete_topic`` holds the manager lock and then takes each partition lock.

The locks are wrapped to record, per thread, every acquisition that breaks the order, so
the inversion is caught deterministically, without racing two threads into a deadlock.
"""

from __future__ import annotations

import threading

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.clock import MockClock

NOW = 1_700_000_000_000


def batch(n: int = 5, key: bytes | None = b"k") -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=NOW, key=key, value=b"v" * 50, headers=[])
    return bytes(b.build())


class _Ordered:
    """A lock that records acquisitions breaking the rank order in this thread."""

    held = threading.local()

    def __init__(self, inner, rank: int, name: str, violations: list[str]) -> None:
        self._inner, self.rank, self.name, self._violations = inner, rank, name, violations

    def _stack(self) -> list[_Ordered]:
        if not hasattr(self.held, "stack"):
            self.held.stack = []
        return self.held.stack

    def acquire(self, *args, **kwargs) -> bool:
        stack = self._stack()
        if self not in stack:
            later = [h.name for h in stack if h.rank > self.rank]
            if later:
                self._violations.append(f"{self.name} taken while holding {later}")
        got = self._inner.acquire(*args, **kwargs)
        if got:
            stack.append(self)
        return got

    def release(self) -> None:
        self._stack().remove(self)
        self._inner.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def _watch(mgr: LogManager) -> list[str]:
    violations: list[str] = []
    mgr._lock = _Ordered(mgr._lock, 0, "manager lock", violations)
    maintenance = mgr._maintenance  # the component that owns the maintenance lock
    maintenance.lock = _Ordered(maintenance.lock, 1, "maintenance lock", violations)
    for p in mgr.listed():
        p.lock = _Ordered(p.lock, 2, f"partition lock {p.topic}-{p.partition}", violations)
    return violations


@pytest.fixture
def closed_dir(tmp_path):
    """A cleanly closed dir: its partitions load lazily, on first use."""
    with LogManager([tmp_path], clock=MockClock(NOW)) as mgr:
        mgr.create_topic("plain", partitions=2)
        mgr.create_topic("keyed", partitions=1, config={"cleanup.policy": "compact"})
        mgr.append("plain", 0, batch())
        mgr.append("keyed", 0, batch())
    return tmp_path


def test_append_to_an_unloaded_partition_follows_the_lock_order(closed_dir):
    with LogManager([closed_dir], clock=MockClock(NOW)) as mgr:
        violations = _watch(mgr)
        mgr.append("plain", 1, batch())
        mgr.delete_topic("plain")
        assert violations == []


def test_maintenance_over_unloaded_partitions_follows_the_lock_order(closed_dir):
    with LogManager([closed_dir], clock=MockClock(NOW)) as mgr:
        violations = _watch(mgr)
        mgr.delete_old_segments()
        assert violations == []
    with LogManager([closed_dir], clock=MockClock(NOW),
                    config={"log.cleaner.dedupe.buffer.size": 1 << 20}) as mgr:
        violations = _watch(mgr)
        mgr.clean()
        mgr.check(fix=True, deep=True)
        assert violations == []


def test_the_watch_sees_an_inversion(closed_dir):
    with LogManager([closed_dir], clock=MockClock(NOW)) as mgr:
        violations = _watch(mgr)
        p = mgr.partition("plain", 0)
        with p.lock, mgr._lock:
            pass
        assert violations == ["manager lock taken while holding ['partition lock plain-0']"]
