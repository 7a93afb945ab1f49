"""Unlink files after a delay (Kafka's asynchronous deletion of ``.deleted`` files).

Retention, truncation and compaction rename a segment's files ``*.deleted`` and hand
them here; they are unlinked once ``file.delete.delay.ms`` has passed, so a reader that
opened them keeps reading meanwhile (and on POSIX even afterwards, through its open
handle). One failed unlink is logged and does not stop the others.

Thread-safety: thread-safe; ``_lock`` guards the pending list.

>>> d = DelayedDeleter(MockClock()); d.schedule([p], 60_000); d.run_due()   # doctest: +SKIP
0
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath

from ..storage.storage import LOCAL
from .clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)


class DelayedDeleter:
    """Files waiting to be unlinked; ``run_due()`` unlinks those whose time has come."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()  # guards _pending
        # (due ms, sequence, paths, callback run before unlinking)
        self._pending: list[tuple[int, int, tuple[Path, ...], Callable[[], None] | None]] = []
        self._seq = itertools.count()

    def schedule(
        self,
        paths: Iterable[PurePath],
        delay_ms: int,
        *,
        before_delete: Callable[[], None] | None = None,
    ) -> None:
        """Unlink ``paths`` once ``delay_ms`` has passed. ``before_delete`` (e.g. closing
        the segment's handles) runs first, at that time."""
        due = self.clock.monotonic_ms() + max(delay_ms, 0)
        with self._lock:
            heapq.heappush(
                self._pending, (due, next(self._seq), tuple(Path(p) for p in paths), before_delete)
            )

    @property
    def pending(self) -> int:
        """Number of files still waiting."""
        with self._lock:
            return sum(len(item[2]) for item in self._pending)

    def next_due_ms(self) -> int | None:
        with self._lock:
            return self._pending[0][0] if self._pending else None

    def release_handles(self, dir_: PurePath) -> int:
        """Run now the ``before_delete`` of every pending file of the directory ``dir_``
        (a log closing: its segments waiting out the delay hold open files nothing will
        read again); the files stay scheduled, and ``.deleted`` files left at exit are
        removed by the next load, as Kafka's loader removes them. Returns how many
        callbacks ran."""
        dir_ = Path(dir_)
        release = []
        with self._lock:
            for i, (due, seq, paths, before) in enumerate(self._pending):
                if before is not None and any(p.parent == dir_ for p in paths):
                    release.append((paths, before))
                    # same (due, seq) key: the heap order holds
                    self._pending[i] = (due, seq, paths, None)
        for paths, before in release:
            try:
                before()
            except Exception:
                logger.exception("closing %s failed", paths)
        return len(release)

    def run_due(self, *, force: bool = False) -> int:
        """Unlink every due file (all with ``force``); returns how many were unlinked."""
        now = self.clock.monotonic_ms()
        due = []
        with self._lock:
            while self._pending and (force or self._pending[0][0] <= now):
                due.append(heapq.heappop(self._pending))
        unlinked = 0
        for _due, _seq, paths, before in due:
            if before is not None:
                try:
                    before()
                except Exception:
                    logger.exception("closing before deleting %s failed", paths)
            for path in paths:
                try:
                    LOCAL.unlink(path)
                    unlinked += 1
                except FileNotFoundError:
                    logger.debug("%s was already gone", path)
                except OSError:
                    logger.exception("failed to delete %s", path)
        return unlinked
