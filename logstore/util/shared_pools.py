"""Process-wide thread pools for the short request fan-outs on a bucket's hot path.

A streaming trigger refreshes a bucket log dir every few hundred ms: the catalog and each
topic log at once (``bucket_logs.refresh``), each log's read-ahead GETs beside its LIST
(``CommitLog.refresh``). A pool built and joined per call starts its threads every time:
about 0.2 ms of CPU and up to ~1 ms of wall time per thread on an idle machine, more when
the cores are contended, paid on every trigger, task look and consumer look. These pools
live as long as the process and keep their idle threads, so a steady fan-out only hands
its calls to threads that already exist.

One pool per fan-out level (``name``): a call running on one level's pool may fan out on
another's, never on its own, so no pool's threads all wait on calls queued behind them.
Each pool may grow to ``MAX_THREADS``, far above any one caller's fan-out, so concurrent
callers (a trigger, the sink's background merger) do not queue behind each other.

The callers keep the contract of the per-call pools these replace (``settle``, ``joined``):
a call returns or raises once every request it started ended, results in order, the
first failure (in order) raised. The pools' threads call the callers' functions; this
module never calls back on the caller's thread (``tests/test_one_pass_through_modules``).

A forked child drops the parent's pools (their threads do not exist in the child) and
builds its own on first use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["MAX_THREADS", "joined", "settle", "shared_pool", "submit_all"]

# Threads are started only when no idle one is free, so a high cap costs nothing while
# unused; it only bounds a burst of concurrent callers.
MAX_THREADS = 64

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def shared_pool(name: str) -> ThreadPoolExecutor:
    """The process's pool for fan-out level ``name`` (threads ``seglog-<name>_N``)."""
    with _lock:
        pool = _pools.get(name)
        if pool is None:
            pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix=f"seglog-{name}")
            _pools[name] = pool
        return pool


def settle(futures: Iterable[Future[R]]) -> list[R]:
    """Wait for every future, then their results in order (the first failure raised):
    nothing a caller started still runs once it returns or raises."""
    pending = list(futures)
    wait(pending)
    return [f.result() for f in pending]


@contextmanager
def joined(futures: Iterable[Future[Any]]) -> Iterator[None]:
    """Wait for every future when the block ends, whatever ends it (their failures are
    left to ``settle``): the block's own work runs beside them."""
    try:
        yield
    finally:
        wait(list(futures))


def submit_all(
    name: str, call: Callable[[T], R], items: Iterable[T], at_most: int = MAX_THREADS
) -> list[Future[R]]:
    """``call`` on every item on pool ``name``, at most ``at_most`` at once: a future per
    item, in order. Every call runs even when one fails. The pool's threads call
    ``call``; this module never calls back on the caller's thread."""
    todo = list(items)
    pool = shared_pool(name)
    if len(todo) <= at_most:
        return [pool.submit(call, item) for item in todo]
    # More items than calls allowed at once: ``at_most`` runners take the next item
    # until none is left, as a pool of that many threads would.
    outcomes: list[Future[R]] = [Future() for _ in todo]
    turns = iter(range(len(todo)))
    turns_lock = threading.Lock()

    def runner() -> None:
        while True:
            with turns_lock:
                i = next(turns, None)
            if i is None:
                return
            try:
                outcomes[i].set_result(call(todo[i]))
            except BaseException as e:  # handed to the caller by ``settle``
                outcomes[i].set_exception(e)

    for _ in range(at_most):
        pool.submit(runner)
    return outcomes


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
