"""``LingerPublisher``: makes a writer's appends visible to other processes within
``linger.ms`` of the first unpublished one, publishing a burst of appends once.

Publishing a local log dir is an fsync of every log up to its high watermark and then
the rename of ``replication-offset-checkpoint`` (``checkpoint_high_watermarks``): durable
first, then visible. That costs a few milliseconds, so a producer in a tight loop should
not pay it per append, and one that appends once must not wait for the 5 s checkpoint
interval either. Kafka's producer solves the same trade with ``linger.ms``: a record
waits at most that long for others to share its request. Here an append waits at most
``linger.ms`` for others to share its publish; ``linger.ms=0`` publishes inside the call.

Thread-safety: every method is thread-safe. ``_cv`` guards ``_due``, ``_stopped`` and
``_error``; the publish itself runs outside it, so appends never wait for an fsync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("seglog.logstore.manager.log_manager")


class LingerPublisher:
    """Runs ``publish`` at most ``linger_ms`` after ``request()``, on a daemon thread
    started on first use. A failed publish is logged and raised by the next ``flush()``.

    >>> publisher = LingerPublisher(5, mgr.checkpoint_high_watermarks)  # doctest: +SKIP
    >>> publisher.request()        # returns at once; published within 5 ms
    >>> publisher.flush()          # published now, or the publish's error raised
    """

    def __init__(self, linger_ms: int, publish: Callable[[], None], *, name: str) -> None:
        self.linger_ms = linger_ms
        self._publish = publish
        self._name = name
        self._cv = threading.Condition()
        self._due: float | None = None  # monotonic time of the pending publish
        self._stopped = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Publish within ``linger_ms`` (now, in this thread, when it is 0)."""
        if self.linger_ms == 0:
            self._publish()
            return
        with self._cv:
            if self._stopped or self._due is not None:
                return  # an earlier request's publish will carry this append too
            self._due = time.monotonic() + self.linger_ms / 1000
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def flush(self) -> None:
        """Publish what is pending now; raise the error of a failed background publish."""
        with self._cv:
            pending, self._due = self._due is not None, None
            error, self._error = self._error, None
        if error is not None:
            raise error
        if pending:
            self._publish()

    def publishing(self) -> None:
        """A publish of every append so far starts now, by other means (the caller's
        ``checkpoint_high_watermarks``): the pending one would repeat it."""
        with self._cv:
            self._due = None

    def stop(self) -> None:
        """Cancel what is pending and end the thread, waiting for a publish in flight
        (the caller publishes by other means: close, pause). A later ``request()``
        starts a new thread. Idempotent."""
        with self._cv:
            self._stopped = True
            self._due = None
            thread, self._thread = self._thread, None
            self._cv.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cv:
            self._stopped = False

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (
                        self._due is None or time.monotonic() < self._due):
                    self._cv.wait(None if self._due is None
                                  else max(0.0, self._due - time.monotonic()))
                if self._stopped:
                    return
                self._due = None
            try:
                self._publish()
            except Exception as e:  # the next flush() raises it; the writer goes on
                logger.exception("publishing appends failed; flush() raises it")
                with self._cv:
                    self._error = e
