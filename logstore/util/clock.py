"""Injected time, so rolling, flushing and retention are tested without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    """Wall-clock time for timestamps, a monotonic clock for intervals. Thread-safe."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class MockClock:
    """A clock that moves only when told. Not thread-safe; for tests.

    >>> c = MockClock(1_000); c.advance(500); c.milliseconds()
    1500
    """

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms

    def milliseconds(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms


SYSTEM_CLOCK = SystemClock()
